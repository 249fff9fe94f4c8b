// Forced tool calls (tool_choice "required" or a named function) in strata
// serve, end to end on the bundled trained model (models/glm5-strata-tiny,
// GLM chat template, <tool_call> etc. as added tokens): the answer is one
// tool call whose arguments validate against the function's schema, JSON and
// SSE, greedy and sampled; the follow-up turn with the tool's result is a
// normal answer; bad tool_choice/tools combinations get 400. Also the
// recogniser itself on byte strings (markup spelled out or as added tokens).
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "experts/expert_store.h"
#include "model/forward.h"
#include "model/model.h"
#include "core/thread_pool.h"
#include "server/glm_output.h"
#include "server/http_server.h"
#include "text/chat_template.h"
#include "text/generation_config.h"
#include "text/json_constraint.h"
#include "text/tokenizer.h"
#include "text/tool_constraint.h"
#include "core/error.h"
#include "core/json.h"
#include "constraint_fixtures.h"
#include "tiny_server.h"

namespace strata::server_tools_test {
namespace {

using test_util::tiny;
// The tools block makes prompts of ~500 tokens.
struct TinyServer : test_util::TinyServer {
  explicit TinyServer(ChatDialect d = ChatDialect::Glm) : test_util::TinyServer(2048, d) {}
};


using test_util::kTools;

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The arguments validate against the function's schema (and the raw-text rules).
void expect_valid_call(const std::string& name, const std::string& arguments) {
  Json a;
  ASSERT_NO_THROW(a = Json::parse(arguments)) << arguments;
  ASSERT_TRUE(a.is_object()) << arguments;
  if (name == "get_weather") {
    ASSERT_TRUE(a.contains("city") && a["city"].is_string()) << arguments;
    const std::string city = a["city"];
    EXPECT_LE(code_points(city), 40u) << arguments;
    EXPECT_EQ(city.find('<'), std::string::npos);
    ASSERT_TRUE(a.contains("days") && a["days"].is_number_integer()) << arguments;
    if (a.contains("unit")) {
      EXPECT_TRUE(a["unit"] == "celsius" || a["unit"] == "fahrenheit") << arguments;
    }
    if (a.contains("detail")) {
      ASSERT_TRUE(a["detail"].is_object()) << arguments;
      EXPECT_TRUE(a["detail"].contains("wind") && a["detail"]["wind"].is_boolean()) << arguments;
      EXPECT_EQ(a["detail"].size(), 1u) << arguments;
    }
    for (auto it = a.begin(); it != a.end(); ++it)
      EXPECT_TRUE(it.key() == "city" || it.key() == "unit" || it.key() == "days" || it.key() == "detail") << it.key();
  } else {
    ASSERT_EQ(name, "get_time");
    ASSERT_TRUE(a.contains("zone") && a["zone"].is_string()) << arguments;
    EXPECT_LE(code_points(a["zone"]), kToolStringMaxChars);
    EXPECT_EQ(a.size(), 1u) << arguments;
  }
}

Json tool_body(const Json& choice, double temperature, uint64_t seed, bool stream) {
  Json b = {{"messages", Json::array({Json{{"role", "user"}, {"content", "What is the weather in Paris for 3 days?"}}})},
            {"tools", Json::parse(kTools)},
            {"tool_choice", choice},
            {"max_tokens", 600},
            {"temperature", temperature},
            {"seed", seed}};
  if (stream) b["stream"] = true;
  return b;
}

struct Call {
  std::string name, arguments, finish, content;
  bool reasoning = false;
};

Call call_of(const std::string& body, bool stream) {
  Call c;
  if (!stream) {
    const Json r = Json::parse(body);
    const Json& ch = r["choices"][0];
    c.finish = ch["finish_reason"];
    if (ch["message"]["content"].is_string()) c.content = ch["message"]["content"];
    c.reasoning = ch["message"].contains("reasoning_content");
    if (ch["message"].contains("tool_calls")) {
      EXPECT_EQ(ch["message"]["tool_calls"].size(), 1u) << body;
      const Json& tc = ch["message"]["tool_calls"][0];
      EXPECT_EQ(tc["type"], "function");
      EXPECT_TRUE(tc["id"].is_string());
      c.name = tc["function"]["name"];
      c.arguments = tc["function"]["arguments"];
    }
    return c;
  }
  size_t i = 0;
  while (i < body.size()) {
    const size_t e = body.find("\n\n", i);
    if (e == std::string::npos) break;
    const std::string ev = body.substr(i + 6, e - i - 6);
    i = e + 2;
    if (ev == "[DONE]") break;
    const Json j = Json::parse(ev);
    if (j.contains("error")) {
      c.finish = "error: " + ev;
      return c;
    }
    if (j["choices"].empty()) continue;
    const Json& ch = j["choices"][0];
    const Json& d = ch["delta"];
    if (d.contains("content")) c.content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) c.reasoning = true;
    if (d.contains("tool_calls")) {
      EXPECT_EQ(d["tool_calls"].size(), 1u) << ev;
      EXPECT_EQ(d["tool_calls"][0]["index"], 0);
      c.name = d["tool_calls"][0]["function"]["name"];
      c.arguments = d["tool_calls"][0]["function"]["arguments"];
    }
    if (!ch["finish_reason"].is_null()) c.finish = ch["finish_reason"];
  }
  return c;
}

const Json kNamed = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};

// A function without parameters is called with {}.
void expect_call_without_parameters(const TinyServer& s) {
  Json nb = tool_body("required", 1.0, 4, false);
  nb["tools"] = Json::parse(R"([{"type":"function","function":{"name":"ping"}}])");
  const auto [st, rep] = s.post("/v1/chat/completions", nb.dump());
  ASSERT_EQ(st, 200) << rep;
  const Call p = call_of(rep, false);
  EXPECT_EQ(p.finish, "tool_calls") << rep;
  EXPECT_EQ(p.name, "ping");
  EXPECT_EQ(p.arguments, "{}");
}

TEST(ServerTools, NamedAndRequiredToolChoice) {
  TinyServer s;
  int by_name[2] = {0, 0};
  for (const bool stream : {false, true}) {
    for (const Json& choice : {kNamed, Json("required")}) {
      for (const auto& [temp, seed] :
           std::vector<std::pair<double, uint64_t>>{{0.0, 1}, {1.0, 2}, {1.0, 3}, {1.0, 4}, {0.7, 5}}) {
        const auto [status, body] = s.post("/v1/chat/completions", tool_body(choice, temp, seed, stream).dump());
        ASSERT_EQ(status, 200) << body << " " << choice.dump() << " seed " << seed << " stream " << stream;
        const Call c = call_of(body, stream);
        EXPECT_EQ(c.finish, "tool_calls") << body;
        EXPECT_FALSE(c.reasoning) << body;  // thinking is off for a forced call
        EXPECT_EQ(c.content, "") << body;
        ASSERT_FALSE(c.name.empty()) << body;
        if (choice.is_object()) {
          EXPECT_EQ(c.name, "get_weather");
        }
        ++by_name[c.name == "get_time"];
        expect_valid_call(c.name, c.arguments);
        if (temp == 0.0 && !stream)
          std::printf("[ tool call ] %s -> %s %s\n", choice.dump().c_str(), c.name.c_str(), c.arguments.c_str());
      }
    }
  }
  std::printf("[ tool call ] get_weather %d, get_time %d\n", by_name[0], by_name[1]);
  // The same seed gives the same call streamed or not.
  const Call a = call_of(s.post("/v1/chat/completions", tool_body("required", 1.0, 9, false).dump()).second, false);
  const Call b = call_of(s.post("/v1/chat/completions", tool_body("required", 1.0, 9, true).dump()).second, true);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.arguments, b.arguments);
  // ignore_eos does not keep a finished call going.
  Json ie = tool_body(kNamed, 1.0, 6, false);
  ie["ignore_eos"] = true;
  const Call i = call_of(s.post("/v1/chat/completions", ie.dump()).second, false);
  EXPECT_EQ(i.finish, "tool_calls");
  expect_call_without_parameters(s);
}

TEST(ServerTools, RoundTripWithToolResult) {
  TinyServer s;
  for (const bool stream : {false, true}) {
    const auto [s1, b1] = s.post("/v1/chat/completions", tool_body(kNamed, 0.0, 1, stream).dump());
    ASSERT_EQ(s1, 200) << b1;
    const Call c = call_of(b1, stream);
    ASSERT_EQ(c.finish, "tool_calls") << b1;
    Json msgs = Json::array(
        {Json{{"role", "user"}, {"content", "What is the weather in Paris for 3 days?"}},
         Json{{"role", "assistant"},
              {"content", nullptr},
              {"tool_calls", Json::array({Json{{"id", "call_1"},
                                                {"type", "function"},
                                                {"function", {{"name", c.name}, {"arguments", c.arguments}}}}})}},
         Json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", R"({"temperature": 21, "sky": "clear"})"}}});
    // tool_choice defaults to auto. Greedy, this model answers (it thinks,
    // then ends its turn after ~110 tokens): a normal answer that ends with
    // an end-of-turn id, not another call and not cut by max_tokens.
    Json b = {{"messages", msgs}, {"tools", Json::parse(kTools)}, {"max_tokens", 400}, {"temperature", 0.0}};
    if (stream) b["stream"] = true;
    const auto [s2, b2] = s.post("/v1/chat/completions", b.dump());
    ASSERT_EQ(s2, 200) << b2;
    const Call r = call_of(b2, stream);
    EXPECT_EQ(r.finish, "stop") << b2;
    EXPECT_EQ(r.name, "") << b2;
    EXPECT_TRUE(r.reasoning || !r.content.empty()) << b2;
    std::printf("[ round trip ] %s: %s\n", r.finish.c_str(), r.content.substr(0, 120).c_str());
  }
}

// With the GLM-4.5/4.6 template the forced call is GLM's syntax too, and the
// server reads it back as an OpenAI tool call, streamed or not.
TEST(ServerTools, Glm45ForcedToolChoice) {
  TinyServer s(ChatDialect::Glm45);
  for (const bool stream : {false, true}) {
    const auto [status, body] = s.post("/v1/chat/completions", tool_body(kNamed, 0.0, 1, stream).dump());
    ASSERT_EQ(status, 200) << body;
    const Call c = call_of(body, stream);
    EXPECT_EQ(c.finish, "tool_calls") << body;
    EXPECT_EQ(c.name, "get_weather") << body;
    EXPECT_EQ(c.content, "") << body;
    expect_valid_call(c.name, c.arguments);
  }
}

// Qwen3's and DeepSeek's JSON call syntax: a forced call (named or
// "required", greedy and sampled, JSON and SSE) is the dialect's markup with
// arguments generated from the schema, which the dialect's parser reads back
// as one OpenAI tool call. (The model was trained on GLM's template; with the
// GLM tokenizer DeepSeek's markup is spelled with ordinary tokens.) The
// string parameters get a maxLength so that every answer fits max_tokens.
TEST(ServerTools, JsonSyntaxForcedToolChoice) {
  Json tools = Json::parse(kTools);
  tools[1]["function"]["parameters"]["properties"]["zone"]["maxLength"] = 40;
  for (const ChatDialect d :
       {ChatDialect::Qwen3, ChatDialect::DeepSeek3, ChatDialect::DeepSeekR1Sys1, ChatDialect::DeepSeek31}) {
    TinyServer s(d);
    int by_name[2] = {0, 0};
    for (const bool stream : {false, true}) {
      for (const Json& choice : {kNamed, Json("required")}) {
        for (const auto& [temp, seed] : std::vector<std::pair<double, uint64_t>>{{0.0, 1}, {1.0, 2}, {1.0, 3}}) {
          Json b = tool_body(choice, temp, seed, stream);
          b["tools"] = tools;
          const auto [status, body] = s.post("/v1/chat/completions", b.dump());
          ASSERT_EQ(status, 200) << chat_dialect_name(d) << " " << body;
          const Call c = call_of(body, stream);
          EXPECT_EQ(c.finish, "tool_calls") << chat_dialect_name(d) << " " << body;
          EXPECT_FALSE(c.reasoning) << body;
          EXPECT_EQ(c.content, "") << body;
          ASSERT_FALSE(c.name.empty()) << chat_dialect_name(d) << " " << body;
          if (choice.is_object()) {
            EXPECT_EQ(c.name, "get_weather");
          }
          ++by_name[c.name == "get_time"];
          expect_valid_call(c.name, c.arguments);
          if (temp == 0.0 && !stream)
            std::printf("[ tool call ] %s %s -> %s %s\n", chat_dialect_name(d), choice.dump().c_str(), c.name.c_str(),
                        c.arguments.c_str());
        }
      }
    }
    std::printf("[ tool call ] %s: get_weather %d, get_time %d\n", chat_dialect_name(d), by_name[0], by_name[1]);
    expect_call_without_parameters(s);
    // A name the markup cannot carry, and an unknown named function: 400.
    Json bad_name = tool_body("required", 0.0, 1, false);
    bad_name["tools"] = Json::parse(R"([{"type":"function","function":{"name":"say \"hi\""}}])");
    const auto [s1, r1] = s.post("/v1/chat/completions", bad_name.dump());
    EXPECT_EQ(s1, 400) << r1;
    EXPECT_NE(r1.find("cannot be generated"), std::string::npos) << r1;
    const auto [s2, r2] = s.post("/v1/chat/completions",
                                 tool_body(Json{{"type", "function"}, {"function", {{"name", "nope"}}}}, 0.0, 1, false).dump());
    EXPECT_EQ(s2, 400) << r2;
    EXPECT_NE(r2.find("tool_choice.function.name"), std::string::npos) << r2;
  }
}

// A Qwen3 answer with reasoning and two JSON tool calls, as the server turns
// it into an OpenAI message and into streamed deltas fed a few bytes at a
// time: the same calls (arguments as JSON text), no call text in content.
TEST(ServerTools, Qwen3ToolCallsInTheAnswer) {
  const std::string out =
      "<think>\nThe user wants weather.\n</think>\n\nLooking it up.\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
      "\"arguments\": {\"zone\": \"CET\"}}\n</tool_call>";
  server::ChatOutput co{true, false, nullptr, ChatDialect::Qwen3};
  server::IdSource ids;
  std::string finish = "stop";
  const Json msg = server::chat_message(co, out, ids, finish);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(msg["content"], "Looking it up.");
  EXPECT_EQ(msg["reasoning_content"], "The user wants weather.");
  ASSERT_EQ(msg["tool_calls"].size(), 2u) << msg.dump();
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris","days":3})");
  EXPECT_EQ(msg["tool_calls"][1]["function"]["arguments"], R"({"zone":"CET"})");
  for (size_t piece : {1u, 3u, 7u}) {
    server::ChatDeltaStream st(co);
    std::string content, reasoning;
    for (size_t i = 0; i < out.size(); i += piece) {
      const Json d = st.next(out.substr(i, piece));
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    }
    std::string f = "stop";
    const Json last = st.last(ids, f);
    if (last.contains("content")) content += last["content"].get<std::string>();
    EXPECT_EQ(f, "tool_calls");
    EXPECT_EQ(content.find("tool_call"), std::string::npos) << content;
    EXPECT_NE(content.find("Looking it up."), std::string::npos) << content;
    EXPECT_NE(reasoning.find("The user wants weather."), std::string::npos) << reasoning;
    ASSERT_TRUE(last.contains("tool_calls")) << last.dump();
    ASSERT_EQ(last["tool_calls"].size(), 2u);
    EXPECT_EQ(last["tool_calls"][1]["index"], 1);
    EXPECT_EQ(last["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris","days":3})");
  }
  // The GLM parser does not read Qwen3's calls as such: the dialect decides.
  server::ChatOutput glm{true, false, nullptr, ChatDialect::Glm};
  std::string f2 = "stop";
  const Json g = server::chat_message(glm, out, ids, f2);
  EXPECT_TRUE(!g.contains("tool_calls") || g["tool_calls"][0]["function"]["name"] != "get_weather") << g.dump();
}

TEST(ServerTools, BadToolChoice) {
  TinyServer s;
  auto body = [](const std::string& extra) {
    return R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,)" + extra + "}";
  };
  const std::string tools = std::string(R"("tools":)") + kTools;
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {R"("tool_choice":"required")", "tool_choice", "needs 'tools'"},
      {tools + R"(,"tool_choice":"sometimes")", "tool_choice", "none, auto, required"},
      {tools + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})", "tool_choice.function.name", "nope"},
      {tools + R"(,"tool_choice":{"type":"function"})", "tool_choice.function", "object"},
      {tools + R"(,"tool_choice":{"type":"custom","function":{"name":"get_time"}})", "tool_choice.type", "function"},
      {tools + R"(,"tool_choice":"required","response_format":{"type":"json_object"})", "response_format", "tool_choice"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","pattern":"x+"}}}}}],"tool_choice":"required")",
       "tools", "pattern"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","format":"uri"}}}}}],"tool_choice":{"type":"function","function":{"name":"f"}})",
       "tools", "'format'"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"string"}}}],"tool_choice":"required")",
       "tools", "object schema"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a<b":{"type":"integer"}}}}}],"tool_choice":"required")",
       "tools", "'<'"},
  };
  for (const auto& [extra, param, needle] : cases) {
    const auto [status, reply] = s.post("/v1/chat/completions", body(extra));
    EXPECT_EQ(status, 400) << extra << " -> " << reply;
    const Json e = Json::parse(reply);
    ASSERT_TRUE(e.contains("error")) << reply;
    EXPECT_EQ(e["error"]["param"], param) << extra << " -> " << reply;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(needle), std::string::npos) << reply;
  }
  // The functions a named tool_choice does not pick are not compiled.
  const std::string ok =
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","format":"uri"}}}}},)"
      R"({"type":"function","function":{"name":"g"}}],"tool_choice":{"type":"function","function":{"name":"g"}})";
  EXPECT_EQ(s.post("/v1/chat/completions", body(ok)).first, 200);
  // auto and none as before.
  EXPECT_EQ(s.post("/v1/chat/completions", body(tools + R"(,"tool_choice":"auto")")).first, 200);
  EXPECT_EQ(s.post("/v1/chat/completions", body(tools + R"(,"tool_choice":"none")")).first, 200);
}

// Tools and tool-call arguments reach the prompt in the client's key order
// (as Jinja's tojson renders them), not re-sorted: the chat prompt is
// exactly the locally rendered one, which a completion over its token ids
// shows by leaving an idle session that the chat request then reuses whole.
TEST(ServerTools, PromptKeepsTheClientsKeyOrder) {
  TinyServer s;
  const std::string tools_text =
      R"([{"type": "function", "function": {"name": "set_alarm", "parameters": {"type": "object",)"
      R"( "properties": {"time": {"type": "string"}, "label": {"type": "string"}}, "required": ["time"]}}}])";
  const std::string args_text = R"({"time": "07:00", "label": "wake up", "days": [1, 2]})";
  auto user = [](const std::string& text) {
    ChatMessage m;
    m.role = "user";
    m.content = text;
    return m;
  };
  ChatMessage call;
  call.role = "assistant";
  call.tool_calls.push_back(ToolCall{"call_1", "set_alarm", OrderedJson::parse(args_text)});
  ChatMessage result;
  result.role = "tool";
  result.content = "ok";
  const std::vector<ChatMessage> msgs = {user("Wake me at 7"), call, result, user("Thanks")};
  const std::string messages_json =
      R"([{"role": "user", "content": "Wake me at 7"},)"
      R"( {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",)"
      R"( "function": {"name": "set_alarm", "arguments": )" + args_text + R"(}}]},)"
      R"( {"role": "tool", "tool_call_id": "call_1", "content": "ok"}, {"role": "user", "content": "Thanks"}])";
  // With the tools, and without them (only the arguments' order is at stake).
  for (const bool with_tools : {true, false}) {
    const OrderedJson tools = with_tools ? OrderedJson::parse(tools_text) : OrderedJson(nullptr);
    const std::string prompt = render_glm_chat(msgs, tools, ChatRenderOptions{});
    // Sorted keys would render another prompt: the test can tell them apart.
    std::vector<ChatMessage> sorted_msgs = msgs;
    sorted_msgs[1].tool_calls[0].arguments = OrderedJson::parse(Json::parse(args_text).dump());
    const OrderedJson sorted_tools = with_tools ? OrderedJson::parse(Json::parse(tools_text).dump()) : OrderedJson(nullptr);
    ASSERT_NE(render_glm_chat(sorted_msgs, sorted_tools, ChatRenderOptions{}), prompt);

    const std::vector<int32_t> ids = tiny().tok.encode(prompt, /*add_special=*/false);
    const Json completion = {{"prompt", ids}, {"max_tokens", 1}, {"temperature", 0.0}};
    const auto [s1, b1] = s.post("/v1/completions", completion.dump());
    ASSERT_EQ(s1, 200) << b1;
    std::string chat = R"({"max_tokens": 1, "temperature": 0, "messages": )" + messages_json;
    if (with_tools) chat += R"(, "tools": )" + tools_text;
    chat += "}";
    const auto [s2, b2] = s.post("/v1/chat/completions", chat);
    ASSERT_EQ(s2, 200) << b2;
    const Json usage = Json::parse(b2)["usage"];
    EXPECT_EQ(usage["prompt_tokens"], ids.size()) << "tools " << with_tools;
    // All but the last token come from the completion's session: the same prompt.
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], ids.size() - 1) << "tools " << with_tools;
  }
}

// The recogniser on bytes.
std::shared_ptr<const ToolCallGrammar> weather() { return ToolCallGrammar::build(OrderedJson::parse(kTools)); }

bool accepts(const ToolCallGrammar& g, std::string_view text) {
  ToolState s(g, 0);
  return s.feed(text) && s.done();
}
bool prefix(const ToolCallGrammar& g, std::string_view text) {
  ToolState s(g, 0);
  return s.feed(text);
}

TEST(ToolConstraint, SpelledMarkup) {
  const auto g = weather();
  EXPECT_TRUE(accepts(*g, "<tool_call>get_time<arg_key>zone</arg_key><arg_value>Europe/Paris</arg_value></tool_call>"));
  EXPECT_TRUE(accepts(*g,
                      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris \"x\" \\ y</arg_value>"
                      "<arg_key>unit</arg_key><arg_value>celsius</arg_value><arg_key>days</arg_key><arg_value>3</arg_value>"
                      "<arg_key>detail</arg_key><arg_value>{\"wind\": true}</arg_value></tool_call>"));
  EXPECT_TRUE(accepts(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>days</arg_key>"
                          "<arg_value>-2</arg_value></tool_call>"));
  // Missing a required parameter, out of order, unknown names, bad values.
  EXPECT_FALSE(accepts(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"));
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weather<arg_key>days</arg_key><arg_value>1</arg_value><arg_key>city"));
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weathe<"));
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weather<arg_key>town"));
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value> Oslo"));    // leading space
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo </"));  // trailing space
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>a<b"));
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>unit</arg_key>"
                          "<arg_value>kelvin"));
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>days</arg_key>"
                          "<arg_value>1.5"));
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>" + std::string(41, 'a')));
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>\x01"));
  // No whitespace in the last place a string has: nothing could follow it.
  EXPECT_TRUE(prefix(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>" + std::string(38, 'a') + " b"));
  EXPECT_FALSE(prefix(*g, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>" + std::string(39, 'a') + " "));
  EXPECT_FALSE(prefix(*g, "hello"));
  EXPECT_FALSE(prefix(*g, "<tool_call>get_time<arg_key>zone</arg_key><arg_value>UTC</arg_value></tool_call>x"));
  // The default cap on strings without maxLength.
  EXPECT_TRUE(prefix(*g, "<tool_call>get_time<arg_key>zone</arg_key><arg_value>" + std::string(kToolStringMaxChars, 'z')));
  EXPECT_FALSE(
      prefix(*g, "<tool_call>get_time<arg_key>zone</arg_key><arg_value>" + std::string(kToolStringMaxChars + 1, 'z')));
  // Only the named function.
  const auto named = ToolCallGrammar::build(OrderedJson::parse(kTools), "get_time");
  EXPECT_FALSE(prefix(*named, "<tool_call>get_w"));
  EXPECT_THROW(ToolCallGrammar::build(OrderedJson::parse(kTools), "nope"), Error);
  // String enum values raw text cannot spell.
  for (const char* v : {R"(" a")", R"("a<b")", R"("tab\t")"})
    EXPECT_THROW(ToolCallGrammar::build(OrderedJson::parse(
                     std::string(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",)"
                                 R"("properties":{"a":{"type":"string","enum":[)") + v + "]}}}}}]")),
                 Error)
        << v;
}

TEST(ToolConstraint, AddedTokenMarkup) {
  const auto g = weather();
  const uint8_t all = (1u << kToolMarkups) - 1;
  ToolState s(*g, all);
  EXPECT_FALSE(ToolState(s).feed('<'));  // markup only as its token
  EXPECT_FALSE(ToolState(s).feed_markup(kToolClose));
  ASSERT_TRUE(s.feed_markup(kToolOpen));
  ASSERT_TRUE(s.feed("get_time"));
  EXPECT_FALSE(ToolState(s).feed_markup(kToolClose));  // zone is required
  ASSERT_TRUE(s.feed_markup(kArgKey));
  ASSERT_TRUE(s.feed("zone"));
  ASSERT_TRUE(s.feed_markup(kArgKeyEnd));
  ASSERT_TRUE(s.feed_markup(kArgValue));
  EXPECT_FALSE(ToolState(s).feed("</arg_value>"));
  ASSERT_TRUE(s.feed("UTC"));
  ASSERT_TRUE(s.feed_markup(kArgValueEnd));
  EXPECT_FALSE(ToolState(s).feed_markup(kArgKey));  // no parameter left
  ASSERT_TRUE(s.feed_markup(kToolClose));
  EXPECT_TRUE(s.done());
}

TEST(ToolConstraint, MasksOnTheTinyTokenizer) {
  test_util::Tiny& t = tiny();
  const auto ids = tool_markup_ids(t.tok);
  for (int m = 0; m < kToolMarkups; ++m) EXPECT_GE(ids[static_cast<size_t>(m)], 0) << tool_markup(m);
  const auto vocab = JsonVocab::build(t.tok, t.model->config.vocab_size);
  ToolCallConstraint c(weather(), vocab, ids);
  std::vector<uint8_t> allowed;
  const std::vector<int32_t> stops = {4076, 4083, 4085};
  EXPECT_EQ(c.allowed(allowed, stops), 1u);  // only <tool_call>
  EXPECT_TRUE(allowed[static_cast<size_t>(ids[kToolOpen])]);
  ASSERT_TRUE(c.advance(ids[kToolOpen]));
  for (const int32_t tok : t.tok.encode("get_time")) {
    c.allowed(allowed, stops);
    ASSERT_TRUE(allowed[static_cast<size_t>(tok)]) << tok;
    ASSERT_TRUE(c.advance(tok));
  }
  c.allowed(allowed, stops);
  EXPECT_TRUE(allowed[static_cast<size_t>(ids[kArgKey])]);
  EXPECT_FALSE(allowed[static_cast<size_t>(ids[kToolClose])]);
  for (int32_t s : stops) EXPECT_FALSE(allowed[static_cast<size_t>(s)]);
  EXPECT_FALSE(c.done());
}

std::vector<uint8_t> brute_mask(const ToolCallConstraint& c, const JsonVocab& v,
                                const std::array<int32_t, kToolMarkups>& ids) {
  std::vector<uint8_t> out(static_cast<size_t>(v.size()), 0);
  for (int32_t i = 0; i < v.size(); ++i) {
    if (!v.usable(i)) continue;
    ToolState s(c.state());
    out[static_cast<size_t>(i)] = s.feed(v.bytes(i));
  }
  for (int m = 0; m < kToolMarkups; ++m) {
    if (ids[static_cast<size_t>(m)] < 0) continue;
    ToolState s(c.state());
    out[static_cast<size_t>(ids[static_cast<size_t>(m)])] = s.feed_markup(m);
  }
  return out;
}

// The trie walk allows exactly the tokens that feeding one by one allows,
// along random walks through the language; every walk ends in a call the
// parser reads back and that validates. Half the walks with the markup as
// added tokens.
TEST(ToolConstraint, MaskEqualsBruteForce) {
  // The last 6 ids stand for added markup tokens (empty bytes: never ordinary).
  std::vector<std::string> bytes = test_util::tool_fake_vocab(6000);
  const int32_t base = static_cast<int32_t>(bytes.size());
  bytes.resize(bytes.size() + kToolMarkups);
  const auto v = JsonVocab::from_bytes(std::move(bytes));
  const std::array<int32_t, kToolMarkups> spelled = {-1, -1, -1, -1, -1, -1};
  const std::array<int32_t, kToolMarkups> added = {base, base + 1, base + 2, base + 3, base + 4, base + 5};
  std::mt19937_64 rng(11);
  int checked = 0, finished = 0;
  for (int run = 0; run < 12; ++run) {
    const auto& ids = run % 2 ? added : spelled;
    ToolCallConstraint c(weather(), v, ids);
    std::vector<uint8_t> got;
    std::string text;
    for (int step = 0; step < 400 && !c.done(); ++step) {
      c.allowed(got, {});
      ASSERT_EQ(got, brute_mask(c, *v, ids)) << text;
      ++checked;
      std::vector<int32_t> ok;
      for (int32_t i = 0; i < v->size(); ++i)
        if (got[static_cast<size_t>(i)]) ok.push_back(i);
      ASSERT_FALSE(ok.empty()) << "dead end after: " << text;
      // Prefer markup-bearing tokens now and then so calls finish.
      int32_t t = ok[rng() % ok.size()];
      for (int k = 0; k < 4 && t < base && v->bytes(t).find('<') == std::string_view::npos; ++k)
        t = ok[rng() % ok.size()];
      ASSERT_TRUE(c.advance(t));
      text += t >= base ? std::string(tool_markup(t - base)) : std::string(v->bytes(t));
    }
    if (!c.done()) continue;
    ++finished;
    const ParsedOutput p = parse_glm_output(text, false, OrderedJson::parse(kTools));
    ASSERT_EQ(p.tool_calls.size(), 1u) << text;
    EXPECT_EQ(p.content, "") << text;
    expect_valid_call(p.tool_calls[0].name, p.tool_calls[0].arguments.dump());
  }
  EXPECT_GE(checked, 100);
  EXPECT_GE(finished, 6);
  std::printf("[ tool mask ] %d masks checked, %d of 12 random calls finished\n", checked, finished);
}

}  // namespace
}  // namespace strata::server_tools_test
