// Sampling: truncation sets and renormalised probabilities on known
// distributions, penalties, seeded reproducibility, stop strings that span
// pieces of streamed text, and generation_config.json parsing.
#include "text/sampler.h"
#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "test_util.h"
#include "text/generation_config.h"
#include "core/error.h"

namespace strata::sampler_test {
namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? static_cast<float>(std::log(p)) : -INFINITY);
  return l;
}

// distribution() of `probs` under `o`, as (id, p) pairs.
std::vector<std::pair<int32_t, double>> kept(const std::vector<double>& probs, const SamplerOptions& o,
                                             std::vector<int32_t> banned = {}) {
  Sampler s(static_cast<int64_t>(probs.size()), o);
  std::vector<float> l = logits_of(probs);
  return s.distribution(l, banned);
}

void expect_kept(const std::vector<std::pair<int32_t, double>>& got,
                 const std::vector<std::pair<int32_t, double>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first) << "rank " << i;
    EXPECT_NEAR(got[i].second, want[i].second, 1e-6) << "rank " << i;
  }
}

SamplerOptions opts(double t = 1.0) {
  SamplerOptions o;
  o.temperature = t;
  return o;
}

TEST(Sampler, FullDistributionWithoutTruncation) {
  expect_kept(kept({0.1, 0.4, 0.2, 0.3}, opts()), {{1, 0.4}, {3, 0.3}, {2, 0.2}, {0, 0.1}});
}

TEST(Sampler, Temperature) {
  // softmax([2, 1, 0] / 2) = softmax([1, 0.5, 0])
  SamplerOptions o = opts(2.0);
  Sampler s(3, o);
  std::vector<float> l = {2.0f, 1.0f, 0.0f};
  const auto d = s.distribution(l);
  const double z = std::exp(1.0) + std::exp(0.5) + 1.0;
  expect_kept(d, {{0, std::exp(1.0) / z}, {1, std::exp(0.5) / z}, {2, 1.0 / z}});
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s(5, opts(0.0));
  std::vector<float> l = {1.0f, 3.0f, -2.0f, 3.0f, NAN};
  EXPECT_EQ(s.sample(l), 1);
  std::vector<float> l2 = {1.0f, 3.0f, -2.0f, 3.0f, 0.0f};
  const int32_t banned[] = {1};
  EXPECT_EQ(s.sample(l2, banned), 3);
  // top-k 1 at any temperature is greedy too.
  SamplerOptions o = opts(5.0);
  o.top_k = 1;
  expect_kept(kept({0.1, 0.4, 0.2, 0.3}, o), {{1, 1.0}});
}

TEST(Sampler, TopK) {
  SamplerOptions o = opts();
  o.top_k = 2;
  expect_kept(kept({0.1, 0.4, 0.2, 0.3}, o), {{1, 0.4 / 0.7}, {3, 0.3 / 0.7}});
  o.top_k = 10;  // more than the vocabulary: no cut
  EXPECT_EQ(kept({0.1, 0.4, 0.2, 0.3}, o).size(), 4u);
  // Ties at the boundary go to the lower id.
  o.top_k = 2;
  expect_kept(kept({0.25, 0.25, 0.25, 0.25}, o), {{0, 0.5}, {1, 0.5}});
}

TEST(Sampler, TopP) {
  // Sorted: 0.5 (id 2), 0.25 (id 0), 0.15 (id 3), 0.1 (id 1). A token is kept
  // while the mass before it is < top_p.
  const std::vector<double> p = {0.25, 0.1, 0.5, 0.15};
  SamplerOptions o = opts();
  o.top_p = 0.4;
  expect_kept(kept(p, o), {{2, 1.0}});
  o.top_p = 0.7;
  expect_kept(kept(p, o), {{2, 0.5 / 0.75}, {0, 0.25 / 0.75}});
  o.top_p = 0.8;
  expect_kept(kept(p, o), {{2, 0.5 / 0.9}, {0, 0.25 / 0.9}, {3, 0.15 / 0.9}});
  o.top_p = 1.0;
  EXPECT_EQ(kept(p, o).size(), 4u);
  o.top_p = 0.0;  // always at least the top token
  expect_kept(kept(p, o), {{2, 1.0}});
}

TEST(Sampler, TopPOverALargeFlatVocabulary) {
  // 1000 equal tokens: the partial sort has to grow past its first prefix;
  // ties are ordered by id.
  SamplerOptions o = opts();
  o.top_p = 0.5005;
  const auto d = kept(std::vector<double>(1000, 0.001), o);
  ASSERT_EQ(d.size(), 501u);
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i].first, static_cast<int32_t>(i));
    EXPECT_NEAR(d[i].second, 1.0 / 501, 1e-9);
  }
}

TEST(Sampler, MinP) {
  SamplerOptions o = opts();
  o.min_p = 0.2;  // threshold 0.2 * 0.5 = 0.1
  expect_kept(kept({0.05, 0.5, 0.15, 0.3}, o), {{1, 0.5 / 0.95}, {3, 0.3 / 0.95}, {2, 0.15 / 0.95}});
  o.min_p = 0.7;  // threshold 0.35
  expect_kept(kept({0.05, 0.5, 0.15, 0.3}, o), {{1, 1.0}});
}

TEST(Sampler, TruncationsApplyInOrder) {
  // top-k 3 -> {0.4, 0.3, 0.2}/0.9; top-p 0.6: 0.444 kept, 0.333 kept (0.444 < 0.6),
  // 0.222 cut (0.778 >= 0.6); min-p 0.8: 0.333 < 0.8 * 0.444 -> cut.
  SamplerOptions o = opts();
  o.top_k = 3;
  o.top_p = 0.6;
  expect_kept(kept({0.1, 0.4, 0.2, 0.3}, o), {{1, 0.4 / 0.7}, {3, 0.3 / 0.7}});
  o.min_p = 0.8;
  expect_kept(kept({0.1, 0.4, 0.2, 0.3}, o), {{1, 1.0}});
}

TEST(Sampler, BannedTokensAreNeverDrawn) {
  SamplerOptions o = opts();
  o.seed = 3;
  Sampler s(4, o);
  const int32_t banned[] = {1, 3};
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l = logits_of({0.1, 0.4, 0.2, 0.3});
    const int32_t t = s.sample(l, banned);
    EXPECT_TRUE(t == 0 || t == 2);
  }
  expect_kept(kept({0.1, 0.4, 0.2, 0.3}, opts(), {1, 3}), {{2, 2.0 / 3}, {0, 1.0 / 3}});
}

TEST(Sampler, SeededDrawsAreReproducibleAndFollowTheDistribution) {
  const std::vector<double> p = {0.1, 0.4, 0.2, 0.3};
  auto draw = [&](uint64_t seed, int n) {
    SamplerOptions o = opts();
    o.seed = seed;
    Sampler s(4, o);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      std::vector<float> l = logits_of(p);
      out.push_back(s.sample(l));
    }
    return out;
  };
  const std::vector<int32_t> a = draw(42, 20000), b = draw(42, 20000), c = draw(43, 20000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::map<int32_t, int> count;
  for (int32_t t : a) ++count[t];
  for (int32_t id = 0; id < 4; ++id) EXPECT_NEAR(count[id] / 20000.0, p[static_cast<size_t>(id)], 0.015) << id;

  // set_options restarts the stream.
  SamplerOptions o = opts();
  o.seed = 42;
  Sampler s(4, o);
  std::vector<float> l = logits_of(p);
  s.sample(l);
  s.set_options(o);
  l = logits_of(p);
  EXPECT_EQ(s.sample(l), a[0]);
}

TEST(Sampler, RepetitionPenaltyCoversPromptAndGenerated) {
  SamplerOptions o = opts(0.0);  // greedy: sample() leaves the penalised logits
  o.repetition_penalty = 2.0;
  Sampler s(4, o);
  const int32_t prompt[] = {0, 0};
  s.reset(prompt);
  s.accept(1);
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f};
  EXPECT_EQ(s.sample(l), 0);  // 2/2 = 1 ties with id 2 at 1: the lower id
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_FLOAT_EQ(l[1], -4.0f);
  EXPECT_FLOAT_EQ(l[2], 1.0f);
  EXPECT_FLOAT_EQ(l[3], 0.5f);
  // reset() forgets the old prompt and the generated tokens.
  s.reset({});
  l = {2.0f, -2.0f, 1.0f, 0.5f};
  s.sample(l);
  EXPECT_FLOAT_EQ(l[0], 2.0f);
  EXPECT_FLOAT_EQ(l[1], -2.0f);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCoverGeneratedOnly) {
  SamplerOptions o = opts(0.0);
  o.presence_penalty = 0.5;
  o.frequency_penalty = 0.25;
  Sampler s(4, o);
  const int32_t prompt[] = {3};
  s.reset(prompt);
  s.accept(2);
  s.accept(2);
  s.accept(1);
  std::vector<float> l = {0.0f, 0.0f, 0.0f, 0.0f};
  s.sample(l);
  EXPECT_FLOAT_EQ(l[0], 0.0f);
  EXPECT_FLOAT_EQ(l[1], -0.75f);  // 0.5 + 0.25 * 1
  EXPECT_FLOAT_EQ(l[2], -1.0f);   // 0.5 + 0.25 * 2
  EXPECT_FLOAT_EQ(l[3], 0.0f);    // prompt tokens are not penalised by these
}

TEST(SamplerStop, StopStringSpanningPieces) {
  StopStrings s({"</end>"});
  EXPECT_EQ(s.push("abc</"), "abc");
  EXPECT_EQ(s.push("en"), "");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.push("d>tail"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.matched(), "</end>");
  EXPECT_EQ(s.push("more"), "");
  EXPECT_EQ(s.flush(), "");
}

TEST(SamplerStop, HeldTextIsReleasedWhenItDiverges) {
  StopStrings s({"STOP", "xyz"});
  std::string shown;
  shown += s.push("aS");
  EXPECT_EQ(shown, "a");
  shown += s.push("T");
  EXPECT_EQ(shown, "a");
  shown += s.push("a x");
  EXPECT_EQ(shown, "aSTa ");
  shown += s.flush();  // end of generation: the held "x" is shown
  EXPECT_EQ(shown, "aSTa x");
  EXPECT_FALSE(s.stopped());
}

TEST(SamplerStop, EarliestStopWinsAndMatchesInsideOnePiece) {
  StopStrings s({"bc", "abcd"});
  EXPECT_EQ(s.push("xabcd"), "x");
  EXPECT_EQ(s.matched(), "abcd");
  StopStrings none;
  EXPECT_EQ(none.push("anything"), "anything");
  StopStrings repeat({"aab"});
  EXPECT_EQ(repeat.push("aa"), "");
  EXPECT_EQ(repeat.push("a"), "a");  // "aaa": only the last "aa" can still start "aab"
  EXPECT_EQ(repeat.push("b!"), "");
  EXPECT_TRUE(repeat.stopped());
}

TEST(SamplerStop, StopStringAcrossTokensOfADecodedStream) {
  // The byte-level test tokenizer: one token per byte, so multi-byte
  // characters and the stop strings are split over several tokens.
  const Tokenizer tok = Tokenizer::load(std::string(STRATA_SOURCE_DIR) + "/tests/chat/byte-tokenizer.json");
  auto run = [&](const std::string& text, std::vector<std::string> stop_strings) {
    const std::vector<int32_t> ids = tok.encode(text);
    EXPECT_EQ(ids.size(), text.size());
    StreamDecoder dec(tok);
    StopStrings stops(std::move(stop_strings));
    std::string shown;
    for (int32_t id : ids) {
      shown += stops.push(dec.push(id));
      if (stops.stopped()) return shown;
    }
    shown += stops.push(dec.flush());
    return shown + stops.flush();
  };
  EXPECT_EQ(run("naïve → STOP après", {"STOP"}), "naïve → ");
  EXPECT_EQ(run("naïve → STOP après", {"→ S"}), "naïve ");
  EXPECT_EQ(run("naïve → STOP après", {"après!"}), "naïve → STOP après");  // never completed: all shown
}

TEST(SamplerConfig, GenerationConfigFields) {
  const GenerationConfig g = parse_generation_config(
      Json::parse(R"({"do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "eos_token_id": [1, 2]})"),
      "gc.json");
  EXPECT_EQ(g.do_sample, true);
  EXPECT_EQ(g.temperature, 0.6);
  EXPECT_EQ(g.top_p, 0.95);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_FALSE(g.min_p.has_value());
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(parse_generation_config(Json::parse(R"({"eos_token_id": 7})"), "gc.json").eos_token_ids,
            (std::vector<int64_t>{7}));
  const std::string e =
      test_util::error_of([] { parse_generation_config(Json::parse(R"({"top_p": "x"})"), "gc.json"); });
  EXPECT_NE(e.find("gc.json: \"top_p\""), std::string::npos) << e;
  EXPECT_THROW(parse_generation_config(Json::parse(R"({"top_p": 1.5})"), "gc.json"), Error);
  EXPECT_THROW(parse_generation_config(Json::parse(R"({"eos_token_id": [-1]})"), "gc.json"), Error);

  const GenerationConfig f = load_generation_config(std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-bf16");
  EXPECT_EQ(f.temperature, 1.0);
  EXPECT_EQ(f.top_p, 0.95);
  EXPECT_EQ(f.eos_token_ids, (std::vector<int64_t>{253, 254, 255}));
  EXPECT_FALSE(load_generation_config("/nonexistent-dir").temperature.has_value());
}

}  // namespace
}  // namespace strata::sampler_test
