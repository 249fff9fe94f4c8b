// The GLM chat template rendered natively, its detection in model
// directories, the output parser, and `strata run` end to end on a tiny
// fixture with a byte-level tokenizer.
//
// The expected prompts follow glm5-architecture.md §9 and were checked
// against Jinja2 rendering the GLM-4.7-dialect template of
// tools/train/chat_template.jinja (tests/chat/jinja_crosscheck.py prints
// them for the same conversations).
#include "text/chat_template.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"
#include "text/tokenizer.h"
#include "core/error.h"

namespace strata::chat_template_test {
namespace {

using test_util::TempDir;
using test_util::write_file;
namespace fs = std::filesystem;

std::string render(const std::vector<ChatMessage>& m, bool gen = false, bool think = true, bool clear = true,
                   const OrderedJson& tools = nullptr) {
  ChatRenderOptions o;
  o.add_generation_prompt = gen;
  o.enable_thinking = think;
  o.clear_thinking = clear;
  return render_glm_chat(m, tools, o);
}

ChatMessage msg(const char* role, const char* content) { return {.role = role, .content = content}; }
ChatMessage assistant(const char* content, const char* reasoning) {
  return {.role = "assistant", .content = content, .reasoning_content = reasoning};
}

OrderedJson weather_tool() {
  return OrderedJson::parse(R"({"type": "function", "function": {"name": "get_weather",
    "description": "Température actuelle", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}})");
}

std::string read_text(const std::string& path) {
  std::FILE* fp = std::fopen(path.c_str(), "rb");
  if (!fp) return {};
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, fp)) > 0) s.append(buf, n);
  std::fclose(fp);
  return s;
}

TEST(ChatTemplate, SystemUserAndGenerationPrompt) {
  EXPECT_EQ(render({msg("system", "You are helpful."), msg("user", "Hi")}, true),
            "[gMASK]<sop><|system|>You are helpful.<|user|>Hi<|assistant|><think>");
  EXPECT_EQ(render({msg("user", "Hi")}, true, /*think=*/false), "[gMASK]<sop><|user|>Hi<|assistant|></think>");
  EXPECT_EQ(render({msg("user", "Hi")}, false), "[gMASK]<sop><|user|>Hi");
  // Contents are not stripped for user and system messages.
  EXPECT_EQ(render({msg("user", " a \n")}), "[gMASK]<sop><|user|> a \n");
}

TEST(ChatTemplate, ReasoningKeptOnlyAfterLastUser) {
  const std::vector<ChatMessage> m = {msg("user", "a"), assistant("c1", "r1"), msg("user", "b"),
                                      assistant(" c2 \n", "\n r2 ")};
  EXPECT_EQ(render(m), "[gMASK]<sop><|user|>a<|assistant|></think>c1<|user|>b<|assistant|><think>r2</think>c2");
  // clear_thinking=false keeps every turn's reasoning.
  EXPECT_EQ(render({msg("user", "a"), assistant("c1", "r1"), msg("user", "b")}, true, true, /*clear=*/false),
            "[gMASK]<sop><|user|>a<|assistant|><think>r1</think>c1<|user|>b<|assistant|><think>");
  // Empty reasoning renders just the separator.
  EXPECT_EQ(render({msg("user", "a"), assistant("c", "")}), "[gMASK]<sop><|user|>a<|assistant|></think>c");
}

TEST(ChatTemplate, ReasoningSplitFromContent) {
  const std::vector<ChatMessage> m = {msg("user", "a"), msg("assistant", "<think>\nold\n</think>\n\nold answer"),
                                      msg("user", "b"), msg("assistant", "<think>\nplan\n</think>\n\nanswer")};
  EXPECT_EQ(render(m),
            "[gMASK]<sop><|user|>a<|assistant|></think>old answer<|user|>b<|assistant|><think>plan</think>answer");
}

TEST(ChatTemplate, ToolsToolCallsAndObservations) {
  ChatMessage call = assistant("", "need the tool");
  call.tool_calls.push_back({.id = "call_1",
                             .name = "get_weather",
                             .arguments = OrderedJson::parse(
                                 R"({"city": "Paris", "days": 2, "opts": {"unit": "c", "x": [1, true, null]}})")});
  const std::vector<ChatMessage> m = {msg("user", "Weather in Paris?"),
                                      call,
                                      msg("tool", "sunny"),
                                      msg("tool", "20C"),
                                      msg("assistant", "Sunny, 20C."),
                                      msg("user", "Thanks"),
                                      msg("tool", "late")};
  const std::string want =
      "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Température actuelle\", "
      "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": "
      "\"integer\"}}, \"required\": [\"city\"]}}}\n</tools>\n\n"
      "For each function call, output the function name and arguments within the following XML format:\n"
      "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>"
      "{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>"
      "<|user|>Weather in Paris?<|assistant|></think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
      "</arg_value><arg_key>days</arg_key><arg_value>2</arg_value><arg_key>opts</arg_key><arg_value>{\"unit\": \"c\", "
      "\"x\": [1, true, null]}</arg_value></tool_call><|observation|><tool_response>sunny</tool_response>"
      "<tool_response>20C</tool_response><|assistant|></think>Sunny, 20C.<|user|>Thanks<|observation|>"
      "<tool_response>late</tool_response><|assistant|><think>";
  EXPECT_EQ(render(m, true, true, true, OrderedJson::array({weather_tool()})), want);
  // No tools (null or empty): no tools block.
  EXPECT_EQ(render({msg("user", "x")}, false, true, true, OrderedJson::array()), "[gMASK]<sop><|user|>x");
}

TEST(ChatTemplate, RefusesBadInput) {
  EXPECT_THROW(render({msg("robot", "x")}), Error);
  EXPECT_THROW(render({msg("user", "x")}, false, true, true, OrderedJson::object()), Error);
  ChatMessage call = assistant("", "");
  call.tool_calls.push_back({.name = "f", .arguments = OrderedJson::array({1})});
  EXPECT_THROW(render({msg("user", "x"), call}), Error);
}

TEST(ChatTemplate, TojsonAndStripMatchPython) {
  EXPECT_EQ(jinja_tojson(OrderedJson::parse(R"({"b": 1, "a": [1.5, "x\ny\"\u0001", false], "é": null})")),
            "{\"b\": 1, \"a\": [1.5, \"x\\ny\\\"\\u0001\", false], \"é\": null}");
  EXPECT_EQ(jinja_tojson(OrderedJson::object()), "{}");
  EXPECT_EQ(jinja_tojson(OrderedJson::array()), "[]");
  EXPECT_EQ(py_strip("\t\n a b \r\x0b\x0c"), "a b");
  EXPECT_EQ(py_strip("\xC2\xA0\xE3\x80\x80x\xE2\x80\xA8"), "x");  // NBSP, ideographic space, line separator
  EXPECT_EQ(py_strip("\xE2\x80\x8B"
                     "x"),
            "\xE2\x80\x8B"
            "x");  // zero-width space is not whitespace in Python
  EXPECT_EQ(py_strip("   "), "");
  EXPECT_EQ(py_strip("\xFF x \xC3"), "\xFF x \xC3");  // invalid UTF-8 stops the strip
}

// tojson is iterative: tool-call arguments are client data, and a document
// nested far deeper than the stack allows renders instead of crashing.
TEST(ChatTemplate, TojsonRendersHostileDepth) {
  constexpr int kDepth = 300000;
  OrderedJson v = 1;
  for (int i = 0; i < kDepth; ++i) {
    OrderedJson a = OrderedJson::array();
    a.push_back(std::move(v));
    v = std::move(a);
  }
  const std::string out = jinja_tojson(v);
  EXPECT_EQ(out, std::string(kDepth, '[') + "1" + std::string(kDepth, ']'));
  OrderedJson o = OrderedJson::object();
  o["a"] = OrderedJson::object();
  o["a"]["b"] = OrderedJson::array({OrderedJson::object(), 2});
  o["c"] = "x";
  EXPECT_EQ(jinja_tojson(o), R"({"a": {"b": [{}, 2]}, "c": "x"})");
}

TEST(ChatTemplate, DetectsTemplates) {
  const std::string glm47 = read_text(std::string(STRATA_SOURCE_DIR) + "/tools/train/chat_template.jinja");
  ASSERT_FALSE(glm47.empty());
  std::string why;
  EXPECT_EQ(classify_chat_template(glm47, &why), ChatDialect::Glm) << why;
  EXPECT_FALSE(classify_chat_template("[gMASK]<sop>{% if x %}<|assistant|>\n<think></think>/nothink{% endif %}", &why));
  EXPECT_NE(why.find("GLM-4.5/4.6"), std::string::npos);
  EXPECT_FALSE(classify_chat_template("[gMASK]<sop><|system|>Reasoning Effort: Max<|assistant|>", &why));
  EXPECT_NE(why.find("GLM-5.2"), std::string::npos);
  EXPECT_FALSE(classify_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}", &why));
  EXPECT_NE(why.find("without the Qwen3 markers"), std::string::npos) << why;
  EXPECT_FALSE(classify_chat_template("{% for m in messages %}<s>{{ m.content }}{% endfor %}", &why));
  EXPECT_NE(why.find("neither a GLM template"), std::string::npos) << why;
}

std::string fixture_template(const char* name) {
  return read_text(std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/templates/" + name + "/chat_template.jinja");
}

// The published templates of the other families (tests/fixtures/templates/,
// checked against Jinja2 by the chat_template_jinja_* ctests).
TEST(ChatTemplate, DetectsQwen3AndGlm45Templates) {
  struct Case {
    const char* dir;
    ChatDialect want;
  };
  for (const Case& c : {Case{"qwen3", ChatDialect::Qwen3}, Case{"qwen3-initial", ChatDialect::Qwen3},
                        Case{"glm45", ChatDialect::Glm45}, Case{"glm46", ChatDialect::Glm45},
                        Case{"glm47", ChatDialect::Glm}}) {
    const std::string t = fixture_template(c.dir);
    ASSERT_FALSE(t.empty()) << c.dir;
    std::string why;
    EXPECT_EQ(classify_chat_template(t, &why), c.want) << c.dir << ": " << why;
  }
  // Near misses are refused with what was recognised.
  const std::string qwen3 = fixture_template("qwen3");
  std::string why;
  std::string no_switch = qwen3;
  no_switch.replace(no_switch.find("enable_thinking is defined"), 15, "thinking_switch");
  EXPECT_FALSE(classify_chat_template(no_switch, &why));
  EXPECT_NE(why.find("2507"), std::string::npos) << why;
  EXPECT_FALSE(classify_chat_template(qwen3 + "<function=", &why));
  EXPECT_NE(why.find("Qwen3-Coder"), std::string::npos) << why;
  std::string glm45 = fixture_template("glm45");
  glm45.replace(glm45.find("<arg_key>"), 9, "<argkey>");
  glm45.replace(glm45.find("<arg_key>"), 9, "<argkey>");
  while (glm45.find("<arg_key>") != std::string::npos) glm45.replace(glm45.find("<arg_key>"), 9, "<argkey>");
  EXPECT_FALSE(classify_chat_template(glm45, &why));
  EXPECT_NE(why.find("GLM-4.5-style"), std::string::npos) << why;
}

TEST(ChatTemplate, DialectsNameTheirTokens) {
  ChatTemplate t;
  for (ChatDialect d : {ChatDialect::Glm, ChatDialect::Glm45, ChatDialect::Qwen3, ChatDialect::Raw}) {
    TempDir dir;
    t = load_chat_template(dir.str(), chat_dialect_name(d));  // forced: no template file needed
    EXPECT_EQ(t.dialect, d);
    EXPECT_EQ(t.source, std::string("--chat-template ") + chat_dialect_name(d));
  }
  t.dialect = ChatDialect::Qwen3;
  EXPECT_EQ(t.special_tokens(), (std::vector<std::string>{"<|im_start|>", "<|im_end|>"}));
  EXPECT_EQ(t.stop_tokens(), (std::vector<std::string>{"<|im_end|>", "<|endoftext|>"}));
  t.dialect = ChatDialect::Glm45;
  EXPECT_EQ(t.stop_tokens(), (std::vector<std::string>{"<|endoftext|>", "<|user|>", "<|observation|>"}));
  EXPECT_EQ(t.special_tokens().size(), 8u);
  t.dialect = ChatDialect::Raw;
  EXPECT_TRUE(t.special_tokens().empty());
  EXPECT_TRUE(t.stop_tokens().empty());
}

TEST(ChatTemplate, RendersQwen3) {
  ChatRenderOptions o;
  const std::vector<ChatMessage> m{msg("system", "Be brief."), msg("user", "Hi")};
  EXPECT_EQ(render_qwen3_chat(m, nullptr, o),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  o.enable_thinking = false;
  EXPECT_EQ(render_qwen3_chat(std::vector<ChatMessage>{msg("user", "Hi")}, nullptr, o),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // Tools go into the system block; calls are JSON; results are user turns.
  ChatMessage call = assistant("", "need it");
  call.tool_calls.push_back({.name = "get_weather", .arguments = OrderedJson::parse(R"({"city": "Paris"})")});
  ChatMessage result = msg("tool", "sunny");
  o.enable_thinking = true;
  const std::string p = render_qwen3_chat(std::vector<ChatMessage>{msg("user", "Weather?"), call, result},
                                        OrderedJson::array({weather_tool()}), o);
  EXPECT_EQ(p.substr(0, 40), "<|im_start|>system\n# Tools\n\nYou may call");
  EXPECT_NE(p.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
                   "\"Température actuelle\""),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("<|im_start|>assistant\n<think>\nneed it\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                   "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
                   "sunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
            std::string::npos)
      << p;
}

TEST(ChatTemplate, RendersGlm45) {
  ChatRenderOptions o;
  o.enable_thinking = false;
  ChatMessage call = assistant("Let me look.", "r");
  call.tool_calls.push_back({.name = "f", .arguments = OrderedJson::parse(R"({"a": "x", "n": 2})")});
  EXPECT_EQ(render_glm45_chat(std::vector<ChatMessage>{msg("system", "S"), msg("user", "Q"), call, msg("tool", "R")}, nullptr, o),
            "[gMASK]<sop><|system|>\nS<|user|>\nQ/nothink<|assistant|>\n<think>r</think>\nLet me look.\n"
            "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>x</arg_value>\n<arg_key>n</arg_key>\n<arg_value>2</arg_value>"
            "\n</tool_call><|observation|>\n<tool_response>\nR\n</tool_response><|assistant|>\n<think></think>");
  o.enable_thinking = true;
  EXPECT_EQ(render_glm45_chat(std::vector<ChatMessage>{msg("user", "Q")}, nullptr, o), "[gMASK]<sop><|user|>\nQ<|assistant|>");
}

TEST(ChatTemplate, LoadsFromModelDirectory) {
  const std::string glm47 = read_text(std::string(STRATA_SOURCE_DIR) + "/tools/train/chat_template.jinja");
  {
    TempDir d;
    Json cfg;
    cfg["chat_template"] = glm47;
    write_file(d.file("tokenizer_config.json"), cfg.dump());
    const ChatTemplate t = load_chat_template(d.str());
    EXPECT_EQ(t.dialect, ChatDialect::Glm);
    EXPECT_NE(t.source.find("tokenizer_config.json"), std::string::npos);
  }
  {  // chat_template.jinja wins over tokenizer_config.json; named templates pick "default"
    TempDir d;
    write_file(d.file("chat_template.jinja"), glm47);
    write_file(d.file("tokenizer_config.json"), R"({"chat_template": "{{ messages }}"})");
    EXPECT_EQ(load_chat_template(d.str()).dialect, ChatDialect::Glm);
    TempDir d2;
    Json cfg;
    cfg["chat_template"] =
        Json::array({{{"name", "tool_use"}, {"template", "x"}}, {{"name", "default"}, {"template", glm47}}});
    write_file(d2.file("tokenizer_config.json"), cfg.dump());
    EXPECT_EQ(load_chat_template(d2.str()).dialect, ChatDialect::Glm);
  }
  {
    TempDir d;
    write_file(d.file("tokenizer_config.json"),
               R"({"chat_template": "{% for m in messages %}<|im_start|>{% endfor %}"})");
    const std::string e = test_util::error_of([&] { load_chat_template(d.str()); });
    EXPECT_NE(e.find("without the Qwen3 markers"), std::string::npos) << e;
    EXPECT_NE(e.find("--chat-template glm"), std::string::npos) << e;
    EXPECT_EQ(load_chat_template(d.str(), "glm").dialect, ChatDialect::Glm);
    EXPECT_EQ(load_chat_template(d.str(), "raw").dialect, ChatDialect::Raw);
  }
  {
    TempDir d;
    const std::string e = test_util::error_of([&] { load_chat_template(d.str()); });
    EXPECT_NE(e.find("no chat template"), std::string::npos) << e;
    EXPECT_THROW(load_chat_template(d.str(), "jinja"), Error);
  }
}

TEST(ChatTemplate, RenderedSpecialsAreSingleTokensOfTheTrainedModel) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/models/glm5-strata-tiny";
  if (!fs::exists(dir + "/tokenizer.json")) GTEST_SKIP() << dir << " is not there";
  const Tokenizer tok = Tokenizer::load(dir);
  EXPECT_EQ(load_chat_template(dir).dialect, ChatDialect::Glm);
  const std::vector<int32_t> ids = tok.encode(render({msg("system", "Be brief."), msg("user", "Hi")}, true));
  std::vector<int32_t> specials;
  for (const char* t : {"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<think>"}) {
    ASSERT_TRUE(tok.token_id(t).has_value()) << t;
    specials.push_back(*tok.token_id(t));
  }
  ASSERT_GE(ids.size(), 6u);
  EXPECT_EQ(ids[0], specials[0]);
  EXPECT_EQ(ids[1], specials[1]);
  EXPECT_EQ(ids[2], specials[2]);
  EXPECT_NE(std::find(ids.begin(), ids.end(), specials[3]), ids.end());
  EXPECT_EQ(ids[ids.size() - 2], specials[4]);
  EXPECT_EQ(ids.back(), specials[5]);
  EXPECT_EQ(tok.decode(ids), render({msg("system", "Be brief."), msg("user", "Hi")}, true));
}

TEST(ChatOutput, SplitsReasoningAndContent) {
  ParsedOutput p = parse_glm_output("\nLet me think.\n</think>\n\nThe answer is 4.", true);
  EXPECT_EQ(p.reasoning, "Let me think.");
  EXPECT_EQ(p.content, "The answer is 4.");
  EXPECT_TRUE(p.reasoning_complete);
  EXPECT_TRUE(p.tool_calls.empty());

  p = parse_glm_output("<think>r</think>c", false);
  EXPECT_EQ(p.reasoning, "r");
  EXPECT_EQ(p.content, "c");

  p = parse_glm_output("still thinking", true);
  EXPECT_EQ(p.reasoning, "still thinking");
  EXPECT_EQ(p.content, "");
  EXPECT_FALSE(p.reasoning_complete);

  p = parse_glm_output(" plain answer ", false);
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "plain answer");
}

TEST(ChatOutput, ParsesToolCalls) {
  const std::string text =
      "I need the "
      "weather.</think>Checking.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>"
      "<arg_key>days</arg_key><arg_value>2</arg_value><arg_key>opts</arg_key><arg_value>{\"unit\": \"c\"}</arg_value>"
      "</tool_call>\n<tool_call>now</tool_call>";
  ParsedOutput p = parse_glm_output(text, true);
  EXPECT_EQ(p.reasoning, "I need the weather.");
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments.dump(), R"({"city":"Paris","days":2,"opts":{"unit":"c"}})");
  EXPECT_EQ(p.tool_calls[1].name, "now");
  EXPECT_EQ(p.tool_calls[1].arguments.dump(), "{}");

  // A parameter the tool declares as a string stays a string.
  const OrderedJson tools = OrderedJson::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"properties": {"code": {"type": "string"}}}}}])");
  p = parse_glm_output(
      "<tool_call>f<arg_key>code</arg_key><arg_value>123</arg_value><arg_key>n</arg_key>"
      "<arg_value>123</arg_value></tool_call>",
      false, tools);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments.dump(), R"({"code":"123","n":123})");

  // Unterminated or malformed calls stay visible as content.
  p = parse_glm_output("a<tool_call>f<arg_key>k</arg_key><arg_value>v", false);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, "a<tool_call>f<arg_key>k</arg_key><arg_value>v");
  p = parse_glm_output("<tool_call><arg_key>k</arg_key></tool_call>", false);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, "<tool_call><arg_key>k</arg_key></tool_call>");
  // Deep nesting is not parsed as JSON (bounded), it stays a string.
  const std::string deep(200, '[');
  p = parse_glm_output("<tool_call>f<arg_key>k</arg_key><arg_value>" + deep + "</arg_value></tool_call>", false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_TRUE(p.tool_calls[0].arguments["k"].is_string());
}

TEST(ChatOutput, RoundTripsRenderedAssistantTurn) {
  ChatMessage a = assistant("Let me check.", "thinking hard");
  a.tool_calls.push_back(
      {.name = "search", .arguments = OrderedJson::parse(R"({"q": "strata", "n": 3, "x": [1, 2]})")});
  const std::string prompt = render({msg("user", "q")}, true);
  const std::string full = render({msg("user", "q"), a});
  ASSERT_EQ(full.substr(0, prompt.size()), prompt);  // the model's output continues the generation prompt
  const ParsedOutput p = parse_glm_output(full.substr(prompt.size()), true);
  EXPECT_EQ(p.reasoning, "thinking hard");
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "search");
  EXPECT_EQ(p.tool_calls[0].arguments, a.tool_calls[0].arguments);
}

TEST(ChatOutput, ParsesQwen3ToolCalls) {
  ParsedOutput p = parse_qwen3_output(
      "<think>\nplan\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"k\\\": [1]}\"}\n"
      "</tool_call>",
      false);
  EXPECT_EQ(p.reasoning, "plan");
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments.dump(), R"({"city":"Paris","days":2})");
  EXPECT_EQ(p.tool_calls[1].name, "g");
  EXPECT_EQ(p.tool_calls[1].arguments.dump(), R"({"k":[1]})");  // a JSON string holding the object
  // Not a call object: kept as text; unterminated: kept as text; no arguments: {}.
  p = parse_qwen3_output("a<tool_call>{\"name\": 3}</tool_call>b<tool_call>{\"name\": \"h\"}</tool_call><tool_call>{", false);
  EXPECT_EQ(p.content, "a<tool_call>{\"name\": 3}</tool_call>b<tool_call>{");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "h");
  EXPECT_TRUE(p.tool_calls[0].arguments.is_object() && p.tool_calls[0].arguments.empty());
  const std::string deep(10000, '[');
  p = parse_qwen3_output("<tool_call>{\"name\": \"f\", \"arguments\": " + deep + "</tool_call>", false);
  EXPECT_TRUE(p.tool_calls.empty());
  // The dispatcher: Raw is all content.
  EXPECT_EQ(parse_chat_output(ChatDialect::Raw, " <think>x</think> ", false).content, " <think>x</think> ");
  EXPECT_EQ(parse_chat_output(ChatDialect::Qwen3, "<think>x</think>y", false).reasoning, "x");
}

// What each dialect renders for an assistant turn with reasoning and a call
// parses back (after the generation prompt) as that turn.
TEST(ChatOutput, RoundTripsQwen3AndGlm45Turns) {
  ChatMessage a = assistant("Let me check.", "thinking hard");
  a.tool_calls.push_back(
      {.name = "search", .arguments = OrderedJson::parse(R"({"q": "strata", "n": 3, "x": [1, 2]})")});
  for (ChatDialect d : {ChatDialect::Qwen3, ChatDialect::Glm45}) {
    ChatTemplate t;
    t.dialect = d;
    ChatRenderOptions o;
    const std::string prompt = t.render(std::vector<ChatMessage>{msg("user", "q")}, nullptr, o);
    o.add_generation_prompt = false;
    std::string full = t.render(std::vector<ChatMessage>{msg("user", "q"), a}, nullptr, o);
    if (d == ChatDialect::Qwen3) full = full.substr(0, full.size() - 11);  // the turn's <|im_end|>\n: a stop token
    ASSERT_EQ(full.substr(0, prompt.size()), prompt) << chat_dialect_name(d);
    const ParsedOutput p = parse_chat_output(d, full.substr(prompt.size()), t.opens_reasoning(o));
    EXPECT_EQ(p.reasoning, "thinking hard") << chat_dialect_name(d);
    EXPECT_EQ(p.content, "Let me check.") << chat_dialect_name(d);
    ASSERT_EQ(p.tool_calls.size(), 1u) << chat_dialect_name(d);
    EXPECT_EQ(p.tool_calls[0].name, "search");
    EXPECT_EQ(p.tool_calls[0].arguments, a.tool_calls[0].arguments) << chat_dialect_name(d);
  }
}

// `strata run` on the tiny fixture with a byte-level tokenizer (vocab 256:
// no room for GLM's special tokens, so only --raw works).
class ChatCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path src = fs::path(STRATA_SOURCE_DIR) / "tests/fixtures/glm5-tiny-bf16";
    for (const char* f : {"config.json", "generation_config.json"}) fs::copy_file(src / f, dir_.path() / f);
    fs::create_symlink(src / "model.safetensors", dir_.path() / "model.safetensors");
    fs::copy_file(fs::path(STRATA_SOURCE_DIR) / "tests/chat/byte-tokenizer.json", dir_.path() / "tokenizer.json");
  }
  // Runs strata with `args`; returns stdout, sets rc; stderr goes to a file.
  std::string strata(const std::string& args, int& rc) {
    const std::string cmd = std::string(STRATA_BINARY) + " " + args + " 2>" + dir_.file("stderr.txt");
    std::FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    rc = WEXITSTATUS(::pclose(p));
    return out;
  }
  std::string err() { return read_text(dir_.file("stderr.txt")); }
  TempDir dir_;
};

TEST_F(ChatCli, RunRawIsSeededAndReproducible) {
  const std::string base = "run --model " + dir_.str() + " --raw --threads 1 -p 'Hello, strata' --ignore-eos -n 12";
  int rc = 0;
  const std::string greedy1 = strata(base + " --temperature 0", rc);
  ASSERT_EQ(rc, 0) << err();
  const std::string greedy2 = strata(base + " --temperature 0 --seed 99", rc);
  EXPECT_EQ(greedy1, greedy2);
  const std::string s1 = strata(base + " --seed 7 --top-k 40", rc);
  ASSERT_EQ(rc, 0) << err();
  const std::string s2 = strata(base + " --seed 7 --top-k 40", rc);
  EXPECT_EQ(s1, s2);
  EXPECT_FALSE(s1.empty());
  EXPECT_EQ(s1.back(), '\n');
  // The seed is used, and sampling is not greedy: 64 tokens drawn at
  // temperature 1 (generation_config.json) from this random model's broad
  // distribution. Measured over 10 seeds, two runs agree on ~23% of output
  // characters (mostly two undecodable bytes both printed as U+FFFD) and a
  // sampled run on ~18% of the greedy one's, so equal 64-token outputs
  // (probability ~0.25^64) would mean the seed or the temperature is ignored.
  const std::string lbase = "run --model " + dir_.str() + " --raw --threads 1 -p 'Hello, strata' --ignore-eos -n 64";
  const std::string g64 = strata(lbase + " --temperature 0", rc);
  ASSERT_EQ(rc, 0) << err();
  const std::string a64 = strata(lbase + " --seed 7 --top-k 40", rc);
  ASSERT_EQ(rc, 0) << err();
  const std::string b64 = strata(lbase + " --seed 8 --top-k 40", rc);
  ASSERT_EQ(rc, 0) << err();
  const std::string c64 = strata(lbase + " --seed 8", rc);  // no --top-k: generation_config's top_p alone
  ASSERT_EQ(rc, 0) << err();
  EXPECT_NE(a64, b64) << "seeds 7 and 8 gave the same 64 tokens";
  EXPECT_NE(a64, g64) << "seed 7 sampled exactly the greedy continuation";
  EXPECT_NE(b64, g64) << "seed 8 sampled exactly the greedy continuation";
  EXPECT_NE(c64, g64) << "seed 8 (top-p only) sampled exactly the greedy continuation";
  // --stats goes through the engine's stats line.
  strata(base + " --temperature 0 --stats", rc);
  EXPECT_NE(err().find("decode 11 tok"), std::string::npos) << err();
}

TEST_F(ChatCli, RefusesTemplateWithoutGlmTokens) {
  int rc = 0;
  // No chat template in the directory.
  strata("run --model " + dir_.str() + " -p hi -n 1", rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err().find("no chat template"), std::string::npos) << err();
  // Forced GLM dialect: the byte tokenizer has no GLM special tokens.
  strata("run --model " + dir_.str() + " --chat-template glm -p hi -n 1", rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err().find("special token [gMASK]"), std::string::npos) << err();
  // A prompt longer than the context is refused.
  strata("run --model " + dir_.str() + " --raw --ctx 4 -p 'too long a prompt' -n 1", rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err().find("the context is 4"), std::string::npos) << err();
}

// `strata run` on the qwen3_moe and glm4_moe fixtures with their families'
// published templates (tests/fixtures/templates/) and a byte-level tokenizer
// whose first control-byte ids are the template's special tokens instead
// (the fixtures' vocabulary is 256): the template is detected, its specials
// are single tokens (the prompt lengths below count them as one each), and
// the model answers.
class FamilyCli : public ChatCli {
 protected:
  void use(const char* fixture, const char* tmpl, const std::vector<std::string>& specials) {
    fs::remove_all(dir_.path());
    fs::create_directories(dir_.path());
    const fs::path src = fs::path(STRATA_SOURCE_DIR) / "tests/fixtures" / fixture;
    for (const char* f : {"config.json", "generation_config.json"}) fs::copy_file(src / f, dir_.path() / f);
    fs::create_symlink(src / "model.safetensors", dir_.path() / "model.safetensors");
    fs::copy_file(fs::path(STRATA_SOURCE_DIR) / "tests/fixtures/templates" / tmpl / "chat_template.jinja",
                  dir_.path() / "chat_template.jinja");
    Json tok = Json::parse(read_text(std::string(STRATA_SOURCE_DIR) + "/tests/chat/byte-tokenizer.json"));
    Json& vocab = tok["model"]["vocab"];
    for (size_t i = 0; i < specials.size(); ++i) {
      for (auto it = vocab.begin(); it != vocab.end(); ++it)
        if (it.value() == static_cast<int>(i)) {
          vocab.erase(it);
          break;
        }
      tok["added_tokens"].push_back({{"id", i}, {"content", specials[i]}, {"single_word", false}, {"lstrip", false},
                                     {"rstrip", false}, {"normalized", false}, {"special", true}});
    }
    write_file(dir_.file("tokenizer.json"), tok.dump());
  }
  // The prompt's length in tokens, from the refusal of a context of 2.
  size_t prompt_tokens(const std::string& extra) {
    int rc = 0;
    strata("run --model " + dir_.str() + " --ctx 2 -p hi -n 1 " + extra, rc);
    EXPECT_EQ(rc, 1);
    static const std::regex re("the prompt is ([0-9]+) tokens");
    std::smatch m;
    const std::string e = err();
    if (!std::regex_search(e, m, re)) {
      ADD_FAILURE() << e;
      return 0;
    }
    return std::stoul(m[1].str());
  }
};

TEST_F(FamilyCli, Qwen3MoeRunsWithItsTemplate) {
  use("qwen3moe-tiny-bf16", "qwen3",
      {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>"});
  // <|im_start|> "user\nhi" <|im_end|> "\n" <|im_start|> "assistant\n": 1 + 7 + 1 + 1 + 1 + 10
  EXPECT_EQ(prompt_tokens(""), 21u);
  // ... + <think> "\n\n" </think> "\n\n"
  EXPECT_EQ(prompt_tokens("--think off"), 27u);
  int rc = 0;
  strata("run --model " + dir_.str() + " --threads 1 --temperature 0 -p hi -n 4", rc);
  EXPECT_EQ(rc, 0) << err();
  // A Qwen3-Coder template is refused naming the file.
  write_file(dir_.file("chat_template.jinja"), read_text(dir_.file("chat_template.jinja")) + "<function=");
  strata("run --model " + dir_.str() + " -p hi -n 1", rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err().find(dir_.file("chat_template.jinja")), std::string::npos) << err();
  EXPECT_NE(err().find("Qwen3-Coder"), std::string::npos) << err();
  // ... unless a dialect is forced.
  strata("run --model " + dir_.str() + " --chat-template qwen3 --threads 1 -p hi -n 2", rc);
  EXPECT_EQ(rc, 0) << err();
}

TEST_F(FamilyCli, Glm4MoeRunsWithTheGlm45Template) {
  use("glm4moe-tiny-bf16", "glm45",
      {"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>",
       "<|endoftext|>"});
  // [gMASK] <sop> <|user|> "\nhi" <|assistant|>
  EXPECT_EQ(prompt_tokens(""), 7u);
  // [gMASK] <sop> <|user|> "\nhi/nothink" <|assistant|> "\n" <think> </think>
  EXPECT_EQ(prompt_tokens("--think off"), 18u);
  int rc = 0;
  strata("run --model " + dir_.str() + " --threads 1 --temperature 0 -p hi -n 4", rc);
  EXPECT_EQ(rc, 0) << err();
  // Without its specials the tokenizer is refused for the template.
  use("glm4moe-tiny-bf16", "glm45", {"[gMASK]", "<sop>"});
  strata("run --model " + dir_.str() + " -p hi -n 1", rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err().find("glm45 chat template needs the special token <|system|>"), std::string::npos) << err();
}

TEST_F(ChatCli, ChatOverPipeKeepsHistoryAndHandlesEof) {
  int rc = 0;
  const std::string out = strata(
      "chat --model " + dir_.str() + " --chat-template raw --threads 1 --temperature 0 --ignore-eos -n 4 < " +
          [&] {
            write_file(dir_.file("in.txt"), "one\ntwo\n:reset\n:more\nthree");  // no final newline: EOF
            return dir_.file("in.txt");
          }(),
      rc);
  ASSERT_EQ(rc, 0) << err();
  const std::string e = err();
  // Three answers, the second re-using the first turn's cache.
  size_t footers = 0;
  for (size_t p = 0; (p = e.find("tok/s", p)) != std::string::npos; ++p) ++footers;
  EXPECT_EQ(footers, 3u) << e;
  EXPECT_NE(e.find("[4 tokens"), std::string::npos) << e;
  EXPECT_NE(out.find("(history and context cleared)"), std::string::npos) << out;
  EXPECT_NE(out.find("(no answer to continue)"), std::string::npos) << out;
  // Turn 2 re-uses turn 1's cache: at least the prompt "one\n" (the random
  // answer bytes decode to U+FFFD, which re-encodes differently); after
  // :reset nothing is cached.
  std::vector<std::pair<long, long>> prompts;  // (new, cached) per turn
  const std::regex re(R"(prompt (\d+) new \+ (\d+) cached)");
  for (std::sregex_iterator it(e.begin(), e.end(), re), end; it != end; ++it)
    prompts.emplace_back(std::stol((*it)[1]), std::stol((*it)[2]));
  ASSERT_EQ(prompts.size(), 3u) << e;
  EXPECT_EQ(prompts[0], std::make_pair(4L, 0L));
  EXPECT_GE(prompts[1].second, 4);
  EXPECT_EQ(prompts[2], std::make_pair(6L, 0L));  // "three\n"
}

}  // namespace
}  // namespace strata::chat_template_test
