// ModelConfig: a real GLM-5 config parses to the documented values
// (docs/glm5-architecture.md §1, §8), the GLM-5.2 schedules come out right,
// and every hostile or unsupported config is refused with the file and the
// field named, before anything is sized from it.
#include "core/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "test_util.h"
#include "core/error.h"

namespace strata::config_test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using test_util::error_of;
using test_util::TempDir;
using test_util::write_file;

const char* kOrigin = "/models/glm-5/config.json";

// GLM-5 (zai-org/GLM-5) config.json, values from the spec's field table.
Json glm5() {
  return parse_json(R"({
  "architectures": ["GlmMoeDsaForCausalLM"],
  "model_type": "glm_moe_dsa",
  "attention_bias": false,
  "attention_dropout": 0.0,
  "dtype": "bfloat16",
  "eos_token_id": [154820, 154827, 154829],
  "ep_size": 1,
  "first_k_dense_replace": 3,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 6144,
  "index_head_dim": 128,
  "index_n_heads": 32,
  "index_topk": 2048,
  "indexer_rope_interleave": true,
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "kv_lora_rank": 512,
  "max_position_embeddings": 202752,
  "moe_intermediate_size": 2048,
  "moe_layer_freq": 1,
  "n_group": 1,
  "n_routed_experts": 256,
  "n_shared_experts": 1,
  "norm_topk_prob": true,
  "num_attention_heads": 64,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 78,
  "num_key_value_heads": 64,
  "num_nextn_predict_layers": 1,
  "pad_token_id": 154820,
  "pretraining_tp": 1,
  "q_lora_rank": 2048,
  "qk_head_dim": 256,
  "qk_nope_head_dim": 192,
  "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-05,
  "rope_interleave": true,
  "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
  "routed_scaling_factor": 2.5,
  "scoring_func": "sigmoid",
  "tie_word_embeddings": false,
  "topk_group": 1,
  "topk_method": "noaux_tc",
  "transformers_version": "5.0.2.dev0",
  "use_cache": true,
  "v_head_dim": 256,
  "vocab_size": 154880
})",
                    "glm5 config");
}

// GLM-5.2-FP8: the fields that differ from GLM-5 (§1.1) plus the FP8
// quantization_config (§8).
Json glm52_fp8() {
  Json j = glm5();
  j["rope_parameters"]["rope_theta"] = 8000000;
  j["max_position_embeddings"] = 1048576;
  j["head_dim"] = 192;
  j["moe_router_dtype"] = "float32";
  j["index_topk_freq"] = 4;
  j["index_skip_topk_offset"] = 3;
  j["index_topk_pattern"] = nullptr;
  j["index_share_for_mtp_iteration"] = true;
  std::vector<std::string> mlp(3, "dense");
  mlp.resize(78, "sparse");
  j["mlp_layer_types"] = mlp;
  j["transformers_version"] = "5.12.0";
  j["quantization_config"] = {{"quant_method", "fp8"},
                              {"fmt", "e4m3"},
                              {"activation_scheme", "dynamic"},
                              {"weight_block_size", {128, 128}},
                              {"modules_to_not_convert", {"lm_head", "model.layers.3.self_attn.indexers_proj"}}};
  return j;
}

ModelConfig parse(const Json& j) { return parse_model_config(j, kOrigin); }
std::string config_error(const Json& j) {
  return error_of([&] { parse_model_config(j, kOrigin); });
}
// The error for `j` with `field` set to `value`; must name the file and field.
std::string error_with(const char* field, const Json& value, Json j = glm5()) {
  j[field] = value;
  return config_error(j);
}

std::vector<int64_t> full_layers(const ModelConfig& c) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    if (c.layer_indexer_full[static_cast<size_t>(i)]) out.push_back(i);
  return out;
}

TEST(ConfigTest, RealGlm5Parses) {
  const ModelConfig c = parse(glm5());
  EXPECT_EQ(c.model_type, "glm_moe_dsa");
  EXPECT_EQ(c.vocab_size, 154880);
  EXPECT_EQ(c.hidden_size, 6144);
  EXPECT_EQ(c.num_hidden_layers, 78);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_FLOAT_EQ(c.routed_scaling_factor, 2.5f);
  EXPECT_EQ(c.num_attention_heads, 64);
  EXPECT_EQ(c.q_lora_rank, 2048);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 192);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.qk_head_dim(), 256);
  EXPECT_EQ(c.v_head_dim, 256);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.max_position_embeddings, 202752);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.index_n_heads, 32);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 2048);
  EXPECT_FALSE(c.index_share_for_mtp_iteration);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.num_weight_layers(), 79);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{154820, 154827, 154829}));
  EXPECT_EQ(c.pad_token_id, 154820);
  EXPECT_FALSE(c.fp8);
  // Layers 0-2 dense, 3-77 MoE, the MTP layer 78 MoE; every indexer full.
  ASSERT_EQ(c.layer_is_moe.size(), 78u);
  ASSERT_EQ(c.layer_indexer_full.size(), 78u);
  for (int64_t i = 0; i < 79; ++i) {
    EXPECT_EQ(c.is_moe(i), i >= 3) << i;
    EXPECT_TRUE(c.indexer_full(i)) << i;
  }
}

TEST(ConfigTest, Glm52Fp8Parses) {
  const ModelConfig c = parse(glm52_fp8());
  EXPECT_DOUBLE_EQ(c.rope_theta, 8e6);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_TRUE(c.index_share_for_mtp_iteration);
  EXPECT_TRUE(c.fp8);
  EXPECT_EQ(c.fp8_block_rows, 128);
  EXPECT_EQ(c.fp8_block_cols, 128);
  for (int64_t i = 0; i < 79; ++i) EXPECT_EQ(c.is_moe(i), i >= 3) << i;
}

TEST(ConfigTest, Glm52IndexerScheduleFreq4Offset3) {
  Json j = glm5();
  j["index_topk_freq"] = 4;
  j["index_skip_topk_offset"] = 3;
  const ModelConfig c = parse(j);
  std::vector<int64_t> want = {0, 1, 2};
  for (int64_t i = 6; i <= 74; i += 4) want.push_back(i);
  EXPECT_EQ(want.size(), 21u);
  EXPECT_EQ(full_layers(c), want);
  EXPECT_EQ(full_layers(c).size(), 21u);
  EXPECT_TRUE(c.indexer_full(78));  // the MTP layer always has an indexer
  // The same through the GLM-5.2 config with the null pattern.
  EXPECT_EQ(full_layers(parse(glm52_fp8())), want);
}

TEST(ConfigTest, IndexerScheduleDefaultsAreAllFull) {
  Json j = glm5();
  j["index_topk_freq"] = 1;
  j["index_skip_topk_offset"] = 2;
  EXPECT_EQ(full_layers(parse(j)).size(), 78u);
}

TEST(ConfigTest, IndexTopkPatternParses) {
  Json j = glm5();
  std::string p = "FFS";
  while (p.size() < 78) p += (p.size() % 5 == 0) ? 'F' : 'S';
  j["index_topk_pattern"] = p;
  j["index_topk_freq"] = 4;  // the pattern wins over freq/offset
  j["index_skip_topk_offset"] = 3;
  const ModelConfig c = parse(j);
  for (size_t i = 0; i < 78; ++i) EXPECT_EQ(c.layer_indexer_full[i], p[i] == 'F') << i;
  EXPECT_TRUE(c.layer_indexer_full[1]);
  EXPECT_FALSE(c.layer_indexer_full[2]);
}

TEST(ConfigTest, IndexTopkPatternBadLetter) {
  std::string p(78, 'F');
  p[5] = 'X';
  EXPECT_THAT(error_with("index_topk_pattern", p),
              AllOf(HasSubstr(kOrigin), HasSubstr("index_topk_pattern[5] = 'X'"), HasSubstr("F or S")));
  p[5] = 'f';  // case matters
  EXPECT_THAT(error_with("index_topk_pattern", p), HasSubstr("index_topk_pattern[5] = 'f'"));
}

TEST(ConfigTest, IndexTopkPatternWrongLengthOrType) {
  EXPECT_THAT(error_with("index_topk_pattern", std::string(77, 'F')),
              AllOf(HasSubstr(kOrigin), HasSubstr("index_topk_pattern"), HasSubstr("78")));
  EXPECT_THAT(error_with("index_topk_pattern", std::string(79, 'F')), HasSubstr("index_topk_pattern"));
  EXPECT_THAT(error_with("index_topk_pattern", Json::array({"F", "S"})), HasSubstr("index_topk_pattern"));
}

TEST(ConfigTest, IndexTopkPatternFirstLayerShared) {
  std::string p(78, 'F');
  p[0] = 'S';
  EXPECT_THAT(error_with("index_topk_pattern", p), AllOf(HasSubstr(kOrigin), HasSubstr("layer 0")));
}

TEST(ConfigTest, IndexerTypes) {
  std::vector<std::string> t(78, "shared");
  t[0] = "full";
  t[40] = "full";
  Json j = glm5();
  j["indexer_types"] = t;
  EXPECT_EQ(full_layers(parse(j)), (std::vector<int64_t>{0, 40}));
  t[7] = "partial";
  EXPECT_THAT(error_with("indexer_types", t), AllOf(HasSubstr(kOrigin), HasSubstr("indexer_types[7]")));
  EXPECT_THAT(error_with("indexer_types", std::vector<std::string>(3, "full")),
              AllOf(HasSubstr(kOrigin), HasSubstr("indexer_types")));
}

TEST(ConfigTest, IndexerScheduleFieldsBounded) {
  EXPECT_THAT(error_with("index_topk_freq", 0), AllOf(HasSubstr(kOrigin), HasSubstr("\"index_topk_freq\"")));
  EXPECT_THAT(error_with("index_skip_topk_offset", -1),
              AllOf(HasSubstr(kOrigin), HasSubstr("\"index_skip_topk_offset\"")));
  EXPECT_THAT(error_with("index_topk_freq", "4"), AllOf(HasSubstr("\"index_topk_freq\""), HasSubstr("integer")));
}

TEST(ConfigTest, MlpLayerTypes) {
  Json j = glm5();
  std::vector<std::string> t(78, "sparse");
  t[0] = t[1] = t[10] = "dense";
  j["mlp_layer_types"] = t;
  j["first_k_dense_replace"] = 3;  // mlp_layer_types wins
  const ModelConfig c = parse(j);
  for (int64_t i = 0; i < 78; ++i) EXPECT_EQ(c.is_moe(i), !(i == 0 || i == 1 || i == 10)) << i;
  EXPECT_TRUE(c.is_moe(78));
}

TEST(ConfigTest, MlpLayerTypesBadEntry) {
  std::vector<std::string> t(78, "sparse");
  t[4] = "moe";
  EXPECT_THAT(error_with("mlp_layer_types", t),
              AllOf(HasSubstr(kOrigin), HasSubstr("mlp_layer_types[4] = \"moe\""), HasSubstr("\"dense\" or \"sparse\"")));
  Json mixed = Json::array();
  for (int i = 0; i < 78; ++i) mixed.push_back("sparse");
  mixed[2] = 1;
  EXPECT_THAT(error_with("mlp_layer_types", mixed), HasSubstr("mlp_layer_types[2] = 1"));
}

TEST(ConfigTest, MlpLayerTypesWrongLength) {
  EXPECT_THAT(error_with("mlp_layer_types", std::vector<std::string>(77, "sparse")),
              AllOf(HasSubstr(kOrigin), HasSubstr("mlp_layer_types"), HasSubstr("78")));
  EXPECT_THAT(error_with("mlp_layer_types", "sparse"), AllOf(HasSubstr(kOrigin), HasSubstr("mlp_layer_types")));
}

TEST(ConfigTest, FirstKDenseReplace) {
  for (int64_t k : {0, 1, 3, 78}) {
    SCOPED_TRACE(k);
    Json j = glm5();
    j["first_k_dense_replace"] = k;
    const ModelConfig c = parse(j);
    for (int64_t i = 0; i < 78; ++i) EXPECT_EQ(c.is_moe(i), i >= k) << i;
  }
  Json j = glm5();
  j["moe_layer_freq"] = 2;
  const ModelConfig c = parse(j);
  for (int64_t i = 0; i < 78; ++i) EXPECT_EQ(c.is_moe(i), i >= 3 && i % 2 == 0) << i;
  EXPECT_THAT(error_with("first_k_dense_replace", 79),
              AllOf(HasSubstr(kOrigin), HasSubstr("\"first_k_dense_replace\" = 79"), HasSubstr("out of range")));
  EXPECT_THAT(error_with("first_k_dense_replace", -1), HasSubstr("\"first_k_dense_replace\""));
  EXPECT_THAT(error_with("moe_layer_freq", 0), HasSubstr("\"moe_layer_freq\""));
}

TEST(ConfigTest, MissingRequiredFields) {
  for (const char* field : {"vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
                            "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
                            "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                            "qk_rope_head_dim", "v_head_dim", "index_n_heads", "index_head_dim", "index_topk"}) {
    SCOPED_TRACE(field);
    Json j = glm5();
    j.erase(field);
    EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("missing required field \"" + std::string(field) + "\"")));
    j[field] = nullptr;  // null is as good as absent
    EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr(std::string("\"").append(field).append("\""))));
  }
}

TEST(ConfigTest, MissingModelType) {
  Json j = glm5();
  j.erase("model_type");
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("\"model_type\"")));
  EXPECT_THAT(error_with("model_type", 5), AllOf(HasSubstr(kOrigin), HasSubstr("\"model_type\"")));
}

TEST(ConfigTest, WrongTypeStringForHiddenSize) {
  EXPECT_THAT(error_with("hidden_size", "6144"),
              AllOf(HasSubstr(kOrigin), HasSubstr("field \"hidden_size\" must be an integer"), HasSubstr("\"6144\"")));
}

TEST(ConfigTest, WrongTypesElsewhere) {
  EXPECT_THAT(error_with("hidden_size", 6144.5), AllOf(HasSubstr("\"hidden_size\""), HasSubstr("integer")));
  EXPECT_THAT(error_with("hidden_size", true), AllOf(HasSubstr("\"hidden_size\""), HasSubstr("integer")));
  EXPECT_THAT(error_with("hidden_size", Json::array({6144})), AllOf(HasSubstr("\"hidden_size\""), HasSubstr("integer")));
  EXPECT_THAT(error_with("norm_topk_prob", "true"),
              AllOf(HasSubstr(kOrigin), HasSubstr("\"norm_topk_prob\""), HasSubstr("true or false")));
  EXPECT_THAT(error_with("routed_scaling_factor", "2.5"),
              AllOf(HasSubstr(kOrigin), HasSubstr("\"routed_scaling_factor\""), HasSubstr("number")));
  EXPECT_THAT(error_with("rope_parameters", "default"), AllOf(HasSubstr(kOrigin), HasSubstr("\"rope_parameters\"")));
}

TEST(ConfigTest, HugeNegativeAndZeroDimsRejectedWithFieldName) {
  struct Case {
    const char* field;
    Json value;
  };
  const std::vector<Case> cases = {
      {"hidden_size", 1e12},                        // a float
      {"hidden_size", int64_t{1000000000000}},      // an integer
      {"hidden_size", 0},
      {"hidden_size", -6144},
      {"hidden_size", std::numeric_limits<uint64_t>::max()},
      {"hidden_size", std::numeric_limits<int64_t>::min()},
      {"vocab_size", -1},
      {"vocab_size", 0},
      {"vocab_size", int64_t{1} << 40},
      {"num_hidden_layers", 100000},
      {"num_hidden_layers", 0},
      {"intermediate_size", int64_t{1} << 31},
      {"moe_intermediate_size", -2048},
      {"n_routed_experts", 1000000},
      {"num_attention_heads", 1 << 20},
      {"q_lora_rank", 0},
      {"kv_lora_rank", 1 << 20},
      {"qk_rope_head_dim", 0},
      {"v_head_dim", 1 << 20},
      {"index_n_heads", -32},
      {"index_head_dim", 1 << 20},
      {"index_topk", 0},
      {"max_position_embeddings", int64_t{1} << 40},
      {"n_shared_experts", 1000},
      {"num_nextn_predict_layers", 2},
      {"num_nextn_predict_layers", -1},
      {"rms_norm_eps", 0.0},
      {"rms_norm_eps", 5.0},
      {"routed_scaling_factor", -1.0},
      {"routed_scaling_factor", 1e300},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.field) + " = " + c.value.dump());
    EXPECT_THAT(error_with(c.field, c.value), AllOf(HasSubstr(kOrigin), HasSubstr(std::string("\"").append(c.field).append("\""))));
  }
}

TEST(ConfigTest, AbsurdLayerCountRefusedBeforeSchedulesAreBuilt) {
  // 100000 layers with a 100000-entry mlp_layer_types: the count is refused
  // on its own, before any per-layer vector is sized from it.
  Json j = glm5();
  j["num_hidden_layers"] = 100000;
  j["mlp_layer_types"] = std::vector<std::string>(100000, "sparse");
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("\"num_hidden_layers\" = 100000"),
                                     HasSubstr("out of range")));
}

TEST(ConfigTest, ExpertsPerTokExceedsRoutedExperts) {
  EXPECT_THAT(error_with("num_experts_per_tok", 257),
              AllOf(HasSubstr(kOrigin), HasSubstr("\"num_experts_per_tok\" = 257"), HasSubstr("[1, 256]")));
  EXPECT_THAT(error_with("num_experts_per_tok", 0), HasSubstr("\"num_experts_per_tok\""));
}

TEST(ConfigTest, RoutedExpertsNotDivisibleByGroups) {
  EXPECT_THAT(error_with("n_group", 3),
              AllOf(HasSubstr(kOrigin), HasSubstr("n_routed_experts 256 is not divisible by n_group 3")));
}

TEST(ConfigTest, GroupLimitedRoutingBounds) {
  EXPECT_THAT(error_with("n_group", 512), AllOf(HasSubstr(kOrigin), HasSubstr("\"n_group\"")));
  EXPECT_THAT(error_with("topk_group", 2), AllOf(HasSubstr(kOrigin), HasSubstr("\"topk_group\"")));
  Json j = glm5();
  j["n_group"] = 8;
  j["topk_group"] = 4;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  j["n_group"] = 256;  // one expert per group
  j["topk_group"] = 8;
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("2 experts per group")));
  j["n_group"] = 64;
  j["topk_group"] = 1;  // 4 experts reachable, 8 wanted
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("num_experts_per_tok 8")));
}

TEST(ConfigTest, UnsupportedModelType) {
  EXPECT_THAT(error_with("model_type", "deepseek_v2"),
              AllOf(HasSubstr(kOrigin), HasSubstr("model_type \"deepseek_v2\" is not supported")));
  EXPECT_THAT(error_with("model_type", "glm5_next"), HasSubstr("\"glm5_next\""));
}

TEST(ConfigTest, RopeYarnRefused) {
  Json j = glm5();
  j["rope_parameters"] = {{"rope_theta", 1000000}, {"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("rope_parameters.rope_type \"yarn\"")));
  j = glm5();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 40}};
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("rope_scaling"), HasSubstr("\"yarn\"")));
  j = glm5();
  j["rope_parameters"]["rope_type"] = 1;
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("rope_type")));
}

TEST(ConfigTest, RopeThetaSources) {
  Json j = glm5();
  j.erase("rope_parameters");
  j["rope_theta"] = 500000.0;
  EXPECT_DOUBLE_EQ(parse(j).rope_theta, 5e5);
  j["rope_theta"] = -1.0;
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("\"rope_theta\"")));
  j = glm5();
  j["rope_parameters"]["rope_theta"] = "1e6";
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("\"rope_theta\"")));
}

TEST(ConfigTest, TieWordEmbeddingsRefused) {
  EXPECT_THAT(error_with("tie_word_embeddings", true),
              AllOf(HasSubstr(kOrigin), HasSubstr("tie_word_embeddings=true is not supported")));
}

TEST(ConfigTest, OtherUnsupportedVariants) {
  EXPECT_THAT(error_with("scoring_func", "softmax"), AllOf(HasSubstr(kOrigin), HasSubstr("scoring_func")));
  EXPECT_THAT(error_with("rope_interleave", false), AllOf(HasSubstr(kOrigin), HasSubstr("rope_interleave")));
  EXPECT_THAT(error_with("indexer_rope_interleave", false),
              AllOf(HasSubstr(kOrigin), HasSubstr("indexer_rope_interleave")));
  EXPECT_THAT(error_with("qk_rope_head_dim", 63), AllOf(HasSubstr(kOrigin), HasSubstr("qk_rope_head_dim 63 must be even")));
  EXPECT_THAT(error_with("index_head_dim", 32), AllOf(HasSubstr(kOrigin), HasSubstr("index_head_dim 32")));
}

TEST(ConfigTest, EosTokenIdAsIntAndAsList) {
  Json j = glm5();
  j["eos_token_id"] = 154820;
  EXPECT_EQ(parse(j).eos_token_ids, (std::vector<int64_t>{154820}));
  j["eos_token_id"] = {0, 154879};
  EXPECT_EQ(parse(j).eos_token_ids, (std::vector<int64_t>{0, 154879}));
  j.erase("eos_token_id");
  EXPECT_TRUE(parse(j).eos_token_ids.empty());
}

TEST(ConfigTest, EosTokenIdOutOfRange) {
  EXPECT_THAT(error_with("eos_token_id", 154880),
              AllOf(HasSubstr(kOrigin), HasSubstr("eos_token_id 154880"), HasSubstr("vocab_size 154880")));
  EXPECT_THAT(error_with("eos_token_id", -1), AllOf(HasSubstr(kOrigin), HasSubstr("eos_token_id -1")));
  EXPECT_THAT(error_with("eos_token_id", Json::array({154820, 999999})),
              AllOf(HasSubstr(kOrigin), HasSubstr("eos_token_id 999999")));
  EXPECT_THAT(error_with("eos_token_id", std::numeric_limits<uint64_t>::max()),
              AllOf(HasSubstr(kOrigin), HasSubstr("eos_token_id 18446744073709551615")));
  EXPECT_THAT(error_with("eos_token_id", "154820"), AllOf(HasSubstr(kOrigin), HasSubstr("eos_token_id")));
  EXPECT_THAT(error_with("eos_token_id", Json::array({1.5})), AllOf(HasSubstr(kOrigin), HasSubstr("eos_token_id")));
  EXPECT_THAT(error_with("eos_token_id", std::vector<int>(65, 1)),
              AllOf(HasSubstr(kOrigin), HasSubstr("eos_token_id has 65 entries")));
}

TEST(ConfigTest, PadTokenIdOutOfRange) {
  EXPECT_THAT(error_with("pad_token_id", 154880), AllOf(HasSubstr(kOrigin), HasSubstr("\"pad_token_id\"")));
  Json j = glm5();
  j.erase("pad_token_id");
  EXPECT_EQ(parse(j).pad_token_id, -1);
}

TEST(ConfigTest, QuantizationConfigFp8) {
  const ModelConfig c = parse(glm52_fp8());
  EXPECT_TRUE(c.fp8);
  EXPECT_EQ(c.fp8_block_rows, 128);
  EXPECT_EQ(c.fp8_block_cols, 128);
  Json j = glm52_fp8();
  j["quantization_config"]["weight_block_size"] = {64, 32};
  const ModelConfig c2 = parse(j);
  EXPECT_EQ(c2.fp8_block_rows, 64);
  EXPECT_EQ(c2.fp8_block_cols, 32);
  j["quantization_config"].erase("weight_block_size");
  j["quantization_config"].erase("fmt");
  const ModelConfig c3 = parse(j);
  EXPECT_TRUE(c3.fp8);
  EXPECT_EQ(c3.fp8_block_rows, 128);
}

TEST(ConfigTest, QuantizationConfigBad) {
  for (const Json& bs : {Json::array({0, 128}), Json::array({128}), Json::array({128, 128, 1}),
                         Json::array({"128", 128}), Json::array({128, 5000}), Json::array({-128, 128}),
                         Json(128), Json::array({128.5, 128})}) {
    SCOPED_TRACE(bs.dump());
    Json j = glm52_fp8();
    j["quantization_config"]["weight_block_size"] = bs;
    EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("quantization_config.weight_block_size")));
  }
  Json j = glm52_fp8();
  j["quantization_config"]["quant_method"] = "gptq";
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("quant_method \"gptq\" is not supported")));
  j["quantization_config"].erase("quant_method");
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("quant_method missing")));
  j = glm52_fp8();
  j["quantization_config"]["fmt"] = "e5m2";
  EXPECT_THAT(config_error(j), AllOf(HasSubstr(kOrigin), HasSubstr("quantization_config.fmt \"e5m2\"")));
  EXPECT_THAT(error_with("quantization_config", "fp8"), AllOf(HasSubstr(kOrigin), HasSubstr("quantization_config")));
}

TEST(ConfigTest, NotAnObject) {
  EXPECT_THAT(config_error(Json::array({1, 2})), AllOf(HasSubstr(kOrigin), HasSubstr("not a JSON object")));
}

TEST(ConfigTest, LoadFromDirectoryNamesTheFile) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  write_file(path, glm5().dump(2));
  EXPECT_EQ(load_model_config(dir.str()).hidden_size, 6144);

  Json j = glm5();
  j["vocab_size"] = -1;
  write_file(path, j.dump());
  EXPECT_THAT(error_of([&] { load_model_config(dir.str()); }),
              AllOf(HasSubstr(path), HasSubstr("\"vocab_size\" = -1")));

  write_file(path, "{\"model_type\": \"glm_moe_dsa\", \"hidden_size\": 1, \"hidden_size\": 2}");
  EXPECT_THAT(error_of([&] { load_model_config(dir.str()); }),
              AllOf(HasSubstr(path), HasSubstr("duplicate key \"hidden_size\"")));

  write_file(path, "{\"model_type\": ");
  EXPECT_THAT(error_of([&] { load_model_config(dir.str()); }), AllOf(HasSubstr(path), HasSubstr("invalid JSON")));

  std::filesystem::remove(path);
  EXPECT_THAT(error_of([&] { load_model_config(dir.str()); }), AllOf(HasSubstr(path), HasSubstr("cannot open")));
}

}  // namespace
}  // namespace strata::config_test
