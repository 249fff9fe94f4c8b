// The DeepSeek-R1 and DeepSeek-V3.1 chat dialects: rendering (the expected
// strings are what Jinja2 prints from tests/fixtures/templates/deepseek-r1 and
// deepseek31; the ctests chat_template_jinja_deepseek-r1 / _deepseek31 compare
// 406 conversations each), detection, the thinking switch (V3.1's `thinking`,
// also as a chat_template_kwargs of the server) and render -> parse.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "server/openai_request.h"
#include "test_util.h"
#include "text/chat_template.h"
#include "text/generation_config.h"

namespace strata::chat_deepseek_r1_v31_test {
namespace {

using test_util::TempDir;
using test_util::write_file;

ChatMessage msg(const char* role, const char* content) { return {.role = role, .content = content}; }
ToolCall call(const char* name, const char* args) { return {.name = name, .arguments = OrderedJson(args)}; }

std::string fixture_template(const char* dir) {
  const Json cfg = parse_json(test_util::read_file(std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/templates/" + dir +
                                                   "/tokenizer_config.json"),
                              "tokenizer_config.json");
  return cfg.at("chat_template").get<std::string>();
}

ChatRenderOptions thinking(bool on, bool gen = true) {
  ChatRenderOptions o;
  o.enable_thinking = on;
  o.add_generation_prompt = gen;
  return o;
}

// An exchange with calls (as JSON text), two results, an answer after them
// holding a </think>, then calls beside text and one more result.
std::vector<ChatMessage> tool_exchange() {
  ChatMessage c1{.role = "assistant", .tool_calls = {call("get_weather", R"({"city": "Paris"})")}};
  ChatMessage c2{.role = "assistant",
                 .content = "Let me see.",
                 .tool_calls = {call("get_weather", R"({"city": "Paris"})"), call("get_time", "{}")}};
  return {msg("user", "w?"), c1, msg("tool", "sunny"), msg("tool", "20C"), msg("assistant", "Sunny</think>."),
          msg("user", "t?"), c2, msg("tool", "9h")};
}

TEST(ChatDeepSeekR1, RendersAsTheR1Template) {
  const std::vector<ChatMessage> sys{msg("system", "A"), msg("user", "Hi"), msg("system", "B")};
  // The R1-Distill template keeps the last system message; R1's (is_first_sp) joins them as V3's.
  EXPECT_EQ(render_deepseek_r1_chat(sys, nullptr, thinking(true), false),
            "<｜begin▁of▁sentence｜>B<｜User｜>Hi<｜Assistant｜><think>\n");
  EXPECT_EQ(render_deepseek_r1_chat(sys, nullptr, thinking(false), true),
            "<｜begin▁of▁sentence｜>A\n\nB<｜User｜>Hi<｜Assistant｜><think>\n");
  // An earlier answer keeps what follows its last </think>.
  EXPECT_EQ(render_deepseek_r1_chat(std::vector<ChatMessage>{msg("user", "a"), msg("assistant", "<think>r</think>x</think>c1"),
                                                             msg("user", "b")},
                                    nullptr, thinking(true), false),
            "<｜begin▁of▁sentence｜><｜User｜>a<｜Assistant｜>c1<｜end▁of▁sentence｜><｜User｜>b<｜Assistant｜><think>\n");
  // Calls as V3 writes them (dropped beside text); the answer after results is not cut.
  EXPECT_EQ(render_deepseek_r1_chat(tool_exchange(), nullptr, thinking(true), false),
            "<｜begin▁of▁sentence｜><｜User｜>w?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
            "<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁outputs▁begin｜>"
            "<｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>\n<｜tool▁output▁begin｜>20C<｜tool▁output▁end｜>"
            "<｜tool▁outputs▁end｜>Sunny</think>.<｜end▁of▁sentence｜><｜User｜>t?<｜Assistant｜>Let me see."
            "<｜end▁of▁sentence｜>\n<｜tool▁output▁begin｜>9h<｜tool▁output▁end｜><｜tool▁outputs▁end｜>");
  EXPECT_THROW(render_deepseek_r1_chat(std::vector<ChatMessage>{msg("robot", "x")}, nullptr, {}, true), Error);
}

TEST(ChatDeepSeekR1, DetectedForcedAndOpensReasoning) {
  const std::string t = fixture_template("deepseek-r1");
  std::string why;
  EXPECT_EQ(classify_chat_template(t, &why), ChatDialect::DeepSeekR1Sys1) << why;
  // R1's own revision joins the system messages (is_first_sp, as V3's template).
  std::string joined = t;
  const std::string one = "{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}";
  ASSERT_NE(joined.find(one), std::string::npos);
  joined.replace(joined.find(one), one.size(),
                 "{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = "
                 "ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set "
                 "ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}{%- endif %}");
  EXPECT_EQ(classify_chat_template(joined, &why), ChatDialect::DeepSeekR1) << why;
  // Without the </think> cut, or with a thinking switch added: refused.
  std::string nocut = t;
  const std::string cut = "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}";
  ASSERT_NE(nocut.find(cut), std::string::npos);
  nocut.erase(nocut.find(cut), cut.size());
  EXPECT_FALSE(classify_chat_template(nocut, &why));
  EXPECT_FALSE(classify_chat_template(t + "{% if not enable_thinking %}{{- '</think>' -}}{% endif %}", &why));
  EXPECT_NE(why.find("DeepSeek template other than"), std::string::npos) << why;

  TempDir dir;
  write_file(dir.path() / "tokenizer_config.json", OrderedJson{{"chat_template", t}}.dump());
  const ChatTemplate ct = load_chat_template(dir.str());
  EXPECT_EQ(ct.dialect, ChatDialect::DeepSeekR1Sys1);
  EXPECT_TRUE(ct.opens_reasoning(thinking(false)));  // no switch: the prompt always opens <think>
  EXPECT_FALSE(ct.opens_reasoning(thinking(true, false)));
  EXPECT_EQ(ct.stop_tokens(), (std::vector<std::string>{"<｜end▁of▁sentence｜>"}));
  EXPECT_EQ(tool_call_open_tag(ct.dialect), "<｜tool▁calls▁begin｜>");
  TempDir empty;
  EXPECT_EQ(load_chat_template(empty.str(), "deepseek-r1").dialect, ChatDialect::DeepSeekR1);
  EXPECT_STREQ(chat_dialect_name(ChatDialect::DeepSeekR1Sys1), "deepseek-r1");
}

TEST(ChatDeepSeek31, RendersThinkingAndNonThinking) {
  const std::vector<ChatMessage> sys{msg("system", "A"), msg("user", "Hi"), msg("system", "B")};
  EXPECT_EQ(render_deepseek31_chat(sys, nullptr, thinking(true)),
            "<｜begin▁of▁sentence｜>A\n\nB<｜User｜>Hi<｜Assistant｜><think>");
  EXPECT_EQ(render_deepseek31_chat(sys, nullptr, thinking(false)),
            "<｜begin▁of▁sentence｜>A\n\nB<｜User｜>Hi<｜Assistant｜></think>");
  EXPECT_EQ(render_deepseek31_chat(sys, nullptr, thinking(true, false)), "<｜begin▁of▁sentence｜>A\n\nB<｜User｜>Hi");
  // History is non-thinking: "</think>" opens the answer, which keeps what follows its first </think>.
  EXPECT_EQ(render_deepseek31_chat(std::vector<ChatMessage>{msg("user", "a"), msg("assistant", "<think>r</think>x</think>c1"),
                                                            msg("user", "b")},
                                   nullptr, thinking(true)),
            "<｜begin▁of▁sentence｜><｜User｜>a<｜Assistant｜></think>x</think>c1<｜end▁of▁sentence｜><｜User｜>b"
            "<｜Assistant｜><think>");
  EXPECT_EQ(render_deepseek31_chat(tool_exchange(), nullptr, thinking(false)),
            "<｜begin▁of▁sentence｜><｜User｜>w?<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
            "get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
            "<｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜><｜tool▁output▁begin｜>20C<｜tool▁output▁end｜>Sunny</think>."
            "<｜end▁of▁sentence｜><｜User｜>t?<｜Assistant｜></think>Let me see.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
            "get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>9h<｜tool▁output▁end｜>");
  // Calls right after the system prompt (the template's is_only_sys) open an answer too.
  EXPECT_EQ(render_deepseek31_chat(std::vector<ChatMessage>{msg("system", "S"),
                                                            {.role = "assistant", .tool_calls = {call("f", "{}")}}},
                                   nullptr, thinking(true)),
            "<｜begin▁of▁sentence｜>S<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}"
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜Assistant｜><think>");
  // Parsed arguments are printed as tojson.
  const ChatMessage obj{.role = "assistant", .tool_calls = {{.name = "f", .arguments = OrderedJson::parse(R"({"a":1})")}}};
  EXPECT_NE(render_deepseek31_chat(std::vector<ChatMessage>{msg("user", "q"), obj}, nullptr, thinking(true))
                .find("f<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜>"),
            std::string::npos);
  EXPECT_THROW(render_deepseek31_chat(std::vector<ChatMessage>{msg("user", "x")}, OrderedJson::object(), {}), Error);
}

TEST(ChatDeepSeek31, DetectedAndRefusedVariants) {
  const std::string t = fixture_template("deepseek31");
  std::string why;
  EXPECT_EQ(classify_chat_template(t, &why), ChatDialect::DeepSeek31) << why;
  // A copy that prints arguments with tojson or opens answers with <think></think> renders differently.
  std::string tj = t;
  const std::string args = "tool['function']['arguments'] + '<｜tool▁call▁end｜>'";
  ASSERT_NE(tj.find(args), std::string::npos);
  tj.replace(tj.find(args), args.size(), "tool['function']['arguments'] | tojson + '<｜tool▁call▁end｜>'");
  EXPECT_FALSE(classify_chat_template(tj, &why));
  EXPECT_FALSE(classify_chat_template(t + "{{'<think></think>'}}", &why));

  TempDir dir;
  write_file(dir.path() / "tokenizer_config.json", OrderedJson{{"chat_template", t}}.dump());
  const ChatTemplate ct = load_chat_template(dir.str());
  EXPECT_EQ(ct.dialect, ChatDialect::DeepSeek31);
  EXPECT_TRUE(ct.opens_reasoning(thinking(true)));
  EXPECT_FALSE(ct.opens_reasoning(thinking(false)));
  EXPECT_EQ(ct.special_tokens(), (std::vector<std::string>{"<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                                                          "<｜end▁of▁sentence｜>"}));
  TempDir empty;
  EXPECT_EQ(load_chat_template(empty.str(), "deepseek31").dialect, ChatDialect::DeepSeek31);
  EXPECT_THROW(load_chat_template(empty.str(), "deepseek-v31"), Error);
}

TEST(ChatDeepSeek31, ThinkingAnswerWithCallsParsesBack) {
  const std::vector<ChatMessage> m{msg("user", "w?")};
  ChatTemplate ct;
  ct.dialect = ChatDialect::DeepSeek31;
  const std::string prompt = ct.render(m, nullptr, thinking(true));
  ASSERT_EQ(prompt.substr(prompt.size() - 7), "<think>");
  const std::string answer =
      "need the tool</think>Looking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
      "{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const ParsedOutput p = parse_chat_output(ct.dialect, answer, ct.opens_reasoning(thinking(true)));
  EXPECT_EQ(p.reasoning, "need the tool");
  EXPECT_EQ(p.content, "Looking.");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, OrderedJson::parse(R"({"city": "Paris"})"));
  // R1: the prompt opened <think>, the answer's reasoning ends at </think>.
  const ParsedOutput r = parse_chat_output(ChatDialect::DeepSeekR1Sys1, "hmm\n</think>\n\nIt is 4.", true);
  EXPECT_EQ(r.reasoning, "hmm");
  EXPECT_EQ(r.content, "It is 4.");
}

TEST(ChatDeepSeek31, ServerTakesTheThinkingKwarg) {
  const GenerationConfig gen;
  const std::string body =
      R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"thinking": false}})";
  const server::ChatRequest r = server::parse_chat_request(Json::parse(body), body, gen, ChatDialect::DeepSeek31, true);
  EXPECT_FALSE(r.render.enable_thinking);
  const std::string on = R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"thinking": true}})";
  EXPECT_TRUE(server::parse_chat_request(Json::parse(on), on, gen, ChatDialect::DeepSeek31, false).render.enable_thinking);
}

}  // namespace
}  // namespace strata::chat_deepseek_r1_v31_test
