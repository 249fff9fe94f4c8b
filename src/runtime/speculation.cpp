#include "runtime/speculation.h"

#include <algorithm>
#include <cmath>

namespace strata {

namespace {
constexpr double kDecay = 0.98;       // acceptance counts: an effective window of ~50 verified positions
constexpr double kPriorSlope = 0.10;  // an unmeasured extra row: 10% of a forward (optimistic, so it is tried)
// auto: while the value rule drafts nothing, a plan verifies one draft anyway
// after 64 plans, then after 128, 256, ... 1024 (each probe that does not turn
// drafting back on doubles the wait: probing costs a wider forward, and with
// streamed experts its expert reads); back to 64 once drafting pays again.
constexpr uint64_t kExplore = 64;
constexpr uint64_t kExploreMax = 1024;
constexpr uint32_t kMeasureFirst = 4;  // auto: ... and so does each plan until a one-row-wider forward was measured 4 times
// An unmeasured extra row's expert bytes: as many as a row of the nearest
// measured forward (no experts shared between rows: pessimistic, so streaming
// does not look free before it was measured; exploring measures it).
constexpr double kPriorBytesPerRow = 1.0;
constexpr double kPosPrior = 2.0;     // a draft position's estimate starts as 2 verified at the source's acceptance
}  // namespace

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::Off: return "off";
    case SpecMode::Auto: return "auto";
    case SpecMode::Mtp: return "mtp";
    case SpecMode::Ngram: return "ngram";
  }
  return "?";
}

std::optional<SpecMode> parse_spec_mode(std::string_view s) {
  for (SpecMode m : {SpecMode::Off, SpecMode::Auto, SpecMode::Mtp, SpecMode::Ngram})
    if (s == spec_mode_name(m)) return m;
  return std::nullopt;
}

const char* draft_source_name(DraftSource s) {
  switch (s) {
    case DraftSource::Forced: return "forced";
    case DraftSource::Ngram: return "ngram";
    case DraftSource::Mtp: return "mtp";
  }
  return "?";
}

uint64_t SpecStats::drafted() const {
  uint64_t n = 0;
  for (const auto& s : source) n += s.drafted;
  return n;
}

uint64_t SpecStats::accepted() const {
  uint64_t n = 0;
  for (const auto& s : source) n += s.accepted;
  return n;
}

double SpecStats::acceptance() const {
  const uint64_t d = drafted();
  return d ? static_cast<double>(accepted()) / static_cast<double>(d) : 0.0;
}

double SpecStats::tokens_per_step() const {
  return steps ? static_cast<double>(tokens) / static_cast<double>(steps) : 0.0;
}

double SpecStats::saved_s() const {
  if (one_row_ns <= 0) return 0.0;
  return (static_cast<double>(tokens) * one_row_ns - static_cast<double>(decode_ns + mtp_ns)) / 1e9;
}

size_t ngram_lookup(std::span<const int32_t> a, std::span<const int32_t> b, int nmin, int nmax,
                    std::span<int32_t> out) {
  const size_t na = a.size(), T = na + b.size();
  const auto at = [&](size_t i) { return i < na ? a[i] : b[i - na]; };
  if (out.empty()) return 0;
  for (int n = std::max(nmax, 1); n >= std::max(nmin, 1); --n) {
    const size_t N = static_cast<size_t>(n);
    if (T < N + 1) continue;
    const size_t suf = T - N;  // the suffix starts here
    const int32_t last = at(T - 1);
    // Most recent first: an occurrence starting at j < suf (it may overlap the suffix).
    for (size_t j = suf; j-- > 0;) {
      if (at(j + N - 1) != last) continue;
      size_t t = 0;
      while (t + 1 < N && at(j + t) == at(suf + t)) ++t;
      if (t + 1 < N) continue;
      size_t m = 0;
      for (size_t p = j + N; p < T && m < out.size(); ++p) out[m++] = at(p);
      if (m > 0) return m;
    }
  }
  return 0;
}

Speculator::Speculator(const SpecOptions& o, bool mtp_loaded, double mtp_prior)
    : o_(o),
      mtp_(mtp_loaded && (o.mode == SpecMode::Mtp || o.mode == SpecMode::Auto)),
      mtp_prior_(mtp_prior) {
  o_.k = std::clamp(o_.k, 1, kSpecMaxDraft);
  o_.ngram_min = std::max(1, o_.ngram_min);
  o_.ngram_max = std::max(o_.ngram_min, o_.ngram_max);
  st_.mode = o_.mode;
  st_.k = o_.mode == SpecMode::Off ? 0 : o_.k;
}

void Speculator::update(Table& t, int64_t rows, double v) {
  Est& e = t[static_cast<size_t>(rows)];
  e.last[e.n % kSamples] = v;
  ++e.n;
  std::array<double, kSamples> s = e.last;
  const size_t k = std::min<size_t>(e.n, kSamples);
  std::sort(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k));
  e.ns = s[(k - 1) / 2];  // two samples: the smaller
}

void Speculator::record_forward(int64_t rows, uint64_t ns, uint64_t bytes, uint64_t read_ns) {
  st_.decode_ns += ns;
  st_.decode_bytes += bytes;
  if (bytes > 0) {
    io_ns_ = io_ns_ * kDecay + static_cast<double>(read_ns);
    io_bytes_ = io_bytes_ * kDecay + static_cast<double>(bytes);
  }
  if (rows < 1 || rows > kMaxRows) return;
  update(main_, rows, static_cast<double>(ns));
  update(bytes_, rows, static_cast<double>(bytes));
  update(compute_, rows, static_cast<double>(ns) - static_cast<double>(bytes) * read_ns_per_byte());
}

void Speculator::record_mtp(int64_t rows, uint64_t ns, int64_t whole) {
  ++st_.mtp_forwards;
  st_.mtp_rows += static_cast<uint64_t>(std::max<int64_t>(rows, 0));
  st_.mtp_ns += ns;
  if (whole < 1 || whole > kMaxRows) return;
  update(mtp_cost_, whole, static_cast<double>(ns));
}

double Speculator::cost(const Table& t, int64_t rows, double prior, bool per_row) {
  rows = std::clamp<int64_t>(rows, 1, kMaxRows);
  // The measured counts, ascending, with their values (an untrusted count
  // capped by the extrapolation from the counts below it).
  std::array<int64_t, kMaxRows + 1> at;
  std::array<double, kMaxRows + 1> val;
  size_t m = 0;
  const auto extrapolate = [&](size_t below, int64_t r) {  // from the `below` first entries
    const int64_t lo = at[below - 1];
    const double slope = below > 1 ? std::max(0.0, (val[below - 1] - val[below - 2]) /
                                                       static_cast<double>(lo - at[below - 2]))
                                   : prior * val[below - 1] / static_cast<double>(per_row ? lo : 1);
    return val[below - 1] + slope * static_cast<double>(r - lo);
  };
  for (int64_t r = 1; r <= kMaxRows; ++r) {
    const Est& e = t[static_cast<size_t>(r)];
    if (!e.n) continue;
    double v = e.ns;
    if (e.n < kTrusted && m > 0) v = std::min(v, extrapolate(m, r));
    at[m] = r;
    val[m++] = v;
  }
  size_t hi = 0;
  while (hi < m && at[hi] < rows) ++hi;
  if (hi < m && at[hi] == rows) return val[hi];
  if (hi > 0 && hi < m) {  // between two measured counts
    const int64_t lo = at[hi - 1];
    return val[hi - 1] + (val[hi] - val[hi - 1]) * static_cast<double>(rows - lo) / static_cast<double>(at[hi] - lo);
  }
  if (hi > 0) return extrapolate(hi, rows);  // above every measured count
  if (m > 0)  // below every measured count
    return val[0] * std::max(0.5, 1.0 - prior * static_cast<double>(at[0] - rows) / static_cast<double>(per_row ? at[0] : 1));
  return 0.0;
}

double Speculator::forward_bytes(int64_t rows) const { return std::max(0.0, cost(bytes_, rows, kPriorBytesPerRow, true)); }

double Speculator::forward_ns(int64_t rows) const {
  const double c = cost(compute_, rows, kPriorSlope, false);
  const double b = forward_bytes(rows) * read_ns_per_byte();
  return c > 0 || b > 0 ? std::max(0.0, c) + b : 0.0;
}

double Speculator::rel_main(int extra) const {
  if (extra <= 0) return 1.0;
  const double a = forward_ns(base_), b = forward_ns(base_ + extra);
  if (a <= 0 || b <= 0) return 1.0 + kPriorSlope * extra;
  return std::max(1.0, b / a);
}

bool Speculator::mtp_measured() const {
  for (int64_t r = 1; r <= kMaxRows; ++r)
    if (mtp_cost_[static_cast<size_t>(r)].n) return true;
  return false;
}

double Speculator::rel_mtp() const {
  // A chain row is priced from MTP forwards of at most base_ rows. Until one
  // ran, from the narrowest wider one (the prompt's MTP sync: one forward
  // over every prompt position) at its time per row: a lower bound (rows
  // share weights and experts, so a forward of r rows costs at most r times
  // one), so the chain is tried and measured, and an answer drops its MTP
  // state at once only where even that bound cannot pay. Before, the sync
  // was scaled down to half its time: on the bundled model's 31-token code
  // prompt a chain row then looked 0.84x a whole decode forward and the MTP
  // state was dropped at the second plan of every answer.
  const double a = forward_ns(base_);
  double m = 0;
  for (int64_t r = 1; r <= kMaxRows && m <= 0; ++r) {
    const Est& e = mtp_cost_[static_cast<size_t>(r)];
    if (!e.n) continue;
    m = r <= base_ ? cost(mtp_cost_, base_, kPriorSlope, false)
                   : e.ns * static_cast<double>(base_) / static_cast<double>(r);
  }
  if (a <= 0 || m <= 0) return mtp_prior_;
  return m / a;
}

double Speculator::acceptance(DraftSource s) const {
  const size_t i = static_cast<size_t>(s);
  return (acc_[i] + 1.0) / (seen_[i] + 2.0);
}

double Speculator::acceptance(DraftSource s, int pos) const {
  const size_t i = static_cast<size_t>(s), p = static_cast<size_t>(std::clamp(pos, 0, kSpecMaxDraft - 1));
  return (pos_acc_[i][p] + kPosPrior * acceptance(s)) / (pos_seen_[i][p] + kPosPrior);
}

double Speculator::value(int forced, DraftSource s, int count) const {
  // Expected tokens: the pending token's, every forced one, and draft i when
  // it and every draft before it are accepted.
  double e = 1.0 + forced, p = 1.0;
  for (int i = 0; i < count; ++i) e += (p *= acceptance(s, i));
  double c = rel_main(forced + count);
  // An MTP plan pays its chain rows after the first draft and the row that
  // keeps the MTP state in sync (which gives the first draft): the state is
  // kept only while plans choose the chain (mtp_plan), so the chain must pay
  // for it against plans without MTP, which would not keep it. Until
  // 2026-12-07 the sync row was left out: one-draft chains looked free, kept
  // being chosen, and the bundled model's `auto` paid ~0.3 of a forward per
  // token to keep a state whose drafts did not pay for it.
  if (s == DraftSource::Mtp && count > 0) c += static_cast<double>(forced + count) * rel_mtp();
  return e / c;
}

SpecPlan Speculator::plan(int forced, int ngram, int cap, bool mtp) {
  const int room = std::max(0, cap - forced);
  ngram = std::min(ngram, room);
  const auto chosen = [&](SpecPlan p) {
    ++st_.chosen[static_cast<size_t>(std::clamp(p.count, 0, kSpecMaxDraft))];
    return p;
  };
  switch (o_.mode) {
    case SpecMode::Off: return {};
    case SpecMode::Ngram: return chosen({DraftSource::Ngram, ngram});
    case SpecMode::Mtp: return chosen(mtp ? SpecPlan{DraftSource::Mtp, room} : SpecPlan{});
    case SpecMode::Auto: break;
  }
  ++plans_;
  SpecPlan best{DraftSource::Ngram, 0};
  double best_v = value(forced, DraftSource::Ngram, 0);
  for (int l = 1; l <= ngram; ++l) {
    const double v = value(forced, DraftSource::Ngram, l);
    if (v > best_v) best_v = v, best = {DraftSource::Ngram, l};
  }
  // An upper bound on what MTP state can give, once a decode forward (of
  // any width) was measured: every draft accepted, charged its chain and
  // one MTP forward a step to keep the state in sync (at least that). Until
  // an MTP forward is measured a chain row is priced at mtp_prior_ (1 / the
  // main layers: an MTP forward is one decoder layer plus the head, so at
  // least that share of a decode forward, in time and in streamed expert
  // bytes), a lower bound: where even it cannot pay, no MTP forward runs.
  // Before 2026-12-07 the rule waited for a measured MTP forward, and with
  // streamed experts the first one (the prompt's sync, reading most of the
  // MTP layer's experts) cost the GLM-5.2 slice 5-10% of a 128-token answer.
  bool hopeless = mtp && room > 0 && forward_ns(base_) > 0;
  if (hopeless) {
    const double plain_v = best_v, r = rel_mtp();
    for (int m = 1; m <= room && hopeless; ++m)
      hopeless = (1.0 + forced + m) / (rel_main(forced + m) + static_cast<double>(forced + m) * r) <= plain_v;
  }
  if (mtp && !hopeless)
    for (int m = 1; m <= room; ++m) {
      const double v = value(forced, DraftSource::Mtp, m);
      if (v > best_v) best_v = v, best = {DraftSource::Mtp, m};
    }
  // Costs are measured only where drafts are verified: look again now and
  // then, and measure a forward one row wider than this step's before its
  // cost is trusted (the priors then only fill in the rest).
  const size_t wider = static_cast<size_t>(std::min<int64_t>(base_ + forced + 1, kMaxRows));
  if (best.count > 0) {
    probe_gap_ = kExplore;
    next_probe_ = plans_ + kExplore;
  } else if (ngram > 0 || (mtp && !hopeless && room > 0)) {
    const bool due = plans_ >= next_probe_;
    if (due || main_[wider].n < kMeasureFirst) {
      const bool ng = ngram > 0 && (!mtp || hopeless || acceptance(DraftSource::Ngram) >= acceptance(DraftSource::Mtp));
      best = {ng ? DraftSource::Ngram : DraftSource::Mtp, 1};
    }
    if (due) {
      probe_gap_ = std::min(probe_gap_ * 2, kExploreMax);
      next_probe_ = plans_ + probe_gap_;
    }
  }
  if (best.source == DraftSource::Mtp && best.count > 0) mtp_backoff_ = 1;
  best.mtp_hopeless = hopeless;
  return chosen(best);
}

bool Speculator::start_mtp() {
  if (!mtp_) return false;
  if (o_.mode != SpecMode::Auto) return true;
  if (mtp_skip_ > 0) {
    --mtp_skip_;
    // The first answer after the back-off looks again: it gets its own
    // kMtpIdleDrop plans before the engine's count drops it.
    if (mtp_skip_ == 0) mtp_idle_ = 0;
    return false;
  }
  return true;
}

bool Speculator::mtp_plan(bool chain) {
  if (chain) {
    mtp_idle_ = 0;
    return false;
  }
  return ++mtp_idle_ >= kMtpIdleDrop;
}

void Speculator::mtp_dropped() {
  ++st_.mtp_drops;
  // Several answers at once (a server's) drop on the same count: the back-off
  // grows once per round of drops, not once per answer.
  if (mtp_skip_ > 0) return;
  mtp_skip_ = mtp_backoff_;
  mtp_backoff_ = std::min(64, mtp_backoff_ * 2);
}

void Speculator::record_step(std::span<const uint8_t> sources, int fed, int reached, int accepted, int tokens) {
  ++st_.steps;
  if (fed > 0) ++st_.spec_steps;
  st_.tokens += static_cast<uint64_t>(std::max(tokens, 0));
  std::array<int, kDraftSources> pos{};  // drafts of each source so far in this step
  for (int i = 0; i < fed && i < static_cast<int>(sources.size()); ++i) {
    const size_t s = sources[static_cast<size_t>(i)];
    const size_t p = static_cast<size_t>(std::min(pos[s]++, kSpecMaxDraft - 1));
    ++st_.source[s].drafted;
    if (i < accepted) ++st_.source[s].accepted;
    if (i < reached) {  // verified: every draft before it was accepted
      const double hit = i < accepted ? 1.0 : 0.0;
      acc_[s] = acc_[s] * kDecay + hit;
      seen_[s] = seen_[s] * kDecay + 1.0;
      pos_acc_[s][p] = pos_acc_[s][p] * kDecay + hit;
      pos_seen_[s][p] = pos_seen_[s][p] * kDecay + 1.0;
    }
  }
}

void Speculator::record_shadow(DraftSource s, bool hit) {
  const size_t i = static_cast<size_t>(s);
  ++st_.source[i].shadow;
  if (hit) ++st_.source[i].shadow_hits;
  acc_[i] = acc_[i] * kDecay + (hit ? 1.0 : 0.0);
  seen_[i] = seen_[i] * kDecay + 1.0;
  pos_acc_[i][0] = pos_acc_[i][0] * kDecay + (hit ? 1.0 : 0.0);  // a first draft
  pos_seen_[i][0] = pos_seen_[i][0] * kDecay + 1.0;
}

SpecStats Speculator::stats() const {
  SpecStats s = st_;
  s.one_row_ns = main_[1].n >= 8 ? main_[1].ns : 0.0;  // a few samples before it means anything
  s.read_ns_per_byte = read_ns_per_byte();
  return s;
}

}  // namespace strata
