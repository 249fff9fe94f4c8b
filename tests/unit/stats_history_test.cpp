// The dashboard's server-side history (server/stats_history.h) and the
// request log's recent requests (server/request_log.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "server/request_log.h"
#include "server/stats_history.h"

namespace strata::server::stats_history_test {
namespace {

// A synthetic server at second k: tokens at a rate that changes every 7 s,
// experts asked for and hit in known proportions, bytes read.
HistorySample feed(uint64_t k) {
  static const std::vector<uint64_t> generated = [] {
    std::vector<uint64_t> g(100002, 0);
    for (size_t i = 1; i < g.size(); ++i) g[i] = g[i - 1] + 3 + ((i - 1) / 7) % 5;
    return g;
  }();
  HistorySample s;
  s.t = static_cast<double>(k);
  s.generated_tokens = generated.at(k);
  s.prefilled_tokens = 100 * k;
  s.expert_requests = 8 * k;
  s.expert_hits = 6 * k;
  s.expert_bytes_read = 250'000'000ull * k;
  return s;
}

TEST(StatsHistory, BoundedAndKeepsTheSpan) {
  StatsHistory h(64, 1.0);
  size_t most = 0;
  for (uint64_t k = 0; k <= 100000; ++k) {
    h.add(feed(k));
    most = std::max(most, h.points().size());
  }
  EXPECT_LE(most, 65u);  // capacity, plus the one that triggers thinning
  EXPECT_LE(h.points().size(), 64u);
  EXPECT_GE(h.points().size(), 32u);
  EXPECT_EQ(h.points().front().t, 0.0);       // from the start
  EXPECT_EQ(h.points().back().t, 100000.0);   // to now
  // The spacing doubled as often as needed: 64 points cover 100000 s.
  EXPECT_EQ(h.spacing_s(), 2048.0);
  for (size_t i = 1; i < h.points().size(); ++i) EXPECT_GT(h.points()[i].t, h.points()[i - 1].t);
}

TEST(StatsHistory, RatesAreExactMeansOverEachInterval) {
  StatsHistory h(16, 1.0);
  for (uint64_t k = 0; k <= 1000; ++k) h.add(feed(k));
  const Json j = h.json();
  const auto& pts = h.points();
  ASSERT_EQ(j["t"].size(), pts.size() - 1);
  double total = 0;
  for (size_t i = 1; i < pts.size(); ++i) {
    const HistorySample a = feed(static_cast<uint64_t>(pts[i - 1].t));
    const HistorySample b = feed(static_cast<uint64_t>(pts[i].t));
    const double dt = b.t - a.t;
    EXPECT_EQ(j["t"][i - 1].get<double>(), b.t);
    EXPECT_EQ(j["generated_tok_s"][i - 1].get<double>(),
              static_cast<double>(b.generated_tokens - a.generated_tokens) / dt);
    EXPECT_EQ(j["prefilled_tok_s"][i - 1].get<double>(), 100.0);
    EXPECT_EQ(j["expert_hit_rate"][i - 1].get<double>(), 0.75);
    EXPECT_EQ(j["disk_read_gb_s"][i - 1].get<double>(), 0.25);
    total += j["generated_tok_s"][i - 1].get<double>() * dt;
  }
  // Thinning loses no tokens: the rates integrate to the total.
  EXPECT_NEAR(total, static_cast<double>(feed(1000).generated_tokens), 1e-6);
  EXPECT_EQ(j["start_s"].get<double>(), 0.0);
  EXPECT_EQ(j["capacity"].get<size_t>(), 16u);
  EXPECT_EQ(j["interval_s"].get<double>(), h.spacing_s());
}

TEST(StatsHistory, NoExpertsAskedIsNullAndLateSamplesReplaceTheNewest) {
  StatsHistory h(8, 1.0);
  HistorySample s;
  h.add(s);
  s.t = 1.0;
  s.generated_tokens = 5;
  h.add(s);
  s.t = 2.0;
  s.generated_tokens = 15;
  h.add(s);
  Json j = h.json();
  ASSERT_EQ(j["t"].size(), 2u);
  EXPECT_TRUE(j["expert_hit_rate"][0].is_null());
  EXPECT_EQ(j["generated_tok_s"][1].get<double>(), 10.0);
  // Thin to a 2 s spacing; a sample 1 s after the newest kept point then
  // stands in for "now" until a whole spacing has passed.
  for (int k = 3; k <= 8; ++k) {
    s.t = k;
    h.add(s);
  }
  ASSERT_EQ(h.spacing_s(), 2.0);
  const size_t n = h.points().size();
  s.t = 9.0;
  h.add(s);
  EXPECT_EQ(h.points().size(), n + 1);
  s.t = 10.0;
  h.add(s);
  EXPECT_EQ(h.points().size(), n + 1);  // replaced the provisional 9 s point
  EXPECT_EQ(h.points().back().t, 10.0);
  s.t = 11.0;
  h.add(s);
  EXPECT_EQ(h.points().size(), n + 2);
}

TEST(RequestLog, KeepsTheLastRequestsNewestFirst) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  RequestLog log(LogFormat::Off, out, 3);
  for (int i = 0; i < 5; ++i) {
    RequestRecord r;
    r.method = "POST";
    r.path = "/v1/completions";
    r.status = 200;
    r.prompt_tokens = i;
    r.completion_tokens = 10 + i;
    r.ms = 1.25;
    log.write(r, 1'700'000'000'000 + i);
  }
  RequestRecord poll;
  poll.method = "GET";
  poll.path = "/v1/stats/history";
  poll.status = 200;
  log.write(poll);  // a dashboard poll: not kept
  const Json j = log.recent();
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["prompt_tokens"], 4);
  EXPECT_EQ(j[2]["prompt_tokens"], 2);
  EXPECT_EQ(j[0]["completion_tokens"], 14);
  EXPECT_EQ(j[0]["path"], "/v1/completions");
  EXPECT_EQ(j[0]["time"], "2023-11-14T22:13:20.004Z");
  EXPECT_EQ(std::ftell(out), 0);  // --log-format off writes nothing
  std::fclose(out);
}

}  // namespace
}  // namespace strata::server::stats_history_test
