// Writing strata containers (src/format/container.h, docs/container.md):
// `strata convert` turns a Hugging Face glm_moe_dsa checkpoint (bf16/f32 or
// block-FP8 safetensors, single file or sharded) into a container, and
// `strata convert --verify` re-reads one and checks every file's checksum.
//
// The conversion reads one source tensor at a time (one expert's three
// matrices for routed experts), so memory stays near the largest tensor.
// Every output file is written as NAME.tmp, fsynced and renamed when
// complete; manifest.json is written last. DIR/convert-state.json records the
// options, the source identity and every finished file (size + checksums), so
// an interrupted conversion can be resumed and yields byte-identical files.
#pragma once
#include <xxhash.h>

#include <cstdint>
#include <string>
#include <vector>

#include "format/container.h"
#include "core/json.h"

namespace strata {

// Precision flags use bits: 4 = int4, 8 = int8, 16 = bf16.
struct ConvertOptions {
  std::string in_dir, out_dir;
  int expert_bits = 4;      // routed experts of decoder layers: 4 | 8
  int64_t group_size = 32;  // 0 = one scale per row; every int-quantized tensor
  int attn_bits = 8;        // q_a, q_b, kv_a, indexer wq_b / wk: 4 | 8 | 16
  int o_bits = 8;           // o_proj
  int kvb_bits = 8;         // kv_b_proj
  int shared_bits = 8;      // shared experts
  int dense_mlp_bits = 8;   // MLPs of the dense (non-MoE) layers
  int mtp_bits = 8;         // every matrix of the MTP layer(s), routed experts included
  int embed_bits = 16;      // embed_tokens: 8 | 16
  int head_bits = 8;        // lm_head: 8 | 16
  int threads = 0;          // 0 = all cores (output does not depend on it)
  bool force = false;       // overwrite a complete container / restart an unfinished one
  bool resume = false;      // continue an unfinished conversion into out_dir
  bool progress = true;     // progress + summary on stderr
  // Test hook: after this many output files are complete, the next one is
  // written half way and the process kills itself with SIGKILL. < 0 = off.
  int test_kill_after_files = -1;

  // The "options" object of the manifest and of convert-state.json.
  Json to_json() const;
  // Throws strata::Error naming the flag when a value is not allowed.
  void validate() const;
};

struct ConvertResult {
  bool already_complete = false;  // --resume on a finished container: nothing to do
  uint64_t source_bytes = 0;      // source tensor bytes converted (this run + skipped)
  uint64_t bytes_written = 0;     // output bytes written by this run
  uint64_t container_bytes = 0;   // total size of the container's files
  int files_written = 0, files_skipped = 0;
  double seconds = 0.0;
  uint64_t peak_rss_bytes = 0;
  std::vector<std::string> unused_tensors;  // checkpoint tensors strata does not use
};

ConvertResult convert_checkpoint(const ConvertOptions& opts);

struct VerifyResult {
  bool ok = true;
  int files = 0;
  uint64_t bytes = 0;
  std::vector<std::string> ok_files;  // names of the files that passed
  std::vector<std::string> problems;  // one line each, naming the file (and tensor / expert)
};

// Re-reads every file listed in DIR/manifest.json and checks its size and
// XXH3-64; for a damaged file also says which tensors / experts differ.
// A missing or invalid manifest throws strata::Error.
VerifyResult verify_container(const std::string& dir);

// Streaming XXH3-64 (seed 0).
class Xxh3 {
 public:
  Xxh3();
  ~Xxh3();
  Xxh3(const Xxh3&) = delete;
  Xxh3& operator=(const Xxh3&) = delete;
  void reset();
  void update(const void* p, size_t n);
  uint64_t digest() const;

 private:
  XXH3_state_t* st_;
};

// One output file written as `path`.tmp (created or truncated), buffered,
// hashed as it goes; commit() flushes, fsyncs and renames it to `path`.
// Destroyed without commit() (an error was thrown), the .tmp is removed, so
// no half-written file is ever left under the final name. Write errors
// (disk full, quota, I/O) throw strata::Error naming the file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* p, size_t n);
  void zeros(uint64_t n);
  void pad_to(uint64_t align) { zeros((align - pos_ % align) % align); }
  uint64_t pos() const { return pos_; }
  // Test hook: once pos() reaches `at`, flush and SIGKILL the process.
  void arm_kill_at(uint64_t at) { kill_at_ = at; }
  // Returns the XXH3-64 of the whole file.
  uint64_t commit();
  const std::string& path() const { return path_; }

 private:
  void flush();
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t pos_ = 0;
  uint64_t kill_at_ = UINT64_MAX;
  std::vector<uint8_t> buf_;
  size_t used_ = 0;
  Xxh3 hash_;
  bool committed_ = false;
};

// fsyncs a directory so renames inside it are durable.
void fsync_dir(const std::string& dir);

}  // namespace strata
