// The GGUF header reader the writer's tests use (tests/unit/gguf_reader.h):
// strata has no GGUF reader in src/ (it only writes GGUF, format/gguf_writer.h),
// so this fuzzes the test reader that checks the writer's output -- a
// reader that crashes on a bad file would hide a writer bug behind a crash.
// Its errors are std::runtime_error.
#include <stdexcept>

#include "fuzz_util.h"
#include "gguf_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::gguf_test;
  try {
    const ParsedFile f = parse_bytes(std::vector<uint8_t>(data, data + size));
    STRATA_FUZZ_CHECK(f.header_end <= f.bytes.size() && f.data_start >= f.header_end);
    STRATA_FUZZ_CHECK(f.key_order.size() == f.kv.size());
  } catch (const std::runtime_error&) {
  }
  return 0;
}
