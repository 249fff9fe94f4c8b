// Chat template rendering over hostile message lists (text/chat_template.h):
// the input is a /v1/chat/completions body, translated as the server does
// (server/openai_request.h) and rendered with the repository's GLM template
// (models/glm5-strata-tiny), then tokenized; the content of the last message
// is also parsed as model output (parse_glm_output) with the request's tools.
// The same messages are rendered and parsed in the GLM-4.5, Qwen3 and DeepSeek-V3 dialects.
#include "core/error.h"
#include "fuzz_util.h"
#include "server/openai_request.h"
#include "text/chat_template.h"
#include "text/generation_config.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  static const Tokenizer tok = Tokenizer::load(fuzz::tiny_model_dir());
  static const ChatTemplate tmpl = load_chat_template(fuzz::tiny_model_dir());
  static const GenerationConfig gen = load_generation_config(fuzz::tiny_model_dir());
  const std::string_view body = fuzz::as_text(data, size);
  try {
    const Json j = server::parse_request_body(body, 1 << 20);
    const server::ChatRequest r = server::parse_chat_request(j, body, gen, tmpl.dialect);
    const std::string prompt = tmpl.render(r.messages, r.tools, r.render);
    (void)tok.encode(prompt, false);
    if (!r.messages.empty())
      (void)parse_glm_output(r.messages.back().content, tmpl.opens_reasoning(r.render), r.tools);
    for (const ChatDialect d : {ChatDialect::Glm45, ChatDialect::Qwen3, ChatDialect::DeepSeek3, ChatDialect::DeepSeekR1,
                                 ChatDialect::DeepSeekR1Sys1, ChatDialect::DeepSeek31}) {
      ChatTemplate other;
      other.dialect = d;
      try {
        (void)tok.encode(other.render(r.messages, r.tools, r.render), false);
      } catch (const Error&) {
      }
      if (!r.messages.empty()) (void)parse_chat_output(d, r.messages.back().content, false, r.tools);
    }
  } catch (const server::ApiError&) {
  } catch (const Error&) {
  }
  return 0;
}
