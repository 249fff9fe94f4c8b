// The expert atlas's arithmetic (runtime/routing_atlas.h) on a synthetic
// trace whose entropy, co-activation, recall at k and shift between kinds
// are computed by hand in the comments.
#include "runtime/routing_atlas.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace strata::routing_atlas_test {
namespace {

// Two MoE layers (model layers 1 and 2), 4 experts, top-2. Per token two
// experts of layer 1 (`l1`), of layer 2 (`l2`) and the read-ahead's
// prediction for layer 2 (`p2`), flattened.
RecordedTrace make_trace(const std::vector<int32_t>& l1, const std::vector<int32_t>& l2, const std::vector<int32_t>& p2) {
  RecordedTrace t;
  t.model = "synthetic";
  t.fingerprint = "00";
  t.layers = {1, 2};
  t.experts = 4;
  t.top_k = 2;
  t.tokens = static_cast<int64_t>(l1.size() / 2);
  for (size_t i = 0; i < l1.size() / 2; ++i) {
    t.chosen.insert(t.chosen.end(), {l1[2 * i], l1[2 * i + 1], l2[2 * i], l2[2 * i + 1]});
    // Layer 1: no prediction (the first MoE layer).
    t.predicted.insert(t.predicted.end(), {-1, -1, p2[2 * i], p2[2 * i + 1]});
  }
  return t;
}

// Kind "a": tokens 0, 1; kind "b": tokens 2, 3.
//   layer 1: {0,1} {0,1} | {0,2} {2,3}
//   layer 2: {1,0} {2,3} | {3,1} {0,2}; predicted for layer 2: [0,2] [3,1] | [1,3] [1,0]
// Element by element, each expected count a separate argument: as a braced
// std::vector<uint64_t> or std::array temporary, {2, 2, 0, 0} read back as
// {2, 2, 2, 2} in the -O3 -march=native (AVX-512) build of this file (GCC
// 12), while -O1 and other values compared right.
void expect_counts(const std::vector<uint64_t>& got, uint64_t c0, uint64_t c1, uint64_t c2, uint64_t c3) {
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], c0);
  EXPECT_EQ(got[1], c1);
  EXPECT_EQ(got[2], c2);
  EXPECT_EQ(got[3], c3);
}

struct Fixture {
  RecordedTrace a = make_trace({0, 1, 0, 1}, {1, 0, 2, 3}, {0, 2, 3, 1});
  RecordedTrace b = make_trace({0, 2, 2, 3}, {3, 1, 0, 2}, {1, 3, 1, 0});
  Atlas atlas() {
    AtlasOptions o;
    o.min_expected = 0;  // rank every pair
    return build_atlas({{"a", &a}, {"b", &b}}, o);
  }
};

TEST(RoutingAtlas, UsageAndEntropyByHand) {
  Fixture f;
  const Atlas at = f.atlas();
  ASSERT_EQ(at.layers.size(), 2u);
  const AtlasLayer& L1 = at.layers[0];
  EXPECT_EQ(L1.layer, 1);
  // Layer 1, all 4 tokens: counts 3, 2, 2, 1 of 8 slots.
  expect_counts(L1.all.counts, 3, 2, 2, 1);
  EXPECT_EQ(L1.all.tokens, 4);
  EXPECT_DOUBLE_EQ(L1.all.share[0], 0.375);
  EXPECT_DOUBLE_EQ(L1.all.share[3], 0.125);
  // H = .375 log2(1/.375) + 2 (.25 * 2) + .125 * 3 = 1.905639 bits; / log2(4).
  EXPECT_NEAR(L1.all.entropy_bits, 1.9056390622295665, 1e-12);
  EXPECT_NEAR(L1.all.entropy_norm, 0.9528195311147833, 1e-12);
  // Layer 2 uses each expert twice: uniform.
  EXPECT_NEAR(at.layers[1].all.entropy_norm, 1.0, 1e-12);
  // Kind "a" on layer 1: experts 0 and 1 only: 1 bit of 2.
  expect_counts(L1.by_kind[0].counts, 2, 2, 0, 0);
  EXPECT_NEAR(L1.by_kind[0].entropy_norm, 0.5, 1e-12);
  // The same through expert_usage on one trace.
  expect_counts(expert_usage(f.b, 0).counts, 1, 0, 2, 1);
}

TEST(RoutingAtlas, CoActivationAgainstIndependence) {
  Fixture f;
  const AtlasLayer L1 = f.atlas().layers[0];
  // together(i, j): tokens that chose both; the diagonal is the counts.
  EXPECT_EQ(L1.together[0 * 4 + 1], 2u);
  EXPECT_EQ(L1.together[1 * 4 + 0], 2u);
  EXPECT_EQ(L1.together[0 * 4 + 2], 1u);
  EXPECT_EQ(L1.together[2 * 4 + 3], 1u);
  EXPECT_EQ(L1.together[0 * 4 + 3], 0u);
  EXPECT_EQ(L1.together[0 * 4 + 0], 3u);
  // lift = together / (counts_a counts_b / tokens):
  //   (2,3): 1 / (2*1/4) = 2;  (0,1): 2 / (3*2/4) = 4/3;  (0,2): 1 / 1.5 = 2/3;  others 0.
  ASSERT_EQ(L1.most_together.size(), 6u);
  EXPECT_EQ(L1.most_together[0].a, 2);
  EXPECT_EQ(L1.most_together[0].b, 3);
  EXPECT_DOUBLE_EQ(L1.most_together[0].lift, 2.0);
  EXPECT_EQ(L1.most_together[1].a, 0);
  EXPECT_EQ(L1.most_together[1].b, 1);
  EXPECT_NEAR(L1.most_together[1].lift, 4.0 / 3.0, 1e-12);
  EXPECT_NEAR(L1.most_together[2].lift, 2.0 / 3.0, 1e-12);
  // Least together: the zero pairs, lowest (a, b) first.
  EXPECT_EQ(L1.least_together[0].a, 0);
  EXPECT_EQ(L1.least_together[0].b, 3);
  EXPECT_EQ(L1.least_together[0].lift, 0.0);
  // A pair is ranked only when independence expects enough tokens: with
  // min_expected 1, (2,3) (expected 0.5) and (1,3), (0,3) drop out.
  AtlasOptions o;
  o.min_expected = 1;
  const Atlas at = build_atlas({{"a", &f.a}, {"b", &f.b}}, o);
  ASSERT_EQ(at.layers[0].most_together.size(), 3u);
  EXPECT_EQ(at.layers[0].most_together[0].a, 0);
  EXPECT_EQ(at.layers[0].most_together[0].b, 1);
}

TEST(RoutingAtlas, RecallAtKOfTheReadAheadByHand) {
  Fixture f;
  const Atlas at = f.atlas();
  // Layer 1 has no prediction (the first MoE layer).
  EXPECT_TRUE(at.layers[0].recall_at.empty());
  EXPECT_EQ(at.layers[0].predicted_tokens, 0);
  const AtlasLayer& L2 = at.layers[1];
  EXPECT_EQ(L2.predicted_tokens, 4);
  // First predicted in the chosen pair: t0 0 in {1,0} yes, t1 3 in {2,3} yes,
  // t2 1 in {3,1} yes, t3 1 in {0,2} no: 3 of 8 chosen, 3 of 4 predicted.
  // First two: t0 1, t1 1, t2 2, t3 1 = 5 of 8.
  ASSERT_EQ(L2.recall_at.size(), 2u);
  EXPECT_DOUBLE_EQ(L2.recall_at[0], 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(L2.recall_at[1], 5.0 / 8.0);
  EXPECT_DOUBLE_EQ(L2.precision_at[0], 3.0 / 4.0);
  EXPECT_DOUBLE_EQ(L2.precision_at[1], 5.0 / 8.0);
  // The static baseline on layer 1: experts 0 (3 tokens), then 1 (2, the
  // lower number of the tie with 2): 3/8, 5/8.
  EXPECT_DOUBLE_EQ(at.layers[0].popular_recall_at[0], 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(at.layers[0].popular_recall_at[1], 5.0 / 8.0);
}

TEST(RoutingAtlas, ShiftBetweenKindsByHand) {
  Fixture f;
  const AtlasLayer L1 = f.atlas().layers[0];
  ASSERT_EQ(L1.shifts.size(), 1u);
  const UsageShift& s = L1.shifts[0];
  // a: (.5, .5, 0, 0), b: (.25, 0, .5, .25): TV = (.25 + .5 + .5 + .25) / 2.
  EXPECT_DOUBLE_EQ(s.tv, 0.75);
  // M = (.375, .25, .25, .125); KL(a||M) = .5 log2(4/3) + .5 = 0.7075187;
  // KL(b||M) = .25 log2(2/3) + .5 + .25 = 0.6037594; JS = their mean.
  const double js = 0.5 * (0.5 * std::log2(4.0 / 3.0) + 0.5) + 0.5 * (0.25 * std::log2(2.0 / 3.0) + 0.75);
  EXPECT_NEAR(s.js_bits, js, 1e-12);
  EXPECT_NEAR(s.js_bits, 0.6556390622295665, 1e-12);
  // Largest |difference| first (ties: the lower number): 1, 2 (.5), 0, 3 (.25).
  ASSERT_GE(s.top_experts.size(), 4u);
  EXPECT_EQ(s.top_experts[0], 1);
  EXPECT_EQ(s.top_experts[1], 2);
  EXPECT_EQ(s.top_experts[2], 0);
  // Layer 2: a (.25, .25, .25, .25) vs b (.25, .25, .25, .25): no shift.
  EXPECT_DOUBLE_EQ(f.atlas().layers[1].shifts[0].tv, 0.0);
  EXPECT_NEAR(js_divergence_bits({0.5, 0.5}, {0.5, 0.5}), 0.0, 1e-15);
  EXPECT_NEAR(js_divergence_bits({1, 0}, {0, 1}), 1.0, 1e-15);
}

TEST(RoutingAtlas, JsonKeysAndRefusals) {
  Fixture f;
  const Json j = atlas_json(f.atlas(), 1);
  EXPECT_EQ(j["format"], "strata-atlas");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["layers"].size(), 2u);
  EXPECT_EQ(j["layers"][0]["usage"]["counts"], Json({3, 2, 2, 1}));
  EXPECT_TRUE(j["layers"][0]["recall_at"].is_null());
  EXPECT_DOUBLE_EQ(j["layers"][1]["recall_at"][1].get<double>(), 0.625);
  EXPECT_EQ(j["coactivation"]["layer"], 1);
  EXPECT_EQ(j["coactivation"]["together"][0][1], 2);
  EXPECT_DOUBLE_EQ(j["coactivation"]["lift"][2][3].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["layers"][0]["shift"][0]["tv"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["summary"]["recall_at_mean"][0].get<double>(), 0.375);
  EXPECT_DOUBLE_EQ(j["summary"]["shift_mean"]["a/b"]["tv_mean"].get<double>(), 0.375);
  // Kinds routed over other experts, or two kinds of one name, are refused.
  RecordedTrace other = f.b;
  other.experts = 8;
  EXPECT_THROW(build_atlas({{"a", &f.a}, {"c", &other}}), Error);
  EXPECT_THROW(build_atlas({{"a", &f.a}, {"a", &f.b}}), Error);
  EXPECT_THROW(build_atlas({}), Error);
}

}  // namespace
}  // namespace strata::routing_atlas_test
