// A loaded model of a supported family (core/config.h): config plus immutable weights. Mutable state
// (KV caches, scratch) lives in Session, experts are reached through an
// ExpertStore, threads come from a ThreadPool passed in.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/aligned.h"
#include "core/config.h"
#include "core/weight.h"
#include "experts/store_options.h"

namespace strata {

struct IndexerWeights {  // DSA lightning indexer (absent on GLM-5.2 shared layers)
  Weight wq_b;           // [n_heads*head_dim, q_lora]
  Weight wk;             // [head_dim, hidden]
  Weight weights_proj;   // [n_heads, hidden]
  std::vector<float> k_norm_weight, k_norm_bias;  // LayerNorm(head_dim)
};

struct AttentionWeights {
  // MLA (AttentionKind::Mla).
  Weight q_a;   // [q_lora, hidden]
  Weight q_b;   // [heads*qk_head, q_lora]
  Weight kv_a;  // [kv_lora+rope, hidden]
  Weight kv_b;  // [heads*(nope+v), kv_lora]
  Weight o;     // [hidden, heads*v]
  std::vector<float> q_a_norm, kv_a_norm;
  bool has_indexer = false;
  IndexerWeights indexer;
  // GQA (AttentionKind::Gqa): self_attn.{q,k,v}_proj (+ .bias when
  // attention_bias), q_norm / k_norm over head_dim when qk_norm; o above is
  // shared ([hidden, heads*head_dim] here).
  Weight q;  // [heads*head_dim, hidden]
  Weight k;  // [kv_heads*head_dim, hidden]
  Weight v;  // [kv_heads*head_dim, hidden]
  std::vector<float> q_norm, k_norm;            // [head_dim], empty without qk_norm
  std::vector<float> q_bias, k_bias, v_bias;    // [rows of q / k / v], empty without attention_bias
};

struct RouterWeights {
  Weight gate;                // [n_experts, hidden], evaluated in f32
  std::vector<float> bias;    // e_score_correction_bias (choice only)
};

struct LayerWeights {
  std::vector<float> input_norm, post_attention_norm;
  AttentionWeights attn;
  bool is_moe = false;
  MlpWeights dense;     // !is_moe
  RouterWeights router; // is_moe
  bool has_shared = false;
  MlpWeights shared;    // is_moe && n_shared_experts > 0
  // MTP layer only (index num_hidden_layers).
  std::vector<float> enorm, hnorm, shared_head_norm;
  Weight eh_proj;  // [hidden, 2*hidden]
};

struct ModelWeights {
  Weight embed;    // [vocab, hidden]
  Weight lm_head;  // [vocab, hidden]
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;  // decoder layers, then MTP layers
  // Routed experts per layer (empty for dense layers), read only through an
  // ExpertStore.
  std::vector<std::vector<MlpWeights>> experts;
};

struct Model {
  std::string dir;
  ModelConfig config;
  ModelWeights weights;
  // A container: the manifest, the resident dense part (weights view into
  // it), and the routed experts left on disk for an expert store to read.
  std::shared_ptr<const Manifest> manifest;
  StreamedBytes dense_blob;  // huge-page backed where the kernel allows (core/aligned.h)
  bool experts_on_disk = false;
  size_t resident_bytes() const;
  // A container's expert files, for a DiskExpertStore (every loaded layer).
  ExpertFiles expert_files() const {
    return ExpertFiles{dir, manifest, static_cast<int64_t>(weights.layers.size())};
  }
};

// Where load_model reads tensors from.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual bool has(const std::string& name) const = 0;
  virtual Weight weight(const std::string& name, int64_t rows, int64_t cols) const = 0;
  virtual std::vector<float> vec(const std::string& name, int64_t n) const = 0;
};

// Reads a container's manifest and dense part into `m` (config, manifest,
// dense_blob, experts_on_disk) and returns a source over the dense tensors.
std::unique_ptr<TensorSource> open_container(Model& m);

struct LoadOptions {
  bool load_mtp = true;
  bool progress = false;  // print loading progress on stderr
};

// Loads and validates every tensor once; the hot path trusts the result.
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts = {});

}  // namespace strata
