#include "server/openai_response.h"

#include <fmt/format.h>

#include <ctime>
#include <random>

namespace strata::server {

std::string IdSource::next(const char* prefix) {
  std::random_device rd;
  return fmt::format("{}-{:08x}{:04x}", prefix, rd(), static_cast<unsigned>(counter_.fetch_add(1) & 0xffff));
}

std::string dump_reply(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json response_base(const char* object, const std::string& id, const std::string& model) {
  return Json{{"id", id}, {"object", object}, {"created", static_cast<int64_t>(std::time(nullptr))}, {"model", model}};
}

Json choice_json(const char* body_key, Json body, Json logprobs, Json finish) {
  return Json{{"index", 0}, {body_key, std::move(body)}, {"logprobs", std::move(logprobs)}, {"finish_reason", std::move(finish)}};
}

Json usage_json(const Job& job) {
  Json u{{"prompt_tokens", job.prompt_tokens},
         {"completion_tokens", job.completion_tokens},
         {"total_tokens", job.prompt_tokens + job.completion_tokens},
         {"prompt_tokens_details", {{"cached_tokens", job.cached_tokens}}}};
  // Speculative decoding (docs/speculative.md), in the fields OpenAI uses
  // for predicted outputs: draft tokens the model accepted and rejected.
  if (job.draft_tokens > 0)
    u["completion_tokens_details"] = {{"accepted_prediction_tokens", job.accepted_draft_tokens},
                                      {"rejected_prediction_tokens", job.draft_tokens - job.accepted_draft_tokens}};
  return u;
}

namespace {

std::string token_text(const Tokenizer& tok, int32_t id) {
  const int32_t ids[1] = {id};
  return tok.decode(ids);
}

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
  return b;
}

// Token strings may be partial UTF-8; JSON needs valid text.
std::string safe_text(const std::string& s) { return Json::parse(dump_reply(Json(s))).get<std::string>(); }

}  // namespace

Json chat_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
  Json content = Json::array();
  for (const auto& lp : lps) {
    const std::string t = token_text(tok, lp.token);
    Json top = Json::array();
    for (auto [id, v] : lp.top) {
      const std::string tt = token_text(tok, id);
      top.push_back({{"token", safe_text(tt)}, {"logprob", v}, {"bytes", bytes_of(tt)}});
    }
    content.push_back({{"token", safe_text(t)}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
  }
  return Json{{"content", content}};
}

Json completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
  Json tokens = Json::array(), tl = Json::array(), top = Json::array();
  for (const auto& lp : lps) {
    tokens.push_back(safe_text(token_text(tok, lp.token)));
    tl.push_back(lp.logprob);
    Json t = Json::object();
    for (auto [id, v] : lp.top) t[safe_text(token_text(tok, id))] = v;
    top.push_back(t);
  }
  return Json{{"tokens", tokens}, {"token_logprobs", tl}, {"top_logprobs", top}};
}

}  // namespace strata::server
