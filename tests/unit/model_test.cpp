// The engine against the independent PyTorch reference (tests/reference/):
// teacher forcing, logits, greedy continuation, MTP, DSA selection, and the
// invariances the design promises (batch, threads, attention form).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "experts/expert_store.h"
#include "model/forward.h"
#include "model/model.h"
#include "core/io.h"
#include "core/json.h"

namespace strata::model_test {
namespace {

// Stated tolerance for logits against the fp32 reference: both compute in
// f32, but reduction orders differ (and the absorbed form reassociates).
constexpr float kLogitTol = 1e-4f;

std::string fixture_dir(const std::string& name) { return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/" + name; }

Json load_reference(const std::string& name) {
  const std::string p = fixture_dir(name) + "/reference.json";
  return parse_json(read_small_file(p, 64u << 20), p);
}

struct Scored {
  std::vector<float> logits, hidden, mtp_logits;
  std::vector<int32_t> top1, mtp_top1;
};

int32_t argmax(const float* x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[b]) b = i;
  return static_cast<int32_t>(b);
}

Scored score(const Model& m, const std::vector<int32_t>& ids, ForwardOptions fo, int threads, int64_t chunk,
             bool mtp) {
  ThreadPool pool(threads);
  ResidentExpertStore store(m.weights.experts);
  ModelRunner runner(m, store, pool);
  const int64_t T = static_cast<int64_t>(ids.size()), V = m.config.vocab_size, D = m.config.hidden_size;
  Session s(m.config, T, mtp);
  Scored out;
  out.logits.resize(static_cast<size_t>(T * V));
  out.hidden.resize(static_cast<size_t>(T * D));
  if (chunk <= 0) chunk = T;
  for (int64_t p0 = 0; p0 < T; p0 += chunk) {
    std::vector<Row> rows;
    for (int64_t p = p0; p < std::min(T, p0 + chunk); ++p) rows.push_back({&s, static_cast<int32_t>(p), ids[p], true});
    runner.forward(rows, fo, out.logits.data() + p0 * V, out.hidden.data() + p0 * D);
  }
  for (int64_t p = 0; p < T; ++p) out.top1.push_back(argmax(out.logits.data() + p * V, V));
  if (mtp) {
    out.mtp_logits.resize(static_cast<size_t>((T - 1) * V));
    for (int64_t p0 = 0; p0 < T - 1; p0 += chunk) {
      std::vector<Row> rows;
      for (int64_t p = p0; p < std::min(T - 1, p0 + chunk); ++p)
        rows.push_back({&s, static_cast<int32_t>(p), ids[p + 1], true});
      runner.forward_mtp(rows, out.hidden.data() + p0 * D, fo, out.mtp_logits.data() + p0 * V);
    }
    for (int64_t p = 0; p < T - 1; ++p) out.mtp_top1.push_back(argmax(out.mtp_logits.data() + p * V, V));
  }
  return out;
}

class FixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(fixture_dir(GetParam()) + "/reference.json"))
      GTEST_SKIP() << "fixture " << GetParam() << " missing: run tests/reference/make_fixtures.py";
    ref = load_reference(GetParam());
    model = load_model(fixture_dir(GetParam()));
    ids = ref["ids"].get<std::vector<int32_t>>();
  }
  Json ref;
  std::unique_ptr<Model> model;
  std::vector<int32_t> ids;
};

// Teacher forcing: every position's top-1 equals the reference's, except a
// near-tie (reference margin below 1e-3) which is reported with its margin.
// A margin the reference does not record counts as infinite: a miss there is
// never excused as a near-tie.
void expect_top1(const std::vector<int32_t>& got, const Json& want, const Json& margin, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int miss = 0;
  for (size_t p = 0; p < got.size(); ++p) {
    if (got[p] == want[p].get<int32_t>()) continue;
    const double m = margin.is_array() && p < margin.size() && margin[p].is_number()
                         ? margin[p].get<double>()
                         : std::numeric_limits<double>::infinity();
    ++miss;
    std::printf("  %s: position %zu differs (strata %d, reference %d), reference top-1 margin %.3g\n", what, p,
                got[p], want[p].get<int32_t>(), m);
    EXPECT_LT(m, 1e-3) << what << ": a miss at position " << p << " that is not a near-tie";
  }
  EXPECT_LE(miss, 1) << what;
}

void expect_logits_close(const float* got, const Json& want, const std::string& what) {
  float worst = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i].get<float>()));
  EXPECT_LE(worst, kLogitTol) << what;
  std::printf("  %s: max |logit diff| = %.3g\n", what.c_str(), worst);
}

TEST_P(FixtureTest, TeacherForcingMatchesReference) {
  Scored s = score(*model, ids, {}, 2, 0, true);
  expect_top1(s.top1, ref["top1"], ref.value("top1_margin", Json()), "top1");
  const int64_t V = model->config.vocab_size;
  for (auto it = ref["logits"].begin(); it != ref["logits"].end(); ++it)
    expect_logits_close(s.logits.data() + std::stoll(it.key()) * V, it.value(), "logits@" + it.key());
  // MTP: next-next-token prediction from the final hidden state.
  ASSERT_EQ(s.mtp_top1.size(), ref["mtp_top1"].size());
  for (size_t p = 0; p < s.mtp_top1.size(); ++p) EXPECT_EQ(s.mtp_top1[p], ref["mtp_top1"][p].get<int32_t>()) << p;
  if (ref.contains("mtp_logits"))
    for (auto it = ref["mtp_logits"].begin(); it != ref["mtp_logits"].end(); ++it)
      expect_logits_close(s.mtp_logits.data() + std::stoll(it.key()) * V, it.value(), "mtp_logits@" + it.key());
}

TEST_P(FixtureTest, GreedyContinuationMatchesReference) {
  const auto prompt = ref["greedy"]["prompt"].get<std::vector<int32_t>>();
  const auto want = ref["greedy"]["ids"].get<std::vector<int32_t>>();
  ThreadPool pool(2);
  ResidentExpertStore store(model->weights.experts);
  ModelRunner runner(*model, store, pool);
  const int64_t V = model->config.vocab_size;
  Session s(model->config, static_cast<int64_t>(prompt.size() + want.size()), false);
  std::vector<Row> rows;
  for (size_t p = 0; p < prompt.size(); ++p) rows.push_back({&s, static_cast<int32_t>(p), prompt[p], p + 1 == prompt.size()});
  std::vector<float> logits(static_cast<size_t>(V));
  runner.forward(rows, {}, logits.data(), nullptr);
  std::vector<int32_t> got;
  for (size_t i = 0; i < want.size(); ++i) {
    got.push_back(argmax(logits.data(), V));
    Row r{&s, static_cast<int32_t>(prompt.size() + i), got.back(), true};
    if (i + 1 < want.size()) runner.forward({&r, 1}, {}, logits.data(), nullptr);
  }
  EXPECT_EQ(got, want);
}

TEST_P(FixtureTest, DsaSelectionMattersAndKeepAllIsDense) {
  ASSERT_GT(static_cast<int64_t>(ids.size()), model->config.index_topk) << "fixture must exceed index_topk";
  ForwardOptions dense;
  dense.dense_attention = true;
  Scored d = score(*model, ids, dense, 2, 0, false);
  ASSERT_TRUE(ref.contains("dense_top1_margin")) << "reference.json lacks dense_top1_margin";
  expect_top1(d.top1, ref["dense_top1"], ref["dense_top1_margin"], "dense_top1");
  const int64_t V = model->config.vocab_size;
  for (auto it = ref["dense_logits"].begin(); it != ref["dense_logits"].end(); ++it)
    expect_logits_close(d.logits.data() + std::stoll(it.key()) * V, it.value(), "dense_logits@" + it.key());
  Scored s = score(*model, ids, {}, 2, 0, false);
  EXPECT_NE(s.logits, d.logits) << "DSA selection changed nothing: the fixture does not exercise it";
}

TEST_P(FixtureTest, AbsorbedDecodeEqualsNaivePrefill) {
  ForwardOptions naive;
  naive.form = AttentionForm::Naive;
  Scored a = score(*model, ids, {}, 2, 1, false);  // one row per call: decode
  Scored b = score(*model, ids, naive, 2, 0, false);
  float worst = 0.0f;
  for (size_t i = 0; i < a.logits.size(); ++i) worst = std::max(worst, std::fabs(a.logits[i] - b.logits[i]));
  std::printf("  absorbed decode vs naive prefill: max |logit diff| = %.3g\n", worst);
  EXPECT_LE(worst, kLogitTol);
  EXPECT_EQ(a.top1, b.top1);
}

TEST_P(FixtureTest, RowsAreBatchAndThreadInvariant) {
  // ARCHITECTURE.md §2: a row's logits are bit-identical whether it ran alone,
  // in a batch of 7 or of all positions, on 1 thread or 2.
  Scored whole = score(*model, ids, {}, 2, 0, true);
  Scored single = score(*model, ids, {}, 1, 1, true);
  Scored sevens = score(*model, ids, {}, 2, 7, true);
  EXPECT_EQ(whole.logits, single.logits);
  EXPECT_EQ(whole.logits, sevens.logits);
  EXPECT_EQ(whole.mtp_logits, single.mtp_logits);
  EXPECT_EQ(whole.mtp_logits, sevens.mtp_logits);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest,
                         ::testing::Values("glm5-tiny-bf16", "glm5-tiny-fp8", "glm52-tiny-bf16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace strata::model_test

namespace strata::model_test {
namespace {

// ModelRunner::touch_scratch grows the workspace's large buffers before the
// first forward of a larger batch, with the sizes the forward's phases lay
// out: those must be what the forward uses, or the forward reallocates (and
// faults in) the buffer after all. On every family's fixture (MLA with and
// without a dense first layer, GQA), in the joint-expert path (5 rows) and
// the per-expert one (40 rows): the forward after the touch grows none of the
// touched buffers. (forward_mtp's wider tmp is left to it.) The views the
// last layer laid out in the shared phase memory lie inside it and, within
// one phase, do not overlap; the attention phase's and the MoE phase's do
// share memory, which is what the phase memory is for.
TEST(Forward, TouchedScratchIsWhatTheForwardUses) {
  int checked = 0;
  for (const char* name : {"glm5-tiny-bf16", "glm52-tiny-bf16", "dsv3-tiny-bf16", "qwen3moe-tiny-bf16",
                           "glm4moe-tiny-bf16"}) {
    const std::unique_ptr<Model> model = load_model(fixture_dir(name));
    const ModelConfig& c = model->config;
    ASSERT_TRUE(c.is_moe(c.num_hidden_layers - 1)) << name << ": the view checks below want a MoE last layer";
    for (int64_t n : {5, 40}) {
      ThreadPool pool(2);
      ResidentExpertStore store(model->weights.experts);
      ModelRunner runner(*model, store, pool);
      runner.touch_scratch(n);
      const Workspace& ws = runner.workspace();
      const std::pair<const char*, const ScratchFloats*> bufs[] = {
          {"h", &ws.h}, {"xn", &ws.xn}, {"tmp", &ws.tmp}, {"phase", &ws.phase}};
      std::vector<std::pair<const float*, size_t>> before;
      for (const auto& b : bufs) before.emplace_back(b.second->data(), b.second->size());
      ASSERT_EQ(ws.h.size(), static_cast<size_t>(n * c.hidden_size)) << name;
      ASSERT_GT(ws.phase.size(), 0u) << name;
      Session s(c, 64, false);
      std::vector<Row> rows;
      for (int64_t p = 0; p < n; ++p) rows.push_back({&s, static_cast<int32_t>(p), static_cast<int32_t>((7 * p + 3) % 200 + 1), true});
      std::vector<float> logits(static_cast<size_t>(n * c.vocab_size));
      runner.forward(rows, {}, logits.data(), nullptr);
      for (size_t i = 0; i < std::size(bufs); ++i) {
        EXPECT_EQ(bufs[i].second->data(), before[i].first) << name << " n " << n << ": the forward reallocated " << bufs[i].first;
        EXPECT_EQ(bufs[i].second->size(), before[i].second) << name << " n " << n << ": the forward grew " << bufs[i].first;
      }
      using Views = std::vector<std::pair<const char*, const ScratchView*>>;
      Views attn = {{"q", &ws.q}, {"kv", &ws.kv}, {"o", &ws.o}, {"attn_out", &ws.attn_out}};
      if (c.attention != AttentionKind::Gqa) attn.push_back({"q_lat", &ws.q_lat});
      const Views ffn = {{"slot_out", &ws.slot_out}, {"xs", &ws.xs}, {"ys", &ws.ys}, {"mlp_g", &ws.mlp_g}, {"mlp_u", &ws.mlp_u}};
      const float* lo = ws.phase.data();
      const float* hi = lo + ws.phase.size();
      size_t attn_floats = 0, ffn_floats = 0;
      const Views* both[] = {&attn, &ffn};
      for (const Views* vs : both)
        for (size_t i = 0; i < vs->size(); ++i) {
          const auto& [vn, v] = (*vs)[i];
          (vs == &attn ? attn_floats : ffn_floats) += v->size();
          ASSERT_GT(v->size(), 0u) << name << " n " << n << ": " << vn << " was never laid out";
          EXPECT_TRUE(v->data() >= lo && v->data() + v->size() <= hi) << name << " n " << n << ": " << vn << " outside the phase memory";
          for (size_t j = 0; j < i; ++j) {
            const auto& [wn, w] = (*vs)[j];
            EXPECT_TRUE(v->data() + v->size() <= w->data() || w->data() + w->size() <= v->data())
                << name << " n " << n << ": " << vn << " overlaps " << wn;
          }
        }
      // Shared, not stacked: the phase memory holds less than both phases.
      EXPECT_LT(ws.phase.size(), attn_floats + ffn_floats) << name << " n " << n;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 10);
}

}  // namespace
}  // namespace strata::model_test
