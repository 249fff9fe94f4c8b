// tokenizer.json itself as the input (text/tokenizer.h Tokenizer::from_json):
// loaded (at most 64 KiB), then a fixed text with added tokens, bytes and
// non-ASCII encoded and decoded with it.
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  if (size > (64u << 10)) return 0;
  try {
    const Tokenizer tok = Tokenizer::from_json(fuzz::as_text(data, size), "", "tokenizer.json");
    static const std::string kText = "Hello, world! <|user|> 12345 héllo\t\n  ünïcode 漢字 🙂 \xff\xfe end";
    const std::vector<int32_t> ids = tok.encode(kText, true);
    for (const int32_t id : ids) STRATA_FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    (void)tok.decode(ids);
    StreamDecoder sd(tok);
    for (const int32_t id : ids) (void)sd.push(id);
    (void)sd.flush();
    for (int32_t id = -1; id < std::min<int64_t>(tok.vocab_size(), 64) + 1; ++id)
      (void)tok.token_text(id), (void)tok.token_bytes(id), (void)tok.is_special(id);
  } catch (const Error&) {
  }
  return 0;
}
