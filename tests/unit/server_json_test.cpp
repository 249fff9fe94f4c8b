// response_format in strata serve, end to end on the bundled trained model
// (models/glm5-strata-tiny, its own 4096-token tokenizer, the GLM chat
// template): json_object and json_schema answers, JSON and SSE, chat and
// completions, parse and validate; malformed response_formats get 400.
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "experts/expert_store.h"
#include "model/forward.h"
#include "model/model.h"
#include "core/thread_pool.h"
#include "server/http_server.h"
#include "text/json_constraint.h"
#include "text/generation_config.h"
#include "text/tokenizer.h"
#include "core/json.h"
#include "tiny_server.h"

namespace strata::server_json_test {
namespace {

using test_util::tiny;
using test_util::TinyServer;

// The schemas used: every one forces the answer to end.
const Json kSchema = Json::parse(R"({
  "type": "object",
  "properties": {
    "sentiment": {"enum": ["positive", "negative", "neutral"]},
    "confident": {"type": "boolean"},
    "stars": {"type": "integer"},
    "summary": {"type": "string", "maxLength": 24},
    "keywords": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
    "note": {"type": ["string", "null"], "maxLength": 8}
  },
  "required": ["sentiment", "confident", "stars", "summary", "keywords"],
  "additionalProperties": false
})");

void expect_valid(const Json& v) {
  ASSERT_TRUE(v.is_object()) << v.dump();
  for (const char* k : {"sentiment", "confident", "stars", "summary", "keywords"}) ASSERT_TRUE(v.contains(k)) << v.dump();
  const std::string s = v["sentiment"];
  EXPECT_TRUE(s == "positive" || s == "negative" || s == "neutral") << s;
  EXPECT_TRUE(v["confident"].is_boolean());
  EXPECT_TRUE(v["stars"].is_number_integer());
  ASSERT_TRUE(v["summary"].is_string());
  size_t cps = 0;
  for (unsigned char c : v["summary"].get<std::string>()) cps += (c & 0xC0) != 0x80;
  EXPECT_LE(cps, 24u);
  ASSERT_TRUE(v["keywords"].is_array());
  EXPECT_LE(v["keywords"].size(), 3u);
  for (const Json& k : v["keywords"]) EXPECT_TRUE(k.is_string());
  if (v.contains("note")) {
    EXPECT_TRUE(v["note"].is_string() || v["note"].is_null());
  }
  for (auto it = v.begin(); it != v.end(); ++it)
    EXPECT_TRUE(kSchema["properties"].contains(it.key())) << it.key();
}

Json chat_body(const Json& rf, double temperature, uint64_t seed, bool stream) {
  Json b = {{"messages", Json::array({Json{{"role", "user"}, {"content", "Review: the film was great. Answer in JSON."}}})},
            {"max_tokens", 300},
            {"temperature", temperature},
            {"seed", seed},
            {"response_format", rf}};
  if (stream) b["stream"] = true;
  return b;
}

// SSE body -> concatenated delta content (chat) or text (completions), and the finish reason.
std::pair<std::string, std::string> sse_text(const std::string& body, bool chat, bool* saw_reasoning = nullptr) {
  std::string text, finish;
  size_t i = 0;
  while (i < body.size()) {
    const size_t e = body.find("\n\n", i);
    if (e == std::string::npos) break;
    const std::string ev = body.substr(i + 6, e - i - 6);
    i = e + 2;
    if (ev == "[DONE]") break;
    const Json c = Json::parse(ev);
    if (c.contains("error")) return {"", "error: " + ev};
    if (c["choices"].empty()) continue;
    const Json& ch = c["choices"][0];
    if (chat) {
      if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
      if (saw_reasoning && ch["delta"].contains("reasoning_content")) *saw_reasoning = true;
    } else {
      text += ch["text"].get<std::string>();
    }
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  return {text, finish};
}

TEST(ServerJson, JsonSchemaChatAndCompletions) {
  TinyServer s;
  const Json rf = {{"type", "json_schema"}, {"json_schema", {{"name", "review"}, {"schema", kSchema}, {"strict", true}}}};
  // Chat, JSON: greedy and sampled.
  for (const auto& [temp, seed] : std::vector<std::pair<double, uint64_t>>{{0.0, 1}, {1.0, 7}, {1.0, 8}, {0.7, 9}}) {
    const auto [status, body] = s.post("/v1/chat/completions", chat_body(rf, temp, seed, false).dump());
    ASSERT_EQ(status, 200) << body;
    const Json r = Json::parse(body);
    const Json& msg = r["choices"][0]["message"];
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << body;
    EXPECT_FALSE(msg.contains("reasoning_content")) << body;  // thinking is off for JSON answers
    Json v;
    ASSERT_NO_THROW(v = Json::parse(msg["content"].get<std::string>())) << body;
    expect_valid(v);
  }
  // Chat, SSE: the same text as JSON for the same seed.
  {
    const auto [s1, b1] = s.post("/v1/chat/completions", chat_body(rf, 1.0, 7, false).dump());
    const auto [s2, b2] = s.post("/v1/chat/completions", chat_body(rf, 1.0, 7, true).dump());
    ASSERT_EQ(s2, 200) << b2;
    bool reasoning = false;
    const auto [text, finish] = sse_text(b2, true, &reasoning);
    EXPECT_EQ(finish, "stop");
    EXPECT_FALSE(reasoning);
    EXPECT_EQ(text, Json::parse(b1)["choices"][0]["message"]["content"].get<std::string>());
    Json v;
    ASSERT_NO_THROW(v = Json::parse(text)) << text;
    expect_valid(v);
  }
  // Completions, JSON and SSE.
  for (bool stream : {false, true}) {
    Json b = {{"prompt", "A product review as JSON:"}, {"max_tokens", 300}, {"temperature", 1.0}, {"seed", 3},
              {"response_format", rf}, {"stream", stream}};
    const auto [status, body] = s.post("/v1/completions", b.dump());
    ASSERT_EQ(status, 200) << body;
    std::string text, finish;
    if (stream) {
      std::tie(text, finish) = sse_text(body, false);
    } else {
      const Json r = Json::parse(body);
      text = r["choices"][0]["text"];
      finish = r["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(finish, "stop") << body;
    Json v;
    ASSERT_NO_THROW(v = Json::parse(text)) << text;
    expect_valid(v);
  }
  // ignore_eos does not keep a finished JSON answer going.
  {
    Json b = chat_body(rf, 1.0, 11, false);
    b["ignore_eos"] = true;
    const auto [status, body] = s.post("/v1/chat/completions", b.dump());
    ASSERT_EQ(status, 200) << body;
    const Json r = Json::parse(body);
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << body;
    expect_valid(Json::parse(r["choices"][0]["message"]["content"].get<std::string>()));
  }
  // Small schemas: an enum alone.
  {
    Json sc = {{"type", "json_schema"}, {"json_schema", {{"name", "pick"}, {"schema", {{"enum", {"red", "green", "blue"}}}}}}};
    const auto [status, body] = s.post("/v1/chat/completions", chat_body(sc, 1.0, 5, false).dump());
    ASSERT_EQ(status, 200) << body;
    const std::string c = Json::parse(body)["choices"][0]["message"]["content"];
    EXPECT_TRUE(c == "\"red\"" || c == "\"green\"" || c == "\"blue\"") << c;
  }
}

// json_object on the bundled model: every answer starts an object and is a
// JSON-object prefix. This model never writes '}' (none of 600 sampled
// answers, temperatures 0.7-2, closed an object), so its answers run to
// max_tokens; answers that complete (finish "stop", a whole object, nothing
// after it) are Server.JsonObjectAnswersComplete (on the random fixture) and
// JsonConstraint.JsonObjectCompletesThenOnlyStopIds.
TEST(ServerJson, JsonObjectMode) {
  TinyServer s;
  const Json rf = {{"type", "json_object"}};
  int parsed = 0;
  for (uint64_t seed : {1, 2, 3}) {
    const auto [status, body] = s.post("/v1/chat/completions", chat_body(rf, 0.8, seed, false).dump());
    ASSERT_EQ(status, 200) << body;
    const Json r = Json::parse(body);
    const std::string c = r["choices"][0]["message"]["content"];
    ASSERT_FALSE(c.empty());
    EXPECT_EQ(c[0], '{');
    if (r["choices"][0]["finish_reason"] == "stop") {
      Json v;
      ASSERT_NO_THROW(v = Json::parse(c)) << c;
      EXPECT_TRUE(v.is_object());
      ++parsed;
    } else {
      EXPECT_EQ(r["choices"][0]["finish_reason"], "length");  // a free-form object may run past max_tokens
      std::printf("[ json_object ] unfinished: %s\n", c.substr(0, 160).c_str());
      auto g = JsonGrammar::any_object();
      JsonState st(*g);
      EXPECT_TRUE(st.feed(c)) << "not a JSON prefix: " << c;
    }
  }
  std::printf("[ json_object ] %d of 3 answers complete within 300 tokens\n", parsed);
}

// `pattern` end to end on the bundled model: greedy and sampled, chat and
// completions, JSON and SSE; every answer finishes and its strings match
// (checked with std::regex, ECMAScript grammar: an independent matcher).
TEST(ServerJson, JsonSchemaPattern) {
  TinyServer s;
  const Json schema = Json::parse(R"({"type":"object","properties":{
      "code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},
      "tag":{"type":"string","pattern":"^(red|green|blue)(/[a-z]{1,4})?$"},
      "note":{"type":"string","pattern":"ok","maxLength":12}},
      "required":["code","tag","note"],"additionalProperties":false})");
  const Json rf = {{"type", "json_schema"}, {"json_schema", {{"name", "pat"}, {"schema", schema}}}};
  const std::regex code("^[A-Z]{3}-[0-9]{4}$"), tag("^(red|green|blue)(/[a-z]{1,4})?$"), note("ok");
  auto check = [&](const std::string& text) {
    Json v;
    ASSERT_NO_THROW(v = Json::parse(text)) << text;
    EXPECT_TRUE(std::regex_search(v["code"].get<std::string>(), code)) << text;
    EXPECT_TRUE(std::regex_search(v["tag"].get<std::string>(), tag)) << text;
    const std::string n = v["note"];
    EXPECT_TRUE(std::regex_search(n, note)) << text;
    size_t cps = 0;
    for (unsigned char c : n) cps += (c & 0xC0) != 0x80;
    EXPECT_LE(cps, 12u) << text;
  };
  for (const auto& [temp, seed] : std::vector<std::pair<double, uint64_t>>{{0.0, 1}, {1.0, 2}, {1.0, 3}, {1.5, 4}}) {
    const auto [status, body] = s.post("/v1/chat/completions", chat_body(rf, temp, seed, false).dump());
    ASSERT_EQ(status, 200) << body;
    const Json r = Json::parse(body);
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << body;
    check(r["choices"][0]["message"]["content"].get<std::string>());
  }
  for (bool stream : {false, true}) {
    Json b = {{"prompt", "A code as JSON:"}, {"max_tokens", 200}, {"temperature", 1.0}, {"seed", 5},
              {"response_format", rf}, {"stream", stream}};
    const auto [status, body] = s.post("/v1/completions", b.dump());
    ASSERT_EQ(status, 200) << body;
    std::string text, finish;
    if (stream) {
      std::tie(text, finish) = sse_text(body, false);
    } else {
      const Json r = Json::parse(body);
      text = r["choices"][0]["text"];
      finish = r["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(finish, "stop") << body;
    check(text);
  }
  // A refused construct is a 400 naming `pattern`.
  const auto [st, rep] = s.post("/v1/completions", R"({"prompt":"x","response_format":{"type":"json_schema",
      "json_schema":{"name":"x","schema":{"type":"string","pattern":"(a)\\1"}}}})");
  EXPECT_EQ(st, 400) << rep;
  EXPECT_NE(rep.find("'pattern'"), std::string::npos) << rep;
  EXPECT_NE(rep.find("backreference"), std::string::npos) << rep;
}

TEST(ServerJson, BadResponseFormats) {
  TinyServer s;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("json")", "response_format"},
      {R"({})", "response_format.type"},
      {R"({"type":5})", "response_format.type"},
      {R"({"type":"xml"})", "response_format.type"},
      {R"({"type":"json_schema"})", "response_format.json_schema"},
      {R"({"type":"json_schema","json_schema":[]})", "response_format.json_schema"},
      {R"({"type":"json_schema","json_schema":{}})", "response_format.json_schema.schema"},
      {R"({"type":"json_schema","json_schema":{"name":"x","schema":"string"}})", "response_format.json_schema.schema"},
      {R"({"type":"json_schema","json_schema":{"name":"a b","schema":{}}})", "response_format.json_schema.name"},
      {R"({"type":"json_schema","json_schema":{"name":"x","strict":"yes","schema":{}}})",
       "response_format.json_schema.strict"},
      {R"({"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"a\\1"}}})",
       "response_format.json_schema.schema"},
      {R"({"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"format":"uri"}}}}})",
       "response_format.json_schema.schema"},
  };
  for (const auto& [rf, param] : cases) {
    const std::string body =
        R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"response_format":)" + rf + "}";
    const auto [status, reply] = s.post("/v1/chat/completions", body);
    EXPECT_EQ(status, 400) << rf << " -> " << reply;
    const Json e = Json::parse(reply);
    ASSERT_TRUE(e.contains("error")) << reply;
    EXPECT_EQ(e["error"]["param"], param) << rf << " -> " << reply;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(e["error"].contains("code"));
  }
  // The unsupported keyword is named.
  const auto [st, rep] = s.post("/v1/completions", R"({"prompt":"x","response_format":{"type":"json_schema",
      "json_schema":{"name":"x","schema":{"type":"string","format":"uri"}}}})");
  EXPECT_EQ(st, 400);
  EXPECT_NE(rep.find("'format'"), std::string::npos) << rep;
  // text is the default behaviour.
  EXPECT_EQ(s.post("/v1/completions", R"({"prompt":"x","max_tokens":2,"response_format":{"type":"text"}})").first, 200);
}

}  // namespace
}  // namespace strata::server_json_test
