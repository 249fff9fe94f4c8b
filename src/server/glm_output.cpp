#include "server/glm_output.h"

#include <algorithm>
#include <string_view>

namespace strata::server {

void GlmStreamSplit::push(const std::string& text, std::string& reasoning, std::string& content, bool final) {
  pending_ += text;
  for (;;) {
    if (in_tool_) {
      pending_.clear();
      return;
    }
    const char* tag = reasoning_ ? "</think>" : nullptr;
    size_t at = std::string::npos, tag_len = 0;
    if (reasoning_) {
      at = pending_.find(tag);
      tag_len = 8;
    } else {
      const size_t a = pending_.find("<think>"), b = pending_.find(tool_open_);
      at = std::min(a, b);
      tag_len = at == std::string::npos ? 0 : (at == a ? 7 : tool_open_.size());
      if (at != std::string::npos && at == b) {
        content += pending_.substr(0, at);
        in_tool_ = true;
        continue;
      }
    }
    if (at == std::string::npos) break;
    (reasoning_ ? reasoning : content) += pending_.substr(0, at);
    pending_.erase(0, at + tag_len);
    reasoning_ = !reasoning_;
  }
  // Hold back a possible partial tag at the end.
  size_t keep = 0;
  if (!final) {
    for (const std::string_view tv : {std::string_view("</think>"), std::string_view("<think>"),
                                      std::string_view(tool_open_)}) {
      for (size_t k = std::min(tv.size() - 1, pending_.size()); k > keep; --k)
        if (pending_.compare(pending_.size() - k, k, tv.substr(0, k)) == 0) {
          keep = k;
          break;
        }
    }
  }
  (reasoning_ ? reasoning : content) += pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
}

Json tool_calls_json(const std::vector<ToolCall>& calls, IdSource& ids, bool indexed) {
  Json out = Json::array();
  int i = 0;
  for (const ToolCall& t : calls) {
    // The arguments are the model's text: they may hold invalid UTF-8.
    Json call{{"id", ids.next("call")},
              {"type", "function"},
              {"function", {{"name", t.name}, {"arguments", t.arguments.dump(-1, ' ', false, OrderedJson::error_handler_t::replace)}}}};
    if (indexed) call["index"] = i++;
    out.push_back(std::move(call));
  }
  return out;
}

Json chat_message(const ChatOutput& out, const std::string& text, IdSource& ids, std::string& finish) {
  Json msg{{"role", "assistant"}};
  if (!out.glm) {
    msg["content"] = text;
    return msg;
  }
  const ParsedOutput p = parse_chat_output(out.dialect, text, out.reasoning_open, out.tools);
  msg["content"] = p.content;
  if (!p.reasoning.empty()) msg["reasoning_content"] = p.reasoning;
  if (!p.tool_calls.empty()) {
    msg["tool_calls"] = tool_calls_json(p.tool_calls, ids, /*indexed=*/false);
    finish = "tool_calls";
  }
  return msg;
}

namespace {

Json delta_of(const std::string& reasoning, const std::string& content) {
  Json delta = Json::object();
  if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
  if (!content.empty()) delta["content"] = content;
  return delta;
}

}  // namespace

Json ChatDeltaStream::next(const std::string& text) {
  if (!out_.glm) return delta_of("", text);
  full_ += text;
  std::string reasoning, content;
  split_.push(text, reasoning, content, false);
  return delta_of(reasoning, content);
}

Json ChatDeltaStream::last(IdSource& ids, std::string& finish) {
  if (!out_.glm) return Json::object();
  std::string reasoning, content;
  split_.push("", reasoning, content, true);
  Json delta = delta_of(reasoning, content);
  const ParsedOutput p = parse_chat_output(out_.dialect, full_, out_.reasoning_open, out_.tools);
  if (!p.tool_calls.empty()) {
    delta["tool_calls"] = tool_calls_json(p.tool_calls, ids, /*indexed=*/true);
    finish = "tool_calls";
  }
  return delta;
}

}  // namespace strata::server
