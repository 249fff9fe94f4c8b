#include "text/json_call_constraint.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "text/tool_constraint.h"

namespace strata {

namespace {

// Names are generated raw between markup (and, for Qwen3, inside a JSON
// string): a character set that needs no escaping and cannot run into the
// markup around it.
bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == ':' || c == '-';
}

}  // namespace

std::shared_ptr<const JsonCallGrammar> JsonCallGrammar::build(const OrderedJson& tools, std::string_view only) {
  auto g = std::make_shared<JsonCallGrammar>();
  for (const ForcedToolFunction& def : forced_tool_functions(tools, only)) {
    if (def.name.empty() || def.name.size() > 256 ||
        !std::all_of(def.name.begin(), def.name.end(), [](char c) { return name_char(c); }))
      fail("{}.name: '{}' cannot be generated in a forced call (names of 1 to 256 characters of A-Z a-z 0-9 _ . : - "
           "only)",
           def.where, def.name);
    // No parameters: the arguments are {}.
    const OrderedJson params = def.params.is_null() ? OrderedJson{{"type", "object"},
                                                                  {"properties", OrderedJson::object()},
                                                                  {"additionalProperties", false}}
                                                    : def.params;
    Function fn{def.name, compile_tool_parameters(params, def.where)};
    const JsonGrammar::Node& root = fn.grammar->node(fn.grammar->root());
    if (root.types != JsonGrammar::kObject || root.literals >= 0 || !root.any_of.empty())
      fail("{}.parameters: must be an object schema (type object)", def.where);
    g->fns_.push_back(std::move(fn));
  }
  return g;
}

JsonCallMarkup json_call_markup(ChatDialect dialect) {
  switch (dialect) {
    case ChatDialect::Qwen3:
      return {"<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>"};
    case ChatDialect::DeepSeek3:
      return {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n",
              "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"};
    case ChatDialect::DeepSeekR1:
    case ChatDialect::DeepSeekR1Sys1:
      // The prompt opened <think>: close it (no reasoning) before the call.
      return {"</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n",
              "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"};
    case ChatDialect::DeepSeek31:
      return {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"};
    case ChatDialect::Glm:
    case ChatDialect::Glm45:
    case ChatDialect::Raw:
      break;
  }
  fail("tool_choice: the {} chat template has no JSON tool-call syntax", chat_dialect_name(dialect));
}

JsonCallConstraint::JsonCallConstraint(std::shared_ptr<const JsonCallGrammar> g, std::shared_ptr<const JsonVocab> v,
                                       const JsonCallMarkup& markup, const Encode& encode)
    : g_(std::move(g)), vocab_(std::move(v)) {
  const auto& fns = g_->functions();
  if (fns.size() == 1) {
    before_ = encode(markup.before_name + fns[0].name + markup.after_name);
  } else {
    before_ = encode(markup.before_name);
    mid_ = encode(markup.after_name);
  }
  after_ = encode(markup.after_args);
  if (before_.empty() || after_.empty() || (fns.size() > 1 && mid_.empty()))
    fail("tool_choice: the tokenizer encodes the tool-call markup to nothing");
  for (const auto* seq : {&before_, &mid_, &after_})
    for (int32_t id : *seq)
      if (id < 0 || id >= vocab_->size()) fail("tool_choice: markup token {} is outside the vocabulary", id);
}

const std::vector<int32_t>& JsonCallConstraint::markup() const {
  return phase_ == kBefore ? before_ : phase_ == kMid ? mid_ : after_;
}

void JsonCallConstraint::enter_args() {
  args_ = std::make_unique<JsonConstraint>(g_->functions()[fn_].grammar, vocab_);
  phase_ = kArgs;
  pos_ = 0;
}

// The current markup is complete: what follows it.
void JsonCallConstraint::next_markup_phase() {
  pos_ = 0;
  if (phase_ == kBefore && g_->functions().size() > 1) {
    phase_ = kName;
  } else if (phase_ == kBefore || phase_ == kMid) {
    enter_args();
  } else {
    phase_ = kDone;
  }
}

size_t JsonCallConstraint::allowed(std::vector<uint8_t>& out, std::span<const int32_t> stop_ids) {
  size_t count = 0;
  switch (phase_) {
    case kBefore:
    case kMid:
    case kAfter:
      out.assign(static_cast<size_t>(vocab_->size()), 0);
      allow_token(out, markup()[pos_], true, count);
      break;
    case kName: {
      out.assign(static_cast<size_t>(vocab_->size()), 0);
      const auto& fns = g_->functions();
      bool complete = false;
      for (const auto& f : fns) complete = complete || f.name == name_;
      for (int32_t id = 0; id < vocab_->size(); ++id) {
        if (!vocab_->usable(id)) continue;
        const std::string_view b = vocab_->bytes(id);
        for (const auto& f : fns) {
          const std::string_view n = f.name;
          if (n.size() >= name_.size() + b.size() && n.compare(0, name_.size(), name_) == 0 &&
              n.compare(name_.size(), b.size(), b) == 0) {
            allow_token(out, id, true, count);
            break;
          }
        }
      }
      if (complete) allow_token(out, mid_[0], true, count);
      break;
    }
    case kArgs:
      count = args_->allowed(out, {});
      if (args_->accepting()) allow_token(out, after_[0], true, count);
      break;
    case kDone:
      out.assign(static_cast<size_t>(vocab_->size()), 0);
      for (int32_t s : stop_ids) allow_token(out, s, true, count);
      break;
  }
  return count;
}

size_t JsonCallConstraint::mask(std::span<float> logits, std::span<const int32_t> stop_ids) {
  if (!cache_.valid_for(stop_ids)) cache_.set(stop_ids, allowed(allowed_, stop_ids));
  mask_logits(logits, allowed_);
  return cache_.count;
}

int32_t JsonCallConstraint::forced(std::span<const int32_t> stop_ids) {
  if (phase_ == kBefore || phase_ == kMid || phase_ == kAfter) return markup()[pos_];
  if (!cache_.valid_for(stop_ids)) cache_.set(stop_ids, allowed(allowed_, stop_ids));
  return only_allowed(allowed_, cache_.count);
}

bool JsonCallConstraint::advance(int32_t token) {
  const bool ok = step(token);
  if (ok) cache_.fresh = false;
  return ok;
}

bool JsonCallConstraint::step(int32_t token) {
  switch (phase_) {
    case kBefore:
    case kMid:
    case kAfter:
      if (token != markup()[pos_]) return false;
      if (++pos_ == markup().size()) next_markup_phase();
      return true;
    case kName: {
      const auto& fns = g_->functions();
      if (token == mid_[0]) {
        for (size_t k = 0; k < fns.size(); ++k) {
          if (fns[k].name != name_) continue;
          fn_ = k;
          phase_ = kMid;
          pos_ = 1;
          if (pos_ == mid_.size()) enter_args();
          return true;
        }
        return false;
      }
      if (!vocab_->usable(token)) return false;
      const std::string next = name_ + std::string(vocab_->bytes(token));
      for (const auto& f : fns) {
        if (f.name.compare(0, next.size(), next) == 0 && f.name.size() >= next.size()) {
          name_ = next;
          return true;
        }
      }
      return false;
    }
    case kArgs:
      // The markup first: the JSON's optional trailing whitespace never
      // competes with a markup token that starts with whitespace.
      if (args_->accepting() && token == after_[0]) {
        phase_ = kAfter;
        pos_ = 1;
        if (pos_ == after_.size()) phase_ = kDone;
        return true;
      }
      return args_->advance(token);
    case kDone:
      break;
  }
  return false;
}

}  // namespace strata
