// The OpenAI request -> internal request translation (server/openai_request.h),
// without a socket: the input is a request body, parsed as both endpoints do
// (/v1/chat/completions and /v1/completions) with the repository's tokenizer.
#include "core/error.h"
#include "fuzz_util.h"
#include "server/openai_request.h"
#include "text/generation_config.h"
#include "text/tokenizer.h"

namespace {

// The error body as the server sends it (server/openai_response.cpp dump_reply).
std::string error_text(const strata::server::ApiError& e) {
  return strata::server::error_json(e).dump(-1, ' ', false, strata::Json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  static const Tokenizer tok = Tokenizer::load(fuzz::tiny_model_dir());
  static const GenerationConfig gen = load_generation_config(fuzz::tiny_model_dir());
  const std::string_view body = fuzz::as_text(data, size);
  Json j;
  try {
    j = server::parse_request_body(body, 64 << 10);
  } catch (const server::ApiError& e) {
    (void)error_text(e);
    return 0;
  }
  for (const ChatDialect d : {ChatDialect::Glm, ChatDialect::Raw}) {
    try {
      const server::ChatRequest r = server::parse_chat_request(j, body, gen, d);
      STRATA_FUZZ_CHECK(r.common.max_tokens >= -1);
    } catch (const server::ApiError& e) {
      (void)error_text(e);
    } catch (const Error&) {
    }
  }
  try {
    const server::CompletionRequest r = server::parse_completion_request(j, body, gen, tok, tok.vocab_size());
    for (const int32_t t : r.prompt) STRATA_FUZZ_CHECK(t >= 0 && t < tok.vocab_size());
  } catch (const server::ApiError& e) {
    (void)error_text(e);
  } catch (const Error&) {
  }
  return 0;
}
