#include "model/model.h"

#include <cstdio>
#include <filesystem>

#include "format/checkpoint_tensors.h"
#include "format/container.h"

#include "core/error.h"

namespace strata {

namespace {

// Where tensors come from: a Hugging Face checkpoint or a strata container.
struct Loader {
  const TensorSource& src;
  const ModelConfig& c;

  Weight w(const std::string& name, int64_t rows, int64_t cols) const { return src.weight(name, rows, cols); }
  std::vector<float> v(const std::string& name, int64_t n) const { return src.vec(name, n); }
  MlpWeights mlp(const std::string& p, int64_t width) const {
    MlpWeights m;
    m.gate = w(p + ".gate_proj.weight", width, c.hidden_size);
    m.up = w(p + ".up_proj.weight", width, c.hidden_size);
    m.down = w(p + ".down_proj.weight", c.hidden_size, width);
    return m;
  }
};

class CheckpointSource final : public TensorSource {
 public:
  CheckpointSource(const std::string& dir, const ModelConfig& c) : ck_(dir), c_(c) {}
  bool has(const std::string& name) const override { return ck_.has(name); }
  Weight weight(const std::string& name, int64_t rows, int64_t cols) const override {
    return load_weight(ck_, name, rows, cols, c_.fp8_block_rows, c_.fp8_block_cols);
  }
  std::vector<float> vec(const std::string& name, int64_t n) const override { return load_f32(ck_, name, {n}); }

 private:
  Checkpoint ck_;
  const ModelConfig& c_;
};

}  // namespace

std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts) {
  auto model = std::make_unique<Model>();
  model->dir = dir;
  std::unique_ptr<TensorSource> source;
  if (is_container(dir)) {
    source = open_container(*model);
  } else if (std::filesystem::exists(dir + "/dense.bin") || std::filesystem::exists(dir + "/convert-state.json")) {
    fail("{}: an unfinished strata conversion (no manifest.json); finish it with strata convert --resume", dir);
  } else {
    model->config = load_model_config(dir);
    source = std::make_unique<CheckpointSource>(dir, model->config);
  }
  const ModelConfig& c = model->config;
  const TensorSource& ck = *source;
  Loader ld{ck, c};
  ModelWeights& W = model->weights;

  const int64_t H = c.num_attention_heads, D = c.hidden_size;
  W.embed = ld.w("model.embed_tokens.weight", c.vocab_size, D);
  W.lm_head = ld.w("lm_head.weight", c.vocab_size, D);
  W.final_norm = ld.v("model.norm.weight", D);

  const int64_t n_layers = c.num_hidden_layers + (opts.load_mtp ? c.num_nextn_predict_layers : 0);
  if (opts.load_mtp && c.num_nextn_predict_layers > 0 &&
      !ck.has("model.layers." + std::to_string(c.num_hidden_layers) + ".eh_proj.weight"))
    fail("{}: config has num_nextn_predict_layers={} but the checkpoint has no MTP layer tensors "
         "(model.layers.{}.eh_proj.weight)", dir, c.num_nextn_predict_layers, c.num_hidden_layers);
  W.layers.resize(static_cast<size_t>(n_layers));
  W.experts.resize(static_cast<size_t>(n_layers));
  for (int64_t L = 0; L < n_layers; ++L) {
    if (opts.progress) std::fprintf(stderr, "\rloading layer %lld/%lld", (long long)L + 1, (long long)n_layers);
    const std::string p = "model.layers." + std::to_string(L);
    LayerWeights& lw = W.layers[static_cast<size_t>(L)];
    lw.input_norm = ld.v(p + ".input_layernorm.weight", D);
    lw.post_attention_norm = ld.v(p + ".post_attention_layernorm.weight", D);

    AttentionWeights& a = lw.attn;
    const std::string ap = p + ".self_attn";
    if (c.attention == AttentionKind::Gqa) {
      const int64_t hd = c.head_dim, KH = c.num_key_value_heads;
      a.q = ld.w(ap + ".q_proj.weight", H * hd, D);
      a.k = ld.w(ap + ".k_proj.weight", KH * hd, D);
      a.v = ld.w(ap + ".v_proj.weight", KH * hd, D);
      a.o = ld.w(ap + ".o_proj.weight", D, H * hd);
      if (c.qk_norm) {
        a.q_norm = ld.v(ap + ".q_norm.weight", hd);
        a.k_norm = ld.v(ap + ".k_norm.weight", hd);
      }
      if (c.attention_bias) {
        a.q_bias = ld.v(ap + ".q_proj.bias", H * hd);
        a.k_bias = ld.v(ap + ".k_proj.bias", KH * hd);
        a.v_bias = ld.v(ap + ".v_proj.bias", KH * hd);
      }
    } else {
      a.q_a = ld.w(ap + ".q_a_proj.weight", c.q_lora_rank, D);
      a.q_a_norm = ld.v(ap + ".q_a_layernorm.weight", c.q_lora_rank);
      a.q_b = ld.w(ap + ".q_b_proj.weight", H * c.qk_head_dim(), c.q_lora_rank);
      a.kv_a = ld.w(ap + ".kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, D);
      a.kv_a_norm = ld.v(ap + ".kv_a_layernorm.weight", c.kv_lora_rank);
      a.kv_b = ld.w(ap + ".kv_b_proj.weight", H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
      a.o = ld.w(ap + ".o_proj.weight", D, H * c.v_head_dim);
      a.has_indexer = c.indexer_full(L);
      if (a.has_indexer) {
        const std::string ip = ap + ".indexer";
        a.indexer.wq_b = ld.w(ip + ".wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
        a.indexer.wk = ld.w(ip + ".wk.weight", c.index_head_dim, D);
        a.indexer.weights_proj = ld.w(ip + ".weights_proj.weight", c.index_n_heads, D);
        a.indexer.k_norm_weight = ld.v(ip + ".k_norm.weight", c.index_head_dim);
        a.indexer.k_norm_bias = ld.v(ip + ".k_norm.bias", c.index_head_dim);
      }
    }

    lw.is_moe = c.is_moe(L);
    const std::string mp = p + ".mlp";
    if (lw.is_moe) {
      lw.router.gate = ld.w(mp + ".gate.weight", c.n_routed_experts, D);
      lw.router.bias = ck.has(mp + ".gate.e_score_correction_bias")
                           ? ld.v(mp + ".gate.e_score_correction_bias", c.n_routed_experts)
                           : std::vector<float>(static_cast<size_t>(c.n_routed_experts), 0.0f);
      if (!model->experts_on_disk) {
        auto& ex = W.experts[static_cast<size_t>(L)];
        ex.reserve(static_cast<size_t>(c.n_routed_experts));
        for (int64_t e = 0; e < c.n_routed_experts; ++e)
          ex.push_back(ld.mlp(mp + ".experts." + std::to_string(e), c.moe_intermediate_size));
      }
      lw.has_shared = c.n_shared_experts > 0;
      if (lw.has_shared) lw.shared = ld.mlp(mp + ".shared_experts", c.moe_intermediate_size * c.n_shared_experts);
    } else {
      lw.dense = ld.mlp(mp, c.intermediate_size);
    }

    if (L >= c.num_hidden_layers) {
      lw.enorm = ld.v(p + ".enorm.weight", D);
      lw.hnorm = ld.v(p + ".hnorm.weight", D);
      lw.shared_head_norm = ld.v(p + ".shared_head.norm.weight", D);
      lw.eh_proj = ld.w(p + ".eh_proj.weight", D, 2 * D);
    }
  }
  if (opts.progress) std::fprintf(stderr, "\n");
  return model;
}

}  // namespace strata
