#include "text/chat_template.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>

#include "core/io.h"
#include "core/error.h"
#include "core/json.h"

namespace strata {

namespace {

constexpr size_t kMaxTemplateFile = 16u << 20;  // tokenizer_config.json with a large added_tokens_decoder

// The code point starting at s[i] if it is well-formed UTF-8 (len set), else -1.
int32_t utf8_at(std::string_view s, size_t i, size_t& len) {
  const uint8_t c = static_cast<uint8_t>(s[i]);
  len = 1;
  if (c < 0x80) return c;
  size_t n = 0;
  int32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 1, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 2, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 3, cp = c & 0x07;
  } else {
    return -1;
  }
  if (s.size() - i <= n) return -1;
  for (size_t k = 1; k <= n; ++k) {
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  len = n + 1;
  return cp;
}

// Python's str.isspace().
bool py_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

bool contains(std::string_view s, std::string_view needle) { return s.find(needle) != std::string_view::npos; }

size_t count(std::string_view s, std::string_view needle) {
  size_t n = 0;
  for (size_t k = s.find(needle); k != std::string_view::npos; k = s.find(needle, k + needle.size())) ++n;
  return n;
}

// The GLM template's reasoning/content split for an assistant message.
void split_assistant(const ChatMessage& m, std::string& reasoning, std::string& content) {
  content = m.content;
  reasoning.clear();
  if (m.reasoning_content) {
    reasoning = *m.reasoning_content;
    return;
  }
  const size_t first = content.find("</think>");
  if (first == std::string::npos) return;
  // reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
  std::string_view before = rstrip_newlines(std::string_view(content).substr(0, first));
  const size_t open = before.rfind("<think>");
  if (open != std::string_view::npos) before = before.substr(open + 7);
  reasoning = std::string(lstrip_newlines(before));
  // content = content.split('</think>')[-1].lstrip('\n')
  const size_t last = content.rfind("</think>");
  content = std::string(lstrip_newlines(std::string_view(content).substr(last + 8)));
}

const char kToolsHeader[] =
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n";
const char kToolsFooter[] =
    "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
    "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>";

// "[gMASK]<sop>" and, when there are tools, the tools block: header, one
// JSON definition per line, footer.
std::string glm_prefix(const OrderedJson& tools, std::string_view header, std::string_view footer) {
  if (!tools.is_null() && !tools.is_array()) fail("chat: tools must be an array of tool definitions");
  std::string out = "[gMASK]<sop>";
  if (tools.is_array() && !tools.empty()) {
    out += header;
    for (const auto& t : tools) out += jinja_tojson(t) + "\n";
    out += footer;
  }
  return out;
}

// The index of the last message with this role, or -1.
int64_t last_index_of(std::span<const ChatMessage> messages, std::string_view role) {
  int64_t last = -1;
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == role) last = static_cast<int64_t>(i);
  return last;
}

// One GLM tool call: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>,
// with `nl` before the call, after the name and after each key and value (GLM-4.5/4.6: "\n";
// GLM-4.7 and GLM-5: ""). String values are written as they are, others as JSON.
void append_glm_tool_call(std::string& out, const ToolCall& tc, size_t i, std::string_view nl) {
  if (!tc.arguments.is_null() && !tc.arguments.is_object())
    fail("chat: message {}: the arguments of tool call \"{}\" must be a JSON object", i, tc.name);
  out += nl;
  out += "<tool_call>";
  out += tc.name;
  out += nl;
  if (tc.arguments.is_object()) {
    for (auto it = tc.arguments.begin(); it != tc.arguments.end(); ++it) {
      out += "<arg_key>";
      out += it.key();
      out += "</arg_key>";
      out += nl;
      out += "<arg_value>";
      out += it.value().is_string() ? it.value().get_ref<const std::string&>() : jinja_tojson(it.value());
      out += "</arg_value>";
      out += nl;
    }
  }
  out += "</tool_call>";
}

}  // namespace

std::string_view py_strip(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    size_t len = 1;
    const int32_t cp = utf8_at(s, b, len);
    if (cp < 0 || !py_space(cp)) break;
    b += len;
  }
  size_t e = s.size();
  while (e > b) {
    // Step back to the start of the last code point (at most 4 bytes).
    size_t start = e - 1;
    while (start > b && e - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    size_t len = 1;
    const int32_t cp = utf8_at(s, start, len);
    if (cp < 0 || start + len != e || !py_space(cp)) break;
    e = start;
  }
  return s.substr(b, e - b);
}

// Iterative, so a document nested deeper than the stack allows (tool-call
// arguments are client data) renders instead of crashing.
std::string jinja_tojson(const OrderedJson& root) {
  constexpr auto kReplace = OrderedJson::error_handler_t::replace;
  struct Frame {
    const OrderedJson* v;
    OrderedJson::const_iterator it;
  };
  std::string out;
  std::vector<Frame> stack;
  auto value = [&](const OrderedJson& v) {
    if (v.is_object() || v.is_array()) {
      out += v.is_object() ? '{' : '[';
      stack.push_back({&v, v.cbegin()});
    } else {
      out += v.dump(-1, ' ', false, kReplace);
    }
  };
  value(root);
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.it == f.v->cend()) {
      out += f.v->is_object() ? '}' : ']';
      stack.pop_back();
      continue;
    }
    if (f.it != f.v->cbegin()) out += ", ";
    const auto it = f.it++;
    if (f.v->is_object()) {
      out += OrderedJson(it.key()).dump(-1, ' ', false, kReplace);
      out += ": ";
    }
    value(*it);  // may grow the stack: `f` is not used after this
  }
  return out;
}

std::string render_glm_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                            const ChatRenderOptions& opts) {
  std::string out = glm_prefix(tools, kToolsHeader, kToolsFooter);
  const int64_t last_user = last_index_of(messages, "user");

  std::string reasoning, content;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      out += "<|user|>";
      out += m.content;
    } else if (m.role == "system") {
      out += "<|system|>";
      out += m.content;
    } else if (m.role == "assistant") {
      out += "<|assistant|>";
      split_assistant(m, reasoning, content);
      if ((!opts.clear_thinking || static_cast<int64_t>(i) > last_user) && !reasoning.empty()) {
        out += "<think>";
        out += py_strip(reasoning);
        out += "</think>";
      } else {
        out += "</think>";
      }
      out += py_strip(content);
      for (const ToolCall& tc : m.tool_calls) append_glm_tool_call(out, tc, i, "");
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|observation|>";
      out += "<tool_response>";
      out += m.content;
      out += "</tool_response>";
    } else {
      fail("chat: message {}: unknown role \"{}\" (expected system, user, assistant or tool)", i, m.role);
    }
  }
  if (opts.add_generation_prompt) out += opts.enable_thinking ? "<|assistant|><think>" : "<|assistant|></think>";
  return out;
}

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

std::string_view strip_newlines(std::string_view s) { return rstrip_newlines(lstrip_newlines(s)); }

void check_tools(const OrderedJson& tools) {
  if (!tools.is_null() && !tools.is_array()) fail("chat: tools must be an array of tool definitions");
}

const char kGlm45ToolsHeader[] =
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n";
const char kGlm45ToolsFooter[] =
    "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
    "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>";

const char kQwen3ToolsHeader[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const char kQwen3ToolsFooter[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

}  // namespace

std::string render_glm45_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                              const ChatRenderOptions& opts) {
  std::string out = glm_prefix(tools, kGlm45ToolsHeader, kGlm45ToolsFooter);
  const int64_t last_user = last_index_of(messages, "user");

  std::string reasoning, content;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      out += "<|user|>\n";
      out += m.content;
      if (!opts.enable_thinking && !ends_with(m.content, "/nothink")) out += "/nothink";
    } else if (m.role == "system") {
      out += "<|system|>\n";
      out += m.content;
    } else if (m.role == "assistant") {
      out += "<|assistant|>";
      split_assistant(m, reasoning, content);
      if (static_cast<int64_t>(i) > last_user && !reasoning.empty()) {
        out += "\n<think>";
        out += py_strip(reasoning);
        out += "</think>";
      } else {
        out += "\n<think></think>";
      }
      const std::string_view body = py_strip(content);
      if (!body.empty()) {
        out += '\n';
        out += body;
      }
      for (const ToolCall& tc : m.tool_calls) append_glm_tool_call(out, tc, i, "\n");
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|observation|>";
      out += "\n<tool_response>\n";
      out += m.content;
      out += "\n</tool_response>";
    } else {
      fail("chat: message {}: unknown role \"{}\" (expected system, user, assistant or tool)", i, m.role);
    }
  }
  if (opts.add_generation_prompt) out += opts.enable_thinking ? "<|assistant|>" : "<|assistant|>\n<think></think>";
  return out;
}

std::string render_qwen3_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                              const ChatRenderOptions& opts) {
  std::string out;
  check_tools(tools);
  const bool first_system = !messages.empty() && messages[0].role == "system";
  if (tools.is_array() && !tools.empty()) {
    out += "<|im_start|>system\n";
    if (first_system) out += messages[0].content + "\n\n";
    out += kQwen3ToolsHeader;
    for (const auto& t : tools) out += "\n" + jinja_tojson(t);
    out += kQwen3ToolsFooter;
  } else if (first_system) {
    out += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
  }
  // The last user message that is not a tool result wrapped as user text
  // (the template's multi_step_tool scan); the last index when none.
  int64_t last_query = static_cast<int64_t>(messages.size()) - 1;
  for (size_t k = messages.size(); k-- > 0;) {
    const ChatMessage& m = messages[k];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = static_cast<int64_t>(k);
      break;
    }
  }

  std::string reasoning, content;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out += "<|im_start|>" + m.role + "\n";
      out += m.content;
      out += "<|im_end|>\n";
    } else if (m.role == "system") {
      // the first system message went into the system block above
    } else if (m.role == "assistant") {
      split_assistant(m, reasoning, content);
      const bool last = i + 1 == messages.size();
      out += "<|im_start|>assistant\n";
      if (static_cast<int64_t>(i) > last_query && (last || !reasoning.empty())) {
        out += "<think>\n";
        out += strip_newlines(reasoning);
        out += "\n</think>\n\n";
        out += lstrip_newlines(content);
      } else {
        out += content;
      }
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const ToolCall& tc = m.tool_calls[k];
        if (k > 0 || !content.empty()) out += '\n';
        out += "<tool_call>\n{\"name\": \"";
        out += tc.name;
        out += "\", \"arguments\": ";
        out += tc.arguments.is_string() ? tc.arguments.get_ref<const std::string&>() : jinja_tojson(tc.arguments);
        out += "}\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out += m.content;
      out += "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    } else {
      fail("chat: message {}: unknown role \"{}\" (expected system, user, assistant or tool)", i, m.role);
    }
  }
  if (opts.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!opts.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

namespace {

// DeepSeek's special tokens (U+FF5C FULLWIDTH VERTICAL LINE, U+2581 LOWER ONE EIGHTH BLOCK).
constexpr std::string_view kDsBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kDsEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kDsUser = "<｜User｜>";
constexpr std::string_view kDsAssistant = "<｜Assistant｜>";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kDsOutputsBegin = "<｜tool▁outputs▁begin｜>";
constexpr std::string_view kDsOutputsEnd = "<｜tool▁outputs▁end｜>";
constexpr std::string_view kDsOutputBegin = "<｜tool▁output▁begin｜>";
constexpr std::string_view kDsOutputEnd = "<｜tool▁output▁end｜>";

// ARGS as the templates concatenate them: a JSON string as it is, else tojson.
void append_deepseek_args(std::string& out, const ToolCall& tc) {
  out += tc.arguments.is_string() ? tc.arguments.get_ref<const std::string&>() : jinja_tojson(tc.arguments);
}

// <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
void append_deepseek3_call(std::string& out, const ToolCall& tc) {
  out += kDsCallBegin;
  out += "function";
  out += kDsSep;
  out += tc.name;
  out += "\n```json\n";
  append_deepseek_args(out, tc);
  out += "\n```";
  out += kDsCallEnd;
}

}  // namespace

namespace {

// The DeepSeek-V3 template and R1's revision of it. `r1`: an answer keeps
// the text after its last </think> and the generation prompt opens <think>.
std::string render_deepseek_v3_r1(std::span<const ChatMessage> messages, const OrderedJson& tools,
                                  const ChatRenderOptions& opts, bool r1, bool join_systems) {
  check_tools(tools);
  std::string out(kDsBos);
  bool first_system = true;
  std::string_view last_system;
  for (const ChatMessage& m : messages) {
    if (m.role != "system") continue;
    last_system = m.content;
    if (!join_systems) continue;
    if (!first_system) out += "\n\n";
    out += m.content;
    first_system = false;
  }
  if (!join_systems) out += last_system;
  // The template's namespace flags. `calls_opened` is never reset: every
  // later assistant message's calls continue the first one's block.
  bool calls_opened = false, in_tool = false, first_output = true;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      in_tool = false;
      out += kDsUser;
      out += m.content;
    } else if (m.role == "assistant" && !m.tool_calls.empty() && m.content.empty()) {
      in_tool = false;
      for (const ToolCall& tc : m.tool_calls) {
        if (!calls_opened) {
          out += kDsAssistant;
          out += kDsCallsBegin;
          append_deepseek3_call(out, tc);
          calls_opened = true;
        } else {
          out += '\n';
          append_deepseek3_call(out, tc);
          out += kDsCallsEnd;
          out += kDsEos;
        }
      }
    } else if (m.role == "assistant") {
      std::string_view content = m.content;
      if (in_tool) {
        out += kDsOutputsEnd;
      } else {
        out += kDsAssistant;
        // R1: content.split('</think>')[-1]
        if (const size_t k = content.rfind("</think>"); r1 && k != std::string_view::npos) content.remove_prefix(k + 8);
      }
      out += content;
      out += kDsEos;
      in_tool = false;
    } else if (m.role == "tool") {
      in_tool = true;
      if (first_output) {
        out += kDsOutputsBegin;
        first_output = false;
      } else {
        out += '\n';
      }
      out += kDsOutputBegin;
      out += m.content;
      out += kDsOutputEnd;
    } else if (m.role != "system") {
      fail("chat: message {}: unknown role \"{}\" (expected system, user, assistant or tool)", i, m.role);
    }
  }
  if (in_tool) out += kDsOutputsEnd;
  if (opts.add_generation_prompt && !in_tool) {
    out += kDsAssistant;
    if (r1) out += "<think>\n";
  }
  return out;
}

}  // namespace

std::string render_deepseek3_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                                  const ChatRenderOptions& opts) {
  return render_deepseek_v3_r1(messages, tools, opts, /*r1=*/false, /*join_systems=*/true);
}

std::string render_deepseek_r1_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                                    const ChatRenderOptions& opts, bool join_systems) {
  return render_deepseek_v3_r1(messages, tools, opts, /*r1=*/true, join_systems);
}

std::string render_deepseek31_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                                   const ChatRenderOptions& opts) {
  check_tools(tools);
  std::string out(kDsBos);
  // The template's flags: is_only_sys is set when there is a system message
  // and cleared after the first other message; is_prefix never becomes true
  // (strata has no prefix messages), so the generation prompt is always written.
  bool first_system = true, only_sys = false;
  for (const ChatMessage& m : messages) {
    if (m.role != "system") continue;
    if (!first_system) out += "\n\n";
    out += m.content;
    first_system = false;
    only_sys = true;
  }
  const std::string_view open_answer = opts.enable_thinking ? "<think>" : "</think>";
  bool last_user = false, in_tool = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      in_tool = false;
      last_user = true;
      out += kDsUser;
      out += m.content;
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      if (last_user || only_sys) {
        out += kDsAssistant;
        out += "</think>";
      }
      last_user = false;
      in_tool = false;
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k == 0) {
          out += m.content;
          out += kDsCallsBegin;
        }
        out += kDsCallBegin;
        out += m.tool_calls[k].name;
        out += kDsSep;
        append_deepseek_args(out, m.tool_calls[k]);
        out += kDsCallEnd;
      }
      out += kDsCallsEnd;
      out += kDsEos;
    } else if (m.role == "assistant") {
      if (last_user) {
        out += kDsAssistant;
        out += "</think>";  // a prefix message (not supported) would take <think> when thinking
      }
      last_user = false;
      std::string_view content = m.content;
      if (in_tool) {
        in_tool = false;
      } else if (const size_t k = content.find("</think>"); k != std::string_view::npos) {
        content.remove_prefix(k + 8);  // content.split('</think>', 1)[1]
      }
      out += content;
      out += kDsEos;
    } else if (m.role == "tool") {
      last_user = false;
      in_tool = true;
      out += kDsOutputBegin;
      out += m.content;
      out += kDsOutputEnd;
    } else if (m.role != "system") {
      fail("chat: message {}: unknown role \"{}\" (expected system, user, assistant or tool)", i, m.role);
    }
    if (m.role != "system") only_sys = false;
  }
  if (opts.add_generation_prompt && !in_tool) {
    out += kDsAssistant;
    out += open_answer;
  }
  return out;
}

const char* chat_dialect_name(ChatDialect d) {
  switch (d) {
    case ChatDialect::Glm:
      return "glm";
    case ChatDialect::Glm45:
      return "glm45";
    case ChatDialect::Qwen3:
      return "qwen3";
    case ChatDialect::DeepSeek3:
      return "deepseek3";
    case ChatDialect::DeepSeekR1:
    case ChatDialect::DeepSeekR1Sys1:
      return "deepseek-r1";
    case ChatDialect::DeepSeek31:
      return "deepseek31";
    case ChatDialect::Raw:
      return "raw";
  }
  return "?";
}

std::vector<std::string> ChatTemplate::special_tokens() const {
  switch (dialect) {
    case ChatDialect::Glm:
    case ChatDialect::Glm45:
      return {"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>"};
    case ChatDialect::Qwen3:
      return {"<|im_start|>", "<|im_end|>"};
    case ChatDialect::DeepSeek3:
    case ChatDialect::DeepSeekR1:
    case ChatDialect::DeepSeekR1Sys1:
    case ChatDialect::DeepSeek31:
      return {std::string(kDsBos), std::string(kDsUser), std::string(kDsAssistant), std::string(kDsEos)};
    case ChatDialect::Raw:
      break;
  }
  return {};
}

std::vector<std::string> ChatTemplate::stop_tokens() const {
  switch (dialect) {
    case ChatDialect::Glm:
    case ChatDialect::Glm45:
      return {"<|endoftext|>", "<|user|>", "<|observation|>"};
    case ChatDialect::Qwen3:
      return {"<|im_end|>", "<|endoftext|>"};
    case ChatDialect::DeepSeek3:
    case ChatDialect::DeepSeekR1:
    case ChatDialect::DeepSeekR1Sys1:
    case ChatDialect::DeepSeek31:
      return {std::string(kDsEos)};
    case ChatDialect::Raw:
      break;
  }
  return {};
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, const OrderedJson& tools,
                                 const ChatRenderOptions& opts) const {
  if (dialect == ChatDialect::Glm) return render_glm_chat(messages, tools, opts);
  if (dialect == ChatDialect::Glm45) return render_glm45_chat(messages, tools, opts);
  if (dialect == ChatDialect::Qwen3) return render_qwen3_chat(messages, tools, opts);
  if (dialect == ChatDialect::DeepSeek3) return render_deepseek3_chat(messages, tools, opts);
  if (dialect == ChatDialect::DeepSeekR1) return render_deepseek_r1_chat(messages, tools, opts, true);
  if (dialect == ChatDialect::DeepSeekR1Sys1) return render_deepseek_r1_chat(messages, tools, opts, false);
  if (dialect == ChatDialect::DeepSeek31) return render_deepseek31_chat(messages, tools, opts);
  std::string out;
  for (const ChatMessage& m : messages) out += m.content;
  return out;
}

std::optional<ChatDialect> classify_chat_template(std::string_view jinja, std::string* why) {
  auto say = [&](const char* s) {
    if (why) *why = s;
  };
  if (contains(jinja, "[gMASK]") && contains(jinja, "<|assistant|>")) {
    if (contains(jinja, "Reasoning Effort")) {
      say("a GLM-5.2/5.3 template (\"Reasoning Effort\" system line, <think></think> history), which strata does "
          "not render yet");
      return std::nullopt;
    }
    if (contains(jinja, "/nothink")) {
      if (contains(jinja, "<arg_key>") && contains(jinja, "<tool_response>") && contains(jinja, "<|observation|>") &&
          contains(jinja, "<think></think>") && contains(jinja, "last_user_index") &&
          !contains(jinja, "<|begin_of_image|>")) {
        say("the GLM-4.5/4.6 template");
        return ChatDialect::Glm45;
      }
      say("a GLM-4.5-style template (/nothink) without the GLM-4.5/4.6 markers (<arg_key>, <tool_response>, "
          "<|observation|>, <think></think>, last_user_index) or with images, which strata does not render");
      return std::nullopt;
    }
    if (contains(jinja, "<arg_key>") && contains(jinja, "<tool_response>") && contains(jinja, "<|observation|>") &&
        contains(jinja, "</think>")) {
      say("the GLM-4.7/GLM-5 template");
      return ChatDialect::Glm;
    }
    say("a GLM template without the GLM-4.7/GLM-5 markers (<arg_key>, <tool_response>, <|observation|>, </think>)");
    return std::nullopt;
  }
  if (contains(jinja, "<|im_start|>")) {
    if (contains(jinja, "<function=")) {
      say("a Qwen3-Coder template (XML <function=...> tool calls), which strata does not render");
      return std::nullopt;
    }
    if (contains(jinja, "<|vision_start|>")) {
      say("a Qwen vision template, which strata does not render");
      return std::nullopt;
    }
    const bool qwen3_markers = contains(jinja, "multi_step_tool") && contains(jinja, "last_query_index") &&
                               contains(jinja, "<tool_response>") && contains(jinja, "\"arguments\": ");
    if (qwen3_markers && contains(jinja, "enable_thinking is defined and enable_thinking is false") &&
        contains(jinja, "<think>\\n\\n</think>\\n\\n") && contains(jinja, "reasoning_content")) {
      say("the Qwen3 template");
      return ChatDialect::Qwen3;
    }
    if (qwen3_markers) {
      say("a Qwen3 template without the enable_thinking switch (Qwen3-2507 Instruct or Thinking), which strata does "
          "not render yet");
      return std::nullopt;
    }
    say("a ChatML template (<|im_start|>) without the Qwen3 markers (multi_step_tool, last_query_index, "
        "<tool_response>, enable_thinking), which strata does not render");
    return std::nullopt;
  }
  if (contains(jinja, kDsUser) && contains(jinja, kDsAssistant)) {
    // The DeepSeek-V3 / V3-0324 template: calls in a ```json fence after the
    // type, results in one <｜tool▁outputs▁begin｜> block, no reasoning
    // handling. R1 (strips </think>, opens <think>) and V3.1 (thinking switch,
    // NAME<｜tool▁sep｜>ARGS calls) render differently.
    // R1's first revision: V3's markers (is_first_sp optional: the R1-Distill
    // checkpoints keep the last system message only), earlier answers cut
    // after their last </think>, and <think>\n after the generation prompt.
    const bool v3_body = contains(jinja, kDsCallsBegin) && contains(jinja, kDsOutputsBegin) &&
                         contains(jinja, "is_output_first") && contains(jinja, "'```json'") &&
                         contains(jinja, "message['content'] is none");
    const bool v3_markers = v3_body && contains(jinja, "is_first_sp");
    const bool no_switch = !contains(jinja, "thinking") && !contains(jinja, "is_last_user") &&
                           !contains(jinja, "tojson");
    if (v3_markers && !contains(jinja, "</think>") && !contains(jinja, "<think>") && no_switch) {
      say("the DeepSeek-V3 template");
      return ChatDialect::DeepSeek3;
    }
    if (v3_body && no_switch && contains(jinja, "content.split('</think>')[-1]") &&
        contains(jinja, "{{'<｜Assistant｜><think>\\n'}}") && count(jinja, "<think>") == 1 &&
        count(jinja, "</think>") == 2) {
      say("the DeepSeek-R1 template");
      return contains(jinja, "is_first_sp") ? ChatDialect::DeepSeekR1 : ChatDialect::DeepSeekR1Sys1;
    }
    // V3.1: the `thinking` switch, "<｜Assistant｜></think>" before an answer,
    // NAME<｜tool▁sep｜>ARGS calls, results without an outputs block.
    if (contains(jinja, "is_only_sys") && contains(jinja, "is_prefix") && contains(jinja, "is_last_user") &&
        contains(jinja, "{% if not thinking is defined %}{% set thinking = false %}{% endif %}") &&
        contains(jinja, "{{'<｜Assistant｜></think>'}}") && contains(jinja, "content.split('</think>', 1)[1]") &&
        contains(jinja, "'<｜tool▁sep｜>' + tool['function']['arguments']") && !contains(jinja, kDsOutputsBegin) &&
        !contains(jinja, "'```json'") && !contains(jinja, "tojson") && !contains(jinja, "<think></think>") &&
        !contains(jinja, "enable_thinking")) {
      say("the DeepSeek-V3.1 template");
      return ChatDialect::DeepSeek31;
    }
    say("a DeepSeek template other than DeepSeek-V3's, R1's or V3.1's (e.g. R1-0528 or the revised V3-0324 with "
        "is_last_user, V3.2, or a modified copy), which strata does not render yet");
    return std::nullopt;
  }
  say("neither a GLM template ([gMASK] and <|assistant|>), a Qwen3 one (<|im_start|>) nor a DeepSeek one "
      "(<｜User｜> and <｜Assistant｜>)");
  return std::nullopt;
}

ChatTemplate load_chat_template(const std::string& model_dir, std::string_view force) {
  ChatTemplate t;
  for (ChatDialect d :
       {ChatDialect::Glm, ChatDialect::Glm45, ChatDialect::Qwen3, ChatDialect::DeepSeek3, ChatDialect::DeepSeekR1,
        ChatDialect::DeepSeek31, ChatDialect::Raw}) {
    if (force == chat_dialect_name(d)) {
      t.dialect = d;
      t.source = std::string("--chat-template ") + chat_dialect_name(d);
      return t;
    }
  }
  if (!force.empty() && force != "auto")
    fail("--chat-template {}: expected auto, glm, glm45, qwen3, deepseek3, deepseek-r1, deepseek31 or raw", force);

  auto exists = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
  std::string text, source;
  const std::string jinja_path = model_dir + "/chat_template.jinja";
  const std::string config_path = model_dir + "/tokenizer_config.json";
  if (exists(jinja_path)) {
    text = read_small_file(jinja_path, kMaxTemplateFile);
    source = jinja_path;
  } else if (exists(config_path)) {
    const Json cfg = parse_json(read_small_file(config_path, kMaxTemplateFile), config_path);
    if (cfg.is_object() && cfg.contains("chat_template")) {
      const Json& ct = cfg["chat_template"];
      source = config_path + " \"chat_template\"";
      if (ct.is_string()) {
        text = ct.get<std::string>();
      } else if (ct.is_array()) {
        // [{"name": ..., "template": ...}]: the "default" one, as transformers picks.
        for (const Json& e : ct) {
          if (!e.is_object() || !e.contains("template") || !e["template"].is_string())
            fail("{}: expected a list of {{\"name\", \"template\"}} objects", source);
          if (text.empty() || (e.contains("name") && e["name"] == "default")) text = e["template"].get<std::string>();
        }
      } else if (!ct.is_null()) {
        fail("{}: expected a string or a list of named templates", source);
      }
    }
  }
  if (text.empty())
    fail(
        "{}: no chat template (neither chat_template.jinja nor a \"chat_template\" in tokenizer_config.json); "
        "pass --chat-template glm (GLM-4.7/GLM-5), glm45 (GLM-4.5/4.6), qwen3, deepseek3 (DeepSeek-V3), deepseek-r1 "
        "or deepseek31 (DeepSeek-V3.1) to use "
        "that dialect anyway, or "
        "--chat-template raw (run: --raw) for plain text",
        model_dir);
  std::string why;
  const std::optional<ChatDialect> d = classify_chat_template(text, &why);
  if (!d)
    fail(
        "{}: the chat template is {}; strata renders templates natively and refuses one it does not know rather "
        "than mis-render it. Pass --chat-template glm to force the GLM-4.7/GLM-5 dialect (glm45: GLM-4.5/4.6, qwen3: "
        "Qwen3, deepseek3: DeepSeek-V3, deepseek-r1, deepseek31: DeepSeek-V3.1), or --chat-template raw (run: --raw) "
        "for plain text",
        source, why);
  t.dialect = *d;
  t.source = source;
  return t;
}

// ---------------------------------------------------------------------------
// Output parsing

namespace {

// Tool-call arguments come from the model: parse them with a nesting bound so
// "[[[[..." cannot exhaust the stack. nullopt if not JSON.
std::optional<OrderedJson> parse_bounded(std::string_view s) {
  int depth = 0, max_depth = 0;
  bool in_str = false, esc = false;
  for (char c : s) {
    if (in_str) {
      if (esc) {
        esc = false;
      } else if (c == '\\') {
        esc = true;
      } else if (c == '"') {
        in_str = false;
      }
    } else if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  if (max_depth > kMaxJsonDepth) return std::nullopt;
  OrderedJson j = OrderedJson::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// True if `tools` declares parameter `arg` of function `fn` as a string.
bool declared_string(const OrderedJson& tools, std::string_view fn, std::string_view arg) {
  if (!tools.is_array()) return false;
  for (const auto& t : tools) {
    if (!t.is_object()) continue;
    const OrderedJson& f = t.contains("function") && t["function"].is_object() ? t["function"] : t;
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get_ref<const std::string&>() != fn) continue;
    if (!f.contains("parameters") || !f["parameters"].is_object()) return false;
    const OrderedJson& p = f["parameters"];
    if (!p.contains("properties") || !p["properties"].is_object()) return false;
    const auto it = p["properties"].find(std::string(arg));
    if (it == p["properties"].end() || !it->is_object() || !it->contains("type")) return false;
    const OrderedJson& ty = (*it)["type"];
    if (ty.is_string()) return ty == "string";
    if (ty.is_array())
      for (const auto& x : ty)
        if (x == "string") return true;
    return false;
  }
  return false;
}

// One "name<arg_key>k</arg_key><arg_value>v</arg_value>..." body; false if malformed.
bool parse_tool_body(std::string_view body, const OrderedJson& tools, ToolCall& tc) {
  const size_t first_key = body.find("<arg_key>");
  tc.name = std::string(py_strip(body.substr(0, first_key)));
  if (tc.name.empty()) return false;
  tc.arguments = OrderedJson::object();
  size_t p = first_key;
  while (p != std::string_view::npos) {
    const size_t k0 = p + 9;
    const size_t k1 = body.find("</arg_key>", k0);
    if (k1 == std::string_view::npos) return false;
    const size_t v_open = body.find("<arg_value>", k1 + 10);
    if (v_open == std::string_view::npos || !py_strip(body.substr(k1 + 10, v_open - k1 - 10)).empty()) return false;
    const size_t v0 = v_open + 11;
    const size_t v1 = body.find("</arg_value>", v0);
    if (v1 == std::string_view::npos) return false;
    const std::string key(py_strip(body.substr(k0, k1 - k0)));
    const std::string_view val = py_strip(body.substr(v0, v1 - v0));
    std::optional<OrderedJson> parsed;
    if (!declared_string(tools, tc.name, key)) parsed = parse_bounded(val);
    tc.arguments[key] = parsed ? std::move(*parsed) : OrderedJson(std::string(val));
    p = body.find("<arg_key>", v1 + 12);
    if (!py_strip(body.substr(v1 + 12, (p == std::string_view::npos ? body.size() : p) - v1 - 12)).empty())
      return false;
  }
  return true;
}

}  // namespace

namespace {

// Splits off the reasoning (see parse_glm_output); returns false when the
// output ended inside it (`out` then complete). `rest`: the text after it.
bool split_reasoning(std::string_view text, bool reasoning_open, ParsedOutput& out, std::string_view& rest) {
  rest = text;
  if (!reasoning_open) {
    const std::string_view t = py_strip(text);
    if (t.substr(0, 7) == "<think>") {
      rest = t.substr(7);
      reasoning_open = true;
    }
  }
  if (reasoning_open) {
    const size_t end = rest.find("</think>");
    if (end == std::string_view::npos) {
      out.reasoning = std::string(py_strip(rest));
      out.reasoning_complete = false;
      return false;
    }
    out.reasoning = std::string(py_strip(rest.substr(0, end)));
    rest = rest.substr(end + 8);
  }
  return true;
}

// One Qwen3 call body: {"name": NAME, "arguments": {...}}; false if not one.
bool parse_qwen3_body(std::string_view body, ToolCall& tc) {
  std::optional<OrderedJson> j = parse_bounded(py_strip(body));
  if (!j || !j->is_object()) return false;
  const auto name = j->find("name");
  if (name == j->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return false;
  tc.name = name->get<std::string>();
  tc.arguments = OrderedJson::object();
  const auto args = j->find("arguments");
  if (args == j->end() || args->is_null()) return true;
  if (args->is_object()) {
    tc.arguments = std::move(*args);
    return true;
  }
  if (args->is_string()) {  // arguments as a JSON string, as OpenAI sends them
    std::optional<OrderedJson> inner = parse_bounded(args->get_ref<const std::string&>());
    if (inner && inner->is_object()) {
      tc.arguments = std::move(*inner);
      return true;
    }
  }
  return false;
}

}  // namespace

ParsedOutput parse_glm_output(std::string_view text, bool reasoning_open, const OrderedJson& tools) {
  ParsedOutput out;
  std::string_view rest;
  if (!split_reasoning(text, reasoning_open, out, rest)) return out;
  std::string content;
  for (;;) {
    const size_t open = rest.find("<tool_call>");
    if (open == std::string_view::npos) break;
    const size_t close = rest.find("</tool_call>", open + 11);
    if (close == std::string_view::npos) break;  // unterminated: stays content
    ToolCall tc;
    if (!parse_tool_body(rest.substr(open + 11, close - open - 11), tools, tc)) {
      content += rest.substr(0, close + 12);  // malformed: shown as text
    } else {
      content += rest.substr(0, open);
      out.tool_calls.push_back(std::move(tc));
    }
    rest = rest.substr(close + 12);
  }
  content += rest;
  out.content = std::string(py_strip(content));
  return out;
}

ParsedOutput parse_qwen3_output(std::string_view text, bool reasoning_open) {
  ParsedOutput out;
  std::string_view rest;
  if (!split_reasoning(text, reasoning_open, out, rest)) return out;
  std::string content;
  for (;;) {
    const size_t open = rest.find("<tool_call>");
    if (open == std::string_view::npos) break;
    const size_t close = rest.find("</tool_call>", open + 11);
    if (close == std::string_view::npos) break;  // unterminated: stays content
    ToolCall tc;
    if (!parse_qwen3_body(rest.substr(open + 11, close - open - 11), tc)) {
      content += rest.substr(0, close + 12);  // malformed: shown as text
    } else {
      content += rest.substr(0, open);
      out.tool_calls.push_back(std::move(tc));
    }
    rest = rest.substr(close + 12);
  }
  content += rest;
  out.content = std::string(py_strip(content));
  return out;
}

namespace {

// One DeepSeek call body: TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n``` (V3) or
// NAME<｜tool▁sep｜>ARGS (V3.1); false if not one.
bool parse_deepseek3_body(std::string_view body, ToolCall& tc) {
  const size_t sep = body.find(kDsSep);
  if (sep == std::string_view::npos) return false;
  std::string_view name = body.substr(0, sep), args = body.substr(sep + kDsSep.size());
  // V3's fence follows the name; V3.1's JSON starts at once (and may hold "```json" in a string).
  const std::string_view lead = py_strip(args);
  const size_t fence = lead.empty() || lead[0] == '{' || lead[0] == '"' ? std::string_view::npos : args.find("```json");
  if (fence != std::string_view::npos) {
    const size_t close = args.rfind("```");
    if (close <= fence) return false;
    name = args.substr(0, fence);
    args = args.substr(fence + 7, close - fence - 7);
  }
  tc.name = std::string(py_strip(name));
  if (tc.name.empty()) return false;
  std::optional<OrderedJson> j = parse_bounded(py_strip(args));
  if (j && j->is_string()) j = parse_bounded(j->get_ref<const std::string&>());  // arguments as a JSON string
  if (!j || !j->is_object()) return false;
  tc.arguments = std::move(*j);
  return true;
}

}  // namespace

ParsedOutput parse_deepseek3_output(std::string_view text, bool reasoning_open) {
  ParsedOutput out;
  std::string_view rest;
  if (!split_reasoning(text, reasoning_open, out, rest)) return out;
  const size_t open = rest.find(kDsCallsBegin);
  if (open == std::string_view::npos) {
    out.content = std::string(py_strip(rest));
    return out;
  }
  std::string content(rest.substr(0, open));
  std::string_view block = rest.substr(open + kDsCallsBegin.size());
  std::string_view after;
  if (const size_t end = block.find(kDsCallsEnd); end != std::string_view::npos) {
    after = block.substr(end + kDsCallsEnd.size());
    block = block.substr(0, end);
  }
  std::string left;  // what the block holds besides well-formed calls
  for (;;) {
    const size_t b = block.find(kDsCallBegin);
    if (b == std::string_view::npos) break;
    const size_t e = block.find(kDsCallEnd, b + kDsCallBegin.size());
    if (e == std::string_view::npos) break;  // unterminated: stays content
    ToolCall tc;
    const size_t body = b + kDsCallBegin.size();
    if (parse_deepseek3_body(block.substr(body, e - body), tc)) {
      left += block.substr(0, b);
      out.tool_calls.push_back(std::move(tc));
    } else {
      left += block.substr(0, e + kDsCallEnd.size());  // malformed: shown as text
    }
    block = block.substr(e + kDsCallEnd.size());
  }
  left += block;
  if (out.tool_calls.empty()) {
    out.content = std::string(py_strip(rest));  // no call parsed: the block is text
    return out;
  }
  content += py_strip(left);
  content += after;
  out.content = std::string(py_strip(content));
  return out;
}

std::string_view tool_call_open_tag(ChatDialect dialect) {
  return is_deepseek(dialect) ? kDsCallsBegin : std::string_view("<tool_call>");
}

ParsedOutput parse_chat_output(ChatDialect dialect, std::string_view text, bool reasoning_open,
                               const OrderedJson& tools) {
  switch (dialect) {
    case ChatDialect::Glm:
    case ChatDialect::Glm45:
      return parse_glm_output(text, reasoning_open, tools);
    case ChatDialect::Qwen3:
      return parse_qwen3_output(text, reasoning_open);
    case ChatDialect::DeepSeek3:
    case ChatDialect::DeepSeekR1:
    case ChatDialect::DeepSeekR1Sys1:
    case ChatDialect::DeepSeek31:
      return parse_deepseek3_output(text, reasoning_open);
    case ChatDialect::Raw:
      break;
  }
  ParsedOutput out;
  out.content = std::string(text);
  return out;
}

}  // namespace strata
