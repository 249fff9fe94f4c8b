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

namespace {
// A fresh answer may bring the MTP state up to date over this many held
// positions (MTP rows from the session's hidden states; the main model's
// keys are reused whole); beyond that it drafts without the MTP layer.
constexpr int64_t kMtpCatchUp = 16;
// --spec auto: every 4th plan that does not use the MTP chain still asks the
// MTP head for its first proposal (one logits row), to score it.
constexpr uint64_t kMtpShadowEvery = 4;

int32_t argmax_row(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}
}  // namespace

Sequence::Sequence(const ModelConfig& c, int64_t ctx, const Tokenizer* tok, std::span<const int32_t> stop_ids,
                   Speculator* spec, KvType kv)
    : Sequence(std::make_unique<Session>(c, ctx, spec && spec->uses_mtp(), kv), {}, c, tok, stop_ids, spec) {}

Sequence::Sequence(std::unique_ptr<Session> session, std::vector<int32_t> held, const ModelConfig& c,
                   const Tokenizer* tok, std::span<const int32_t> stop_ids, Speculator* spec)
    : vocab_(c.vocab_size),
      tok_(tok),
      stop_ids_(stop_ids.begin(), stop_ids.end()),
      session_(std::move(session)),
      tokens_(std::move(held)),
      logits_(static_cast<size_t>(c.vocab_size)),
      work_(static_cast<size_t>(c.vocab_size)),
      hidden_size_(c.hidden_size),
      spec_(spec && spec->on() ? spec : nullptr),
      sampler_(c.vocab_size, SamplerOptions{}) {
  if (static_cast<int64_t>(tokens_.size()) != session_->n_past)
    fail("sequence: the session holds {} positions but {} tokens were given", session_->n_past, tokens_.size());
  tokens_.reserve(static_cast<size_t>(session_->capacity()));  // a growing answer never reallocates
  // The MTP state at the last held position was computed with a next token
  // that may not be the one that comes: trusted only before it.
  if (session_->has_mtp()) {
    session_->hidden_n = std::min(session_->hidden_n, session_->n_past);
    mtp_synced_ = std::min(session_->mtp_n_past, std::max<int64_t>(session_->n_past - 1, 0));
  }
  session_->mtp_n_past = mtp_synced_;
  if (spec_ && spec_->uses_mtp()) mtp_hidden_.resize(static_cast<size_t>(hidden_size_));
}

std::unique_ptr<Session> Sequence::release_session() {
  tokens_.clear();
  pending_.reset();
  logits_valid_ = false;
  mtp_synced_ = 0;
  return std::move(session_);
}

void Sequence::clear() {
  session_->truncate(0);
  tokens_.clear();
  pending_.reset();
  logits_valid_ = false;
  mtp_synced_ = 0;
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
  drafted_ = accepted_ = 0;
  first_token_ns_ = 0;
  rows_added_ = 0;
  logits_rows_ = 0;
  fed_drafts_ = 0;
  planned_ = false;
  mtp_round_ = 0;
  mtp_done_ = false;
}

int64_t Sequence::begin(std::span<const int32_t> prompt, const GenerationParams& params) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n < 1) fail("the prompt is empty");
  if (n > capacity()) fail("the prompt is {} tokens and the context (--ctx) is {}", n, capacity());
  start(params);
  sampler_.reset(prompt);
  size_t common = 0;
  while (common < tokens_.size() && common < prompt.size() && tokens_[common] == prompt[common]) ++common;
  // The MTP layer's state at position p depends on the token at p + 1: from
  // the last shared position on it is stale. It is brought up to date from
  // the session's hidden states of the shared positions (MTP rows only, in
  // the first MTP round); without them (a session read back from --kv-dir)
  // or beyond kMtpCatchUp positions this answer drafts without it. The main
  // model's keys are reused the same either way.
  mtp_on_ = false;
  mtp_wait_ = false;
  if (session_->has_mtp()) {
    const auto c = static_cast<int64_t>(common);
    mtp_synced_ = std::min(mtp_synced_, std::max<int64_t>(c - 1, 0));
    // auto: the MTP state costs an MTP row per prompt position not yet
    // synced, and a drafted token saves at most one decode forward, so an
    // answer limited to fewer tokens than that cannot pay it back (a
    // server's short requests): it runs without MTP state.
    const bool worth = !spec_ || !spec_->auto_mode() || p_.max_tokens < 0 || p_.max_tokens >= n - mtp_synced_;
    mtp_on_ = spec_ && worth && spec_->start_mtp() && hidden_covers(mtp_synced_, c) && c - mtp_synced_ <= kMtpCatchUp;
    mtp_wait_ = mtp_on_ && spec_->auto_mode() && !spec_->decode_measured();
    session_->mtp_n_past = std::min(session_->mtp_n_past, mtp_synced_);
  }
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
  const bool mtp = mtp_on_;
  start(params);
  mtp_on_ = mtp && hidden_covers(mtp_synced_, static_cast<int64_t>(tokens_.size()));
  sampler_.reset(tokens_);
  prefilling_ = false;
  reused_ = static_cast<int64_t>(tokens_.size());
  if (pending_ && static_cast<int64_t>(tokens_.size()) >= capacity()) finish(StopReason::Context, nullptr);
}

// ---------------------------------------------------------------- drafting

int64_t Sequence::next_token(int64_t p) const {
  const int64_t held = static_cast<int64_t>(tokens_.size());
  if (p + 1 < held) return tokens_[static_cast<size_t>(p + 1)];
  if (p + 1 == held) {
    if (pending_) return *pending_;
    if (prefilling_ && held < static_cast<int64_t>(prompt_.size())) return prompt_[static_cast<size_t>(held)];
  }
  return -1;
}

int64_t Sequence::sync_end() const {
  const int64_t held = static_cast<int64_t>(tokens_.size());
  return held > 0 && next_token(held - 1) >= 0 ? held : std::max<int64_t>(held - 1, 0);
}

bool Sequence::hidden_covers(int64_t from, int64_t to) const { return from >= to || to <= session_->hidden_n; }

void Sequence::keep_hidden(const float* hidden, int64_t pos0, int64_t n) {
  // Held as a prefix: after a gap (a forward without hidden states) none.
  if (!hidden || n <= 0 || !session_->has_mtp() || pos0 > session_->hidden_n) return;
  const auto D = static_cast<size_t>(hidden_size_);
  std::copy(hidden, hidden + static_cast<size_t>(n) * D, session_->hidden.begin() + static_cast<std::ptrdiff_t>(pos0 * hidden_size_));
  session_->hidden_n = pos0 + n;
}

bool Sequence::push_draft(int32_t t, DraftSource src) {
  if (n_draft_ >= kSpecMaxDraft || t < 0 || t >= vocab_ || is_stop(t)) return false;
  if (probing_ && !p_.constraint->advance(t)) return false;
  draft_[static_cast<size_t>(n_draft_)] = t;
  draft_src_[static_cast<size_t>(n_draft_)] = static_cast<uint8_t>(src);
  ++n_draft_;
  return true;
}

void Sequence::plan() {
  planned_ = true;
  n_draft_ = n_forced_ = n_ngram_ = 0;
  ngram_used_ = false;
  mtp_depth_ = 0;
  mtp_rounds_ = 1;
  mtp_shadow_ = false;
  mtp_first_ = -1;
  if (!spec_ || !pending_ || finished() || prefilling_) return;
  const SpecOptions& so = spec_->options();
  const int64_t P = static_cast<int64_t>(tokens_.size());  // the pending token's position
  int64_t cap = std::min<int64_t>(so.k, capacity() - 1 - P);
  if (p_.max_tokens >= 0) cap = std::min(cap, p_.max_tokens - generated_ - 1);
  if (cap <= 0) return;
  // Forced tokens first: the constraint allows exactly one.
  if (p_.constraint) probing_ = p_.constraint->save();
  if (probing_)
    while (n_draft_ < cap) {
      const int32_t t = p_.constraint->forced(stop_ids_);
      if (t < 0 || !push_draft(t, DraftSource::Forced)) break;
    }
  n_forced_ = n_draft_;
  // Then the n-gram continuation of the context (held tokens, pending, forced).
  tail_[0] = *pending_;
  for (int i = 0; i < n_forced_; ++i) tail_[static_cast<size_t>(i + 1)] = draft_[static_cast<size_t>(i)];
  n_ngram_ = static_cast<int>(ngram_lookup(tokens_, std::span<const int32_t>(tail_.data(), static_cast<size_t>(n_forced_ + 1)),
                                           so.ngram_min, so.ngram_max,
                                           std::span<int32_t>(ngram_.data(), static_cast<size_t>(cap - n_forced_))));
  if (mtp_wait_ && spec_->decode_measured()) mtp_wait_ = false;
  const bool mtp = mtp_on_ && !mtp_wait_ && hidden_covers(std::min(mtp_synced_, P - 1), P);
  const SpecPlan pl = spec_->plan(n_forced_, n_ngram_, static_cast<int>(cap), mtp);
  if (pl.source == DraftSource::Ngram) {
    for (int i = 0; i < pl.count; ++i)
      if (!push_draft(ngram_[static_cast<size_t>(i)], DraftSource::Ngram)) break;
    ngram_used_ = n_draft_ > n_forced_;
  } else if (pl.count > 0) {
    mtp_depth_ = pl.count;
    mtp_rounds_ = n_forced_ + pl.count;
  }
  if (mtp_on_ && !mtp_wait_ && spec_->auto_mode()) {
    // The MTP state costs an MTP row per token (prompt tokens included), and
    // with streamed experts the MTP layer's expert reads: answers stop keeping
    // it once the engine's last Speculator::kMtpIdleDrop plans, over answers,
    // did not choose the chain, so that steps drafting nothing soon cost what
    // steps of --spec off cost, short answers included; at once where the
    // measured costs say no chain can pay (SpecPlan::mtp_hopeless).
    if (spec_->mtp_plan(mtp_depth_ > 0) || (pl.mtp_hopeless && mtp_depth_ == 0)) {
      mtp_on_ = false;
      spec_->mtp_dropped();
    } else if (mtp_depth_ == 0 && mtp && n_forced_ == 0 && ++plans_ % kMtpShadowEvery == 0) {
      mtp_shadow_ = true;
    }
  }
}

void Sequence::end_drafting() {
  if (probing_) p_.constraint->restore();
  probing_ = false;
  if (session_->has_mtp()) session_->mtp_n_past = std::min(session_->mtp_n_past, mtp_synced_);
}

int64_t Sequence::add_mtp_rows(std::vector<Row>& rows, std::vector<float>& hidden) {
  mtp_rows_ = 0;
  mtp_logits_ = false;
  if (!mtp_on_ || finished() || mtp_done_) return 0;
  const int64_t P = static_cast<int64_t>(tokens_.size());
  const size_t D = static_cast<size_t>(hidden_size_);
  if (mtp_round_ == 0) {
    if (!prefilling_ && pending_ && !planned_) plan();
    if (!mtp_on_ || mtp_wait_) return 0;
    // Round 0: the positions fed since the last sync whose next token is
    // known, from the main model's hidden states; the last one (the pending
    // token's) also starts the chain.
    const bool chain = mtp_depth_ > 0 || mtp_shadow_;
    int64_t from = mtp_synced_;
    const int64_t to = sync_end();
    if (chain && pending_ && to == P) from = std::min(from, P - 1);  // recomputed if already synced: same values
    if (!hidden_covers(from, to)) {
      mtp_on_ = false;  // the hidden states are gone: no MTP state for the rest of this answer
      mtp_depth_ = 0;
      mtp_rounds_ = 1;
      return 0;
    }
    // Sync rows only write the MTP layer's keys (Row::keys_only); the
    // chain's start, below, runs the whole layer.
    for (int64_t p = from; p < to; ++p) {
      const float* h = session_->hidden.data() + static_cast<size_t>(p) * D;
      rows.push_back({session_.get(), static_cast<int32_t>(p), static_cast<int32_t>(next_token(p)), false, true});
      hidden.insert(hidden.end(), h, h + D);
    }
    mtp_sync_to_ = to;
    mtp_rows_ = to - from;
    if (mtp_rows_ == 0) {
      mtp_done_ = true;
      return 0;
    }
    if (chain && pending_ && to == P) {
      mtp_logits_ = n_forced_ == 0;
      rows.back().want_logits = mtp_logits_;
      rows.back().keys_only = false;
    } else {
      mtp_depth_ = 0;
      mtp_rounds_ = 1;
      mtp_shadow_ = false;
    }
    return mtp_rows_;
  }
  if (mtp_round_ >= mtp_rounds_) {
    mtp_done_ = true;
    return 0;
  }
  // Round r: position P - 1 + r fed the draft before it, with the chain's
  // own last output as its hidden state; predicts draft r.
  const int r = mtp_round_;
  mtp_logits_ = r >= n_forced_;
  rows.push_back({session_.get(), static_cast<int32_t>(P - 1 + r), draft_[static_cast<size_t>(r - 1)], mtp_logits_});
  hidden.insert(hidden.end(), mtp_hidden_.begin(), mtp_hidden_.end());
  mtp_rows_ = 1;
  return 1;
}

void Sequence::take_mtp(const float* logits, const float* hidden_out, int64_t n_logits) {
  if (mtp_rows_ == 0) return;
  const size_t D = static_cast<size_t>(hidden_size_);
  if (mtp_round_ == 0) mtp_synced_ = mtp_sync_to_;
  const int r = mtp_round_++;
  if (mtp_rounds_ > mtp_round_ && hidden_out)
    std::copy(hidden_out + static_cast<size_t>(mtp_rows_ - 1) * D, hidden_out + static_cast<size_t>(mtp_rows_) * D,
              mtp_hidden_.begin());
  if (mtp_logits_ && logits) {
    const int32_t d = argmax_row(logits, n_logits);
    if (mtp_depth_ > 0) {
      if (r != n_draft_ || !push_draft(d, DraftSource::Mtp)) mtp_rounds_ = mtp_round_;  // the chain ends here
    } else if (mtp_shadow_) {
      mtp_first_ = d;
    }
  }
  if (mtp_round_ >= mtp_rounds_) mtp_done_ = true;
}

// -------------------------------------------------------------------- step

int64_t Sequence::add_rows(std::vector<Row>& rows, int64_t budget) {
  rows_added_ = 0;
  logits_rows_ = 0;
  fed_drafts_ = 0;
  if (finished()) return 0;
  rows_pos0_ = static_cast<int64_t>(tokens_.size());
  if (prefilling_) {
    const int64_t n = static_cast<int64_t>(prompt_.size());
    const int64_t start = static_cast<int64_t>(tokens_.size());
    const int64_t k = std::min(budget, n - start);
    for (int64_t p = start; p < start + k; ++p) {
      const bool last = p == n - 1;
      rows.push_back({session_.get(), static_cast<int32_t>(p), prompt_[static_cast<size_t>(p)], last});
      if (last) logits_rows_ = 1;
    }
    rows_added_ = std::max<int64_t>(0, k);
  } else if (pending_) {
    if (spec_ && !planned_) plan();
    end_drafting();
    const int32_t P = static_cast<int32_t>(tokens_.size());
    rows.push_back({session_.get(), P, *pending_, true});
    for (int i = 0; i < n_draft_; ++i) rows.push_back({session_.get(), P + 1 + i, draft_[static_cast<size_t>(i)], true});
    fed_drafts_ = n_draft_;
    rows_added_ = 1 + n_draft_;
    logits_rows_ = rows_added_;
  }
  planned_ = false;
  mtp_round_ = 0;
  mtp_rounds_ = 0;
  mtp_depth_ = 0;
  mtp_shadow_ = false;
  mtp_done_ = false;
  return rows_added_;
}

bool Sequence::advance(const float* logits, StepOutput& out, const float* hidden) {
  out.token = -1;
  out.tokens.clear();
  // A step emits at most its drafts + 1 tokens: reserved once, so a step that
  // first accepts more drafts than any before it does not allocate.
  out.tokens.reserve(static_cast<size_t>(kSpecMaxDraft) + 1);
  out.text.clear();
  out.logprobs.clear();
  if (rows_added_ > 0) {
    if (prefilling_) {
      const size_t start = tokens_.size();
      tokens_.insert(tokens_.end(), prompt_.begin() + static_cast<std::ptrdiff_t>(start),
                     prompt_.begin() + static_cast<std::ptrdiff_t>(start + static_cast<size_t>(rows_added_)));
      prefilled_ += rows_added_;
      if (tokens_.size() == prompt_.size()) prefilling_ = false;
      keep_hidden(hidden, rows_pos0_, rows_added_);
      logits_valid_ = false;
      if (logits_rows_ > 0) {
        if (!logits) fail("sequence: a logits row was asked for and none was given");
        std::copy(logits, logits + vocab_, logits_.begin());
        logits_valid_ = true;
      }
      rows_added_ = 0;
      logits_rows_ = 0;
    } else {
      if (!logits) fail("sequence: a logits row was asked for and none was given");
      tokens_.push_back(*pending_);
      pending_.reset();
      // Each logits row chooses a token; the draft fed after it is accepted
      // when that token is the draft. The first token that is not the draft
      // (or the answer's end) stops it: that token is the new pending one.
      const int nd = fed_drafts_;
      const int64_t gen0 = generated_;
      int reached = 0, acc = 0;
      bool go = true;
      for (int i = 0; i <= nd; ++i) {
        std::copy(logits + static_cast<size_t>(i) * static_cast<size_t>(vocab_),
                  logits + static_cast<size_t>(i + 1) * static_cast<size_t>(vocab_), logits_.begin());
        logits_valid_ = true;
        const int32_t d = i < nd ? draft_[static_cast<size_t>(i)] : -1;
        if (d >= 0) ++reached;
        go = sample(out, d);
        const bool hit = d >= 0 && out.token == d;
        if (hit) ++acc;
        if (!go || !hit) break;
        tokens_.push_back(d);  // fed by this forward already
        pending_.reset();
      }
      keep_hidden(hidden, rows_pos0_, static_cast<int64_t>(tokens_.size()) - rows_pos0_);
      session_->truncate(static_cast<int64_t>(tokens_.size()));  // forget the rejected drafts
      drafted_ += nd;
      accepted_ += acc;
      if (spec_) {
        spec_->record_step(std::span<const uint8_t>(draft_src_.data(), static_cast<size_t>(nd)), nd, reached, acc,
                           static_cast<int>(generated_ - gen0));
        // Proposals not verified are scored against the token that came.
        const bool first = n_forced_ == 0 && !out.tokens.empty();
        if (first && n_ngram_ > 0 && !ngram_used_) spec_->record_shadow(DraftSource::Ngram, ngram_[0] == out.tokens[0]);
        if (first && mtp_first_ >= 0) spec_->record_shadow(DraftSource::Mtp, mtp_first_ == out.tokens[0]);
      }
      n_draft_ = n_forced_ = n_ngram_ = fed_drafts_ = 0;
      mtp_first_ = -1;
      rows_added_ = 0;
      logits_rows_ = 0;
      return go;
    }
  }
  if (finished()) return false;
  if (prefilling_ || !logits_valid_) return true;  // more rows to feed first
  return sample(out);
}

bool Sequence::sample(StepOutput& out, int32_t draft) {
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
  const std::span<const int32_t> banned = ban ? std::span<const int32_t>(stop_ids_) : std::span<const int32_t>{};
  const int32_t tok = draft >= 0 ? sampler_.sample_draft(work_, draft, banned) : sampler_.sample(work_, banned);
  first_ = false;
  out.token = tok;
  out.tokens.push_back(tok);
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
    TokenLogprob& lp = out.logprobs.emplace_back();
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
  logits_rows_ = 0;
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

void run_mtp_rounds(Engine& e, std::span<Sequence* const> seqs, MtpScratch& ws) {
  const size_t V = static_cast<size_t>(e.mtp_draft_vocab()), D = static_cast<size_t>(e.config().hidden_size);
  for (;;) {
    ws.rows.clear();
    ws.hidden.clear();
    ws.owners.clear();
    int64_t nlog = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t first = static_cast<int64_t>(ws.rows.size());
      if (seqs[i]->add_mtp_rows(ws.rows, ws.hidden) > 0) {
        ws.owners.emplace_back(i, first);
        if (seqs[i]->mtp_wants_logits()) ++nlog;
      }
    }
    if (ws.rows.empty()) return;
    if (ws.logits.size() < static_cast<size_t>(nlog) * V) ws.logits.resize(static_cast<size_t>(nlog) * V);
    if (ws.hidden_out.size() < ws.rows.size() * D) ws.hidden_out.resize(ws.rows.size() * D);
    e.forward_mtp(ws.rows, ws.hidden.data(), nlog ? ws.logits.data() : nullptr, ws.hidden_out.data(), true);
    int64_t li = 0;
    for (const auto& [i, first] : ws.owners) {
      const float* lg = nullptr;
      if (seqs[i]->mtp_wants_logits()) lg = ws.logits.data() + static_cast<size_t>(li++) * V;
      seqs[i]->take_mtp(lg, ws.hidden_out.data() + static_cast<size_t>(first) * D, static_cast<int64_t>(V));
    }
  }
}

TurnStats run_turn(Engine& e, Sequence& s, const std::function<void(const StepOutput&)>& emit,
                   const std::function<bool()>& interrupted, int64_t chunk) {
  TurnStats st;
  st.start_ns = now_ns();
  st.reused = s.reused();
  const size_t V = static_cast<size_t>(e.config().vocab_size), D = static_cast<size_t>(e.config().hidden_size);
  std::vector<Row> rows;
  std::vector<float> logits(V), hidden;
  MtpScratch mtp;
  Sequence* const one[] = {&s};
  StepOutput out;
  e.speculator().set_batch(1);
  while (!s.finished()) {
    if (interrupted()) {
      out = StepOutput{};
      out.text = s.end(StopReason::Interrupted);
      if (!out.text.empty()) emit(out);
      break;
    }
    if (s.mtp_on()) run_mtp_rounds(e, one, mtp);
    rows.clear();
    const bool prompt = s.prefilling();
    const int64_t k = s.add_rows(rows, chunk);
    if (k > 0) {
      if (logits.size() < static_cast<size_t>(s.logits_rows()) * V) logits.resize(static_cast<size_t>(s.logits_rows()) * V);
      const bool h = s.wants_hidden();
      if (h && hidden.size() < static_cast<size_t>(k) * D) hidden.resize(static_cast<size_t>(k) * D);
      e.forward(rows, s.wants_logits() ? logits.data() : nullptr, h ? hidden.data() : nullptr, prompt ? k : 0);
    }
    s.advance(logits.data(), out, s.wants_hidden() ? hidden.data() : nullptr);
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
