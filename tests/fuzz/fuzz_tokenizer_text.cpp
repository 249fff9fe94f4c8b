// Tokenizer encode/decode over hostile text (text/tokenizer.h), with the
// repository's small GLM tokenizer (models/glm5-strata-tiny). The input is
// the text; its bytes are also read as token ids for decode, both the
// whole-sequence and the streaming decoder, which must agree.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  static const Tokenizer tok = Tokenizer::load(fuzz::tiny_model_dir());
  const std::string_view text = fuzz::as_text(data, size);
  try {
    const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/size % 2 == 1);
    for (const int32_t id : ids) STRATA_FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    (void)tok.decode(ids);
    (void)tok.decode(ids, /*skip_special=*/true);
  } catch (const Error&) {
  }
  // The bytes as ids, some of them out of range.
  std::vector<int32_t> ids(size / 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint16_t v;
    std::memcpy(&v, data + 2 * i, 2);
    ids[i] = static_cast<int32_t>(v) - 64;
  }
  std::string whole;
  bool whole_ok = true;
  try {
    whole = tok.decode(ids);
  } catch (const Error&) {
    whole_ok = false;
  }
  try {
    StreamDecoder sd(tok);
    std::string streamed;
    for (const int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    if (whole_ok) STRATA_FUZZ_CHECK(streamed == whole);
  } catch (const Error&) {
  }
  for (const int32_t id : ids) (void)tok.token_text(id), (void)tok.is_special(id), (void)tok.token_bytes(id);
  return 0;
}
