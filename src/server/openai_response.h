// The JSON shapes of OpenAI responses that do not depend on the chat
// dialect (docs/server.md): ids, the envelope every completion object and
// chunk shares, choices, usage and logprobs. Reply bodies are dumped with
// invalid UTF-8 replaced: generated text may end inside a character.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "runtime/generation.h"
#include "server/scheduler.h"
#include "text/tokenizer.h"

namespace strata::server {

// Response and tool-call ids ("chatcmpl-<random><counter>"): random, and a
// per-server counter keeps two ids of one server apart even when the
// random part repeats. Thread-safe.
class IdSource {
 public:
  std::string next(const char* prefix);

 private:
  std::atomic<uint64_t> counter_{0};
};

// A reply or SSE payload as text (invalid UTF-8 -> U+FFFD).
std::string dump_reply(const Json& j);

// {"id", "object", "created", "model"}: what every response object starts with.
Json response_base(const char* object, const std::string& id, const std::string& model);

// One choice (index 0): {"index", body_key: body, "logprobs", "finish_reason"};
// body_key is "message" or "delta" (chat) or "text" (completions).
Json choice_json(const char* body_key, Json body, Json logprobs, Json finish);

Json usage_json(const Job& job);

// Chat's {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}.
Json chat_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps);
// Completions' {"tokens", "token_logprobs", "top_logprobs"}.
Json completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps);

}  // namespace strata::server
