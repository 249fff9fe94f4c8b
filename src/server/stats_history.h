// The dashboard's history (docs/server.md "Monitoring"): throughput, expert
// hit rate and disk reads since the server started, kept by the server so a
// page opened later still shows them (GET /v1/stats/history). A sampler
// thread adds one sample of the cumulative counters about once an interval;
// the history holds at most `capacity` of them. When full it drops every
// other point but the first and the last, and the spacing between points
// doubles: memory stays bounded at any uptime and the span stays from start
// to now. Rates are differences of cumulative counters between consecutive
// kept points, so each is the exact mean over its interval however often the
// history was thinned. Nothing here runs in the generation step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/json.h"

namespace strata::server {

// The counters at one moment (cumulative since start, never decreasing).
struct HistorySample {
  double t = 0;  // seconds since the server started
  uint64_t generated_tokens = 0, prefilled_tokens = 0;
  uint64_t expert_requests = 0, expert_hits = 0, expert_bytes_read = 0;
};

class StatsHistory {
 public:
  // `capacity`: points kept at most (rounded up to an even number, at least
  // 4); `interval_s`: the sampler's period, the first spacing of points.
  explicit StatsHistory(size_t capacity = 720, double interval_s = 1.0);

  // The latest counters. A sample less than a spacing after the last kept
  // point replaces the newest one (so the history always ends now).
  void add(const HistorySample& s);

  const std::vector<HistorySample>& points() const { return pts_; }
  size_t capacity() const { return cap_; }
  double spacing_s() const { return spacing_; }  // between kept points now

  // {"interval_s", "capacity", "start_s", "t": [...], "generated_tok_s": [...],
  //  "prefilled_tok_s": [...], "expert_hit_rate": [... null where no expert
  //  was asked for], "disk_read_gb_s": [...]}: one entry per interval between
  // consecutive points, `t` its end (seconds since start).
  Json json() const;

 private:
  size_t cap_;
  double base_, spacing_;
  std::vector<HistorySample> pts_;
};

}  // namespace strata::server
