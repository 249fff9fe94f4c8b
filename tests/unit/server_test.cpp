// strata serve in-process: an HTTP server on 127.0.0.1 (ephemeral port) over
// the tiny bf16 fixture with a byte-level tokenizer (tests/chat/), driven by
// httplib's client. Covers the bad-request suite (status + OpenAI error
// shape), chat/completions (JSON and SSE), limits (429, 401, 413, timeout),
// continuous batching (16 concurrent greedy clients == one at a time, bit
// for bit) and prefix reuse (== a fresh prefill).
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "experts/expert_store.h"
#include "model/forward.h"
#include "model/model.h"
#include "core/thread_pool.h"
#include "runtime/speculation.h"
#include "server/http_server.h"
#include "server/kv_store.h"
#include "text/json_constraint.h"
#include "test_util.h"
#include "tiny_server.h"
#include "text/tokenizer.h"
#include "core/io.h"
#include "core/json.h"

namespace strata::server_test {
namespace {

const std::string kModelDir = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-bf16";
const std::string kTokenizer = std::string(STRATA_SOURCE_DIR) + "/tests/chat/byte-tokenizer.json";

struct Shared {
  std::shared_ptr<const Model> model = load_model(kModelDir, LoadOptions{.load_mtp = false});
  Tokenizer tok = Tokenizer::load(kTokenizer);
  GenerationConfig gen = load_generation_config(kModelDir);
};
Shared& shared() {
  static Shared s;
  return s;
}

// One server with its own runner, pool and scheduler, serving on a thread.
class TestServer {
 public:
  explicit TestServer(server::ServerOptions o = {}, ChatDialect dialect = ChatDialect::Raw,
                      server::KvStore* kv = nullptr, SpecOptions spec = {}) {
    Shared& s = shared();
    o.host = "127.0.0.1";
    o.port = 0;
    if (o.sched.ctx == 4096) o.sched.ctx = 256;
    o.model_id = "tiny";
    EngineOptions eo;
    eo.threads = 1;
    eo.verbose = false;
    eo.spec = spec;
    engine_ = std::make_unique<Engine>(s.model, eo);
    server::ServerModel sm;
    sm.engine = engine_.get();
    sm.tok = &s.tok;
    sm.stop_ids = {253, 254, 255};
    sm.kv = kv;
    ChatTemplate raw;
    raw.dialect = dialect;
    raw.source = "test";
    srv_ = std::make_unique<server::Server>(sm, raw, s.gen, o);
    port_ = srv_->bind();
    thread_ = std::thread([this] { srv_->run(); });
  }
  ~TestServer() {
    srv_->stop();
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  int port() const { return port_; }

 private:
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<server::Server> srv_;
  int port_ = 0;
  std::thread thread_;
};

struct Reply {
  int status = 0;
  std::string body;
  Json json() const { return Json::parse(body); }
};

Reply post(const TestServer& s, const std::string& path, const std::string& body,
           const httplib::Headers& h = {}) {
  auto c = s.client();
  auto r = c.Post(path.c_str(), h, body, "application/json");
  if (!r) return {0, "no response: " + httplib::to_string(r.error())};
  return {r->status, r->body};
}
Reply get(const TestServer& s, const std::string& path, const httplib::Headers& h = {}) {
  auto c = s.client();
  auto r = c.Get(path.c_str(), h);
  if (!r) return {0, "no response"};
  return {r->status, r->body};
}

void expect_error_shape(const Reply& r, const std::string& what) {
  Json j;
  ASSERT_NO_THROW(j = Json::parse(r.body)) << what << ": " << r.body;
  ASSERT_TRUE(j.contains("error")) << what << ": " << r.body;
  const Json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string()) << what;
  EXPECT_FALSE(e["message"].get<std::string>().empty()) << what;
  EXPECT_TRUE(e["type"].is_string()) << what;
  EXPECT_TRUE(e.contains("param")) << what;
  EXPECT_TRUE(e.contains("code")) << what;
}

// SSE body -> the data payloads, checking the framing.
std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < body.size()) {
    const size_t e = body.find("\n\n", i);
    if (e == std::string::npos) break;
    const std::string ev = body.substr(i, e - i);
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    out.push_back(ev.substr(6));
    i = e + 2;
  }
  EXPECT_EQ(i, body.size()) << "trailing bytes after the last event";
  return out;
}

TEST(Server, HealthModelsDashboardMetrics) {
  TestServer s;
  Reply h = get(s, "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.json()["status"], "ok");
  Reply m = get(s, "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.json()["data"][0]["id"], "tiny");
  Reply d = get(s, "/");
  EXPECT_EQ(d.status, 200);
  EXPECT_NE(d.body.find("/v1/stats"), std::string::npos);
  Reply c = post(s, "/v1/completions", R"({"prompt":[1,2,3],"max_tokens":4,"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(c.status, 200) << c.body;
  Reply p = get(s, "/metrics");
  ASSERT_EQ(p.status, 200);
  EXPECT_NE(p.body.find("strata_tokens_generated_total 4"), std::string::npos) << p.body;
  EXPECT_NE(p.body.find("strata_prompt_tokens_total 3"), std::string::npos) << p.body;
  EXPECT_NE(p.body.find("strata_queue_depth"), std::string::npos);
  EXPECT_NE(p.body.find("strata_expert_hit_rate"), std::string::npos);
  Reply st = get(s, "/v1/stats");
  ASSERT_EQ(st.status, 200);
  const Json sj = st.json();
  EXPECT_EQ(sj["generated_tokens"], 4);
  ASSERT_EQ(sj["expert_heat"].size(), 4u);
  uint64_t used = 0;
  for (const Json& v : sj["expert_heat"][1]) used += v.get<uint64_t>();
  EXPECT_GT(used, 0u);
}

TEST(Server, BadRequests) {
  server::ServerOptions o;
  o.max_body = 4096;
  TestServer s(o);
  struct Case {
    const char* path;
    std::string body;
    int status;
  };
  const std::string chat = "/v1/chat/completions", cmpl = "/v1/completions";
  auto msgs = [](const std::string& extra) {
    return R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}";
  };
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  const std::vector<Case> cases = {
      {"/v1/chat/completions", "not json", 400},
      {"/v1/chat/completions", "[]", 400},
      {"/v1/chat/completions", "{}", 400},
      {"/v1/chat/completions", R"({"messages":"hi"})", 400},
      {"/v1/chat/completions", R"({"messages":[]})", 400},
      {"/v1/chat/completions", R"({"messages":[1]})", 400},
      {"/v1/chat/completions", R"({"messages":[{"role":"wizard","content":"x"}]})", 400},
      {"/v1/chat/completions", R"({"messages":[{"content":"x"}]})", 400},
      {"/v1/chat/completions", R"({"messages":[{"role":"user"}]})", 400},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":5}]})", 400},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", 400},
      {"/v1/chat/completions", msgs(R"(,"max_tokens":-1)"), 400},
      {"/v1/chat/completions", msgs(R"(,"max_tokens":0)"), 400},
      {"/v1/chat/completions", msgs(R"(,"max_tokens":"10")"), 400},
      {"/v1/chat/completions", msgs(R"(,"max_tokens":1.5)"), 400},
      {"/v1/chat/completions", msgs(R"(,"temperature":-1)"), 400},
      {"/v1/chat/completions", msgs(R"(,"temperature":5)"), 400},
      {"/v1/chat/completions", msgs(R"(,"temperature":"hot")"), 400},
      {"/v1/chat/completions", msgs(R"(,"top_p":0)"), 400},
      {"/v1/chat/completions", msgs(R"(,"top_p":1.5)"), 400},
      {"/v1/chat/completions", msgs(R"(,"top_k":-5)"), 400},
      {"/v1/chat/completions", msgs(R"(,"min_p":2)"), 400},
      {"/v1/chat/completions", msgs(R"(,"presence_penalty":5)"), 400},
      {"/v1/chat/completions", msgs(R"(,"n":2)"), 400},
      {"/v1/chat/completions", msgs(R"(,"stop":5)"), 400},
      {"/v1/chat/completions", msgs(R"(,"stop":[1])"), 400},
      {"/v1/chat/completions", msgs(R"(,"stop":[""])"), 400},
      {"/v1/chat/completions", msgs(R"(,"stream":"yes")"), 400},
      {"/v1/chat/completions", msgs(R"(,"stream_options":{"include_usage":true})"), 400},
      {"/v1/chat/completions", msgs(R"(,"response_format":"json")"), 400},
      {"/v1/chat/completions", msgs(R"(,"response_format":{"type":"yaml"})"), 400},
      {"/v1/chat/completions", msgs(R"(,"response_format":{"type":"json_schema","json_schema":{}})"), 400},
      {"/v1/chat/completions", msgs(R"(,"response_format":{"type":"json_schema","json_schema":{"schema":[]}})"), 400},
      {"/v1/chat/completions",
       msgs(R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"\\bx"}}})"), 400},
      {"/v1/chat/completions", msgs(R"(,"logprobs":true,"top_logprobs":50)"), 400},
      {"/v1/chat/completions", msgs(R"(,"top_logprobs":2)"), 400},
      {"/v1/chat/completions", msgs(R"(,"seed":"abc")"), 400},
      {"/v1/chat/completions", msgs(R"(,"tools":"x")"), 400},
      {"/v1/chat/completions", msgs(R"(,"tools":[{"type":"function"}])"), 400},
      {"/v1/chat/completions", msgs(R"(,"tool_choice":5)"), 400},
      {"/v1/chat/completions", msgs(R"(,"chat_template_kwargs":[])"), 400},
      {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"messages":[]})", 400},
      {"/v1/chat/completions", R"({"x":)" + deep + "}", 400},
      {"/v1/chat/completions", std::string(5000, ' '), 413},
      {"/v1/completions", "{}", 400},
      {"/v1/completions", R"({"prompt":5})", 400},
      {"/v1/completions", R"({"prompt":[999999]})", 400},
      {"/v1/completions", R"({"prompt":[-1]})", 400},
      {"/v1/completions", R"({"prompt":[1.5]})", 400},
      {"/v1/completions", R"({"prompt":[]})", 400},
      {"/v1/completions", R"({"prompt":""})", 400},
      {"/v1/completions", R"({"prompt":["a","b"]})", 400},
      {"/v1/completions", R"({"prompt":"a","logprobs":10})", 400},
      {"/v1/completions", R"({"prompt":"a","echo":true})", 400},
      {"/v1/completions", R"({"prompt":")" + std::string(300, 'a') + R"("})", 400},
      {"/v1/nothing", "{}", 404},
  };
  ASSERT_GE(cases.size(), 30u);
  for (const Case& c : cases) {
    const Reply r = post(s, c.path, c.body);
    const std::string what = std::string(c.path) + " " + c.body.substr(0, 120);
    EXPECT_EQ(r.status, c.status) << what << " -> " << r.body;
    expect_error_shape(r, what);
  }
  // Unknown endpoint by GET, too.
  const Reply g = get(s, "/v2/whatever");
  EXPECT_EQ(g.status, 404);
  expect_error_shape(g, "GET /v2/whatever");
  // The server is still fine.
  EXPECT_EQ(post(s, chat, msgs(R"(,"max_tokens":2)")).status, 200);
  EXPECT_EQ(post(s, cmpl, R"({"prompt":"ab","max_tokens":2})").status, 200);
}

TEST(Server, ChatAndCompletions) {
  server::ServerOptions o;
  o.max_tokens_ceiling = 6;
  TestServer s(o);
  // A huge max_tokens is clamped to the ceiling, not refused.
  const Reply a = post(s, "/v1/chat/completions",
                       R"({"messages":[{"role":"user","content":"hello"}],"max_tokens":1000000000,
                           "temperature":0,"ignore_eos":true})");
  ASSERT_EQ(a.status, 200) << a.body;
  const Json aj = a.json();
  EXPECT_EQ(aj["object"], "chat.completion");
  EXPECT_EQ(aj["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(aj["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(aj["usage"]["completion_tokens"], 6);
  EXPECT_EQ(aj["usage"]["prompt_tokens"], 5);  // "hello", byte tokens, raw template
  EXPECT_EQ(aj["usage"]["total_tokens"], 11);

  // Streaming gives the same text, the usage chunk and [DONE].
  const Reply b = post(s, "/v1/chat/completions",
                       R"({"messages":[{"role":"user","content":"hello"}],"max_tokens":6,"temperature":0,
                           "ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(b.status, 200) << b.body;
  const auto ev = sse_events(b.body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string text, finish;
  Json usage;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    const Json c = Json::parse(ev[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c.contains("usage")) usage = c["usage"];
    if (c["choices"].empty()) continue;
    const Json& d = c["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, aj["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage["completion_tokens"], 6);

  // Completions from token ids, with logprobs.
  const Reply c = post(s, "/v1/completions",
                       R"({"prompt":[10,20,30],"max_tokens":3,"temperature":0,"ignore_eos":true,"logprobs":2})");
  ASSERT_EQ(c.status, 200) << c.body;
  const Json cj = c.json();
  EXPECT_EQ(cj["object"], "text_completion");
  EXPECT_EQ(cj["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(cj["choices"][0]["logprobs"]["tokens"].size(), 3u);
  // A dict keyed by token text: byte tokens >= 0x80 all read as U+FFFD and may merge.
  EXPECT_GE(cj["choices"][0]["logprobs"]["top_logprobs"][0].size(), 1u);
  EXPECT_LE(cj["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  const Reply cl = post(s, "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":0,
                            "ignore_eos":true,"logprobs":true,"top_logprobs":3})");
  ASSERT_EQ(cl.status, 200) << cl.body;
  const Json clj = cl.json();
  const Json& lpc = clj["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lpc.size(), 2u);
  EXPECT_EQ(lpc[0]["top_logprobs"].size(), 3u);
  EXPECT_GE(lpc[0]["top_logprobs"][0]["logprob"].get<double>(), lpc[0]["top_logprobs"][1]["logprob"].get<double>());
  for (const Json& lp : cj["choices"][0]["logprobs"]["token_logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);

  // Same seed, same sampled text.
  const std::string seeded = R"({"prompt":"abc","max_tokens":6,"temperature":1,"seed":42,"ignore_eos":true})";
  const Reply s1 = post(s, "/v1/completions", seeded), s2 = post(s, "/v1/completions", seeded);
  ASSERT_EQ(s1.status, 200);
  EXPECT_EQ(s1.json()["choices"][0]["text"], s2.json()["choices"][0]["text"]);

  // A stop string cuts the text before it, with finish_reason "stop". The
  // greedy text is mostly U+FFFD (lone byte tokens >= 0x80), so the stop
  // strings are whole code points of it: the first one past the start that
  // does not occur earlier, alone and followed by the next one (a stop string
  // spanning two tokens).
  const std::string plain = R"({"prompt":"xyz","max_tokens":6,"temperature":0,"ignore_eos":true})";
  const Reply full = post(s, "/v1/completions", plain);
  ASSERT_EQ(full.status, 200) << full.body;
  const std::string ft = full.json()["choices"][0]["text"];
  std::vector<size_t> cp;  // code point starts, then the end
  for (size_t i = 0; i < ft.size(); ++i)
    if ((static_cast<unsigned char>(ft[i]) & 0xC0) != 0x80) cp.push_back(i);
  cp.push_back(ft.size());
  size_t k = 1;
  while (k + 1 < cp.size() && ft.find(ft.substr(cp[k], cp[k + 1] - cp[k])) != cp[k]) ++k;
  ASSERT_LT(k + 1, cp.size()) << "no code point past the first that is new: " << ft;
  std::vector<std::string> stops = {ft.substr(cp[k], cp[k + 1] - cp[k])};
  if (k + 2 < cp.size()) stops.push_back(ft.substr(cp[k], cp[k + 2] - cp[k]));
  for (const std::string& stop : stops) {
    for (const bool stream : {false, true}) {
      Json req = Json::parse(plain);
      req["stop"] = Json::array({stop});
      req["stream"] = stream;
      const Reply r = post(s, "/v1/completions", req.dump());
      ASSERT_EQ(r.status, 200) << r.body;
      std::string text, finish;
      if (stream) {
        const auto ev = sse_events(r.body);
        ASSERT_FALSE(ev.empty());
        EXPECT_EQ(ev.back(), "[DONE]");
        for (size_t i = 0; i + 1 < ev.size(); ++i) {
          const Json c = Json::parse(ev[i]);
          if (c["choices"].empty()) continue;
          text += c["choices"][0]["text"].get<std::string>();
          if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
        }
      } else {
        const Json j = r.json();
        text = j["choices"][0]["text"];
        finish = j["choices"][0]["finish_reason"];
      }
      EXPECT_EQ(finish, "stop") << "stop " << Json(stop).dump() << " stream " << stream;
      EXPECT_EQ(text, ft.substr(0, cp[k])) << "stop " << Json(stop).dump() << " in " << Json(ft).dump();
    }
  }
}

// Different seeds give different answers, and sampling is not greedy, on the
// bundled trained model (its text tokens: the fixture's lone bytes >= 0x80
// all read as U+FFFD, so its answers cannot be told apart by their bytes).
// Chat logprobs give each token's bytes and its log-probability under the
// model at temperature 1. Sampling at temperature >= 1 (top_p 1) reproduces
// a given answer X with probability at most exp(sum of X's logprobs): one
// factor per token (a higher temperature only lowers the top token's
// probability, and the greedy answer takes the top token each time; ending
// on a stop id is one more factor <= 1). Two answers with the same byte lists
// are the same tokens when none of them reads as U+FFFD (a token's bytes are
// unique in the vocabulary). The test checks both before it expects two
// answers to differ, so a failure by chance has probability under 1e-6.
TEST(Server, SeedsDifferAndSamplingIsNotGreedy) {
  test_util::TinyServer s;
  struct Answer {
    std::vector<Json> bytes;
    double logprob = 0;
    std::string text;
  };
  auto ask = [&](double temperature, uint64_t seed) {
    Json req = Json::parse(R"({"messages":[{"role":"user","content":"Describe a river."}],"max_tokens":24,
                               "top_p":1,"logprobs":true,"chat_template_kwargs":{"enable_thinking":false}})");
    req["temperature"] = temperature;
    req["seed"] = seed;
    const auto [status, body] = s.post("/v1/chat/completions", req.dump());
    EXPECT_EQ(status, 200) << body;
    Answer a;
    const Json j = Json::parse(body);
    for (const Json& lp : j["choices"][0]["logprobs"]["content"]) {
      a.bytes.push_back(lp["bytes"]);
      a.logprob += lp["logprob"].get<double>();
      a.text += lp["token"].get<std::string>();
    }
    return a;
  };
  const Json fffd = Json::array({0xEF, 0xBF, 0xBD});
  auto identifiable = [&](const Answer& a) { return std::find(a.bytes.begin(), a.bytes.end(), fffd) == a.bytes.end(); };
  const Answer x = ask(1.0, 42), x2 = ask(1.0, 42), y = ask(1.0, 43), greedy = ask(0.0, 42);
  EXPECT_EQ(x.bytes, x2.bytes);  // the same seed, the same answer
  EXPECT_EQ(ask(0.0, 7).bytes, greedy.bytes);  // greedy ignores the seed
  ASSERT_TRUE(identifiable(x)) << x.text;
  ASSERT_TRUE(identifiable(greedy)) << greedy.text;
  ASSERT_LT(std::exp(x.logprob), 1e-6) << "seed 43 could repeat seed 42's answer by chance: " << x.text;
  EXPECT_NE(x.bytes, y.bytes) << "seeds 42 and 43 gave the same answer: " << x.text;
  ASSERT_LT(std::exp(greedy.logprob), 1e-6) << "sampling could give the greedy answer by chance: " << greedy.text;
  EXPECT_NE(x.bytes, greedy.bytes) << "temperature 1 gave the greedy answer: " << x.text;
  std::printf("[ seeds ] P(seed 43 == seed 42) <= %.3g, P(sampled == greedy) <= %.3g\n", std::exp(x.logprob),
              std::exp(greedy.logprob));
}

// response_format json_object answers that really end. The bundled trained
// model never writes '}' (ServerJson.JsonObjectMode: its objects run to
// max_tokens), so this runs on the random fixture, whose near-uniform byte
// choices close an object often. Greedy, over 20 prompts: every answer is a
// JSON-object prefix; the ones that finish ("stop", with end-of-turn ids
// banned by ignore_eos, so only the constraint's "complete, nothing may
// follow" can end them) parse as an object and are exactly their tokens
// (one byte each: nothing generated after the '}'). At least 3 must finish
// (7 of 20 do here; greedy differs between machines at most in rare
// near-ties), one with a key, and SSE gives the same.
TEST(Server, JsonObjectAnswersComplete) {
  TestServer s;
  auto body = [](int i, bool stream) {
    Json b = Json::parse(
        R"({"max_tokens":128,"temperature":0,"ignore_eos":true,"response_format":{"type":"json_object"}})");
    b["prompt"] = "p" + std::to_string(i);
    b["stream"] = stream;
    return b.dump();
  };
  int finished = 0, with_keys = 0, first = -1;
  std::string first_text;
  for (int i = 0; i < 20; ++i) {
    const Reply r = post(s, "/v1/completions", body(i, false));
    ASSERT_EQ(r.status, 200) << r.body;
    const Json j = r.json();
    const std::string text = j["choices"][0]["text"];
    const std::string finish = j["choices"][0]["finish_reason"];
    const int64_t tokens = j["usage"]["completion_tokens"];
    auto g = JsonGrammar::any_object();
    JsonState st(*g);
    ASSERT_TRUE(st.feed(text)) << "not a JSON-object prefix: " << Json(text).dump();
    if (finish == "length") {
      EXPECT_EQ(tokens, 128) << r.body;
      EXPECT_FALSE(st.done()) << r.body;  // a complete object would have ended the answer
      continue;
    }
    ASSERT_EQ(finish, "stop") << r.body;
    EXPECT_TRUE(st.done()) << r.body;
    Json v;
    ASSERT_NO_THROW(v = Json::parse(text)) << r.body;
    EXPECT_TRUE(v.is_object()) << r.body;
    EXPECT_EQ(static_cast<size_t>(tokens), text.size()) << "tokens past the end of the object: " << r.body;
    ++finished;
    with_keys += !v.empty();
    if (first < 0) first = i, first_text = text;
  }
  std::printf("[ json_object ] %d of 20 greedy answers complete, %d with keys\n", finished, with_keys);
  EXPECT_GE(finished, 3);
  EXPECT_GE(with_keys, 1);
  ASSERT_GE(first, 0);
  const Reply r = post(s, "/v1/completions", body(first, true));
  ASSERT_EQ(r.status, 200) << r.body;
  const auto ev = sse_events(r.body);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string text, finish;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    const Json c = Json::parse(ev[i]);
    if (c["choices"].empty()) continue;
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(finish, "stop");
  EXPECT_EQ(text, first_text);
}

// JSON-Schema numeric bounds and formats through response_format (what zod's
// z.number().int() and pydantic emit): 200, and every answer (greedy and
// sampled, on the random fixture) finishes as an object within the bounds.
TEST(Server, JsonSchemaBoundsAndFormats) {
  TestServer s;
  const Json schema = Json::parse(R"({"type":"object","properties":{
      "n":{"type":"integer","minimum":10,"maximum":20,"description":"a count"},
      "x":{"type":"number","exclusiveMinimum":0,"maximum":5},
      "z":{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991},
      "d":{"type":"string","format":"date"}},"required":["n","x","z","d"],"additionalProperties":false,
      "$schema":"http://json-schema.org/draft-07/schema#"})");
  int finished = 0;
  for (int i = 0; i < 8; ++i) {
    Json b = Json::parse(R"({"max_tokens":160,"ignore_eos":true})");
    b["prompt"] = "q" + std::to_string(i);
    b["temperature"] = i % 2 ? 1.0 : 0.0;
    b["seed"] = i;
    b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "t"}, {"schema", schema}}}};
    const Reply r = post(s, "/v1/completions", b.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const Json j = r.json();
    const std::string text = j["choices"][0]["text"];
    ASSERT_EQ(j["choices"][0]["finish_reason"], "stop") << r.body;
    Json v;
    ASSERT_NO_THROW(v = Json::parse(text)) << r.body;
    ASSERT_TRUE(v["n"].is_number_integer()) << text;
    EXPECT_GE(v["n"].get<int64_t>(), 10) << text;
    EXPECT_LE(v["n"].get<int64_t>(), 20) << text;
    EXPECT_GT(v["x"].get<double>(), 0) << text;
    EXPECT_LE(v["x"].get<double>(), 5) << text;
    ASSERT_TRUE(v["z"].is_number_integer()) << text;
    EXPECT_LE(std::abs(v["z"].get<int64_t>()), int64_t{9007199254740991}) << text;
    const std::string d = v["d"];
    EXPECT_EQ(d.size(), 10u) << text;
    ++finished;
    if (i < 2) std::printf("[ bounds ] %s\n", Json(text).dump().c_str());
  }
  EXPECT_EQ(finished, 8);
  // Still a 400 naming the keyword for what is not supported.
  Json b = Json::parse(R"({"max_tokens":4,"prompt":"a"})");
  b["response_format"] = {{"type", "json_schema"},
                          {"json_schema", {{"name", "t"}, {"schema", {{"type", "string"}, {"format", "uri"}}}}}};
  const Reply r = post(s, "/v1/completions", b.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("'format'"), std::string::npos) << r.body;
}

TEST(Server, LimitsKeyQueueTimeout) {
  {
    server::ServerOptions o;
    o.api_keys = {"sekrit"};
    TestServer s(o);
    const std::string body = R"({"prompt":"a","max_tokens":1})";
    Reply r = post(s, "/v1/completions", body);
    EXPECT_EQ(r.status, 401);
    expect_error_shape(r, "no key");
    r = post(s, "/v1/completions", body, {{"Authorization", "Bearer sekriT"}});
    EXPECT_EQ(r.status, 401);
    r = post(s, "/v1/completions", body, {{"Authorization", "Bearer sekrit"}});
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(get(s, "/metrics").status, 401);
    EXPECT_EQ(get(s, "/health").status, 200);
  }
  {
    server::ServerOptions o;
    o.sched.parallel = 1;
    o.sched.queue = 0;
    o.sched.ctx = 4000;
    o.max_tokens_ceiling = 100000;
    o.timeout_s = 30;
    TestServer s(o);
    std::thread long_one([&] {
      post(s, "/v1/completions", R"({"prompt":"a","max_tokens":600,"temperature":0,"ignore_eos":true})");
    });
    bool busy = false;
    for (int i = 0; i < 500 && !busy; ++i) {
      busy = get(s, "/v1/stats").json()["active_requests"] == 1;
      if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(busy);
    const Reply r = post(s, "/v1/completions", R"({"prompt":"b","max_tokens":1})");
    EXPECT_EQ(r.status, 429) << r.body;
    expect_error_shape(r, "queue full");
    long_one.join();
  }
  {
    server::ServerOptions o;
    o.timeout_s = 0.05;
    o.sched.ctx = 4000;
    o.max_tokens_ceiling = 100000;
    TestServer s(o);
    const Reply r = post(s, "/v1/completions", R"({"prompt":"a","max_tokens":3900,"temperature":0,"ignore_eos":true})");
    EXPECT_EQ(r.status, 504) << r.body;
    expect_error_shape(r, "timeout");
  }
}

// The GLM template path: tools rendered, thinking switched off, the output
// parsed into content / reasoning / tool calls (random bytes here: it must
// simply hold together, JSON and SSE alike).
TEST(Server, GlmTemplateRequests) {
  server::ServerOptions o;
  o.sched.ctx = 1024;
  TestServer s(o, ChatDialect::Glm);
  const std::string base = R"({"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"weather?"},
      {"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"sunny"}],
    "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string"}}}}}],
    "max_tokens":8,"temperature":0,"ignore_eos":true)";
  const Reply a = post(s, "/v1/chat/completions", base + R"(,"chat_template_kwargs":{"enable_thinking":false}})");
  ASSERT_EQ(a.status, 200) << a.body;
  const Json aj = a.json();
  EXPECT_TRUE(aj["choices"][0]["message"]["content"].is_string());
  EXPECT_GT(aj["usage"]["prompt_tokens"].get<int>(), 100);  // the tools block and turns, as bytes
  const Reply b = post(s, "/v1/chat/completions", base + R"(,"stream":true})");
  ASSERT_EQ(b.status, 200) << b.body;
  const auto ev = sse_events(b.body);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back(), "[DONE]");
  for (size_t i = 0; i + 1 < ev.size(); ++i) EXPECT_NO_THROW(Json::parse(ev[i]));
}

// 16 concurrent greedy clients get exactly what each gets alone.
TEST(Server, ConcurrentGreedyEqualsSequential) {
  server::ServerOptions o;
  o.sched.parallel = 6;
  o.sched.queue = 16;
  o.sched.keep_sessions = 0;
  o.sched.prefill_chunk = 7;  // prefill interleaves with decodes over several steps
  TestServer s(o);
  constexpr int kClients = 16;
  std::vector<std::string> bodies;
  for (int i = 0; i < kClients; ++i) {
    Json ids = Json::array();
    for (int k = 0; k < 3 + (i * 5) % 17; ++k) ids.push_back((i * 37 + k * 11) % 250);
    bodies.push_back(Json{{"prompt", ids}, {"max_tokens", 8 + i % 5}, {"temperature", 0}, {"logprobs", 0}}.dump());
  }
  // /v1/stats counters (steps, generated tokens), read between the phases:
  // the concurrent phase is judged on its own deltas.
  auto counters = [&] {
    const Json st = get(s, "/v1/stats").json();
    return std::pair<double, double>{st["steps"].get<double>(), st["generated_tokens"].get<double>()};
  };
  std::vector<std::string> alone(kClients), together(kClients);
  const auto before_alone = counters();
  for (int i = 0; i < kClients; ++i) {
    const Reply r = post(s, "/v1/completions", bodies[i]);
    ASSERT_EQ(r.status, 200) << r.body;
    const Json j = r.json();
    alone[i] = j["choices"][0].dump() + j["usage"].dump();
  }
  const auto after_alone = counters();
  std::vector<std::thread> ts;
  std::latch start(kClients);  // every client posts at once
  for (int i = 0; i < kClients; ++i)
    ts.emplace_back([&, i] {
      start.arrive_and_wait();
      const Reply r = post(s, "/v1/completions", bodies[i]);
      if (r.status != 200) {
        together[i] = r.body;
        return;
      }
      const Json j = r.json();
      together[i] = j["choices"][0].dump() + j["usage"].dump();
    });
  for (auto& t : ts) t.join();
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(together[i], alone[i]) << "client " << i;
  const auto after_together = counters();
  // Sequences per step: a step samples at most one token per sequence, so
  // generated tokens / steps is a lower bound on the sequences it decoded
  // together. One request at a time can never exceed 1 (prefill steps sample
  // nothing); a scheduler that never batches stays at or below 1 in the
  // concurrent phase too. (rows / steps cannot tell: prefill chunks of 7 rows
  // alone give ~1.8.)
  const double alone_steps = after_alone.first - before_alone.first;
  const double alone_tokens = after_alone.second - before_alone.second;
  const double steps = after_together.first - after_alone.first;
  const double tokens = after_together.second - after_alone.second;
  ASSERT_GT(alone_steps, 0);
  ASSERT_GT(steps, 0);
  EXPECT_EQ(tokens, alone_tokens);  // the same answers
  EXPECT_LE(alone_tokens / alone_steps, 1.0);
  EXPECT_GT(tokens / steps, 1.5) << "sequences were not decoded together: " << tokens << " tokens in " << steps
                                 << " steps";
  std::printf("[ batching ] alone %.0f tokens in %.0f steps; together %.0f tokens in %.0f steps\n", alone_tokens,
              alone_steps, tokens, steps);
}

// Speculative decoding in the server, --spec ngram and auto (n-gram and
// forced drafts: the shared model has no MTP layer): concurrent answers,
// greedy and seeded sampled, half of them with a JSON schema (forced
// tokens), equal the --spec off server's
// sequential ones, each answer's usage reports its accepted and rejected
// draft tokens, and those add up to /v1/stats' spec counters.
TEST(Server, SpeculationEqualsOffAndReportsDrafts) {
  server::ServerOptions o;
  o.sched.parallel = 4;
  o.sched.keep_sessions = 0;
  TestServer off(o);
  constexpr int kClients = 12;
  std::vector<std::string> bodies;
  // Odd clients ask for a JSON schema: its keys are forced tokens (bytes).
  // Clients 6.. sample with a seed: the same text as --spec off too.
  const Json schema = Json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
      "city":{"type":"string","maxLength":6}},"required":["name","city"],"additionalProperties":false})");
  for (int i = 0; i < kClients; ++i) {
    Json ids = Json::array();
    for (int k = 0; k < 12; ++k) ids.push_back((i * 41 + (k % 4) * 13) % 250);
    Json b{{"prompt", ids}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
    if (i >= 6) {
      b["temperature"] = 0.6;
      b["top_p"] = 0.9;
      b["frequency_penalty"] = 0.2;
      b["seed"] = 100 + i;
    }
    if (i % 2) b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "t"}, {"schema", schema}}}};
    bodies.push_back(b.dump());
  }
  std::vector<Json> want(kClients);
  for (int i = 0; i < kClients; ++i) {
    const Reply r = post(off, "/v1/completions", bodies[i]);
    ASSERT_EQ(r.status, 200) << r.body;
    want[i] = r.json();
    EXPECT_FALSE(want[i]["usage"].contains("completion_tokens_details")) << "--spec off reported drafts";
  }
  for (SpecMode mode : {SpecMode::Ngram, SpecMode::Auto}) {
    TestServer on(o, ChatDialect::Raw, nullptr, SpecOptions{.mode = mode, .k = 4});
    std::vector<Json> got(kClients);
    std::vector<std::thread> ts;
    std::latch start(kClients);
    for (int i = 0; i < kClients; ++i)
      ts.emplace_back([&, i] {
        start.arrive_and_wait();
        const Reply r = post(on, "/v1/completions", bodies[i]);
        got[i] = r.status == 200 ? r.json() : Json{{"status", r.status}, {"body", r.body}};
      });
    for (auto& t : ts) t.join();
    int64_t accepted = 0, rejected = 0, sampled_rejected = 0;
    for (int i = 0; i < kClients; ++i) {
      ASSERT_TRUE(got[i].contains("choices")) << got[i].dump();
      EXPECT_EQ(got[i]["choices"][0]["text"], want[i]["choices"][0]["text"])
          << "client " << i << " --spec " << spec_mode_name(mode);
      EXPECT_EQ(got[i]["usage"]["completion_tokens"], want[i]["usage"]["completion_tokens"]) << "client " << i;
      if (got[i]["usage"].contains("completion_tokens_details")) {
        const Json& d = got[i]["usage"]["completion_tokens_details"];
        const int64_t a = d["accepted_prediction_tokens"].get<int64_t>(), r = d["rejected_prediction_tokens"].get<int64_t>();
        accepted += a;
        rejected += r;
        if (i >= 6) sampled_rejected += r;
      }
    }
    const Json st = get(on, "/v1/stats").json();
    std::printf("[ spec %s ] %lld accepted, %lld rejected draft tokens over %d answers (%lld rejected in sampled answers)\n",
                spec_mode_name(mode), static_cast<long long>(accepted), static_cast<long long>(rejected), kClients,
                static_cast<long long>(sampled_rejected));
    EXPECT_GT(accepted, 0) << "no draft was accepted: the test proves nothing";
    // A rejection is where the old two-draw rule left the random stream.
    EXPECT_GT(sampled_rejected, 0) << "no draft was rejected in a sampled answer";
    EXPECT_EQ(st["spec"]["mode"], spec_mode_name(mode));
    EXPECT_EQ(st["spec"]["drafted"].get<int64_t>(), accepted + rejected);
    EXPECT_EQ(st["spec"]["accepted"].get<int64_t>(), accepted);
  }
}

// A conversation's next turn reuses the session's KV and answers exactly as a
// fresh prefill does.
TEST(Server, PrefixReuse) {
  const std::string first = R"({"prompt":[5,6,7,8,9,10,11,12],"max_tokens":5,"temperature":0,"ignore_eos":true})";
  const std::string second =
      R"({"prompt":[5,6,7,8,9,10,11,12,40,41,42],"max_tokens":5,"temperature":0,"ignore_eos":true,"logprobs":1})";
  std::string fresh;
  {
    server::ServerOptions o;
    o.sched.keep_sessions = 0;
    TestServer s(o);
    const Json j = post(s, "/v1/completions", second).json();
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    fresh = j["choices"][0].dump();
  }
  server::ServerOptions o;
  o.sched.keep_sessions = 2;
  TestServer s(o);
  ASSERT_EQ(post(s, "/v1/completions", first).status, 200);
  const Json j = post(s, "/v1/completions", second).json();
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(j["choices"][0].dump(), fresh);
  // The same prompt again: all but the last token reused.
  const Json k = post(s, "/v1/completions", second).json();
  EXPECT_EQ(k["usage"]["prompt_tokens_details"]["cached_tokens"], 10);
  EXPECT_EQ(k["choices"][0].dump(), fresh);
}

// --kv-dir: a finished turn is saved; a new server over the same directory
// resumes from it (no re-prefill of the saved positions) and answers exactly
// as a server that never stopped.
TEST(Server, ConversationSurvivesRestart) {
  const std::string first = R"({"prompt":[5,6,7,8,9,10,11,12],"max_tokens":5,"temperature":0,"ignore_eos":true})";
  const std::string second =
      R"({"prompt":[5,6,7,8,9,10,11,12,40,41,42],"max_tokens":6,"temperature":0,"ignore_eos":true,"logprobs":1})";
  std::string uninterrupted;
  {
    server::ServerOptions o;
    o.sched.keep_sessions = 2;
    TestServer s(o);
    ASSERT_EQ(post(s, "/v1/completions", first).status, 200);
    uninterrupted = post(s, "/v1/completions", second).json()["choices"][0].dump();
  }
  test_util::TempDir d;
  const uint64_t fp = server::kv_fingerprint(*shared().model, ForwardOptions{});
  {
    server::KvStore kv(d.str(), shared().model->config, fp, 8, false);
    server::ServerOptions o;
    o.sched.keep_sessions = 0;  // nothing kept in memory: only the disk can help
    TestServer s(o, ChatDialect::Raw, &kv);
    ASSERT_EQ(post(s, "/v1/completions", first).status, 200);
    const Json st = get(s, "/v1/stats").json();
    EXPECT_EQ(st["kv_store"]["conversations"], 1);
    EXPECT_GT(st["kv_store"]["bytes_written"].get<uint64_t>(), 0u);
  }
  server::KvStore kv(d.str(), shared().model->config, fp, 8, false);  // the restart
  ASSERT_EQ(kv.conversations(), 1u);
  server::ServerOptions o;
  o.sched.keep_sessions = 0;
  TestServer s(o, ChatDialect::Raw, &kv);
  const Json j = post(s, "/v1/completions", second).json();
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(j["choices"][0].dump(), uninterrupted);
  const Json st = get(s, "/v1/stats").json();
  EXPECT_EQ(st["prefilled_tokens"], 3);  // only 40, 41, 42
  EXPECT_EQ(st["kv_store"]["positions_loaded"], 8);
}

// Saved prefixes are reused only within one API key (docs/security.md):
// cached_tokens tells a client nothing about another key's prompts. Client
// A's prompt, then B's identical prompt: B reuses nothing; A's repeat does.
// The same through --kv-dir across a restart: the file records the key's
// scope (a hash, never the key) and is offered to that key only.
TEST(Server, PrefixReuseIsScopedPerApiKey) {
  const std::string body = R"({"prompt":[5,6,7,8,9,10,11,12],"max_tokens":3,"temperature":0,"ignore_eos":true})";
  const httplib::Headers a{{"Authorization", "Bearer key-a"}}, b{{"Authorization", "Bearer key-b"}};
  auto cached = [](const Reply& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? r.json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>() : -1;
  };
  std::string fresh;
  {
    server::ServerOptions o;
    o.api_keys = {"key-a", "key-b"};
    o.sched.keep_sessions = 4;
    TestServer s(o);
    const Reply first = post(s, "/v1/completions", body, a);
    EXPECT_EQ(cached(first), 0);
    fresh = first.json()["choices"][0].dump();
    const Reply other = post(s, "/v1/completions", body, b);
    EXPECT_EQ(cached(other), 0);  // A's session is there, but not B's to reuse
    EXPECT_EQ(other.json()["choices"][0].dump(), fresh);
    const Reply again = post(s, "/v1/completions", body, a);
    EXPECT_EQ(cached(again), 7);  // all but the last prompt token
    EXPECT_EQ(again.json()["choices"][0].dump(), fresh);
    EXPECT_EQ(cached(post(s, "/v1/completions", body, b)), 7);  // B's own session now
  }
  // --kv-dir: A saves; after a restart B is offered nothing, A resumes.
  test_util::TempDir d;
  const uint64_t fp = server::kv_fingerprint(*shared().model, ForwardOptions{});
  {
    server::KvStore kv(d.str(), shared().model->config, fp, 8, false);
    server::ServerOptions o;
    o.api_keys = {"key-a", "key-b"};
    o.sched.keep_sessions = 0;  // only the disk can help
    TestServer s(o, ChatDialect::Raw, &kv);
    EXPECT_EQ(cached(post(s, "/v1/completions", body, a)), 0);
    EXPECT_EQ(cached(post(s, "/v1/completions", body, b)), 0);  // A's file is not B's
  }
  // The files record the scope (the hash at byte 32), never the key itself.
  std::vector<uint64_t> scopes;
  for (const auto& e : std::filesystem::directory_iterator(d.path())) {
    if (!e.path().filename().string().starts_with("conv-")) continue;
    const std::string bytes = read_small_file(e.path().string(), 64 << 20);
    ASSERT_GE(bytes.size(), 64u);
    EXPECT_EQ(bytes.find("key-a"), std::string::npos);
    EXPECT_EQ(bytes.find("key-b"), std::string::npos);
    uint64_t sc = 0;
    std::memcpy(&sc, bytes.data() + 32, 8);
    scopes.push_back(sc);
  }
  std::sort(scopes.begin(), scopes.end());
  std::vector<uint64_t> want{server::key_scope("key-a"), server::key_scope("key-b")};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(scopes, want);
  EXPECT_NE(server::key_scope("key-a"), server::key_scope("key-b"));
  server::KvStore kv(d.str(), shared().model->config, fp, 8, false);  // the restart
  ASSERT_EQ(kv.conversations(), 2u);
  server::ServerOptions o;
  o.api_keys = {"key-a", "key-c"};
  o.sched.keep_sessions = 0;
  TestServer s(o, ChatDialect::Raw, &kv);
  EXPECT_EQ(cached(post(s, "/v1/completions", body, {{"Authorization", "Bearer key-c"}})), 0);
  const Reply resumed = post(s, "/v1/completions", body, a);
  EXPECT_EQ(cached(resumed), 7);
  EXPECT_EQ(resumed.json()["choices"][0].dump(), fresh);
  EXPECT_EQ(get(s, "/v1/stats", a).json()["kv_store"]["positions_loaded"], 7);
}

// A keyless server is one namespace: any client reuses any prefix (the
// default, as before). --prefix-reuse off: nothing is ever reused.
TEST(Server, PrefixReuseOffAndKeylessNamespace) {
  const std::string body = R"({"prompt":[5,6,7,8,9,10,11,12],"max_tokens":3,"temperature":0,"ignore_eos":true})";
  auto cached = [](const Reply& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? r.json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>() : -1;
  };
  {
    TestServer s;
    EXPECT_EQ(cached(post(s, "/v1/completions", body)), 0);
    EXPECT_EQ(cached(post(s, "/v1/completions", body)), 7);
  }
  server::ServerOptions o;
  o.sched.prefix_reuse = false;
  o.sched.keep_sessions = 4;
  TestServer s(o);
  std::string first;
  for (int i = 0; i < 3; ++i) {
    const Reply r = post(s, "/v1/completions", body);
    EXPECT_EQ(cached(r), 0) << "request " << i;
    if (i == 0) first = r.json()["choices"][0].dump();
    EXPECT_EQ(r.json()["choices"][0].dump(), first);
  }
  const Json st = get(s, "/v1/stats").json();
  EXPECT_EQ(st["cached_tokens"], 0);
  EXPECT_EQ(st["prefilled_tokens"], 24);
}

}  // namespace
}  // namespace strata::server_test
