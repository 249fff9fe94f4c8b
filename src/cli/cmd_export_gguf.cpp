// `strata export-gguf`: converts a Hugging Face checkpoint into a GGUF file
// that llama.cpp loads, so the engine can be cross-checked against an
// independent implementation (docs/llama-cpp-crosscheck.md). One llama.cpp
// architecture per strata family:
//
//   glm_moe_dsa -> glm-dsa, deepseek_v3 -> deepseek2, qwen3_moe -> qwen3moe,
//   glm4_moe -> glm4moe.
//
// The two MLA families follow llama.cpp's own converter for
// DeepseekV2/V3ForCausalLM (and GlmMoeDsaForCausalLM, derived from it):
// kv_b_proj is split per head into attn_k_b (stored transposed,
// [H, kv_lora, nope]) and attn_v_b ([H, v, kv_lora]). glm-dsa adds the
// per-layer indexer schedule (attention.indexer.types); deepseek2 adds YaRN
// rope scaling (see yarn_metadata for how its two magnitude factors map onto
// llama.cpp's keys). The two GQA
// families store q/k/v/o as they are (plus q/k norms and q/k/v biases where
// the checkpoint has them). In every family routed experts are stacked into
// one 3-D tensor per projection and layer, the router bias is
// exp_probs_b.bias, and an MTP layer is block num_hidden_layers with its
// nextn.* tensors. The vocabulary is a gpt2-style list of placeholder
// strings: the cross-check works on token ids, and a checkpoint directory has
// no tokenizer strata reads.
//
// llama.cpp's qwen3moe has no dense layers (every block is MoE, one expert
// width). A qwen3_moe dense layer (mlp_only_layers, decoder_sparse_step) is
// written as a MoE layer that computes the same function: a zero router
// (uniform softmax, so any top-k of the experts, each weighted 1/k after
// renormalisation) over experts that are all the dense MLP. When the dense
// width differs from moe_intermediate_size, every expert is zero-padded to
// the wider one (a padded channel contributes silu(0) * 0 = 0).
//
// Tensors are read and converted one at a time while the file is written, so
// memory stays at about one tensor (one expert for stacked experts).
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "format/gguf_writer.h"
#include "format/checkpoint_tensors.h"
#include "format/safetensors.h"
#include "core/numeric.h"
#include "core/config.h"
#include "core/weight.h"
#include "core/error.h"
#include "core/io.h"
#include "core/json.h"

namespace strata::cli {

namespace {

// The llama.cpp architecture a strata family is written as.
enum class GgufArch { GlmDsa, Deepseek2, Qwen3Moe, Glm4Moe };

struct ExportOptions {
  std::string model_dir;
  std::string out_path;
  std::string type = "f32";          // matrices: f32 | f16 | bf16 | q8_0 | q4_0
  std::string kv_b_type;             // attn_k_b / attn_v_b; empty = same as `type`
  bool no_mtp = false;               // leave out the MTP (nextn) layer
  bool quiet = false;
};

GgmlType parse_type(const std::string& s, const char* flag) {
  if (s == "f32") return GgmlType::F32;
  if (s == "f16") return GgmlType::F16;
  if (s == "bf16") return GgmlType::BF16;
  if (s == "q8_0") return GgmlType::Q8_0;
  if (s == "q4_0") return GgmlType::Q4_0;
  fail("{} must be f32, f16, bf16, q8_0 or q4_0, got \"{}\"", flag, s);
}

// Converts f32 values to `type` and hands them to the sink.
class RowEncoder {
 public:
  explicit RowEncoder(GgmlType type) : type_(type) {}
  void emit(const GgufWriter::Sink& sink, const float* v, size_t n) {
    if (type_ == GgmlType::F32) {
      sink(v, n * sizeof(float));
      return;
    }
    if (type_ == GgmlType::Q8_0 || type_ == GgmlType::Q4_0) {
      if (n % 32 != 0) fail("a row of {} values is not a multiple of {}'s block of 32", n, ggml_type_name(type_));
      bytes_.resize(n / 32 * ggml_type_size(type_));
      if (type_ == GgmlType::Q8_0)
        quantize_row_q8_0(v, static_cast<int64_t>(n), bytes_.data());
      else
        quantize_row_q4_0(v, static_cast<int64_t>(n), bytes_.data());
      sink(bytes_.data(), bytes_.size());
      return;
    }
    half_.resize(n);
    if (type_ == GgmlType::F16) {
      for (size_t i = 0; i < n; ++i) {
        half_[i] = f32_to_f16(v[i]);
        if ((half_[i] & 0x7fffu) == 0x7c00u && std::isfinite(v[i]))
          fail("value {} is outside the f16 range; export with --type f32 or bf16", v[i]);
      }
    } else {
      for (size_t i = 0; i < n; ++i) half_[i] = f32_to_bf16(v[i]);
    }
    sink(half_.data(), n * sizeof(uint16_t));
  }

 private:
  GgmlType type_;
  std::vector<uint16_t> half_;
  std::vector<uint8_t> bytes_;
};

class Exporter {
 public:
  Exporter(const ExportOptions& opt, const ModelConfig& cfg, const Checkpoint& ck, const Json& raw_config)
      : opt_(opt), c_(cfg), ck_(ck), raw_(raw_config) {
    mat_type_ = parse_type(opt.type, "--type");
    kvb_type_ = opt.kv_b_type.empty() ? mat_type_ : parse_type(opt.kv_b_type, "--kv-b-type");
  }

  void run() {
    validate();
    metadata();
    vocabulary();
    tensors();
    w_.write(opt_.out_path);
  }

  size_t num_tensors() const { return w_.num_tensors(); }
  size_t num_kv() const { return w_.num_kv(); }
  int64_t blocks() const { return c_.num_hidden_layers + (with_mtp_ ? c_.num_nextn_predict_layers : 0); }

 private:
  std::string key(const char* suffix) const { return std::string(arch_name_) + "." + suffix; }
  static std::string blk(int64_t i, const char* suffix) { return "blk." + std::to_string(i) + "." + suffix; }
  static std::string hf(int64_t i, const char* suffix) { return "model.layers." + std::to_string(i) + "." + suffix; }
  bool mla() const { return arch_ == GgufArch::GlmDsa || arch_ == GgufArch::Deepseek2; }

  void validate() {
    const std::string origin = ck_.dir() + "/config.json";
    if (c_.model_type == "glm_moe_dsa") {
      arch_ = GgufArch::GlmDsa, arch_name_ = "glm-dsa";
    } else if (c_.model_type == "deepseek_v3") {
      arch_ = GgufArch::Deepseek2, arch_name_ = "deepseek2";
    } else if (c_.model_type == "qwen3_moe") {
      arch_ = GgufArch::Qwen3Moe, arch_name_ = "qwen3moe";
    } else if (c_.model_type == "glm4_moe") {
      arch_ = GgufArch::Glm4Moe, arch_name_ = "glm4moe";
    } else {
      fail("{}: export-gguf supports model_type \"glm_moe_dsa\", \"deepseek_v3\", \"qwen3_moe\" and "
           "\"glm4_moe\"; \"{}\" is not exported yet",
           origin, c_.model_type);
    }
    if (arch_ == GgufArch::Qwen3Moe) {
      validate_qwen3(origin);
      return;
    }
    // llama.cpp describes the dense/MoE schedule by one number, the count of
    // leading dense layers.
    lead_dense_ = 0;
    while (lead_dense_ < c_.num_hidden_layers && !c_.layer_is_moe[static_cast<size_t>(lead_dense_)]) ++lead_dense_;
    for (int64_t i = lead_dense_; i < c_.num_hidden_layers; ++i)
      if (!c_.layer_is_moe[static_cast<size_t>(i)])
        fail("{}: layer {} is dense after MoE layer {}; GGUF {} only supports leading dense layers "
             "(leading_dense_block_count)",
             origin, i, lead_dense_, arch_name_);
    if (lead_dense_ == c_.num_hidden_layers)
      fail("{}: every layer is dense; llama.cpp's {} expects MoE layers", origin, arch_name_);
    if (mla() && c_.n_shared_experts < 1)
      fail("{}: n_shared_experts = 0; llama.cpp's {} graph always runs a shared expert", origin, arch_name_);
    if (arch_ != GgufArch::GlmDsa && c_.n_group > 1 && c_.n_routed_experts % c_.n_group != 0)  // glm4moe, deepseek2
      fail("{}: n_routed_experts {} is not a multiple of n_group {}", origin, c_.n_routed_experts, c_.n_group);
    if (arch_ == GgufArch::Deepseek2) validate_yarn(origin);
    const std::string mtp_probe = hf(c_.num_hidden_layers, "eh_proj.weight");
    with_mtp_ = !opt_.no_mtp && c_.num_nextn_predict_layers > 0 && ck_.has(mtp_probe);
    if (!opt_.no_mtp && c_.num_nextn_predict_layers > 0 && !with_mtp_ && !opt_.quiet)
      std::fprintf(stderr, "strata: note: %s has no MTP layer tensors (%s); exporting without MTP\n",
                   ck_.dir().c_str(), mtp_probe.c_str());
    if (arch_ == GgufArch::GlmDsa && c_.index_head_dim % 64 != 0 && !opt_.quiet)
      std::fprintf(stderr,
                   "strata: warning: index_head_dim %lld is not a multiple of 64; llama.cpp's glm-dsa graph "
                   "multiplies the indexer q/k by a 64x64-or-larger Hadamard matrix and aborts at context creation\n",
                   static_cast<long long>(c_.index_head_dim));
  }

  // llama.cpp's deepseek2 reads no YaRN beta (it always uses beta_fast 32,
  // beta_slow 1), and with factor 1 (ln f = 0) its softmax multiplier is the
  // rotary one squared (see yarn_metadata).
  void validate_yarn(const std::string& origin) const {
    if (!c_.rope_yarn) return;
    if (c_.yarn_beta_fast != 32.0 || c_.yarn_beta_slow != 1.0)
      fail("{}: rope_scaling.beta_fast / beta_slow = {} / {}; llama.cpp's deepseek2 always uses 32 / 1", origin,
           c_.yarn_beta_fast, c_.yarn_beta_slow);
    if (std::log(c_.yarn_factor) == 0.0 &&
        std::fabs(std::sqrt(c_.softmax_scale_mult) - c_.rope_attention_factor) > 1e-6f * c_.rope_attention_factor)
      fail("{}: rope_scaling.factor 1 with a softmax scale of {} and a rotary scale of {}; llama.cpp's deepseek2 "
           "cannot express that combination",
           origin, c_.softmax_scale_mult, c_.rope_attention_factor);
  }

  // llama.cpp's qwen3moe: softmax router renormalised over the top-k, no
  // shared expert, no MTP, RoPE over the whole head, every block MoE with one
  // expert width (dense layers are rewritten, see the top of this file).
  void validate_qwen3(const std::string& origin) {
    if (!c_.norm_topk_prob)
      fail("{}: norm_topk_prob is false; llama.cpp's qwen3moe always renormalises the top-k weights", origin);
    if (c_.n_shared_experts != 0)
      fail("{}: n_shared_experts = {}; llama.cpp's qwen3moe has no shared expert", origin, c_.n_shared_experts);
    if (c_.rotary_dim != c_.head_dim)
      fail("{}: RoPE over {} of {} head dims; llama.cpp's qwen3moe rotates the whole head", origin, c_.rotary_dim,
           c_.head_dim);
    if (c_.attention_bias || !c_.qk_norm)
      fail("{}: llama.cpp's qwen3moe needs q/k norms and no attention bias", origin);
    ff_exp_ = c_.moe_intermediate_size;
    for (int64_t i = 0; i < c_.num_hidden_layers; ++i)
      if (!c_.is_moe(i)) ff_exp_ = std::max(ff_exp_, c_.intermediate_size);
    with_mtp_ = false;
  }

  void metadata() {
    w_.add_string("general.architecture", arch_name_);
    w_.add_string("general.type", "model");
    std::string name = std::filesystem::path(ck_.dir()).lexically_normal().filename().string();
    if (name.empty() || name == ".") name = std::filesystem::path(ck_.dir()).lexically_normal().parent_path().filename().string();
    w_.add_string("general.name", name.empty() ? c_.model_type : name);
    // llama_ftype: 0 = all f32, 1 = mostly f16, 2 = mostly q4_0, 7 = mostly q8_0, 32 = mostly bf16.
    const uint32_t ftype = mat_type_ == GgmlType::F32    ? 0u
                           : mat_type_ == GgmlType::F16  ? 1u
                           : mat_type_ == GgmlType::Q4_0 ? 2u
                           : mat_type_ == GgmlType::Q8_0 ? 7u
                                                         : 32u;
    w_.add_u32("general.file_type", ftype);
    if (!mla()) {
      gqa_metadata();
      return;
    }

    w_.add_u32(key("block_count"), static_cast<uint32_t>(blocks()));
    w_.add_u32(key("context_length"), static_cast<uint32_t>(c_.max_position_embeddings));
    w_.add_u32(key("embedding_length"), static_cast<uint32_t>(c_.hidden_size));
    w_.add_u32(key("feed_forward_length"), static_cast<uint32_t>(c_.intermediate_size));
    w_.add_u32(key("vocab_size"), static_cast<uint32_t>(c_.vocab_size));
    w_.add_u32(key("attention.head_count"), static_cast<uint32_t>(c_.num_attention_heads));
    // MLA runs as MQA over the compressed latent: one kv head whose key is
    // [latent | rope] and whose value is the latent.
    w_.add_u32(key("attention.head_count_kv"), 1);
    w_.add_u32(key("attention.key_length"), static_cast<uint32_t>(c_.kv_lora_rank + c_.qk_rope_head_dim));
    w_.add_u32(key("attention.value_length"), static_cast<uint32_t>(c_.kv_lora_rank));
    w_.add_u32(key("attention.key_length_mla"), static_cast<uint32_t>(c_.qk_head_dim()));
    w_.add_u32(key("attention.value_length_mla"), static_cast<uint32_t>(c_.v_head_dim));
    w_.add_u32(key("attention.q_lora_rank"), static_cast<uint32_t>(c_.q_lora_rank));
    w_.add_u32(key("attention.kv_lora_rank"), static_cast<uint32_t>(c_.kv_lora_rank));
    w_.add_f32(key("attention.layer_norm_rms_epsilon"), c_.rms_norm_eps);
    w_.add_f32(key("rope.freq_base"), static_cast<float>(c_.rope_theta));
    w_.add_u32(key("rope.dimension_count"), static_cast<uint32_t>(c_.qk_rope_head_dim));

    w_.add_u32(key("leading_dense_block_count"), static_cast<uint32_t>(lead_dense_));
    w_.add_u32(key("expert_feed_forward_length"), static_cast<uint32_t>(c_.moe_intermediate_size));
    w_.add_u32(key("expert_count"), static_cast<uint32_t>(c_.n_routed_experts));
    w_.add_u32(key("expert_used_count"), static_cast<uint32_t>(c_.num_experts_per_tok));
    w_.add_u32(key("expert_shared_count"), static_cast<uint32_t>(c_.n_shared_experts));
    if (arch_ == GgufArch::GlmDsa) {
      w_.add_u32(key("expert_group_count"), static_cast<uint32_t>(c_.n_group));
      w_.add_u32(key("expert_group_used_count"), static_cast<uint32_t>(c_.topk_group));
    } else {
      expert_groups();
    }
    w_.add_f32(key("expert_weights_scale"), c_.routed_scaling_factor);
    w_.add_bool(key("expert_weights_norm"), c_.norm_topk_prob);
    w_.add_u32(key("expert_gating_func"), 2);  // LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
    if (arch_ == GgufArch::GlmDsa)
      indexer_metadata();
    else
      yarn_metadata();
    if (with_mtp_) w_.add_u32(key("nextn_predict_layers"), static_cast<uint32_t>(c_.num_nextn_predict_layers));
  }

  // glm-dsa's DSA indexer.
  void indexer_metadata() {
    w_.add_u32(key("attention.indexer.head_count"), static_cast<uint32_t>(c_.index_n_heads));
    w_.add_u32(key("attention.indexer.key_length"), static_cast<uint32_t>(c_.index_head_dim));
    w_.add_u32(key("attention.indexer.top_k"), static_cast<uint32_t>(c_.index_topk));
    // One entry per decoder layer (the MTP layer always has its own indexer).
    // Written even when every layer is full: without it llama.cpp guesses the
    // schedule from the context length.
    w_.add_array_bool(key("attention.indexer.types"), c_.layer_indexer_full);
  }

  // qwen3moe / glm4moe: plain GQA heads (key_length = value_length =
  // head_dim); RoPE (NEOX, half-split) over rope.dimension_count dims.
  void gqa_metadata() {
    w_.add_u32(key("block_count"), static_cast<uint32_t>(blocks()));
    w_.add_u32(key("context_length"), static_cast<uint32_t>(c_.max_position_embeddings));
    w_.add_u32(key("embedding_length"), static_cast<uint32_t>(c_.hidden_size));
    w_.add_u32(key("feed_forward_length"), static_cast<uint32_t>(c_.intermediate_size));
    w_.add_u32(key("vocab_size"), static_cast<uint32_t>(c_.vocab_size));
    w_.add_u32(key("attention.head_count"), static_cast<uint32_t>(c_.num_attention_heads));
    w_.add_u32(key("attention.head_count_kv"), static_cast<uint32_t>(c_.num_key_value_heads));
    w_.add_u32(key("attention.key_length"), static_cast<uint32_t>(c_.head_dim));
    w_.add_u32(key("attention.value_length"), static_cast<uint32_t>(c_.head_dim));
    w_.add_f32(key("attention.layer_norm_rms_epsilon"), c_.rms_norm_eps);
    w_.add_f32(key("rope.freq_base"), static_cast<float>(c_.rope_theta));
    w_.add_u32(key("rope.dimension_count"), static_cast<uint32_t>(c_.rotary_dim));
    w_.add_u32(key("expert_count"), static_cast<uint32_t>(c_.n_routed_experts));
    w_.add_u32(key("expert_used_count"), static_cast<uint32_t>(c_.num_experts_per_tok));
    if (arch_ == GgufArch::Qwen3Moe) {
      w_.add_u32(key("expert_feed_forward_length"), static_cast<uint32_t>(ff_exp_));
      return;
    }
    w_.add_u32(key("expert_feed_forward_length"), static_cast<uint32_t>(c_.moe_intermediate_size));
    w_.add_u32(key("leading_dense_block_count"), static_cast<uint32_t>(lead_dense_));
    w_.add_u32(key("expert_shared_count"), static_cast<uint32_t>(c_.n_shared_experts));
    expert_groups();
    w_.add_f32(key("expert_weights_scale"), c_.routed_scaling_factor);
    w_.add_bool(key("expert_weights_norm"), c_.norm_topk_prob);
    w_.add_u32(key("expert_gating_func"), 2);  // LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
    if (with_mtp_) w_.add_u32(key("nextn_predict_layers"), static_cast<uint32_t>(c_.num_nextn_predict_layers));
  }

  // Group-limited routing (glm4moe, deepseek2): written only when it can drop
  // a group (llama.cpp asserts 0 < used < count when count > 1; keeping every
  // group selects as no groups).
  void expert_groups() {
    if (c_.n_group > 1 && c_.topk_group < c_.n_group) {
      w_.add_u32(key("expert_group_count"), static_cast<uint32_t>(c_.n_group));
      w_.add_u32(key("expert_group_used_count"), static_cast<uint32_t>(c_.topk_group));
    }
  }

  // deepseek2's YaRN. strata (as transformers) multiplies the rotary cos/sin
  // by A = rope_attention_factor and the softmax scale 1/sqrt(qk_head_dim) by
  // S = softmax_scale_mult. llama.cpp's deepseek2, with f = factor and
  // m = yarn_log_multiplier / 0.1, multiplies cos/sin by rope.scaling.attn_factor
  // (R, default 1; its own mscale ratio is 1 for this architecture) and the
  // softmax scale by (R * (1 + 0.1 m ln f))^2. So R = A and
  // 0.1 m = (sqrt(S) / A - 1) / ln f. For the released checkpoints
  // (mscale = mscale_all_dim) A = 1 and this is 0.1 * mscale_all_dim, which is
  // what llama.cpp's own converter writes.
  void yarn_metadata() {
    if (!c_.rope_yarn) return;
    w_.add_string(key("rope.scaling.type"), "yarn");
    w_.add_f32(key("rope.scaling.factor"), static_cast<float>(c_.yarn_factor));
    w_.add_u32(key("rope.scaling.original_context_length"), static_cast<uint32_t>(c_.yarn_original_context));
    const double A = c_.rope_attention_factor, ln_f = std::log(c_.yarn_factor);
    if (A != 1.0) w_.add_f32(key("rope.scaling.attn_factor"), static_cast<float>(A));
    if (ln_f != 0.0)  // factor 1: validate_yarn checked that sqrt(S) = A
      w_.add_f32(key("rope.scaling.yarn_log_multiplier"),
                 static_cast<float>((std::sqrt(static_cast<double>(c_.softmax_scale_mult)) / A - 1.0) / ln_f));
  }

  void vocabulary() {
    const int64_t V = c_.vocab_size;
    std::vector<std::string> tokens(static_cast<size_t>(V));
    std::vector<int32_t> types(static_cast<size_t>(V), 1);  // NORMAL
    for (int64_t i = 0; i < V; ++i) tokens[static_cast<size_t>(i)] = "[T" + std::to_string(i) + "]";
    auto control = [&](int64_t id) {
      if (id >= 0 && id < V) types[static_cast<size_t>(id)] = 3;  // CONTROL
    };
    for (int64_t id : c_.eos_token_ids) control(id);
    control(c_.pad_token_id);
    w_.add_string("tokenizer.ggml.model", "gpt2");
    w_.add_string("tokenizer.ggml.pre", "default");
    w_.add_array_string("tokenizer.ggml.tokens", tokens);
    w_.add_array_i32("tokenizer.ggml.token_type", types);
    w_.add_array_string("tokenizer.ggml.merges", {});  // the gpt2 loader requires the key; ids need no merges
    if (auto it = raw_.find("bos_token_id"); it != raw_.end() && it->is_number_integer() &&
                                             it->get<int64_t>() >= 0 && it->get<int64_t>() < V) {
      control(it->get<int64_t>());
      w_.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(it->get<int64_t>()));
    }
    if (!c_.eos_token_ids.empty())
      w_.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(c_.eos_token_ids.front()));
    if (c_.pad_token_id >= 0) w_.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(c_.pad_token_id));
    w_.add_bool("tokenizer.ggml.add_bos_token", false);
    w_.add_bool("tokenizer.ggml.add_eos_token", false);
  }

  // A 1-D float tensor (norm weight, bias), always f32 as llama.cpp's converter keeps them.
  void vec(const std::string& gguf_name, const std::string& hf_name, int64_t n) {
    ck_.entry(hf_name);  // fail now, naming the tensor, rather than halfway through the write
    const Checkpoint* ck = &ck_;
    w_.add_tensor(gguf_name, {n}, GgmlType::F32, [ck, hf_name, n](const GgufWriter::Sink& sink) {
      std::vector<float> v = load_f32(*ck, hf_name, {n});
      sink(v.data(), v.size() * sizeof(float));
    });
  }

  // A 2-D nn.Linear-style weight [rows, cols] (any checkpoint format).
  // `keep_float`: a block-quantized export (q8_0/q4_0) writes this one as f32
  // (the router, as llama.cpp's quantizer leaves it).
  void mat(const std::string& gguf_name, const std::string& hf_name, int64_t rows, int64_t cols,
           bool keep_float = false) {
    check_shape(hf_name, {rows, cols});
    const Checkpoint* ck = &ck_;
    const int64_t br = c_.fp8_block_rows, bc = c_.fp8_block_cols;
    const GgmlType type = keep_float && ggml_block_elems(mat_type_) > 1 ? GgmlType::F32 : mat_type_;
    w_.add_tensor(gguf_name, {rows, cols}, type, [=](const GgufWriter::Sink& sink) {
      Weight wt = load_weight(*ck, hf_name, rows, cols, br, bc);
      emit_rows(wt, type, sink);
    });
  }

  // Routed experts of layer `i` stacked into [E, rows, cols].
  void experts(const std::string& gguf_name, int64_t i, const char* proj, int64_t rows, int64_t cols) {
    std::vector<std::string> names;
    for (int64_t e = 0; e < c_.n_routed_experts; ++e) {
      names.push_back(hf(i, "mlp.experts.") + std::to_string(e) + "." + proj + ".weight");
      check_shape(names.back(), {rows, cols});
    }
    const Checkpoint* ck = &ck_;
    const int64_t br = c_.fp8_block_rows, bc = c_.fp8_block_cols;
    const GgmlType type = mat_type_;
    w_.add_tensor(gguf_name, {c_.n_routed_experts, rows, cols}, type, [=](const GgufWriter::Sink& sink) {
      for (const std::string& n : names) emit_rows(load_weight(*ck, n, rows, cols, br, bc), type, sink);
    });
  }

  // kv_b_proj [H*(nope+v), kv_lora] -> attn_k_b [H, kv_lora, nope] (each
  // head's k block transposed, for the absorbed q·W_UK) and attn_v_b
  // [H, v, kv_lora].
  void kv_b(int64_t i) {
    const std::string name = hf(i, "self_attn.kv_b_proj.weight");
    const int64_t H = c_.num_attention_heads, nope = c_.qk_nope_head_dim, vd = c_.v_head_dim, r = c_.kv_lora_rank;
    check_shape(name, {H * (nope + vd), r});
    const Checkpoint* ck = &ck_;
    const int64_t br = c_.fp8_block_rows, bc = c_.fp8_block_cols;
    const GgmlType type = kvb_type_;
    if (nope > 0) {
      w_.add_tensor(blk(i, "attn_k_b.weight"), {H, r, nope}, type, [=](const GgufWriter::Sink& sink) {
        Weight wt = load_weight(*ck, name, H * (nope + vd), r, br, bc);
        std::vector<float> head(static_cast<size_t>(nope * r)), out(static_cast<size_t>(nope));
        RowEncoder enc(type);
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t j = 0; j < nope; ++j) wt.row_f32(h * (nope + vd) + j, head.data() + j * r);
          for (int64_t col = 0; col < r; ++col) {
            for (int64_t j = 0; j < nope; ++j) out[static_cast<size_t>(j)] = head[static_cast<size_t>(j * r + col)];
            enc.emit(sink, out.data(), out.size());
          }
        }
      });
    }
    w_.add_tensor(blk(i, "attn_v_b.weight"), {H, vd, r}, type, [=](const GgufWriter::Sink& sink) {
      Weight wt = load_weight(*ck, name, H * (nope + vd), r, br, bc);
      std::vector<float> row(static_cast<size_t>(r));
      RowEncoder enc(type);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < vd; ++j) {
          wt.row_f32(h * (nope + vd) + nope + j, row.data());
          enc.emit(sink, row.data(), row.size());
        }
    });
  }

  static void emit_rows(const Weight& wt, GgmlType type, const GgufWriter::Sink& sink) {
    std::vector<float> row(static_cast<size_t>(wt.cols));
    RowEncoder enc(type);
    for (int64_t r = 0; r < wt.rows; ++r) {
      wt.row_f32(r, row.data());
      enc.emit(sink, row.data(), row.size());
    }
  }

  void check_shape(const std::string& name, const std::vector<int64_t>& want) const {
    const TensorEntry& e = ck_.entry(name);
    if (e.shape != want) {
      auto str = [](const std::vector<int64_t>& s) {
        std::string o = "[";
        for (size_t k = 0; k < s.size(); ++k) o += (k ? ", " : "") + std::to_string(s[k]);
        return o + "]";
      };
      fail("{}: tensor \"{}\" has shape {}, expected {}", ck_.file_of(name).path(), name, str(e.shape), str(want));
    }
  }

  // The MTP layer's own tensors (llama.cpp's nextn block), shared by every
  // family with an MTP layer. GLM-5 checkpoints leave out the embedding and
  // head, and llama.cpp then uses the main ones: copied only when present.
  void nextn(int64_t i) {
    const int64_t d = c_.hidden_size;
    mat(blk(i, "nextn.eh_proj.weight"), hf(i, "eh_proj.weight"), d, 2 * d);
    vec(blk(i, "nextn.enorm.weight"), hf(i, "enorm.weight"), d);
    vec(blk(i, "nextn.hnorm.weight"), hf(i, "hnorm.weight"), d);
    if (ck_.has(hf(i, "shared_head.norm.weight")))
      vec(blk(i, "nextn.shared_head_norm.weight"), hf(i, "shared_head.norm.weight"), d);
    if (ck_.has(hf(i, "embed_tokens.weight")))
      mat(blk(i, "nextn.embed_tokens.weight"), hf(i, "embed_tokens.weight"), c_.vocab_size, d);
    if (ck_.has(hf(i, "shared_head.head.weight")))
      mat(blk(i, "nextn.shared_head_head.weight"), hf(i, "shared_head.head.weight"), c_.vocab_size, d);
  }

  void dense_mlp(int64_t i) {
    const int64_t d = c_.hidden_size, ff = c_.intermediate_size;
    mat(blk(i, "ffn_gate.weight"), hf(i, "mlp.gate_proj.weight"), ff, d);
    mat(blk(i, "ffn_up.weight"), hf(i, "mlp.up_proj.weight"), ff, d);
    mat(blk(i, "ffn_down.weight"), hf(i, "mlp.down_proj.weight"), d, ff);
  }

  void shared_experts(int64_t i, int64_t sff) {
    const int64_t d = c_.hidden_size;
    mat(blk(i, "ffn_gate_shexp.weight"), hf(i, "mlp.shared_experts.gate_proj.weight"), sff, d);
    mat(blk(i, "ffn_up_shexp.weight"), hf(i, "mlp.shared_experts.up_proj.weight"), sff, d);
    mat(blk(i, "ffn_down_shexp.weight"), hf(i, "mlp.shared_experts.down_proj.weight"), d, sff);
  }

  // An f32 tensor of zeros (a tensor llama.cpp requires that the checkpoint lacks).
  void zeros_f32(const std::string& name, std::vector<int64_t> dims) {
    int64_t n = 1;
    for (int64_t x : dims) n *= x;
    w_.add_tensor(name, std::move(dims), GgmlType::F32, [n](const GgufWriter::Sink& sink) {
      const std::vector<float> zero(static_cast<size_t>(n), 0.0f);
      sink(zero.data(), zero.size() * sizeof(float));
    });
  }

  void layer(int64_t i) {
    const int64_t d = c_.hidden_size, H = c_.num_attention_heads;
    if (i >= c_.num_hidden_layers) nextn(i);
    vec(blk(i, "attn_norm.weight"), hf(i, "input_layernorm.weight"), d);
    vec(blk(i, "attn_q_a_norm.weight"), hf(i, "self_attn.q_a_layernorm.weight"), c_.q_lora_rank);
    vec(blk(i, "attn_kv_a_norm.weight"), hf(i, "self_attn.kv_a_layernorm.weight"), c_.kv_lora_rank);
    mat(blk(i, "attn_q_a.weight"), hf(i, "self_attn.q_a_proj.weight"), c_.q_lora_rank, d);
    mat(blk(i, "attn_q_b.weight"), hf(i, "self_attn.q_b_proj.weight"), H * c_.qk_head_dim(), c_.q_lora_rank);
    mat(blk(i, "attn_kv_a_mqa.weight"), hf(i, "self_attn.kv_a_proj_with_mqa.weight"),
        c_.kv_lora_rank + c_.qk_rope_head_dim, d);
    kv_b(i);
    mat(blk(i, "attn_output.weight"), hf(i, "self_attn.o_proj.weight"), d, H * c_.v_head_dim);
    vec(blk(i, "ffn_norm.weight"), hf(i, "post_attention_layernorm.weight"), d);

    if (c_.indexer_full(i)) {
      const int64_t ih = c_.index_n_heads, id = c_.index_head_dim;
      vec(blk(i, "indexer.k_norm.weight"), hf(i, "self_attn.indexer.k_norm.weight"), id);
      vec(blk(i, "indexer.k_norm.bias"), hf(i, "self_attn.indexer.k_norm.bias"), id);
      mat(blk(i, "indexer.proj.weight"), hf(i, "self_attn.indexer.weights_proj.weight"), ih, d);
      mat(blk(i, "indexer.attn_k.weight"), hf(i, "self_attn.indexer.wk.weight"), id, d);
      mat(blk(i, "indexer.attn_q_b.weight"), hf(i, "self_attn.indexer.wq_b.weight"), ih * id, c_.q_lora_rank);
    }

    if (!c_.is_moe(i)) {
      dense_mlp(i);
      return;
    }
    const int64_t E = c_.n_routed_experts, ff = c_.moe_intermediate_size, sff = ff * c_.n_shared_experts;
    mat(blk(i, "ffn_gate_inp.weight"), hf(i, "mlp.gate.weight"), E, d, /*keep_float=*/true);
    vec(blk(i, "exp_probs_b.bias"), hf(i, "mlp.gate.e_score_correction_bias"), E);
    experts(blk(i, "ffn_gate_exps.weight"), i, "gate_proj", ff, d);
    experts(blk(i, "ffn_up_exps.weight"), i, "up_proj", ff, d);
    experts(blk(i, "ffn_down_exps.weight"), i, "down_proj", d, ff);
    shared_experts(i, sff);
  }

  // `names` ([E] checkpoint matrices of [src_rows, src_cols]) stacked into
  // [E, rows, cols], each zero-padded at the end of its rows and columns.
  void padded_stack(const std::string& gguf_name, std::vector<std::string> names, int64_t src_rows, int64_t src_cols,
                    int64_t rows, int64_t cols) {
    for (const std::string& n : names) check_shape(n, {src_rows, src_cols});
    const Checkpoint* ck = &ck_;
    const int64_t br = c_.fp8_block_rows, bc = c_.fp8_block_cols;
    const GgmlType type = mat_type_;
    const int64_t E = static_cast<int64_t>(names.size());
    w_.add_tensor(gguf_name, {E, rows, cols}, type, [=](const GgufWriter::Sink& sink) {
      std::vector<float> row(static_cast<size_t>(cols), 0.0f);
      RowEncoder enc(type);
      for (const std::string& n : names) {
        Weight wt = load_weight(*ck, n, src_rows, src_cols, br, bc);
        for (int64_t r = 0; r < rows; ++r) {
          std::fill(row.begin(), row.end(), 0.0f);
          if (r < src_rows) wt.row_f32(r, row.data());
          enc.emit(sink, row.data(), row.size());
        }
      }
    });
  }

  // The GQA families' block: q/k/v/o, optional q/k norms and q/k/v biases,
  // then a dense MLP, or router + stacked experts (+ shared experts).
  void gqa_layer(int64_t i) {
    const int64_t d = c_.hidden_size, H = c_.num_attention_heads, KH = c_.num_key_value_heads, hd = c_.head_dim;
    if (i >= c_.num_hidden_layers) nextn(i);
    vec(blk(i, "attn_norm.weight"), hf(i, "input_layernorm.weight"), d);
    mat(blk(i, "attn_q.weight"), hf(i, "self_attn.q_proj.weight"), H * hd, d);
    mat(blk(i, "attn_k.weight"), hf(i, "self_attn.k_proj.weight"), KH * hd, d);
    mat(blk(i, "attn_v.weight"), hf(i, "self_attn.v_proj.weight"), KH * hd, d);
    if (c_.attention_bias) {
      vec(blk(i, "attn_q.bias"), hf(i, "self_attn.q_proj.bias"), H * hd);
      vec(blk(i, "attn_k.bias"), hf(i, "self_attn.k_proj.bias"), KH * hd);
      vec(blk(i, "attn_v.bias"), hf(i, "self_attn.v_proj.bias"), KH * hd);
    }
    mat(blk(i, "attn_output.weight"), hf(i, "self_attn.o_proj.weight"), d, H * hd);
    if (c_.qk_norm) {
      vec(blk(i, "attn_q_norm.weight"), hf(i, "self_attn.q_norm.weight"), hd);
      vec(blk(i, "attn_k_norm.weight"), hf(i, "self_attn.k_norm.weight"), hd);
    }
    // qwen3moe calls the pre-MLP norm ffn_norm, glm4moe post_attention_norm.
    vec(blk(i, arch_ == GgufArch::Qwen3Moe ? "ffn_norm.weight" : "post_attention_norm.weight"),
        hf(i, "post_attention_layernorm.weight"), d);

    const int64_t E = c_.n_routed_experts;
    if (!c_.is_moe(i)) {
      const int64_t ff = c_.intermediate_size;
      if (arch_ == GgufArch::Glm4Moe) {
        dense_mlp(i);
        return;
      }
      // qwen3moe: the dense MLP as E identical experts behind a zero router.
      zeros_f32(blk(i, "ffn_gate_inp.weight"), {E, d});
      const std::vector<std::string> g(static_cast<size_t>(E), hf(i, "mlp.gate_proj.weight"));
      const std::vector<std::string> u(static_cast<size_t>(E), hf(i, "mlp.up_proj.weight"));
      const std::vector<std::string> dn(static_cast<size_t>(E), hf(i, "mlp.down_proj.weight"));
      padded_stack(blk(i, "ffn_gate_exps.weight"), g, ff, d, ff_exp_, d);
      padded_stack(blk(i, "ffn_up_exps.weight"), u, ff, d, ff_exp_, d);
      padded_stack(blk(i, "ffn_down_exps.weight"), dn, d, ff, d, ff_exp_);
      return;
    }
    const int64_t ff = c_.moe_intermediate_size;
    mat(blk(i, "ffn_gate_inp.weight"), hf(i, "mlp.gate.weight"), E, d, /*keep_float=*/true);
    if (arch_ == GgufArch::Glm4Moe) {
      // glm4moe requires the selection bias; a checkpoint without one selects by the plain scores.
      if (ck_.has(hf(i, "mlp.gate.e_score_correction_bias"))) {
        vec(blk(i, "exp_probs_b.bias"), hf(i, "mlp.gate.e_score_correction_bias"), E);
      } else {
        zeros_f32(blk(i, "exp_probs_b.bias"), {E});
      }
    }
    const int64_t fx = arch_ == GgufArch::Qwen3Moe ? ff_exp_ : ff;
    std::vector<std::string> g, u, dn;
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = hf(i, "mlp.experts.") + std::to_string(e) + ".";
      g.push_back(ep + "gate_proj.weight"), u.push_back(ep + "up_proj.weight"), dn.push_back(ep + "down_proj.weight");
    }
    if (fx == ff) {
      experts(blk(i, "ffn_gate_exps.weight"), i, "gate_proj", ff, d);
      experts(blk(i, "ffn_up_exps.weight"), i, "up_proj", ff, d);
      experts(blk(i, "ffn_down_exps.weight"), i, "down_proj", d, ff);
    } else {
      padded_stack(blk(i, "ffn_gate_exps.weight"), g, ff, d, fx, d);
      padded_stack(blk(i, "ffn_up_exps.weight"), u, ff, d, fx, d);
      padded_stack(blk(i, "ffn_down_exps.weight"), dn, d, ff, d, fx);
    }
    if (arch_ == GgufArch::Glm4Moe && c_.n_shared_experts > 0) shared_experts(i, ff * c_.n_shared_experts);
  }

  void tensors() {
    const int64_t d = c_.hidden_size;
    mat("token_embd.weight", "model.embed_tokens.weight", c_.vocab_size, d);
    vec("output_norm.weight", "model.norm.weight", d);
    mat("output.weight", "lm_head.weight", c_.vocab_size, d);
    for (int64_t i = 0; i < blocks(); ++i) {
      if (mla())
        layer(i);
      else
        gqa_layer(i);
    }
  }

  const ExportOptions& opt_;
  const ModelConfig& c_;
  const Checkpoint& ck_;
  const Json& raw_;
  GgmlType mat_type_ = GgmlType::F32;
  GgmlType kvb_type_ = GgmlType::F32;
  GgufArch arch_ = GgufArch::GlmDsa;
  const char* arch_name_ = "glm-dsa";
  int64_t lead_dense_ = 0;
  int64_t ff_exp_ = 0;  // qwen3moe: the one expert width (moe_intermediate_size, or wider for dense layers)
  bool with_mtp_ = false;
  GgufWriter w_;
};

int run_export(const ExportOptions& opt) {
  const ModelConfig cfg = load_model_config(opt.model_dir);
  const std::string cfg_path = opt.model_dir + "/config.json";
  const Json raw = parse_json(read_small_file(cfg_path, 4u << 20), cfg_path);
  const Checkpoint ck(opt.model_dir);
  Exporter ex(opt, cfg, ck, raw);
  ex.run();
  if (!opt.quiet) {
    struct stat st {};
    ::stat(opt.out_path.c_str(), &st);
    std::fprintf(stderr, "strata: wrote %s: %zu tensors, %zu metadata keys, %lld blocks, %.1f MiB\n",
                 opt.out_path.c_str(), ex.num_tensors(), ex.num_kv(), static_cast<long long>(ex.blocks()),
                 static_cast<double>(st.st_size) / (1 << 20));
  }
  return 0;
}

}  // namespace

void add_export_gguf_command(CLI::App& app, Runner& run) {
  auto opt = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export-gguf",
      "Convert a checkpoint to a GGUF file for llama.cpp (glm_moe_dsa -> glm-dsa, deepseek_v3 -> deepseek2, "
      "qwen3_moe -> qwen3moe, glm4_moe -> glm4moe)");
  cmd->add_option("--model", opt->model_dir, "Checkpoint directory (config.json + safetensors)")->required();
  cmd->add_option("--out", opt->out_path, "Output .gguf file (written atomically)")->required();
  cmd->add_option("--type", opt->type,
                  "Storage type of weight matrices: f32 (default), f16, bf16, q8_0 or q4_0 (llama.cpp's 32-element "
                  "blocks; the router stays f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--kv-b-type", opt->kv_b_type,
                  "Storage type of attn_k_b/attn_v_b only (default: --type); bf16 avoids an abort in "
                  "llama.cpp's AMX CPU backend")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_flag("--no-mtp", opt->no_mtp, "Leave out the MTP (nextn) layer");
  cmd->add_flag("-q,--quiet", opt->quiet, "Print nothing on success");
  cmd->callback([opt, &run] { run = [opt] { return run_export(*opt); }; });
}

}  // namespace strata::cli
