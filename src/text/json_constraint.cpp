#include "text/json_constraint.h"

#include <utility>

namespace strata {

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> g, std::shared_ptr<const JsonVocab> v)
    : g_(std::move(g)), vocab_(std::move(v)), state_(*g_), walk_(state_, vocab_->max_len()), saved_(*g_) {}

size_t JsonConstraint::allowed(std::vector<uint8_t>& out, std::span<const int32_t> stop_ids) {
  const JsonVocab& v = *vocab_;
  out.assign(static_cast<size_t>(v.size()), 0);
  size_t count = 0;
  const int64_t room = state_.string_room();
  if (room >= 0) {
    // Plain tokens fit by length alone; walk only the others.
    const std::span<const int32_t> plain = v.plain();
    const std::span<const uint32_t> cps = v.plain_cps();
    for (size_t k = 0; k < plain.size() && cps[k] <= static_cast<uint64_t>(room); ++k) {
      out[static_cast<size_t>(plain[k])] = 1;
      ++count;
    }
    count += walk_.walk(v.rest(), state_, out);
  } else {
    count += walk_.walk(v.all(), state_, out);
  }
  const bool acc = state_.accepting();
  for (int32_t s : stop_ids) allow_token(out, s, acc, count);
  return count;
}

size_t JsonConstraint::mask(std::span<float> logits, std::span<const int32_t> stop_ids) {
  if (!cache_.valid_for(stop_ids)) cache_.set(stop_ids, allowed(allowed_, stop_ids));
  mask_logits(logits, allowed_);
  return cache_.count;
}

int32_t JsonConstraint::forced(std::span<const int32_t> stop_ids) {
  if (!cache_.valid_for(stop_ids)) cache_.set(stop_ids, allowed(allowed_, stop_ids));
  return only_allowed(allowed_, cache_.count);
}

bool JsonConstraint::advance(int32_t token) {
  if (!vocab_->usable(token)) return false;
  JsonState next(state_);
  if (!next.feed(vocab_->bytes(token))) return false;
  state_.assign(next);
  moved();
  return true;
}

bool JsonConstraint::save() {
  saved_.assign(state_);
  probe_.save();
  return true;
}

void JsonConstraint::moved() {
  if (probe_.saving && !probe_.moved) probe_.keep(allowed_, cache_);
  cache_.fresh = false;
}

void JsonConstraint::restore() {
  if (probe_.restore(allowed_, cache_)) state_.assign(saved_);
}

}  // namespace strata
