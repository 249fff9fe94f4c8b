// Indexer key precision (issue 16): what the DSA key selection and the logits
// would be if the indexer's key cache held int8 keys (one absmax scale per
// key row) or FP8 e4m3 keys (one amax / 448 scale per block of 128 values, as
// DeepSeek-V3.2's indexer keys) instead of f32. A measurement, not a run-time
// path: an IndexerObserver rounds each key the moment the indexer writes it
// (before any query reads it), so every later selection sees only rounded
// keys, queries and everything else unchanged. Each fixture with an indexer
// is prefilled with a long pseudo-random prompt in one forward call (every
// position selects once per indexer-full layer) and compared with the f32
// run: selections that differ (set difference size) and logits / top-1.
// The numbers are printed (docs/benchmarks.md "Indexer key precision"
// quotes them); the assertions hold the measurement honest (the observer
// alone changes nothing, the fixtures really select, the rounding is the
// stated one) and pin the measured counts as upper bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/session.h"

namespace strata::indexer_key_precision_test {
namespace {

// Fp8Hadamard: DeepSeek-V3.2's reference rotates the indexer's q and k by a
// normalised Hadamard transform before the FP8 rounding (it spreads a row's
// outliers; the scores are unchanged in exact arithmetic). With f32 queries,
// that is the key rounded in the rotated basis and rotated back (H H = I).
enum class KeyFormat { F32, Int8, Fp8, Fp8Hadamard };
const char* name(KeyFormat f) {
  switch (f) {
    case KeyFormat::F32: return "f32";
    case KeyFormat::Int8: return "int8";
    case KeyFormat::Fp8: return "fp8-e4m3";
    case KeyFormat::Fp8Hadamard: return "fp8-e4m3 after Hadamard";
  }
  return "?";
}

// The normalised Walsh-Hadamard transform of n (a power of two) values, in
// place: its own inverse.
void hadamard(float* x, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

// The nearest float8_e4m3fn code to x (|x| <= 448 after scaling), ties to
// the even code, as a float -> e4m3fn cast rounds.
uint8_t f32_to_fp8e4m3(float x) {
  static const std::array<float, 127> mag = [] {
    std::array<float, 127> m{};
    for (int c = 0; c < 127; ++c) m[static_cast<size_t>(c)] = fp8e4m3_to_f32(static_cast<uint8_t>(c));
    return m;
  }();
  const float a = std::min(std::fabs(x), 448.0f);
  const auto it = std::lower_bound(mag.begin(), mag.end(), a);
  int c = static_cast<int>(it - mag.begin());
  if (c > 0 && (c == 127 || a - mag[static_cast<size_t>(c - 1)] < mag[static_cast<size_t>(c)] - a ||
                (a - mag[static_cast<size_t>(c - 1)] == mag[static_cast<size_t>(c)] - a && (c - 1) % 2 == 0)))
    --c;
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | c);
}

// Rounds one key row of n values in place to what the format stores.
void round_key(KeyFormat f, float* k, int64_t n) {
  if (f == KeyFormat::Int8) {
    std::vector<uint8_t> q(static_cast<size_t>(n));
    float scale = 0.0f;
    quantize_row(QuantBits::Int8, 0, k, n, q.data(), &scale);
    dequantize_row(QuantBits::Int8, 0, q.data(), &scale, n, k);
  } else if (f == KeyFormat::Fp8Hadamard) {
    hadamard(k, n);
    round_key(KeyFormat::Fp8, k, n);
    hadamard(k, n);
  } else if (f == KeyFormat::Fp8) {
    constexpr int64_t kBlock = 128;
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t e = std::min(n, b + kBlock);
      float amax = 0.0f;
      for (int64_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(k[i]));
      const float s = amax / 448.0f;
      if (s == 0.0f) continue;
      for (int64_t i = b; i < e; ++i) k[i] = fp8e4m3_to_f32(f32_to_fp8e4m3(k[i] / s)) * s;
    }
  }
}

// Rounds every key the indexer writes, and records every selection:
// (layer, position) -> ascending keys, or {-1} for "every causal key".
struct KeyRounding : IndexerObserver {
  KeyFormat format;
  int64_t head_dim;
  std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>> selections;
  KeyRounding(KeyFormat f, int64_t d) : format(f), head_dim(d) {}
  void keys_written(int64_t layer, std::span<const Row> rows) override {
    std::vector<float> key(static_cast<size_t>(head_dim));
    for (const Row& r : rows) {  // the cache holds keys in lanes: out, rounded, back
      LaneRows& keys = r.seq->layer(layer).index_key;
      keys.get_row(r.pos, key.data());
      round_key(format, key.data(), head_dim);
      keys.set_row(r.pos, key.data());
    }
  }
  void selected(int64_t layer, std::span<const Row> rows, const std::vector<std::vector<int32_t>>& sel,
                const uint8_t* all) override {
    for (size_t r = 0; r < rows.size(); ++r)
      selections[{layer, rows[r].pos}] = all[r] ? std::vector<int32_t>{-1} : sel[r];
  }
};

struct Prefill {
  std::vector<float> logits;  // [T, V]
  std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>> selections;
};

// Prefill of ids in one forward call, every row wanting logits; observer
// `f` (none when null_observer).
Prefill prefill(const Model& m, const std::vector<int32_t>& ids, KeyFormat f, bool null_observer = false) {
  ResidentExpertStore store(m.weights.experts);
  ThreadPool pool(2);
  ModelRunner runner(m, store, pool);
  KeyRounding obs(f, m.config.index_head_dim);
  if (!null_observer) runner.set_indexer_observer(&obs);
  const int64_t T = static_cast<int64_t>(ids.size());
  Session s(m.config, T, false);
  std::vector<Row> rows;
  for (int64_t p = 0; p < T; ++p) rows.push_back({&s, static_cast<int32_t>(p), ids[static_cast<size_t>(p)], true});
  Prefill out;
  out.logits.resize(static_cast<size_t>(T * m.config.vocab_size));
  runner.forward(rows, {}, out.logits.data(), nullptr);
  out.selections = std::move(obs.selections);
  return out;
}

int32_t argmax(const float* x, int64_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

struct Diff {
  int64_t selecting = 0;     // (layer, position) pairs that select (context > index_topk)
  int64_t differing = 0;     // of them, those whose key set differs from f32's
  int64_t keys_swapped = 0;  // sum of |set difference| over them
  int64_t max_swapped = 0;   // the largest |set difference|
  int64_t top1_changed = 0;  // positions whose top-1 differs from f32's
  float max_logit_diff = 0;
  bool logits_equal = true;
};

Diff compare(const Prefill& base, const Prefill& r, int64_t V) {
  Diff d;
  for (const auto& [key, want] : base.selections) {
    const auto it = r.selections.find(key);
    EXPECT_TRUE(it != r.selections.end());
    if (it == r.selections.end() || want == std::vector<int32_t>{-1}) continue;
    ++d.selecting;
    std::vector<int32_t> only;
    std::set_difference(want.begin(), want.end(), it->second.begin(), it->second.end(), std::back_inserter(only));
    if (only.empty()) continue;
    ++d.differing;
    d.keys_swapped += static_cast<int64_t>(only.size());
    d.max_swapped = std::max(d.max_swapped, static_cast<int64_t>(only.size()));
  }
  d.logits_equal = std::memcmp(base.logits.data(), r.logits.data(), base.logits.size() * sizeof(float)) == 0;
  for (size_t i = 0; i < base.logits.size(); ++i)
    d.max_logit_diff = std::max(d.max_logit_diff, std::fabs(base.logits[i] - r.logits[i]));
  for (size_t p = 0; p < base.logits.size() / static_cast<size_t>(V); ++p)
    d.top1_changed += argmax(base.logits.data() + p * V, V) != argmax(r.logits.data() + p * V, V);
  return d;
}

TEST(IndexerKeyPrecision, Fp8RoundingIsNearestEven) {
  for (int c = 0; c < 127; ++c) {  // every finite code round-trips, both signs
    const float v = fp8e4m3_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(f32_to_fp8e4m3(v), c) << v;
    EXPECT_EQ(f32_to_fp8e4m3(-v), c | 0x80) << v;
  }
  EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1.0625f)), 1.0f);   // halfway 1 and 1.125: the even code (1.0)
  EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1.1875f)), 1.25f);  // halfway 1.125 and 1.25: the even code (1.25)
  EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1.07f)), 1.125f);
  EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1000.0f)), 448.0f);
  std::vector<float> hx{1, 2, 3, 4, -1, 0.5f, 7, 0}, hy = hx;  // H is its own inverse
  hadamard(hy.data(), 8);
  EXPECT_NEAR(hy[0], 16.5f / std::sqrt(8.0f), 1e-5f);
  hadamard(hy.data(), 8);
  for (size_t i = 0; i < hx.size(); ++i) EXPECT_NEAR(hy[i], hx[i], 1e-5f) << i;
  // A row's absmax survives both formats exactly; the rest within half a step.
  std::vector<float> k{0.5f, -3.0f, 0.01f, 2.9f}, k8 = k, kf = k;
  round_key(KeyFormat::Int8, k8.data(), 4);
  round_key(KeyFormat::Fp8, kf.data(), 4);
  EXPECT_EQ(k8[1], -3.0f);
  EXPECT_EQ(kf[1], -3.0f);
  for (size_t i = 0; i < k.size(); ++i) {
    EXPECT_LE(std::fabs(k8[i] - k[i]), 3.0f / 127 / 2 * 1.0001f) << i;
    EXPECT_LE(std::fabs(kf[i] - k[i]), std::fabs(k[i]) / 16 + 3.0f / 448 * 0.002f) << i;
  }
}

struct Case {
  const char* dir;  // under the source tree
  int64_t tokens;   // prompt length
  // Upper bounds on the differing selections per format (int8, fp8, fp8
  // after Hadamard): the counts measured here (AVX-512 VNNI machine, 2
  // threads, 2026-12-02) plus about 10% for another kernel path's f32 score
  // rounding; see docs/benchmarks.md "Indexer key precision".
  int64_t int8_differing_max, fp8_differing_max, fp8h_differing_max;
  int64_t differing_max(KeyFormat f) const {
    return f == KeyFormat::Int8 ? int8_differing_max : f == KeyFormat::Fp8 ? fp8_differing_max : fp8h_differing_max;
  }
};

class IndexerKeyPrecisionOn : public ::testing::TestWithParam<Case> {};

TEST_P(IndexerKeyPrecisionOn, SelectionsAndLogits) {
  const Case& c = GetParam();
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/" + c.dir;
  const std::unique_ptr<Model> m = load_model(dir);
  ASSERT_TRUE(m->config.has_dsa()) << dir;
  ASSERT_LE(c.tokens, m->config.max_position_embeddings);
  const int64_t V = m->config.vocab_size;
  std::vector<int32_t> ids;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < c.tokens; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(static_cast<int32_t>(1 + (x >> 33) % static_cast<uint64_t>(V - 1)));
  }
  const Prefill plain = prefill(*m, ids, KeyFormat::F32, true);
  const Prefill base = prefill(*m, ids, KeyFormat::F32);
  // The observer alone (no rounding) changes nothing.
  ASSERT_EQ(std::memcmp(plain.logits.data(), base.logits.data(), plain.logits.size() * sizeof(float)), 0);
  const Diff self = compare(base, base, V);
  ASSERT_GT(self.selecting, c.tokens / 2) << "the prompt must be well past index_topk " << m->config.index_topk;
  ASSERT_EQ(m->config.index_head_dim & (m->config.index_head_dim - 1), 0) << "the Hadamard transform wants a power of two";
  for (KeyFormat f : {KeyFormat::Int8, KeyFormat::Fp8, KeyFormat::Fp8Hadamard}) {
    const Diff d = compare(base, prefill(*m, ids, f), V);
    std::printf("  %s, %lld tokens, index_topk %lld, %s keys: %lld of %lld selections differ (keys swapped: %lld in "
                "all, at most %lld in one), logits %s (max |diff| %.3g), top-1 changed at %lld of %lld positions\n",
                c.dir, static_cast<long long>(c.tokens), static_cast<long long>(m->config.index_topk), name(f),
                static_cast<long long>(d.differing), static_cast<long long>(d.selecting),
                static_cast<long long>(d.keys_swapped), static_cast<long long>(d.max_swapped),
                d.logits_equal ? "bit-identical" : "differ", d.max_logit_diff, static_cast<long long>(d.top1_changed),
                static_cast<long long>(c.tokens));
    EXPECT_EQ(d.selecting, self.selecting);
    // Identical selections everywhere <=> identical logits: the index keys
    // reach the output only through the selection.
    EXPECT_EQ(d.differing == 0, d.logits_equal) << name(f);
    EXPECT_LE(d.differing, c.differing_max(f)) << name(f);
    // The rounded keys reach the selection: measured not exact on every
    // fixture (revisit docs/benchmarks.md if this ever fails).
    EXPECT_GT(d.differing, 0) << name(f);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, IndexerKeyPrecisionOn,
                         ::testing::Values(Case{"tests/fixtures/glm5-tiny-bf16", 256, 500, 790, 780},
                                           Case{"tests/fixtures/glm5-tiny-fp8", 256, 580, 800, 830},
                                           Case{"tests/fixtures/glm52-tiny-bf16", 256, 650, 820, 810},
                                           Case{"tests/fixtures/glm5-long-bf16", 1024, 360, 870, 870},
                                           Case{"models/glm5-strata-tiny", 512, 820, 2150, 1950}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string s = std::string(i.param.dir).substr(std::string(i.param.dir).rfind('/') + 1);
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace strata::indexer_key_precision_test
