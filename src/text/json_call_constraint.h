// Forced tool calls (tool_choice "required" or a named function; docs/server.md)
// for the chat dialects whose calls carry their arguments as JSON: Qwen3 and
// DeepSeek-V3 / R1 / V3.1. Constrained decoding makes the answer exactly one
// call in the dialect's markup, which the dialect's parser
// (parse_chat_output) reads back as that call:
//
//   Qwen3            <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
//   DeepSeek-V3, R1  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```
//                    <｜tool▁call▁end｜><｜tool▁calls▁end｜>     (R1: after "</think>": its prompt opens <think>)
//   DeepSeek-V3.1    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//
// and nothing after it (the answer ends there, like an end-of-turn token).
// ARGS is the JSON text of the function's `parameters` schema, generated as
// response_format generates JSON (json_constraint.h: the same keywords are
// supported, any other one refused naming it). NAME is one of the allowed
// functions' names (a named tool_choice: that one). The markup is the
// tokenizer's encoding of its text, so a markup string that is an added token
// of the tokenizer (<tool_call>, DeepSeek's <｜...｜> tokens) is that token.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_template.h"
#include "text/json_constraint.h"
#include "text/token_mask.h"

namespace strata {

class JsonCallGrammar {
 public:
  struct Function {
    std::string name;
    std::shared_ptr<const JsonGrammar> grammar;  // the parameters schema (an object)
  };
  // `tools`: the request's tools (OpenAI form). `only`: the function
  // tool_choice names, or empty for any of them ("required"). Throws
  // strata::Error naming tools[i].function... and the problem (a schema
  // keyword not supported, a name that is not [A-Za-z0-9_.:-]+, an unknown
  // function: "tool_choice...").
  static std::shared_ptr<const JsonCallGrammar> build(const OrderedJson& tools, std::string_view only = {});
  const std::vector<Function>& functions() const { return fns_; }

 private:
  std::vector<Function> fns_;
};

// The markup around a call in `dialect` (Qwen3 or a DeepSeek one): the text
// before the name, between the name and the arguments, and after them.
struct JsonCallMarkup {
  std::string before_name, after_name, after_args;
};
// Throws strata::Error for a dialect without a JSON call syntax.
JsonCallMarkup json_call_markup(ChatDialect dialect);

class JsonCallConstraint final : public TokenConstraint {
 public:
  using Encode = std::function<std::vector<int32_t>(std::string_view)>;
  // `encode`: the tokenizer's encoding of a markup text (no post-processor).
  JsonCallConstraint(std::shared_ptr<const JsonCallGrammar> g, std::shared_ptr<const JsonVocab> v,
                     const JsonCallMarkup& markup, const Encode& encode);
  // allowed[i] = 1 for the tokens that may come next; stop ids only once the
  // call is complete. Returns how many are allowed.
  size_t allowed(std::vector<uint8_t>& allowed, std::span<const int32_t> stop_ids);
  size_t mask(std::span<float> logits, std::span<const int32_t> stop_ids) override;
  bool advance(int32_t token) override;
  bool done() const override { return phase_ == kDone; }
  const char* what() const override { return "tool_choice"; }
  int32_t forced(std::span<const int32_t> stop_ids) override;
  // Not probed ahead: speculative decoding drafts nothing under it.

 private:
  enum Phase : uint8_t { kBefore, kName, kMid, kArgs, kAfter, kDone };
  std::shared_ptr<const JsonCallGrammar> g_;
  std::shared_ptr<const JsonVocab> vocab_;
  std::vector<int32_t> before_, mid_, after_;  // the markup's tokens (before_ holds the name when there is one function)
  Phase phase_ = kBefore;
  size_t pos_ = 0;      // tokens of the current markup taken
  std::string name_;    // kName: the bytes so far
  size_t fn_ = 0;       // the function, once chosen
  std::unique_ptr<JsonConstraint> args_;
  std::vector<uint8_t> allowed_;
  AllowedCache cache_;  // allowed_ is the current state's (forced(), then mask() at the same state)
  bool step(int32_t token);
  const std::vector<int32_t>& markup() const;
  void enter_args();
  void next_markup_phase();
};

}  // namespace strata
