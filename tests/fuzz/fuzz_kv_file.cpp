// The --kv-dir conversation file reader (server/kv_store.h): the input
// becomes DIR/conv-0.kv, the store indexes the directory, finds the saved
// prefix and loads it into a Session. The first input byte picks how much of
// the file the harness makes valid, so the fuzzer gets past each check:
//   0: the rest of the input is the whole file;
//   1: a valid header (magic, version, record size, fingerprint), then the
//      input from the count on;
//   2: as 1, and every record's checksum recomputed over its bytes.
// The scope (byte 32, the input's in every mode) is found only by itself.
// The model is a tiny config (2 layers, 2 + 1 + 1 floats per position).
#include <xxhash.h>

#include <cstring>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "fuzz_util.h"
#include "model/session.h"
#include "server/kv_store.h"

namespace {

constexpr uint64_t kFingerprint = 0x5eed5eed5eed5eedull;

strata::ModelConfig tiny_config() {
  using namespace strata;
  ModelConfig c;
  c.vocab_size = 300;
  c.num_hidden_layers = 2;
  c.num_nextn_predict_layers = 0;
  c.kv_lora_rank = 2;
  c.qk_rope_head_dim = 1;
  c.index_n_heads = 1;  // a DSA model: the indexer key is part of the record
  c.index_head_dim = 1;
  c.max_position_embeddings = 64;
  c.layer_is_moe = {false, true};
  c.layer_indexer_full = {true, false};
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  if (size < 1 || size > (1u << 16)) return 0;
  static const ModelConfig cfg = tiny_config();
  static const std::string dir = [] {
    std::string d = fuzz::scratch_dir() + "/kv";
    std::filesystem::create_directories(d);
    return d;
  }();
  // 16-byte record head + (2+1+1) + (2+1) floats.
  constexpr size_t kRecord = 16 + 7 * 4;
  std::string file;
  const int mode = data[0] % 3;
  if (mode == 0) {
    file.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  } else {
    file.assign(24, '\0');
    std::memcpy(file.data(), "STRATAKV", 8);
    const uint32_t version = 2, rb = kRecord;
    std::memcpy(file.data() + 8, &version, 4);
    std::memcpy(file.data() + 12, &rb, 4);
    std::memcpy(file.data() + 16, &kFingerprint, 8);
    file.append(reinterpret_cast<const char*>(data + 1), size - 1);
    if (mode == 2) {
      for (size_t at = 64; at + kRecord <= file.size(); at += kRecord) {
        int32_t t;
        std::memcpy(&t, file.data() + at, 4);
        const uint64_t h = XXH3_64bits_withSeed(file.data() + at + 16, kRecord - 16, static_cast<uint32_t>(t));
        std::memcpy(file.data() + at + 8, &h, 8);
      }
    }
  }
  fuzz::write_file(dir + "/conv-0.kv", file);
  // The prefix-reuse scope the file records (byte 32): its conversation is
  // offered to that scope only.
  uint64_t scope = 0;
  if (file.size() >= 40) std::memcpy(&scope, file.data() + 32, 8);
  try {
    server::KvStore store(dir, cfg, kFingerprint, 4, /*verbose=*/false);
    STRATA_FUZZ_CHECK(store.record_bytes() == kRecord);
    // Every conversation's own tokens are its best match.
    for (int64_t id = 0; id < static_cast<int64_t>(store.conversations()); ++id) {
      Session s(cfg, 32);
      std::vector<int32_t> tokens;
      const size_t n = store.load(id, 32, s, tokens);
      STRATA_FUZZ_CHECK(n == tokens.size() && static_cast<int64_t>(n) == s.n_past);
      for (const int32_t t : tokens) STRATA_FUZZ_CHECK(t >= 0 && t < cfg.vocab_size);
      if (n > 0) {
        const auto m = store.find(tokens, tokens.size(), scope);
        STRATA_FUZZ_CHECK(m.common == n);
        STRATA_FUZZ_CHECK(store.find(tokens, tokens.size(), ~scope).id < 0);  // never another scope's
      }
    }
    const std::vector<int32_t> prompt(data, data + std::min<size_t>(size, 40));
    (void)store.find(prompt, prompt.size(), scope);
  } catch (const Error&) {
  }
  return 0;
}
