// qwen3_moe (GQA + softmax router family) against its independent PyTorch
// reference (tests/reference/qwen3_moe_ref.py, fixture qwen3moe-tiny-bf16):
// teacher forcing, logits, greedy continuation, batch / thread invariance,
// and the family's config refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/io.h"
#include "core/json.h"
#include "experts/expert_store.h"
#include "model/forward.h"
#include "model/model.h"

namespace strata::qwen3_moe_test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr float kLogitTol = 1e-4f;  // f32 both sides; reduction orders differ
const char* const kFixture = "qwen3moe-tiny-bf16";

std::string fixture_dir() { return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/" + kFixture; }

int32_t argmax(const float* x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[b]) b = i;
  return static_cast<int32_t>(b);
}

// Logits of every position, `chunk` rows per forward call.
std::vector<float> score(const Model& m, const std::vector<int32_t>& ids, int threads, int64_t chunk) {
  ThreadPool pool(threads);
  ResidentExpertStore store(m.weights.experts);
  ModelRunner runner(m, store, pool);
  const int64_t T = static_cast<int64_t>(ids.size()), V = m.config.vocab_size;
  Session s(m.config, T);
  std::vector<float> logits(static_cast<size_t>(T * V));
  if (chunk <= 0) chunk = T;
  for (int64_t p0 = 0; p0 < T; p0 += chunk) {
    std::vector<Row> rows;
    for (int64_t p = p0; p < std::min(T, p0 + chunk); ++p) rows.push_back({&s, static_cast<int32_t>(p), ids[p], true});
    runner.forward(rows, {}, logits.data() + p0 * V, nullptr);
  }
  return logits;
}

class Qwen3Fixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string p = fixture_dir() + "/reference.json";
    if (!std::filesystem::exists(p)) GTEST_SKIP() << "fixture missing: run tests/reference/make_qwen3_fixture.py";
    ref = parse_json(read_small_file(p, 64u << 20), p);
    model = load_model(fixture_dir());
    ids = ref["ids"].get<std::vector<int32_t>>();
  }
  Json ref;
  std::unique_ptr<Model> model;
  std::vector<int32_t> ids;
};

TEST_F(Qwen3Fixture, ConfigIsTheGqaSoftmaxFamily) {
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.attention, AttentionKind::Gqa);
  EXPECT_EQ(c.router, RouterKind::Softmax);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_FALSE(c.is_moe(0));  // mlp_only_layers: [0]
  EXPECT_TRUE(c.is_moe(1));
  EXPECT_EQ(c.num_nextn_predict_layers, 0);
  EXPECT_EQ(c.cache_floats(0), 2 * 2 * 32);
}

TEST_F(Qwen3Fixture, TeacherForcingMatchesReference) {
  const std::vector<float> logits = score(*model, ids, 2, 0);
  const int64_t V = model->config.vocab_size;
  const auto want = ref["top1"].get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), ids.size());
  for (size_t p = 0; p < ids.size(); ++p)
    EXPECT_EQ(argmax(logits.data() + p * V, V), want[p]) << "position " << p;  // margins >= 1e-2 by construction
  for (auto it = ref["logits"].begin(); it != ref["logits"].end(); ++it) {
    const float* got = logits.data() + std::stoll(it.key()) * V;
    float worst = 0.0f;
    for (size_t i = 0; i < it.value().size(); ++i)
      worst = std::max(worst, std::fabs(got[i] - it.value()[i].get<float>()));
    std::printf("  logits@%s: max |diff| = %.3g\n", it.key().c_str(), worst);
    EXPECT_LE(worst, kLogitTol) << "logits@" << it.key();
  }
}

TEST_F(Qwen3Fixture, GreedyContinuationMatchesReference) {
  const auto prompt = ref["greedy"]["prompt"].get<std::vector<int32_t>>();
  const auto want = ref["greedy"]["ids"].get<std::vector<int32_t>>();
  ThreadPool pool(2);
  ResidentExpertStore store(model->weights.experts);
  ModelRunner runner(*model, store, pool);
  const int64_t V = model->config.vocab_size;
  Session s(model->config, static_cast<int64_t>(prompt.size() + want.size()));
  std::vector<Row> rows;
  for (size_t p = 0; p < prompt.size(); ++p)
    rows.push_back({&s, static_cast<int32_t>(p), prompt[p], p + 1 == prompt.size()});
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

TEST_F(Qwen3Fixture, RowsAreBatchAndThreadInvariant) {
  const std::vector<float> whole = score(*model, ids, 2, 0);
  EXPECT_EQ(whole, score(*model, ids, 1, 1));
  EXPECT_EQ(whole, score(*model, ids, 2, 7));
}

TEST_F(Qwen3Fixture, TruncatedSessionRecomputesTheSameRows) {
  // Truncate (a rejected draft, :reset) then recompute: the same logits.
  ThreadPool pool(2);
  ResidentExpertStore store(model->weights.experts);
  ModelRunner runner(*model, store, pool);
  const int64_t T = static_cast<int64_t>(ids.size()), V = model->config.vocab_size;
  Session s(model->config, T);
  std::vector<float> a(static_cast<size_t>(T * V)), b(static_cast<size_t>(T * V));
  std::vector<Row> rows;
  for (int64_t p = 0; p < T; ++p) rows.push_back({&s, static_cast<int32_t>(p), ids[p], true});
  runner.forward(rows, {}, a.data(), nullptr);
  s.truncate(20);
  std::vector<Row> rest(rows.begin() + 20, rows.end());
  runner.forward(rest, {}, b.data() + 20 * V, nullptr);
  EXPECT_TRUE(std::equal(a.begin() + 20 * V, a.end(), b.begin() + 20 * V));
}

// The family's config: required fields, bounds, unsupported options refused by name.
Json qwen_config() {
  const std::string p = fixture_dir() + "/config.json";
  return parse_json(read_small_file(p, 1u << 20), p);
}

std::string config_error(const Json& j) {
  try {
    parse_model_config(j, "q.json");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Qwen3Config, UnsupportedOptionsAreRefusedByName) {
  if (!std::filesystem::exists(fixture_dir() + "/config.json")) GTEST_SKIP() << "fixture missing";
  const Json base = qwen_config();
  auto with = [&](const char* k, Json v) {
    Json j = base;
    j[k] = std::move(v);
    return config_error(j);
  };
  auto without = [&](const char* k) {
    Json j = base;
    j.erase(k);
    return config_error(j);
  };
  EXPECT_EQ(config_error(base), "");
  EXPECT_THAT(with("use_sliding_window", true), HasSubstr("use_sliding_window"));
  EXPECT_THAT(with("attention_bias", true), HasSubstr("attention_bias"));
  EXPECT_THAT(with("hidden_act", "gelu"), HasSubstr("hidden_act"));
  EXPECT_THAT(with("tie_word_embeddings", true), HasSubstr("tie_word_embeddings"));
  EXPECT_THAT(with("rope_scaling", Json{{"rope_type", "yarn"}, {"factor", 4.0}}), HasSubstr("rope_scaling.rope_type"));
  EXPECT_THAT(with("num_key_value_heads", 3), AllOf(HasSubstr("num_key_value_heads"), HasSubstr("multiple")));
  EXPECT_THAT(with("num_key_value_heads", 8), HasSubstr("\"num_key_value_heads\" = 8 is out of range"));
  EXPECT_THAT(with("head_dim", 31), HasSubstr("head_dim 31 must be even"));
  EXPECT_THAT(with("num_experts_per_tok", 9), HasSubstr("\"num_experts_per_tok\" = 9 is out of range"));
  EXPECT_THAT(with("mlp_only_layers", Json::array({4})), HasSubstr("mlp_only_layers entry 4"));
  EXPECT_THAT(with("decoder_sparse_step", 0), HasSubstr("\"decoder_sparse_step\" = 0 is out of range"));
  EXPECT_THAT(without("num_experts"), HasSubstr("missing required field \"num_experts\""));
  EXPECT_THAT(without("num_key_value_heads"), HasSubstr("missing required field \"num_key_value_heads\""));
  EXPECT_THAT(with("model_type", "qwen3_next"), HasSubstr("model_type \"qwen3_next\" is not supported"));
}

TEST(Qwen3Config, LayerPatternFollowsSparseStepAndMlpOnlyLayers) {
  if (!std::filesystem::exists(fixture_dir() + "/config.json")) GTEST_SKIP() << "fixture missing";
  Json j = qwen_config();
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = Json::array({3});
  const ModelConfig c = parse_model_config(j, "q.json");
  EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, true, false, false}));
}

}  // namespace
}  // namespace strata::qwen3_moe_test
