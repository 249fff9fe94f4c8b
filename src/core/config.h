// The typed, validated model configuration (Hugging Face config.json of a
// glm_moe_dsa checkpoint). Every dimension is bounded before anything is
// allocated from it; a hostile config fails with a message naming the field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"

namespace strata {

struct ModelConfig {
  std::string model_type;
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
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;

  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  bool index_share_for_mtp_iteration = false;

  int64_t num_nextn_predict_layers = 0;
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;

  // FP8 checkpoint (quantization_config.quant_method == "fp8").
  bool fp8 = false;
  int64_t fp8_block_rows = 128;
  int64_t fp8_block_cols = 128;

  // Per decoder layer (size num_hidden_layers); the MTP layers are always MoE
  // with a full indexer.
  std::vector<bool> layer_is_moe;
  std::vector<bool> layer_indexer_full;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool is_moe(int64_t layer) const { return layer >= num_hidden_layers || layer_is_moe[layer]; }
  bool indexer_full(int64_t layer) const { return layer >= num_hidden_layers || layer_indexer_full[layer]; }
  // Layers with tensors: decoder layers plus MTP layers.
  int64_t num_weight_layers() const { return num_hidden_layers + num_nextn_predict_layers; }
};

// Parses and validates; `origin` names the file in error messages.
ModelConfig parse_model_config(const Json& j, const std::string& origin);
ModelConfig load_model_config(const std::string& model_dir);

}  // namespace strata
