#include "runtime/generation.h"

#include <algorithm>
#include <cmath>

#include "core/clock.h"
#include "core/error.h"
#include "runtime/engine.h"

namespace strata {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::None: return "none";
    case StopReason::Eos: return "end of turn";
    case StopReason::StopString: return "stop string";
    case StopReason::Done: return "complete";
    case StopReason::Length: return "length";
    case StopReason::Context: return "context full";
    case StopReason::Interrupted: return "interrupted";
    case StopReason::Error: return "error";
  }
  return "?";
}

Sequence::Sequence(const ModelConfig& c, int64_t ctx, const Tokenizer* tok, std::span<const int32_t> stop_ids)
    : Sequence(std::make_unique<Session>(c, ctx, false), {}, c, tok, stop_ids) {}

Sequence::Sequence(std::unique_ptr<Session> session, std::vector<int32_t> held, const ModelConfig& c,
                   const Tokenizer* tok, std::span<const int32_t> stop_ids)
    : vocab_(c.vocab_size),
      tok_(tok),
      stop_ids_(stop_ids.begin(), stop_ids.end()),
      session_(std::move(session)),
      tokens_(std::move(held)),
      logits_(static_cast<size_t>(c.vocab_size)),
      work_(static_cast<size_t>(c.vocab_size)),
      sampler_(c.vocab_size, SamplerOptions{}) {
  if (static_cast<int64_t>(tokens_.size()) != session_->n_past)
    fail("sequence: the session holds {} positions but {} tokens were given", session_->n_past, tokens_.size());
  tokens_.reserve(static_cast<size_t>(session_->capacity()));  // a growing answer never reallocates
}

std::unique_ptr<Session> Sequence::release_session() {
  tokens_.clear();
  pending_.reset();
  logits_valid_ = false;
  return std::move(session_);
}

void Sequence::clear() {
  session_->truncate(0);
  tokens_.clear();
  pending_.reset();
  logits_valid_ = false;
}

bool Sequence::is_stop(int32_t t) const { return std::find(stop_ids_.begin(), stop_ids_.end(), t) != stop_ids_.end(); }

void Sequence::start(const GenerationParams& params) {
  p_ = params;
  if (!(p_.sampling == sampler_.options())) sampler_.set_options(p_.sampling);
  if (tok_) decoder_.emplace(*tok_, /*skip_special=*/false);
  stops_ = StopStrings(p_.stop);
  first_ = true;
  reason_ = StopReason::None;
  error_.clear();
  generated_ = prefilled_ = reused_ = 0;
  first_token_ns_ = 0;
  rows_added_ = 0;
  wants_logits_ = false;
}

int64_t Sequence::begin(std::span<const int32_t> prompt, const GenerationParams& params) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n < 1) fail("the prompt is empty");
  if (n > capacity()) fail("the prompt is {} tokens and the context (--ctx) is {}", n, capacity());
  start(params);
  sampler_.reset(prompt);
  size_t common = 0;
  while (common < tokens_.size() && common < prompt.size() && tokens_[common] == prompt[common]) ++common;
  if (common == prompt.size() && tokens_.size() == prompt.size() && logits_valid_ && !pending_) {
    reused_ = n;  // the session already ends here, its next-token logits held
    prefilling_ = false;
    return reused_;
  }
  if (common == prompt.size()) --common;  // recompute the last position's logits
  session_->truncate(static_cast<int64_t>(common));
  tokens_.resize(common);
  pending_.reset();
  logits_valid_ = false;
  prompt_.assign(prompt.begin(), prompt.end());
  prefilling_ = true;
  reused_ = static_cast<int64_t>(common);
  return reused_;
}

void Sequence::resume(const GenerationParams& params) {
  if (!can_continue()) fail("there is no answer to continue");
  start(params);
  sampler_.reset(tokens_);
  prefilling_ = false;
  reused_ = static_cast<int64_t>(tokens_.size());
  if (pending_ && static_cast<int64_t>(tokens_.size()) >= capacity()) finish(StopReason::Context, nullptr);
}

int64_t Sequence::add_rows(std::vector<Row>& rows, int64_t budget) {
  rows_added_ = 0;
  wants_logits_ = false;
  if (finished()) return 0;
  if (prefilling_) {
    const int64_t n = static_cast<int64_t>(prompt_.size());
    const int64_t start = static_cast<int64_t>(tokens_.size());
    const int64_t k = std::min(budget, n - start);
    for (int64_t p = start; p < start + k; ++p) {
      const bool last = p == n - 1;
      rows.push_back({session_.get(), static_cast<int32_t>(p), prompt_[static_cast<size_t>(p)], last});
      wants_logits_ = wants_logits_ || last;
    }
    rows_added_ = std::max<int64_t>(0, k);
  } else if (pending_) {
    rows.push_back({session_.get(), static_cast<int32_t>(tokens_.size()), *pending_, true});
    rows_added_ = 1;
    wants_logits_ = true;
  }
  return rows_added_;
}

bool Sequence::advance(const float* logits, StepOutput& out) {
  out.token = -1;
  out.text.clear();
  out.logprob.reset();
  if (rows_added_ > 0) {
    if (prefilling_) {
      const size_t start = tokens_.size();
      tokens_.insert(tokens_.end(), prompt_.begin() + static_cast<std::ptrdiff_t>(start),
                     prompt_.begin() + static_cast<std::ptrdiff_t>(start + static_cast<size_t>(rows_added_)));
      prefilled_ += rows_added_;
      if (tokens_.size() == prompt_.size()) prefilling_ = false;
    } else {
      tokens_.push_back(*pending_);
      pending_.reset();
    }
    logits_valid_ = false;
    if (wants_logits_) {
      if (!logits) fail("sequence: a logits row was asked for and none was given");
      std::copy(logits, logits + vocab_, logits_.begin());
      logits_valid_ = true;
    }
    rows_added_ = 0;
    wants_logits_ = false;
  }
  if (finished()) return false;
  if (prefilling_ || !logits_valid_) return true;  // more rows to feed first
  return sample(out);
}

bool Sequence::sample(StepOutput& out) {
  if (p_.max_tokens >= 0 && generated_ >= p_.max_tokens) {
    finish(StopReason::Length, &out.text);  // nothing sampled: the logits stay held
    return false;
  }
  std::copy(logits_.begin(), logits_.end(), work_.begin());
  double lse = 0;
  if (p_.top_logprobs >= 0) {  // of the raw logits, before penalties and masks
    float mx = -INFINITY;
    for (int64_t i = 0; i < vocab_; ++i) mx = std::max(mx, logits_[static_cast<size_t>(i)]);
    double sum = 0;
    for (int64_t i = 0; i < vocab_; ++i) sum += std::exp(static_cast<double>(logits_[static_cast<size_t>(i)]) - mx);
    lse = mx + std::log(sum);
  }
  // response_format / tool_choice: tokens that would leave the language get -inf.
  if (p_.constraint && p_.constraint->mask(work_, stop_ids_) == 0) {
    error_ = fmt::format("{}: no token can continue the constrained answer", p_.constraint->what());
    finish(StopReason::Error, nullptr);
    return false;
  }
  const bool ban = p_.ignore_eos || (first_ && p_.ban_stops_first);
  const int32_t tok = sampler_.sample(work_, ban ? std::span<const int32_t>(stop_ids_) : std::span<const int32_t>{});
  first_ = false;
  out.token = tok;
  if (!first_token_ns_) first_token_ns_ = now_ns();
  if (!p_.ignore_eos && is_stop(tok)) {
    finish(StopReason::Eos, &out.text);  // not fed: the logits stay held (:more)
    return false;
  }
  sampler_.accept(tok);
  if (p_.constraint && !p_.constraint->advance(tok)) {
    error_ = fmt::format("{}: the sampled token does not continue the constrained answer", p_.constraint->what());
    finish(StopReason::Error, nullptr);
    return false;
  }
  ++generated_;
  if (p_.top_logprobs >= 0) {
    TokenLogprob lp;
    lp.token = tok;
    lp.logprob = static_cast<float>(logits_[static_cast<size_t>(tok)] - lse);
    if (p_.top_logprobs > 0) {
      order_.resize(static_cast<size_t>(vocab_));
      for (int64_t i = 0; i < vocab_; ++i) order_[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      const size_t k = std::min<size_t>(static_cast<size_t>(p_.top_logprobs), order_.size());
      const float* l = logits_.data();
      std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k), order_.end(),
                        [&](int32_t a, int32_t b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
      for (size_t i = 0; i < k; ++i) lp.top.emplace_back(order_[i], static_cast<float>(l[order_[i]] - lse));
    }
    out.logprob = std::move(lp);
  }
  if (decoder_) out.text += stops_.push(decoder_->push(tok));
  // Shown; it is fed by the next step unless the answer ends here (then it
  // stays pending: :more feeds it first).
  pending_ = tok;
  logits_valid_ = false;
  StopReason r = StopReason::None;
  if (stops_.stopped())
    r = StopReason::StopString;
  else if (p_.constraint && p_.constraint->done())
    r = StopReason::Done;
  else if (p_.max_tokens >= 0 && generated_ >= p_.max_tokens)
    r = StopReason::Length;
  else if (static_cast<int64_t>(tokens_.size()) >= capacity())
    r = StopReason::Context;
  if (r == StopReason::None) return true;
  finish(r, &out.text);
  return false;
}

void Sequence::finish(StopReason r, std::string* tail) {
  reason_ = r;
  rows_added_ = 0;
  wants_logits_ = false;
  if (r == StopReason::Error || !decoder_ || stops_.stopped()) return;
  std::string t = stops_.push(decoder_->flush());
  if (!stops_.stopped()) t += stops_.flush();
  if (tail) *tail += t;
}

std::string Sequence::end(StopReason r) {
  if (finished()) return {};
  std::string tail;
  finish(r, &tail);
  return tail;
}

TurnStats run_turn(Engine& e, Sequence& s, const std::function<void(const StepOutput&)>& emit,
                   const std::function<bool()>& interrupted, int64_t chunk) {
  TurnStats st;
  st.start_ns = now_ns();
  st.reused = s.reused();
  std::vector<Row> rows;
  std::vector<float> logits(static_cast<size_t>(e.config().vocab_size));
  StepOutput out;
  while (!s.finished()) {
    if (interrupted()) {
      out = StepOutput{};
      out.text = s.end(StopReason::Interrupted);
      if (!out.text.empty()) emit(out);
      break;
    }
    rows.clear();
    const bool prompt = s.prefilling();
    const int64_t k = s.add_rows(rows, chunk);
    if (k > 0) e.forward(rows, s.wants_logits() ? logits.data() : nullptr, nullptr, prompt ? k : 0);
    s.advance(logits.data(), out);
    if (out.token >= 0 || !out.text.empty()) emit(out);
  }
  st.prefilled = s.prefilled();
  st.generated = s.generated();
  st.first_token_ns = s.first_token_ns();
  st.reason = s.reason();
  st.end_ns = now_ns();
  return st;
}

}  // namespace strata
