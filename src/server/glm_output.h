// A chat answer as OpenAI returns it, from the model's raw output text
// (docs/server.md "Tools", text/chat_template.h parse_chat_output): with a
// GLM or Qwen3 template the text is split into reasoning_content, content
// and tool_calls (each dialect's call syntax); with no template (and for
// constrained JSON output, which is the answer as generated) it is all
// content.
//
// Streamed, reasoning and content go out as they come, but a tag split
// across pieces ("</thi" + "nk>") is held back until it is whole, and text
// from a <tool_call> (DeepSeek: <｜tool▁calls▁begin｜>) on is held back entirely: tool calls are sent whole,
// parsed from the full output, in the last delta.
#pragma once
#include <string>
#include <string_view>

#include "core/json.h"
#include "server/openai_response.h"
#include "text/chat_template.h"

namespace strata::server {

// Splits streamed GLM output into reasoning and content.
class GlmStreamSplit {
 public:
  // `reasoning_open`: the prompt ended inside <think> (ChatTemplate::opens_reasoning);
  // `tool_open`: the dialect's tool-call opening (tool_call_open_tag).
  explicit GlmStreamSplit(bool reasoning_open, std::string_view tool_open = "<tool_call>")
      : reasoning_(reasoning_open), tool_open_(tool_open) {}
  // Appends to (reasoning, content) what `text` adds; `final`: no more text
  // comes, so nothing is held back.
  void push(const std::string& text, std::string& reasoning, std::string& content, bool final);

 private:
  bool reasoning_;
  bool in_tool_ = false;
  std::string tool_open_;
  std::string pending_;
};

// What a chat answer's output means.
struct ChatOutput {
  bool glm = false;             // split the template's markup; false: the text is all content
  bool reasoning_open = false;  // the prompt opened a reasoning block
  OrderedJson tools = nullptr;  // the request's tools (argument types)
  ChatDialect dialect = ChatDialect::Glm;  // whose tool-call syntax (parse_chat_output)
};

// OpenAI's tool_calls array; `indexed`: streamed deltas number their calls.
Json tool_calls_json(const std::vector<ToolCall>& calls, IdSource& ids, bool indexed);

// The assistant message of a whole (non-streamed) answer. `finish` becomes
// "tool_calls" when the answer calls tools.
Json chat_message(const ChatOutput& out, const std::string& text, IdSource& ids, std::string& finish);

// One streamed answer as chat deltas.
class ChatDeltaStream {
 public:
  explicit ChatDeltaStream(ChatOutput out)
      : out_(std::move(out)), split_(out_.reasoning_open, tool_call_open_tag(out_.dialect)) {}
  // The delta for the next piece of output: {"reasoning_content", "content"},
  // either absent when empty; {} while everything is held back.
  Json next(const std::string& text);
  // The delta that ends the answer: what was held back and the tool calls
  // (then `finish` becomes "tool_calls"); {} when there is nothing.
  Json last(IdSource& ids, std::string& finish);

 private:
  ChatOutput out_;
  GlmStreamSplit split_;
  std::string full_;  // all output so far (GLM only), for the tool calls
};

}  // namespace strata::server
