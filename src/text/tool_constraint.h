// Forced tool calls (tool_choice "required" or a named function;
// docs/server.md): constrained decoding that makes the answer exactly one GLM
// tool call, which parse_glm_output then reads back as that call.
//
// The answer is, byte for byte:
//   <tool_call>NAME(<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>)*</tool_call>
// and nothing after it (the answer ends there, like an end-of-turn token).
// - NAME: one of the allowed functions' names.
// - KEY: the parameters of `parameters.properties`, in schema order, each at
//   most once, every `required` one present (optional ones may be skipped);
//   a function without properties takes no arguments.
// - VALUE of a parameter declared a string (`type` "string" or a list with
//   "string": the parser keeps such values as raw text): raw text, valid
//   UTF-8, no '<' and no control bytes but tab, newline and carriage return,
//   no leading or trailing whitespace (the parser strips it), at most
//   maxLength code points and never more than kToolStringMaxChars; minLength,
//   enum and const apply as in response_format.
// - VALUE of any other parameter: the JSON text of its schema, generated as
//   response_format generates it (json_constraint.h), with no '<' in it (a
//   string spells '<' as \u003c if it needs one).
// The parameters schema is compiled by the response_format compiler, so the
// same keywords are supported and any other one is refused naming it.
// When the tokenizer has an added token for a markup string (<tool_call>,
// </tool_call>, <arg_key>, </arg_key>, <arg_value>, </arg_value>; GLM's
// tokenizers do), the markup is generated only as that token; otherwise it
// is spelled with ordinary tokens.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_template.h"
#include "text/json_constraint.h"
#include "text/token_mask.h"

namespace strata {

constexpr uint32_t kToolStringMaxChars = 256;  // raw string values without a smaller maxLength

// One function of a request's `tools` that a forced call may use.
struct ForcedToolFunction {
  std::string name;
  std::string where;   // "tools[i].function", for messages
  OrderedJson params;  // its `parameters`; null when absent
};
// The functions a forced call may use: all of `tools`, or the one `only`
// names. Throws strata::Error naming tools[i].function... (a malformed tool,
// a name declared twice, `parameters` not an object), or starting with
// "tool_choice" when `only` names no function.
std::vector<ForcedToolFunction> forced_tool_functions(const OrderedJson& tools, std::string_view only);
// A tool's parameters schema compiled by the response_format compiler;
// errors name `where`.parameters and the keyword.
std::shared_ptr<const JsonGrammar> compile_tool_parameters(const OrderedJson& params, const std::string& where);

enum ToolMarkup : uint8_t { kToolOpen, kToolClose, kArgKey, kArgKeyEnd, kArgValue, kArgValueEnd, kToolMarkups };
// The markup strings, by ToolMarkup.
std::string_view tool_markup(int m);

class ToolCallGrammar {
 public:
  struct Param {
    std::string key;   // as generated (raw text)
    int32_t node = 0;  // its value in `grammar`
    bool required = false;
    bool raw = false;  // declared a string: raw text
  };
  struct Function {
    std::string name;
    std::shared_ptr<const JsonGrammar> grammar;  // the parameters schema
    std::vector<Param> params;
    std::vector<uint8_t> req_from;  // req_from[i]: first required param index >= i (params.size(): none)
  };
  // `tools`: the request's tools (OpenAI form, key order as sent). `only`:
  // the function tool_choice names, or empty for any of them ("required").
  // Throws strata::Error naming tools[i].function... and the problem
  // (unsupported schema keyword, a name or key that cannot be generated, an
  // unknown function).
  static std::shared_ptr<const ToolCallGrammar> build(const OrderedJson& tools, std::string_view only = {});

  const std::vector<Function>& functions() const { return fns_; }  // sorted by name

 private:
  std::vector<Function> fns_;
};

// The recogniser; cheap to copy. After a refused feed the state is
// unspecified: feed a copy when probing.
class ToolState {
 public:
  // `atomic`: bit m set when markup m is generated only as its added token.
  ToolState(const ToolCallGrammar& g, uint8_t atomic);
  bool feed(uint8_t c);
  bool feed(std::string_view bytes);
  // Markup `m` as its added token.
  bool feed_markup(int m);
  bool done() const { return phase_ == kDone; }
  // Inside a raw string value between characters: how many more code points
  // it may take (the mask's fast path); -1 otherwise.
  int64_t raw_room() const;
  bool raw_empty() const { return raw_cps_ == 0; }

 private:
  enum Phase : uint8_t { kBound, kLit, kName, kKey, kValue, kDone };
  enum Ctx : uint8_t { kStart, kJunction, kKeyEnd, kValOpen, kValEnd };
  uint8_t starts() const;  // markups that may start here (the current item complete)
  uint8_t junction(const ToolCallGrammar::Function& f, uint32_t next) const;
  void commit();           // ends the current name, key or value
  void enter(int m);       // after markup m
  bool raw_closable() const;
  bool feed_value(uint8_t c);

  const ToolCallGrammar* g_;
  uint8_t atomic_;
  Phase phase_ = kBound;
  Ctx ctx_ = kStart;
  uint8_t lits_ = 0;  // kLit: markups still matching
  uint32_t pos_ = 0;  // bytes matched of the markup, name or key
  uint32_t fn_lo_ = 0, fn_hi_ = 0;  // kName: candidates (fn_lo_ is the function once chosen)
  uint32_t next_ = 0;  // next parameter index that may come
  uint64_t keys_ = 0;  // kKey: candidate parameters
  uint32_t param_ = 0;
  // kValue
  JsonState val_;
  uint32_t raw_cps_ = 0;
  uint8_t raw_need_ = 0;  // continuation bytes still due
  bool raw_space_ = false;  // the last code point is whitespace
  int32_t raw_cp_ = 0;
};

// The added-token ids of the markup strings (-1: spelled by ordinary tokens).
std::array<int32_t, kToolMarkups> tool_markup_ids(const Tokenizer& tok);

class ToolCallConstraint final : public TokenConstraint {
 public:
  ToolCallConstraint(std::shared_ptr<const ToolCallGrammar> g, std::shared_ptr<const JsonVocab> v,
                     std::array<int32_t, kToolMarkups> markup_ids);
  // allowed[i] = 1 for the tokens that may come next; stop ids only once the
  // call is complete. Returns how many are allowed.
  size_t allowed(std::vector<uint8_t>& allowed, std::span<const int32_t> stop_ids);
  size_t mask(std::span<float> logits, std::span<const int32_t> stop_ids) override;
  bool advance(int32_t token) override;
  bool done() const override { return state_.done(); }
  const char* what() const override { return "tool_choice"; }
  int32_t forced(std::span<const int32_t> stop_ids) override;
  bool save() override;
  void restore() override;
  const ToolState& state() const { return state_; }

 private:
  std::shared_ptr<const ToolCallGrammar> g_;
  std::shared_ptr<const JsonVocab> vocab_;
  std::array<int32_t, kToolMarkups> ids_;
  ToolState state_;
  void build_plain_flags();
  TrieWalk<ToolState> walk_;
  std::vector<uint8_t> allowed_;
  AllowedCache cache_;     // allowed_ is the current state's (forced(), then mask() at the same state)
  ToolState saved_;      // speculation: save() / restore()
  ConstraintProbe probe_;  // ... and the saved state's allowed set
  void moved();            // the state changed: the cached set is stale (kept if it was the saved state's)
  // Per plain token of the vocabulary (JsonVocab's string fast path), built
  // on first use: bit 0 has '<', bit 1 starts and bit 2 ends with whitespace.
  std::vector<uint8_t> plain_flags_;
  std::vector<int32_t> plain_lt_;  // the plain tokens with '<'
};

}  // namespace strata
