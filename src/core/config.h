// The typed, validated model configuration (Hugging Face config.json of a
// supported family: glm_moe_dsa, qwen3_moe, glm4_moe, deepseek_v3, deepseek_v32). Every dimension is bounded
// before anything is allocated from it; a hostile config fails with a message
// naming the field.
//
// A family is a description, not a fork: which attention (MLA with the DSA
// indexer, or GQA with its variations: partial rotary, q/k/v bias, optional
// per-head q/k norms), which router (sigmoid scores with
// a correction bias and group limits, or softmax top-k), whether layers have
// a shared expert, the dense/MoE layer pattern (layer_is_moe) and the tensor
// names that follow from the attention kind. The forward branches on these
// once per layer (docs/architecture.md, "Adding a family").
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"

namespace strata {

enum class AttentionKind : uint8_t {
  Mla,  // multi-head latent attention (+ DSA indexer when index_n_heads > 0): glm_moe_dsa, deepseek_v3,
        // deepseek_v32
  Gqa,  // grouped-query attention, half-split RoPE over the first rotary_dim dims of each head,
        // optional q/k/v bias and per-head q/k RMSNorm: qwen3_moe, glm4_moe
};

enum class RouterKind : uint8_t {
  SigmoidGroups,  // sigmoid scores, correction bias steers the choice, group-limited, routed scaling
  Softmax,        // softmax over all experts, top-k, renormalised when norm_topk_prob
};

struct ModelConfig {
  std::string model_type;
  AttentionKind attention = AttentionKind::Mla;
  RouterKind router = RouterKind::SigmoidGroups;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t intermediate_size = 0;      // dense MLP width
  int64_t moe_intermediate_size = 0;  // per routed expert (and per shared expert)
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_shared_experts = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;

  int64_t num_attention_heads = 0;
  // GQA only (zero for MLA): kv heads, the per-head width of q, k and v.
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  // GQA: the first rotary_dim dims of every q / k head rotate (half-split
  // pairs (i, i + rotary_dim/2)), the rest pass through (glm4_moe's
  // partial_rotary_factor; head_dim for qwen3_moe). attention_bias: q/k/v
  // projections have a bias (o has none). qk_norm: RMSNorm over head_dim on
  // every q and k head before RoPE.
  int64_t rotary_dim = 0;
  bool attention_bias = false;
  bool qk_norm = false;
  // MLA only (zero for GQA).
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  double rope_theta = 10000.0;
  // YaRN rope scaling (deepseek_v3's rope_scaling type "yarn"; off elsewhere).
  // inv_freq[i] blends 1/(factor * theta^(2i/d)) and 1/theta^(2i/d) by a
  // linear ramp over dims [yarn_low, yarn_high] (the correction range of
  // beta_fast / beta_slow over the original context, floored / ceiled and
  // clamped); cos and sin are multiplied by rope_attention_factor.
  bool rope_yarn = false;
  double yarn_factor = 1.0;
  double yarn_low = 0.0, yarn_high = 0.0;
  // The inputs of that range, kept for export-gguf (llama.cpp recomputes it).
  int64_t yarn_original_context = 0;
  double yarn_beta_fast = 32.0, yarn_beta_slow = 1.0;
  float rope_attention_factor = 1.0f;
  // Multiplies the attention softmax scale 1/sqrt(qk_head_dim): YaRN's
  // mscale(factor, mscale_all_dim)^2 (deepseek_v3); exactly 1 elsewhere.
  float softmax_scale_mult = 1.0f;
  int64_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;

  // DSA indexer (glm_moe_dsa and deepseek_v32; zero for GQA and deepseek_v3,
  // where layer_indexer_full is all false and every row attends every causal key).
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  // How the indexer rotates the first qk_rope_head_dim dims of its q and k:
  // adjacent pairs (2i, 2i+1) (glm_moe_dsa), or split halves (i, i + d/2)
  // (deepseek_v32: transformers' DeepseekV32Indexer). MLA itself always
  // rotates adjacent pairs.
  bool index_rope_half = false;
  bool index_share_for_mtp_iteration = false;

  int64_t num_nextn_predict_layers = 0;
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;

  // FP8 checkpoint (quantization_config.quant_method == "fp8").
  bool fp8 = false;
  int64_t fp8_block_rows = 128;
  int64_t fp8_block_cols = 128;

  // Per decoder layer (size num_hidden_layers); the MTP layers are always MoE,
  // with a full indexer when the family has one.
  std::vector<bool> layer_is_moe;
  std::vector<bool> layer_indexer_full;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool is_moe(int64_t layer) const { return layer >= num_hidden_layers || layer_is_moe[layer]; }
  bool has_dsa() const { return index_n_heads > 0; }
  bool indexer_full(int64_t layer) const {
    return has_dsa() && (layer >= num_hidden_layers || layer_indexer_full[layer]);
  }
  // Layers with tensors: decoder layers plus MTP layers.
  int64_t num_weight_layers() const { return num_hidden_layers + num_nextn_predict_layers; }
  // The key cache of one layer, floats per position and per part, in the
  // order LayerCache holds them: MLA {latent, roped key, indexer key (full
  // layers), 0, 0}; GQA {0, 0, 0, keys, values} (num_key_value_heads * head_dim each).
  std::array<int64_t, 5> cache_widths(int64_t layer) const {
    if (attention == AttentionKind::Gqa) return {0, 0, 0, num_key_value_heads * head_dim, num_key_value_heads * head_dim};
    return {kv_lora_rank, qk_rope_head_dim, indexer_full(layer) ? index_head_dim : 0, 0, 0};
  }
  int64_t cache_floats(int64_t layer) const {
    const auto w = cache_widths(layer);
    return w[0] + w[1] + w[2] + w[3] + w[4];
  }
};

// Parses and validates; `origin` names the file in error messages.
ModelConfig parse_model_config(const Json& j, const std::string& origin);
ModelConfig load_model_config(const std::string& model_dir);

}  // namespace strata
