// The DeepSeek-V3 chat dialect: rendering (the expected strings are what
// Jinja2 prints from tests/fixtures/templates/deepseek3, the template of
// DeepSeek-V3's tokenizer_config.json; the ctest chat_template_jinja_deepseek3
// compares 406 conversations), detection, and the output parser the server
// uses for DeepSeek's tool-call markup, whole and streamed. The dsv3 fixture
// has no tokenizer, so the dialect is tested on strings here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "server/glm_output.h"
#include "test_util.h"
#include "text/chat_template.h"

namespace strata::chat_deepseek_test {
namespace {

using test_util::TempDir;
using test_util::write_file;

ChatMessage msg(const char* role, const char* content) { return {.role = role, .content = content}; }
ChatMessage calls(std::vector<ToolCall> c) { return {.role = "assistant", .tool_calls = std::move(c)}; }
ToolCall call(const char* name, const char* args) { return {.name = name, .arguments = OrderedJson::parse(args)}; }

std::string render(const std::vector<ChatMessage>& m, bool gen = true) {
  ChatRenderOptions o;
  o.add_generation_prompt = gen;
  return render_deepseek3_chat(m, nullptr, o);
}

std::string fixture_template() {
  const Json cfg = parse_json(
      test_util::read_file(std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/templates/deepseek3/tokenizer_config.json"),
      "tokenizer_config.json");
  return cfg.at("chat_template").get<std::string>();
}

TEST(ChatDeepSeek, SystemMessagesJoinedBeforeTheTurns) {
  EXPECT_EQ(render({msg("system", "A"), msg("user", "Hi"), msg("system", "B")}),
            "<｜begin▁of▁sentence｜>A\n\nB<｜User｜>Hi<｜Assistant｜>");
  EXPECT_EQ(render({msg("user", "Hi")}, false), "<｜begin▁of▁sentence｜><｜User｜>Hi");
  // Thinking options do not apply; earlier answers are rendered as given.
  ChatRenderOptions o;
  o.enable_thinking = false;
  EXPECT_EQ(render_deepseek3_chat(std::vector<ChatMessage>{msg("user", "a"), msg("assistant", "<think>r</think>c1"),
                                                           msg("user", "b")},
                                  nullptr, o),
            "<｜begin▁of▁sentence｜><｜User｜>a<｜Assistant｜><think>r</think>c1<｜end▁of▁sentence｜><｜User｜>b"
            "<｜Assistant｜>");
}

TEST(ChatDeepSeek, ToolCallsAndResultsAsTheTemplateWritesThem) {
  const ToolCall w = call("get_weather", R"({"city": "Paris"})"), t = call("get_time", "{}");
  EXPECT_EQ(render({msg("user", "w?"), calls({w}), msg("tool", "sunny"), msg("tool", "20C"), msg("assistant", "Sunny."),
                    msg("user", "t?"), calls({w, t}), msg("tool", "9h")}),
            "<｜begin▁of▁sentence｜><｜User｜>w?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
            "<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>"
            "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>\n<｜tool▁output▁begin｜>20C"
            "<｜tool▁output▁end｜><｜tool▁outputs▁end｜>Sunny.<｜end▁of▁sentence｜><｜User｜>t?\n"
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
            "get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>\n"
            "<｜tool▁output▁begin｜>9h<｜tool▁output▁end｜><｜tool▁outputs▁end｜>");
  // With text beside them the template drops the calls (its `content is none` test).
  ChatMessage both = calls({w});
  both.content = "Let me see.";
  EXPECT_EQ(render({msg("user", "w?"), both}),
            "<｜begin▁of▁sentence｜><｜User｜>w?<｜Assistant｜>Let me see.<｜end▁of▁sentence｜><｜Assistant｜>");
  // Arguments given as JSON text are printed as they are.
  ToolCall s{.name = "f", .arguments = OrderedJson(R"({"a":1})")};
  EXPECT_NE(render({msg("user", "q"), calls({s})}, false).find("```json\n{\"a\":1}\n```"), std::string::npos);
  EXPECT_THROW(render({msg("robot", "x")}), Error);
  EXPECT_THROW(render_deepseek3_chat(std::vector<ChatMessage>{msg("user", "x")}, OrderedJson::object(), {}), Error);
}

TEST(ChatDeepSeek, DetectsTheV3TemplateAndRefusesOtherDeepSeekTemplates) {
  const std::string t = fixture_template();
  std::string why;
  EXPECT_EQ(classify_chat_template(t, &why), ChatDialect::DeepSeek3) << why;
  // R1 splits off </think> and opens <think>; V3.1 has a thinking switch.
  std::string r1 = t;
  const std::string prompt = "{{'<｜Assistant｜>'}}";
  ASSERT_NE(r1.rfind(prompt), std::string::npos);
  r1.replace(r1.rfind(prompt), prompt.size(), "{{'<｜Assistant｜><think>\\n'}}");
  EXPECT_FALSE(classify_chat_template(r1, &why));
  EXPECT_NE(why.find("DeepSeek template other than"), std::string::npos) << why;
  EXPECT_FALSE(classify_chat_template(t + "{% if not thinking is defined %}{% endif %}", &why));
  EXPECT_FALSE(classify_chat_template("{{ bos_token }}<｜User｜>{{ m }}<｜Assistant｜>", &why));
  EXPECT_NE(why.find("DeepSeek"), std::string::npos) << why;

  // From a checkpoint's tokenizer_config.json, and forced by name.
  TempDir dir;
  OrderedJson cfg{{"chat_template", t}};
  write_file(dir.path() / "tokenizer_config.json", cfg.dump());
  const ChatTemplate ct = load_chat_template(dir.str());
  EXPECT_EQ(ct.dialect, ChatDialect::DeepSeek3);
  EXPECT_EQ(ct.special_tokens(), (std::vector<std::string>{"<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                                                          "<｜end▁of▁sentence｜>"}));
  EXPECT_EQ(ct.stop_tokens(), (std::vector<std::string>{"<｜end▁of▁sentence｜>"}));
  EXPECT_FALSE(ct.opens_reasoning({}));
  TempDir empty;
  EXPECT_EQ(load_chat_template(empty.str(), "deepseek3").dialect, ChatDialect::DeepSeek3);
  EXPECT_STREQ(chat_dialect_name(ChatDialect::DeepSeek3), "deepseek3");
}

TEST(ChatDeepSeek, ParsesToolCalls) {
  // DeepSeek-V3's form: type, fenced JSON; two calls, then the block's end.
  ParsedOutput p = parse_deepseek3_output(
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"city\": \"Paris\", \"days\": 3}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time"
      "\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      false);
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, OrderedJson::parse(R"({"city": "Paris", "days": 3})"));
  EXPECT_EQ(p.tool_calls[1].name, "get_time");
  EXPECT_TRUE(p.tool_calls[1].arguments.is_object() && p.tool_calls[1].arguments.empty());
  // V3.1's form (NAME<｜tool▁sep｜>ARGS), R1-style reasoning, no block end
  // (the end-of-sentence token stopped the output), arguments as JSON text.
  p = parse_deepseek3_output(
      "<think>need it</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>\"{\\\"x\\\": [1, 2]}\""
      "<｜tool▁call▁end｜>",
      false);
  EXPECT_EQ(p.reasoning, "need it");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "f");
  EXPECT_EQ(p.tool_calls[0].arguments, OrderedJson::parse(R"({"x": [1, 2]})"));
  // V3.1's JSON may hold a fence in a string: it is not V3's fence.
  p = parse_deepseek3_output(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>md<｜tool▁sep｜>{\"text\": \"```json\\n{}\\n```\"}<｜tool▁call▁end｜>",
      false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "md");
  EXPECT_EQ(p.tool_calls[0].arguments["text"], "```json\n{}\n```");
  // Malformed calls stay text; a block without a good call is all content.
  p = parse_deepseek3_output(
      "a<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n[1]\n```<｜tool▁call▁end｜>"
      "<｜tool▁call▁begin｜>h<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁call▁begin｜>k<｜tool▁sep｜>{",
      false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "h");
  EXPECT_EQ(p.content,
            "a<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n[1]\n```<｜tool▁call▁end｜>"
            "<｜tool▁call▁begin｜>k<｜tool▁sep｜>{");
  const std::string text = "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜><｜tool▁sep｜>{}<｜tool▁call▁end｜>";
  p = parse_deepseek3_output(text, false);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, text);
  const std::string deep(10000, '[');
  EXPECT_TRUE(parse_deepseek3_output("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>" + deep +
                                         "<｜tool▁call▁end｜>",
                                     false)
                  .tool_calls.empty());
  EXPECT_EQ(parse_chat_output(ChatDialect::DeepSeek3, " plain ", false).content, "plain");
  EXPECT_EQ(tool_call_open_tag(ChatDialect::DeepSeek3), "<｜tool▁calls▁begin｜>");
  EXPECT_EQ(tool_call_open_tag(ChatDialect::Qwen3), "<tool_call>");
}

// What the renderer writes for a call-only turn parses back (the model then
// closes the block and ends the sentence).
TEST(ChatDeepSeek, RoundTripsARenderedCall) {
  const ChatMessage a = calls({call("search", R"({"q": "strata", "n": 3, "x": [1, {"y": null}]})")});
  const std::string prompt = render({msg("user", "q")});
  const std::string full = render({msg("user", "q"), a}, false);
  ASSERT_EQ(full.substr(0, prompt.size()), prompt);
  const ParsedOutput p = parse_deepseek3_output(full.substr(prompt.size()) + "<｜tool▁calls▁end｜>", false);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "search");
  EXPECT_EQ(p.tool_calls[0].arguments, a.tool_calls[0].arguments);
}

// The server's OpenAI message and streamed deltas for a DeepSeek answer fed
// a few bytes at a time: the calls whole in the last delta, no call markup
// in the content.
TEST(ChatDeepSeek, ServerTurnsTheAnswerIntoToolCalls) {
  const std::string out =
      "Looking it up.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"city\": \"Paris\", \"days\": 3}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_time\n```json\n{\"zone\": \"CET\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  server::ChatOutput co{true, false, nullptr, ChatDialect::DeepSeek3};
  server::IdSource ids;
  std::string finish = "stop";
  const Json m = server::chat_message(co, out, ids, finish);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(m["content"], "Looking it up.");
  ASSERT_EQ(m["tool_calls"].size(), 2u) << m.dump();
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris","days":3})");
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], R"({"zone":"CET"})");
  for (size_t piece : {1u, 2u, 5u, 13u}) {
    server::ChatDeltaStream st(co);
    std::string content;
    for (size_t i = 0; i < out.size(); i += piece) {
      const Json d = st.next(out.substr(i, piece));
      if (d.contains("content")) content += d["content"].get<std::string>();
    }
    std::string f = "stop";
    const Json last = st.last(ids, f);
    if (last.contains("content")) content += last["content"].get<std::string>();
    EXPECT_EQ(content, "Looking it up.") << piece;
    EXPECT_EQ(f, "tool_calls");
    ASSERT_TRUE(last.contains("tool_calls")) << last.dump();
    ASSERT_EQ(last["tool_calls"].size(), 2u);
    EXPECT_EQ(last["tool_calls"][1]["index"], 1);
    EXPECT_EQ(last["tool_calls"][1]["function"]["name"], "get_time");
  }
  // A split-up partial tag that turns out to be text is released.
  server::ChatDeltaStream st(co);
  std::string content;
  for (const char* piece : {"a<｜tool", "▁x"}) {
    const Json d = st.next(piece);
    if (d.contains("content")) content += d["content"].get<std::string>();
  }
  std::string f = "stop";
  const Json last = st.last(ids, f);
  if (last.contains("content")) content += last["content"].get<std::string>();
  EXPECT_EQ(content, "a<｜tool▁x");
  EXPECT_EQ(f, "stop");
}

}  // namespace
}  // namespace strata::chat_deepseek_test
