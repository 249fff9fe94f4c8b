#include "server/stats_history.h"

#include <algorithm>

namespace strata::server {

namespace {
// A counter's growth (0 should one ever go back).
double grew(uint64_t to, uint64_t from) { return to > from ? static_cast<double>(to - from) : 0.0; }
}  // namespace

StatsHistory::StatsHistory(size_t capacity, double interval_s)
    : cap_(std::max<size_t>(4, capacity + (capacity & 1))), base_(interval_s), spacing_(interval_s) {
  pts_.reserve(cap_ + 1);
}

void StatsHistory::add(const HistorySample& s) {
  // The newest point is provisional while it is less than a spacing after
  // the one before it (half a sampler period of slack for timer jitter).
  const size_t n = pts_.size();
  if (n >= 2 && pts_[n - 1].t - pts_[n - 2].t < spacing_ - base_ / 2) {
    pts_[n - 1] = s;
    return;
  }
  pts_.push_back(s);
  if (pts_.size() <= cap_) return;
  // Full: keep the even indices (0, 2, ..., cap_; cap_ is even, so the
  // newest point stays) and double the spacing.
  size_t w = 0;
  for (size_t r = 0; r < pts_.size(); r += 2) pts_[w++] = pts_[r];
  pts_.resize(w);
  spacing_ *= 2;
}

Json StatsHistory::json() const {
  Json t = Json::array(), gen = Json::array(), pre = Json::array(), hit = Json::array(), disk = Json::array();
  for (size_t i = 1; i < pts_.size(); ++i) {
    const HistorySample& a = pts_[i - 1];
    const HistorySample& b = pts_[i];
    const double dt = b.t - a.t;
    if (dt <= 0) continue;
    t.push_back(b.t);
    gen.push_back(grew(b.generated_tokens, a.generated_tokens) / dt);
    pre.push_back(grew(b.prefilled_tokens, a.prefilled_tokens) / dt);
    if (const double req = grew(b.expert_requests, a.expert_requests); req > 0)
      hit.push_back(grew(b.expert_hits, a.expert_hits) / req);
    else
      hit.push_back(nullptr);
    disk.push_back(grew(b.expert_bytes_read, a.expert_bytes_read) / 1e9 / dt);
  }
  Json j;
  j["interval_s"] = spacing_;
  j["capacity"] = cap_;
  j["start_s"] = pts_.empty() ? 0.0 : pts_.front().t;
  j["t"] = std::move(t);
  j["generated_tok_s"] = std::move(gen);
  j["prefilled_tok_s"] = std::move(pre);
  j["expert_hit_rate"] = std::move(hit);
  j["disk_read_gb_s"] = std::move(disk);
  return j;
}

}  // namespace strata::server
