// OpenAI request bodies -> typed, validated requests (docs/server.md): the
// fields both endpoints share (sampling, stop, streaming, logprobs,
// response_format), a chat's messages, tools and tool_choice, and a
// completion's prompt. Anything the client got wrong is an ApiError naming
// the field (`param`), in the order the fields are checked here, so the
// same bad request always gets the same answer. Nothing here touches the
// scheduler: the handlers turn a parsed request into a Job.
//
// Key order: nlohmann::json (Json) sorts object keys, but a chat template
// renders tools and tool-call arguments in the client's order (Jinja's
// tojson), and schemas are generated in their properties' order. Those
// parts are taken from the body parsed again as OrderedJson (once per
// request, only when one of them is present).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "text/chat_template.h"
#include "text/generation_config.h"
#include "text/json_constraint.h"
#include "text/sampler.h"
#include "text/tokenizer.h"
#include "text/json_call_constraint.h"
#include "text/tool_constraint.h"

namespace strata::server {

// A request the client got wrong (or one the server refuses): OpenAI's
// {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // empty: null
  std::string type = "invalid_request_error";
  std::string code;   // empty: null
};

// Throws a 400 ApiError about `param`.
[[noreturn]] void bad(std::string param, std::string message, std::string code = {});
Json error_json(const ApiError& e);

// Typed field readers: absent or null -> nullopt (field: nullptr); a wrong
// type or a value outside [lo, hi] -> 400 naming the field.
const Json* field(const Json& j, const char* name);
std::optional<double> get_number(const Json& j, const char* name, double lo, double hi);
std::optional<int64_t> get_int(const Json& j, const char* name, int64_t lo, int64_t hi);
std::optional<bool> get_bool(const Json& j, const char* name);
std::optional<std::string> get_string(const Json& j, const char* name);

// The request body as a JSON object (413 above `max_body`, 400 when it is
// not JSON or not an object). Depth and duplicate keys are checked here
// (core/json.h), so the ordered re-parse of the same text cannot fail.
Json parse_request_body(std::string_view body, size_t max_body);

// The body parsed again keeping key order, on first use.
class OrderedBody {
 public:
  explicit OrderedBody(std::string_view text) : text_(text) {}
  const OrderedJson& get();

 private:
  std::string_view text_;
  std::optional<OrderedJson> doc_;
};

// What both endpoints share, parsed and validated.
struct CommonRequest {
  int64_t max_tokens = -1;  // -1: the ceiling
  SamplerOptions sampling;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false, ignore_eos = false;
  int top_logprobs = -1;                    // -1: no logprobs
  std::shared_ptr<const JsonGrammar> json;  // response_format json_object / json_schema
};

// `chat`: logprobs is a boolean plus top_logprobs (chat) or a count (completions).
CommonRequest parse_common(const Json& j, const GenerationConfig& gen, bool chat, OrderedBody& ordered);

struct ChatRequest {
  CommonRequest common;
  std::vector<ChatMessage> messages;
  OrderedJson tools = nullptr;  // null: none offered (or tool_choice "none")
  // tool_choice "required" or a named function: the answer is forced to be
  // one tool call (constrained decoding, text/tool_constraint.h).
  // GLM dialects: GLM's markup (tool_grammar); Qwen3 and DeepSeek: their
  // JSON call syntax (json_call_grammar, text/json_call_constraint.h).
  std::shared_ptr<const ToolCallGrammar> tool_grammar;
  std::shared_ptr<const JsonCallGrammar> json_call_grammar;
  ChatRenderOptions render;
};

// `dialect`: whose call syntax a forced tool call takes (not Raw).
// `default_thinking`: enable_thinking when the request does not say (serve --think).
ChatRequest parse_chat_request(const Json& j, std::string_view body, const GenerationConfig& gen, ChatDialect dialect,
                               bool default_thinking = true);

struct CompletionRequest {
  CommonRequest common;
  std::vector<int32_t> prompt;  // token ids (a text prompt is encoded with special tokens)
};

CompletionRequest parse_completion_request(const Json& j, std::string_view body, const GenerationConfig& gen,
                                           const Tokenizer& tok, int64_t vocab);

}  // namespace strata::server
