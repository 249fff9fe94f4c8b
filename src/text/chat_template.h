// Chat messages -> prompt text, and the model's output text -> reasoning,
// content and tool calls, for the chat dialects strata renders (docs/text.md):
// GLM-4.7/GLM-5, GLM-4.5/4.6, Qwen3 and DeepSeek-V3 / R1 / V3.1.
//
// strata renders templates natively instead of running Jinja: a model
// directory's template (chat_template.jinja, or tokenizer_config.json
// "chat_template") is recognised by distinctive markers and the matching
// renderer is chosen. A template strata does not know is refused with a
// message, never rendered by a guess.
//
// The GLM renderer reproduces the GLM-4.7 template (also used by GLM-5 and
// GLM-5.1; glm5-architecture.md §9):
//
//   [gMASK]<sop>[<|system|>\n# Tools ... </tool_call>]        tools block, only with tools
//   <|system|>{content}                                           per system message
//   <|user|>{content}
//   <|assistant|><think>{reasoning}</think>{content}<tool_call>...  reasoning only after the
//   <|assistant|></think>{content}                                  last user message
//   <|observation|><tool_response>{result}</tool_response>...       consecutive tool messages
//                                                                   share one <|observation|>
//   <|assistant|><think>   or   <|assistant|></think>              generation prompt
//
// The GLM-4.5 renderer reproduces the GLM-4.5/4.6 template (GLM-4.5-Air too):
// newline-separated turns, "<|assistant|>\n<think>{reasoning}</think>" (empty
// <think></think> in history), tool calls with one <arg_key>/<arg_value> per
// line, "/nothink" appended to user turns when thinking is off, and a bare
// "<|assistant|>" generation prompt (the model opens <think> itself).
//
// The Qwen3 renderer reproduces the hybrid-thinking Qwen3 template (Qwen3-*B,
// Qwen3-30B-A3B, Qwen3-235B-A22B): ChatML (<|im_start|>role\n...<|im_end|>),
// tools listed in the system block, calls as <tool_call>\n{"name": ..,
// "arguments": {..}}\n</tool_call>, results as <tool_response> blocks inside a
// user turn, and "<think>\n\n</think>\n\n" after the generation prompt when
// enable_thinking is false.
//
// The DeepSeek-V3 renderer reproduces the DeepSeek-V3 / V3-0324 template:
// BOS, the system messages joined by blank lines, <｜User｜>{content},
// <｜Assistant｜>{content}<｜end▁of▁sentence｜>, tool calls as
// <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>,
// tool results in <｜tool▁outputs▁begin｜>...<｜tool▁outputs▁end｜>, and a bare
// <｜Assistant｜> generation prompt (no thinking switch, no tool list).
// tests/fixtures/templates/ holds the templates and tests/chat/jinja_crosscheck.py
// checks each renderer against Jinja2.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// Key order matters: Jinja's tojson keeps the caller's order, so tools and
// tool-call arguments are kept in insertion order.
using OrderedJson = nlohmann::ordered_json;

struct ToolCall {
  std::string id{};  // not rendered by GLM; carried for the OpenAI API
  std::string name{};
  OrderedJson arguments = OrderedJson::object();  // an object: key -> value
};

struct ChatMessage {
  std::string role{};  // "system", "user", "assistant" or "tool"
  std::string content{};
  // Assistant reasoning. Absent: taken from `content` when it holds
  // "...</think>" (what the template does with such content).
  std::optional<std::string> reasoning_content{};
  std::vector<ToolCall> tool_calls{};  // assistant
  std::string tool_call_id{};          // tool (not rendered by GLM)
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = true;
  // The template's clear_thinking: true drops the reasoning of assistant
  // turns before the last user message (the template default).
  bool clear_thinking = true;
};

// Renders `messages` in the GLM-4.7/GLM-5 dialect. `tools` is null or an
// array of tool definitions (each rendered as JSON, one per line). Throws
// strata::Error on an unknown role or a non-object tool-call argument list.
std::string render_glm_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                            const ChatRenderOptions& opts);
// The GLM-4.5/4.6 dialect (clear_thinking does not apply: history reasoning
// is always dropped).
std::string render_glm45_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                              const ChatRenderOptions& opts);
// The Qwen3 dialect (clear_thinking does not apply). A tool call's arguments
// given as a JSON string are printed as they are, as the template does.
std::string render_qwen3_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                              const ChatRenderOptions& opts);

// The DeepSeek-V3 dialect (thinking options do not apply; `tools` is not
// rendered: the template has no tool list). As the template does, an
// assistant message with tool calls renders them only when its content is
// empty (the template's `content is none`), and the calls of every later
// such message continue the first one's block ("\n<｜tool▁call▁begin｜>...
// <｜tool▁calls▁end｜><｜end▁of▁sentence｜>" each); arguments given as a JSON
// string are printed as they are, others as tojson.
std::string render_deepseek3_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                                  const ChatRenderOptions& opts);
// The DeepSeek-R1 dialect: DeepSeek-V3's rendering but for the reasoning --
// an earlier answer keeps only the text after its last </think>, and the
// generation prompt is "<｜Assistant｜><think>\n" (thinking options do not
// apply). `join_systems`: all system messages joined by blank lines (the
// template's is_first_sp, as DeepSeek-V3's); false: the last one only (the
// R1-Distill checkpoints' template).
std::string render_deepseek_r1_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                                    const ChatRenderOptions& opts, bool join_systems);
// The DeepSeek-V3.1 dialect (thinking and non-thinking modes): the
// template's `thinking` is opts.enable_thinking; "<｜Assistant｜></think>"
// opens an answer after a user turn (history is always rendered
// non-thinking: an answer keeps the text after its first </think>), calls are
// <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>...
// <｜tool▁calls▁end｜><｜end▁of▁sentence｜> after the message's text, results are
// <｜tool▁output▁begin｜>R<｜tool▁output▁end｜> each, and the generation
// prompt is "<｜Assistant｜><think>" (thinking) or "<｜Assistant｜></think>".
// `tools` is not rendered (the template has no tool list).
std::string render_deepseek31_chat(std::span<const ChatMessage> messages, const OrderedJson& tools,
                                   const ChatRenderOptions& opts);

// Python-compatible `json.dumps(v, ensure_ascii=False)`: ", " and ": "
// separators, non-ASCII kept, invalid UTF-8 replaced by U+FFFD. This is what
// the template's tojson filter prints.
std::string jinja_tojson(const OrderedJson& v);

// Python's str.strip(): removes leading and trailing Unicode whitespace.
std::string_view py_strip(std::string_view s);

enum class ChatDialect {
  Glm,    // GLM-4.7 / GLM-5 / GLM-5.1
  Glm45,  // GLM-4.5 / GLM-4.5-Air / GLM-4.6
  Qwen3,  // Qwen3 (hybrid thinking): Qwen3-30B-A3B, Qwen3-235B-A22B, ...
  DeepSeek3,  // DeepSeek-V3 / V3-0324
  DeepSeekR1,    // DeepSeek-R1 and the R1-Distill checkpoints (R1's first template revision)
  DeepSeekR1Sys1,  // the same, the R1-Distill template: the last system message only (no --chat-template name)
  DeepSeek31,    // DeepSeek-V3.1 (thinking switch, NAME<｜tool▁sep｜>ARGS calls)
  Raw,    // no template: messages' contents are concatenated (test models)
};

// The DeepSeek dialects (one output syntax: parse_deepseek3_output).
inline bool is_deepseek(ChatDialect d) {
  return d == ChatDialect::DeepSeek3 || d == ChatDialect::DeepSeekR1 || d == ChatDialect::DeepSeekR1Sys1 ||
         d == ChatDialect::DeepSeek31;
}

// The --chat-template name of a dialect: "glm", "glm45", "qwen3", "deepseek3", "deepseek-r1", "deepseek31" or
// "raw" (DeepSeekR1Sys1: "deepseek-r1").
const char* chat_dialect_name(ChatDialect d);

struct ChatTemplate {
  ChatDialect dialect = ChatDialect::Glm;
  std::string source;  // where the template came from (for messages)

  std::string render(std::span<const ChatMessage> messages, const OrderedJson& tools,
                     const ChatRenderOptions& opts) const;
  // True when the generation prompt ends inside a reasoning block (GLM's
  // "<|assistant|><think>"): the model's output starts with reasoning.
  bool opens_reasoning(const ChatRenderOptions& opts) const {
    if (!opts.add_generation_prompt) return false;
    if (dialect == ChatDialect::DeepSeekR1 || dialect == ChatDialect::DeepSeekR1Sys1) return true;
    return (dialect == ChatDialect::Glm || dialect == ChatDialect::DeepSeek31) && opts.enable_thinking;
  }
  // The special tokens the dialect's markup needs in the tokenizer.
  std::vector<std::string> special_tokens() const;
  // The special tokens that end an answer besides the model's EOS ids.
  std::vector<std::string> stop_tokens() const;
};

// Which renderer a template text needs. Returns nullopt for a template that
// is not one strata renders; `why` then says what was recognised.
std::optional<ChatDialect> classify_chat_template(std::string_view jinja, std::string* why = nullptr);

// Finds and classifies the chat template of a model directory (a Hugging
// Face checkpoint or a strata container: chat_template.jinja first, then
// tokenizer_config.json "chat_template", string or list of {name, template}).
// `force`: "" or "auto" (detect), or a dialect name (chat_dialect_name: no
// detection). Throws
// strata::Error naming the file when the template is missing or unknown and
// not forced.
ChatTemplate load_chat_template(const std::string& model_dir, std::string_view force = "auto");

// The model's output, split. Reasoning is the text of a <think>...</think>
// block (or, when the prompt opened one, everything up to </think>); tool
// calls are GLM's <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>
// ...</tool_call> blocks; content is the rest (stripped).
struct ParsedOutput {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool reasoning_complete = true;  // false: the output ended inside <think>
};

// `reasoning_open`: the prompt ended with <think> (ChatTemplate::opens_reasoning).
// GLM-4.5's calls ("<tool_call>name\n<arg_key>..." one per line) parse too.
// Argument values are JSON-decoded unless `tools` declares the parameter a
// string or the text is not JSON (then they stay strings), as vLLM's GLM
// tool parser does. Unterminated tool calls are kept as content.
ParsedOutput parse_glm_output(std::string_view text, bool reasoning_open, const OrderedJson& tools = nullptr);

// Qwen3's output: reasoning as for GLM; tool calls are <tool_call>{"name":
// NAME, "arguments": {...}}</tool_call> blocks (whitespace around the JSON
// ignored; arguments given as a JSON string holding an object are decoded);
// a block that is not such an object is kept as content.
ParsedOutput parse_qwen3_output(std::string_view text, bool reasoning_open);

// DeepSeek's output: reasoning as for GLM (R1-style <think> blocks); the
// calls are a <｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜> block of
// <｜tool▁call▁begin｜>TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
// (DeepSeek-V3) or <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>
// (V3.1's form) calls, ARGS a JSON object (or a JSON string holding one). The
// block may end with the output (the end-of-sentence token stops it); a call
// that is malformed or unterminated is kept as content.
ParsedOutput parse_deepseek3_output(std::string_view text, bool reasoning_open);

// The text that opens a tool-call block in `dialect`'s output (streaming
// holds back text from it on): "<tool_call>", or DeepSeek's "<｜tool▁calls▁begin｜>".
std::string_view tool_call_open_tag(ChatDialect dialect);

// The parser of `dialect` (Raw: all content).
ParsedOutput parse_chat_output(ChatDialect dialect, std::string_view text, bool reasoning_open,
                               const OrderedJson& tools = nullptr);

}  // namespace strata
