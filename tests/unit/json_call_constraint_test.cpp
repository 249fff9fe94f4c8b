// The forced-call constraint of the JSON call dialects (Qwen3, DeepSeek) on a
// byte vocabulary: the tokens of a well-formed call are each allowed and
// taken, the answer parses back as that call, and what leaves the markup,
// the function names or the schema is refused. The end-to-end runs on the
// bundled model are in server_tools_test.cpp (JsonSyntaxForcedToolChoice).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "constraint_fixtures.h"
#include "core/error.h"
#include "text/chat_template.h"
#include "text/json_call_constraint.h"

namespace strata::json_call_constraint_test {
namespace {

// Tokens 0..255: the bytes; then the markup strings as added tokens.
const std::vector<std::string> kAdded = {"<tool_call>", "</tool_call>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                                         "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"};

std::shared_ptr<const JsonVocab> vocab() {
  std::vector<std::string> b;
  for (int i = 0; i < 256; ++i) b.emplace_back(1, static_cast<char>(i));
  for (const std::string& a : kAdded) b.push_back(a);
  return JsonVocab::from_bytes(b);
}

// Added tokens split out first, the rest byte by byte (as a tokenizer does).
std::vector<int32_t> encode(std::string_view s) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < s.size();) {
    bool added = false;
    for (size_t k = 0; k < kAdded.size() && !added; ++k) {
      if (s.compare(i, kAdded[k].size(), kAdded[k]) == 0) {
        out.push_back(256 + static_cast<int32_t>(k));
        i += kAdded[k].size();
        added = true;
      }
    }
    if (!added) out.push_back(static_cast<unsigned char>(s[i++]));
  }
  return out;
}

// Feeds `text`'s tokens; returns how many were taken before one was refused
// (or not allowed by the mask).
size_t feed(JsonCallConstraint& c, const std::string& text) {
  const std::vector<int32_t> stops = {999};
  std::vector<uint8_t> allowed;
  const std::vector<int32_t> toks = encode(text);
  for (size_t i = 0; i < toks.size(); ++i) {
    c.allowed(allowed, stops);
    if (!allowed[static_cast<size_t>(toks[i])] || !c.advance(toks[i])) return i;
  }
  return toks.size();
}

JsonCallConstraint make(ChatDialect d, std::string_view only = {}) {
  return JsonCallConstraint(JsonCallGrammar::build(OrderedJson::parse(test_util::kTools), only), vocab(),
                            json_call_markup(d), encode);
}

TEST(JsonCallConstraint, Qwen3CallIsTakenAndParsesBack) {
  const std::string call =
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>";
  JsonCallConstraint c = make(ChatDialect::Qwen3);
  ASSERT_EQ(feed(c, call), encode(call).size());
  EXPECT_TRUE(c.done());
  std::vector<uint8_t> allowed;
  const std::vector<int32_t> stops = {5};
  EXPECT_EQ(c.allowed(allowed, stops), 1u);  // only the stop id once done
  const ParsedOutput p = parse_chat_output(ChatDialect::Qwen3, call, false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get_time");
  EXPECT_EQ(p.tool_calls[0].arguments, OrderedJson::parse(R"({"zone": "CET"})"));
  EXPECT_EQ(p.content, "");

  // The markup is forced token by token, the name picked among the functions.
  JsonCallConstraint f = make(ChatDialect::Qwen3);
  const std::vector<int32_t> no_stops;
  EXPECT_EQ(f.forced(no_stops), 256);  // <tool_call> as its added token
  EXPECT_EQ(feed(f, "<tool_call>\n{\"name\": \"get_"), encode("<tool_call>\n{\"name\": \"get_").size());
  EXPECT_EQ(f.forced(no_stops), -1);  // weather or time
  EXPECT_EQ(feed(f, "x"), 0u);        // no such function
  EXPECT_EQ(feed(f, "\""), 0u);       // "get_" is not a name
  // Arguments outside the schema: a number for a string, an unknown key.
  const std::string head = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"";
  JsonCallConstraint a = make(ChatDialect::Qwen3, "get_time");
  EXPECT_EQ(feed(a, head + "zone\": 5"), encode(head + "zone\": ").size());
  JsonCallConstraint k = make(ChatDialect::Qwen3, "get_time");
  EXPECT_EQ(feed(k, head + "x"), encode(head).size());
  // A named function: its name is part of the forced markup.
  JsonCallConstraint n = make(ChatDialect::Qwen3, "get_weather");
  EXPECT_EQ(feed(n, "<tool_call>\n{\"name\": \"get_time"), encode("<tool_call>\n{\"name\": \"get_").size());
}

TEST(JsonCallConstraint, DeepSeekCallsAreTakenAndParseBack) {
  const std::string args = R"({"city": "Paris", "days": 3})";
  const struct {
    ChatDialect d;
    std::string text;
    bool reasoning_open;
  } cases[] = {
      {ChatDialect::DeepSeek3,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" + args +
           "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       false},
      {ChatDialect::DeepSeekR1Sys1,
       "</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" + args +
           "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       true},
      {ChatDialect::DeepSeek31,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" + args +
           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       false},
  };
  for (const auto& k : cases) {
    for (const std::string_view only : {std::string_view(), std::string_view("get_weather")}) {
      JsonCallConstraint c = make(k.d, only);
      ASSERT_EQ(feed(c, k.text), encode(k.text).size()) << chat_dialect_name(k.d);
      EXPECT_TRUE(c.done());
    }
    const ParsedOutput p = parse_chat_output(k.d, k.text, k.reasoning_open);
    ASSERT_EQ(p.tool_calls.size(), 1u) << chat_dialect_name(k.d);
    EXPECT_EQ(p.tool_calls[0].name, "get_weather");
    EXPECT_EQ(p.tool_calls[0].arguments, OrderedJson::parse(args));
    EXPECT_EQ(p.content, "");
    EXPECT_EQ(p.reasoning, "");
    // "days" is required: the object cannot close without it.
    JsonCallConstraint m = make(k.d, "get_weather");
    const std::string cut = k.text.substr(0, k.text.find(args)) + R"({"city": "Paris"})";
    EXPECT_EQ(feed(m, cut), encode(cut).size() - 1) << chat_dialect_name(k.d);
  }
}

TEST(JsonCallConstraint, RefusesWhatTheMarkupCannotCarry) {
  const auto build = [](const char* tools, std::string_view only = {}) {
    return JsonCallGrammar::build(OrderedJson::parse(tools), only);
  };
  EXPECT_THROW(build(R"([{"type":"function","function":{"name":"a b"}}])"), Error);
  EXPECT_THROW(build(R"([{"type":"function","function":{"name":"f\""}}])"), Error);
  EXPECT_THROW(build(R"([{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])"),
               Error);
  EXPECT_THROW(build(R"([{"type":"function","function":{"name":"f","parameters":{"type":"string"}}}])"), Error);
  EXPECT_THROW(build(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","not":{}}}}])"), Error);
  try {
    build(test_util::kTools, "nope");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("tool_choice", 0), 0u) << e.what();
  }
  EXPECT_EQ(build(R"([{"type":"function","function":{"name":"ping"}}])")->functions().size(), 1u);
  EXPECT_THROW(json_call_markup(ChatDialect::Glm), Error);
}

}  // namespace
}  // namespace strata::json_call_constraint_test
