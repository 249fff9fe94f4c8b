// Conversations that survive restarts (docs/server.md, "Persistent
// conversations"): the KV state of finished turns, one file per conversation
// under --kv-dir, resumed without re-prefill after a restart or a crash.
//
// File layout (little-endian):
//   header, 64 bytes: magic "STRATAKV", version u32, record_bytes u32,
//     fingerprint u64 (model + forward options), count u64 (at byte 24),
//     scope u64 (at byte 32: key_scope of the API key that saved it, 0
//     without keys; files written before scopes existed hold 0 there),
//     the rest zero;
//   records from byte 64, one per position, record_bytes each:
//     token i32, zero u32, XXH3-64 of the data seeded with the token u64, then per decoder layer
//     the normalised KV latent, the roped key and (full-indexer layers) the
//     indexer key of that position, as f32 — exactly the Session's floats
//     (an f16 session's latent and roped key: its halves).
// Saving appends records, fsyncs, then writes the count and fsyncs again:
// a crash mid-append leaves bytes past `count` that loading ignores, so what
// was saved before is never lost. A record whose checksum fails ends the
// usable prefix there (the file is then reported and kept, not trusted).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/io.h"
#include "kernels/matmul.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/session.h"

namespace strata::server {

// Identity of what produced a KV state: the container manifest (every
// tensor's checksum) or a checkpoint's config and file sizes, plus the
// forward options and activation mode that change the floats (the kernel
// path does not: every path computes the same bits).
uint64_t kv_fingerprint(const Model& m, const ForwardOptions& f, IntActivations acts = IntActivations::Int8);

// The prefix-reuse scope of an API key (docs/security.md): a hash of it,
// never 0 (0 is the keyless namespace). What the conversation files record
// instead of the key. XXH3-64, not a password hash: whoever can read the
// files can test guesses at a short key (the files, mode 0600, hold the
// conversations themselves).
uint64_t key_scope(std::string_view api_key);

class KvStore {
 public:
  // Opens (creating) `dir` and indexes its conversation files: headers and
  // token lists only. Files of another model or version are skipped with a
  // note on stderr (never deleted); at most `max_files` are kept (the least
  // recently saved beyond that are removed).
  // kv: the sessions' key storage (ForwardOptions::kv): an f16 store's
  // records hold the latent and roped key as halves (the fingerprint tells
  // the two kinds of file apart). Sessions of the other kind are refused.
  KvStore(std::string dir, const ModelConfig& c, uint64_t fingerprint, int max_files = 64, bool verbose = true,
          KvType kv = KvType::F32);
  ~KvStore();
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  struct Match {
    int64_t id = -1;  // conversation, -1 when none shares a token
    size_t common = 0;
  };
  // The saved conversation of `scope` sharing the longest prefix with
  // `prompt`, counting at most `limit` tokens. Another scope's are never offered.
  Match find(std::span<const int32_t> prompt, size_t limit, uint64_t scope = 0) const;
  // Reads positions [0, n) of conversation `id` into `s` (n_past = n) and
  // their tokens into `tokens`; checks every record's checksum. Returns the
  // positions actually loaded (fewer when a record is damaged).
  size_t load(int64_t id, size_t n, Session& s, std::vector<int32_t>& tokens);
  // Saves the state of a finished turn of `scope`: `s` holds `tokens`
  // (n_past of them). `origin` is the conversation the session was resumed
  // from (or -1): when it is of the same scope and its tokens are a prefix of
  // `tokens`, only the new positions are appended; otherwise a new
  // conversation file is written. Returns the id.
  int64_t save(int64_t origin, const Session& s, std::span<const int32_t> tokens, uint64_t scope = 0);

  // Test hook (tests/unit/kv_store_test.cpp, crashes during a save): when
  // set, called after each step of a save that changes the disk: "write" (a
  // header, a count or a run of records written to `path`), "sync"
  // (fdatasync of `path`), "rename" (the new file is now `path`), "sync dir".
  // A test copies the directory there, as a crash at that point leaves it.
  // Never set by the server.
  std::function<void(std::string_view step, const std::string& path)> on_save_step;

  size_t conversations() const { return convs_.size(); }
  size_t record_bytes() const { return record_bytes_; }
  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t records_loaded() const { return records_loaded_; }
  const std::string& dir() const { return dir_; }

 private:
  struct Conv {
    int64_t id = -1;
    std::string path;
    std::vector<int32_t> tokens;  // the positions offered (a prefix of the file's records)
    uint64_t disk_count = 0;      // the count in the file's header (>= tokens.size())
    uint64_t last_used = 0;
    uint64_t scope = 0;           // key_scope of the key that saved it (header byte 32)
  };
  Conv* by_id(int64_t id);
  void forget(int64_t id);
  void pack(const Session& s, int64_t pos, int32_t token, uint8_t* rec) const;
  void check_type(const Session& s) const;
  void write_new(Conv& c, const Session& s, std::span<const int32_t> tokens);
  void append(Conv& c, const Session& s, std::span<const int32_t> tokens);
  void evict();
  void write_records(const Fd& fd, const Session& s, std::span<const int32_t> tokens, size_t from);
  void saved_step(const char* step, const std::string& path) const {
    if (on_save_step) on_save_step(step, path);
  }
  Fd lock_fd_;  // flock on DIR/.lock: one server per directory; closing releases it

  std::string dir_;
  uint64_t fingerprint_;
  int max_files_;
  bool verbose_;
  KvType kv_;
  // Per decoder layer: floats per position of each LayerCache part
  // (ModelConfig::cache_widths: latent, rope, index, k, v), stored in that order.
  std::vector<std::array<int64_t, 5>> layer_widths_;
  size_t record_bytes_ = 0;
  std::vector<Conv> convs_;
  int64_t next_id_ = 0;
  uint64_t tick_ = 0;
  uint64_t bytes_written_ = 0, records_loaded_ = 0;
  std::vector<uint8_t> buf_;
};

}  // namespace strata::server
