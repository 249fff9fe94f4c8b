#include "core/config.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "core/error.h"
#include "core/io.h"

namespace strata {

namespace {

// Limits that any GLM-5-class model fits in with room to spare; anything
// larger is a corrupt or hostile file.
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxHidden = 1 << 16;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxWidth = 1 << 18;
constexpr int64_t kMaxExperts = 4096;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxPositions = int64_t{1} << 24;

struct Reader {
  const Json& j;
  const std::string& origin;

  const Json* get(const char* key) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return nullptr;
    return &*it;
  }
  int64_t integer(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> def = std::nullopt) const {
    const Json* v = get(key);
    if (!v) {
      if (def) return *def;
      fail("{}: missing required field \"{}\"", origin, key);
    }
    if (!v->is_number_integer()) fail("{}: field \"{}\" must be an integer, got {}", origin, key, v->dump());
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
      fail("{}: field \"{}\" = {} is out of range [{}, {}]", origin, key, v->dump(), lo, hi);
    int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) fail("{}: field \"{}\" = {} is out of range [{}, {}]", origin, key, x, lo, hi);
    return x;
  }
  double number(const char* key, double lo, double hi, std::optional<double> def = std::nullopt) const {
    const Json* v = get(key);
    if (!v) {
      if (def) return *def;
      fail("{}: missing required field \"{}\"", origin, key);
    }
    if (!v->is_number()) fail("{}: field \"{}\" must be a number, got {}", origin, key, v->dump());
    double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      fail("{}: field \"{}\" = {} is out of range [{}, {}]", origin, key, x, lo, hi);
    return x;
  }
  bool boolean(const char* key, bool def) const {
    const Json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) fail("{}: field \"{}\" must be true or false, got {}", origin, key, v->dump());
    return v->get<bool>();
  }
};

// eos_token_id (one id or a list) and pad_token_id: the same in every family.
void parse_special_tokens(const Reader& r, ModelConfig& c) {
  const std::string& origin = r.origin;
  if (const Json* e = r.get("eos_token_id")) {
    auto add = [&](const Json& v) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.vocab_size)
        fail("{}: eos_token_id {} is not a token id below vocab_size {}", origin, v.dump(), c.vocab_size);
      c.eos_token_ids.push_back(v.get<int64_t>());
    };
    if (e->is_array()) {
      if (e->size() > 64) fail("{}: eos_token_id has {} entries (limit 64)", origin, e->size());
      for (const Json& v : *e) add(v);
    } else {
      add(*e);
    }
  }
  c.pad_token_id = r.integer("pad_token_id", 0, c.vocab_size - 1, -1);
}

// The GQA families' shared tail: SiLU experts only, a separate lm_head, then
// the special tokens.
void parse_silu_untied_and_special_tokens(const Reader& r, ModelConfig& c) {
  const std::string& origin = r.origin;
  if (const Json* act = r.get("hidden_act"); act && (!act->is_string() || act->get<std::string>() != "silu"))
    fail("{}: hidden_act {} is not supported (only \"silu\")", origin, act->dump());
  if (r.boolean("tie_word_embeddings", false))
    fail("{}: tie_word_embeddings=true is not supported (strata needs a separate lm_head)", origin);
  parse_special_tokens(r, c);
}

// RoPE: rope_parameters (transformers v5) or top-level rope_theta; only the
// default rope type (no scaling) is supported.
double parse_rope_theta(const Reader& r) {
  const std::string& origin = r.origin;
  double theta = r.number("rope_theta", 1.0, 1e12, 10000.0);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const Json* rp = r.get(key);
    if (!rp) continue;
    if (!rp->is_object()) fail("{}: field \"{}\" must be an object", origin, key);
    Reader rr{*rp, origin};
    if (rp->contains("rope_theta")) theta = rr.number("rope_theta", 1.0, 1e12);
    const Json* type = rr.get("rope_type");
    if (!type) type = rr.get("type");
    if (type && (!type->is_string() || type->get<std::string>() != "default"))
      fail("{}: {}.rope_type {} is not supported (only \"default\")", origin, key, type->dump());
  }
  return theta;
}

// FP8 block quantization (quantization_config), the same in every family.
void parse_quantization(const Reader& r, ModelConfig& c) {
  const std::string& origin = r.origin;
  if (const Json* q = r.get("quantization_config")) {
    if (!q->is_object()) fail("{}: quantization_config must be an object", origin);
    const Json* m = Reader{*q, origin}.get("quant_method");
    if (!m || !m->is_string() || m->get<std::string>() != "fp8")
      fail("{}: quantization_config.quant_method {} is not supported (only \"fp8\")", origin,
           m ? m->dump() : "missing");
    c.fp8 = true;
    if (const Json* fmt_ = Reader{*q, origin}.get("fmt"); fmt_ && *fmt_ != "e4m3")
      fail("{}: quantization_config.fmt {} is not supported (only \"e4m3\")", origin, fmt_->dump());
    if (const Json* b = Reader{*q, origin}.get("weight_block_size")) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer() ||
          (*b)[0].get<int64_t>() < 1 || (*b)[1].get<int64_t>() < 1 || (*b)[0].get<int64_t>() > 4096 ||
          (*b)[1].get<int64_t>() > 4096)
        fail("{}: quantization_config.weight_block_size must be two integers in [1, 4096]", origin);
      c.fp8_block_rows = (*b)[0].get<int64_t>();
      c.fp8_block_cols = (*b)[1].get<int64_t>();
    }
  }
}

// The sigmoid router with correction bias, groups and routed scaling, plus
// shared experts (glm_moe_dsa, glm4_moe); `shared_default` is the family's
// n_shared_experts when the field is absent.
void parse_sigmoid_router(const Reader& r, ModelConfig& c, int64_t shared_default) {
  const std::string& origin = r.origin;
  c.router = RouterKind::SigmoidGroups;
  c.n_routed_experts = r.integer("n_routed_experts", 1, kMaxExperts);
  c.num_experts_per_tok = r.integer("num_experts_per_tok", 1, c.n_routed_experts);
  c.n_shared_experts = r.integer("n_shared_experts", 0, 64, shared_default);
  c.n_group = r.integer("n_group", 1, c.n_routed_experts, 1);
  c.topk_group = r.integer("topk_group", 1, c.n_group, 1);
  if (c.n_routed_experts % c.n_group != 0)
    fail("{}: n_routed_experts {} is not divisible by n_group {}", origin, c.n_routed_experts, c.n_group);
  if (c.n_group > 1 && c.n_routed_experts / c.n_group < 2)
    fail("{}: group-limited routing needs at least 2 experts per group", origin);
  if (c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group))
    fail("{}: num_experts_per_tok {} exceeds the experts in topk_group {} groups", origin,
         c.num_experts_per_tok, c.topk_group);
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  c.routed_scaling_factor = static_cast<float>(r.number("routed_scaling_factor", 0.0, 1e4, 1.0));
  if (const Json* sf = r.get("scoring_func"); sf && (!sf->is_string() || sf->get<std::string>() != "sigmoid"))
    fail("{}: scoring_func {} is not supported (only \"sigmoid\")", origin, sf->dump());
}

// qwen3_moe (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-480B): GQA with
// per-head q/k RMSNorm, softmax top-k routing, no shared expert, MoE layers
// by decoder_sparse_step and mlp_only_layers, no MTP layer.
void parse_qwen3_moe(const Reader& r, ModelConfig& c) {
  const std::string& origin = r.origin;
  c.attention = AttentionKind::Gqa;
  c.router = RouterKind::Softmax;
  c.vocab_size = r.integer("vocab_size", 1, kMaxVocab);
  c.hidden_size = r.integer("hidden_size", 1, kMaxHidden);
  c.num_hidden_layers = r.integer("num_hidden_layers", 1, kMaxLayers);
  c.intermediate_size = r.integer("intermediate_size", 1, kMaxWidth);
  c.moe_intermediate_size = r.integer("moe_intermediate_size", 1, kMaxWidth);
  c.n_routed_experts = r.integer("num_experts", 1, kMaxExperts);
  c.num_experts_per_tok = r.integer("num_experts_per_tok", 1, c.n_routed_experts);
  c.norm_topk_prob = r.boolean("norm_topk_prob", false);  // transformers' Qwen3MoeConfig default
  c.num_attention_heads = r.integer("num_attention_heads", 1, kMaxHeads);
  c.num_key_value_heads = r.integer("num_key_value_heads", 1, c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", origin, c.num_attention_heads,
         c.num_key_value_heads);
  c.head_dim = r.integer("head_dim", 2, kMaxHeadDim, c.hidden_size / c.num_attention_heads);
  if (c.head_dim < 2 || c.head_dim % 2 != 0) fail("{}: head_dim {} must be even and at least 2", origin, c.head_dim);
  c.rotary_dim = c.head_dim;
  c.qk_norm = true;
  c.max_position_embeddings = r.integer("max_position_embeddings", 1, kMaxPositions, 4096);
  c.rms_norm_eps = static_cast<float>(r.number("rms_norm_eps", 1e-12, 1.0, 1e-6));
  c.rope_theta = parse_rope_theta(r);
  if (r.boolean("use_sliding_window", false))
    fail("{}: use_sliding_window=true is not supported (qwen3_moe runs full attention)", origin);
  if (r.boolean("attention_bias", false)) fail("{}: attention_bias=true is not supported for qwen3_moe", origin);
  parse_silu_untied_and_special_tokens(r, c);

  // MoE layers: not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0.
  const int64_t L = c.num_hidden_layers;
  const int64_t step = r.integer("decoder_sparse_step", 1, L, 1);
  c.layer_is_moe.assign(static_cast<size_t>(L), false);
  for (int64_t i = 0; i < L; ++i) c.layer_is_moe[static_cast<size_t>(i)] = (i + 1) % step == 0;
  if (const Json* only = r.get("mlp_only_layers")) {
    if (!only->is_array() || static_cast<int64_t>(only->size()) > L)
      fail("{}: mlp_only_layers must be an array of at most num_hidden_layers ({}) layer indices", origin, L);
    for (const Json& v : *only) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= L)
        fail("{}: mlp_only_layers entry {} is not a layer index below num_hidden_layers {}", origin, v.dump(), L);
      c.layer_is_moe[static_cast<size_t>(v.get<int64_t>())] = false;
    }
  }
  c.layer_indexer_full.assign(static_cast<size_t>(L), false);
  parse_quantization(r, c);
}

// glm4_moe (GLM-4.5, GLM-4.6, GLM-4.7, GLM-4.5-Air): GQA with partial
// rotary (the first head_dim * partial_rotary_factor dims of each head,
// half-split), q/k/v bias when attention_bias, per-head q/k RMSNorm when
// use_qk_norm, the sigmoid router of glm_moe_dsa (correction bias, groups,
// routed scaling), shared experts, the first first_k_dense_replace layers
// dense, an MTP layer when num_nextn_predict_layers = 1. Defaults are
// transformers' Glm4MoeConfig defaults.
void parse_glm4_moe(const Reader& r, ModelConfig& c) {
  const std::string& origin = r.origin;
  c.attention = AttentionKind::Gqa;
  c.vocab_size = r.integer("vocab_size", 1, kMaxVocab);
  c.hidden_size = r.integer("hidden_size", 1, kMaxHidden);
  c.num_hidden_layers = r.integer("num_hidden_layers", 1, kMaxLayers);
  c.intermediate_size = r.integer("intermediate_size", 1, kMaxWidth);
  c.moe_intermediate_size = r.integer("moe_intermediate_size", 1, kMaxWidth);
  parse_sigmoid_router(r, c, 1);
  c.num_attention_heads = r.integer("num_attention_heads", 1, kMaxHeads);
  c.num_key_value_heads = r.integer("num_key_value_heads", 1, c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", origin, c.num_attention_heads,
         c.num_key_value_heads);
  c.head_dim = r.integer("head_dim", 2, kMaxHeadDim, c.hidden_size / c.num_attention_heads);
  if (c.head_dim < 2 || c.head_dim % 2 != 0) fail("{}: head_dim {} must be even and at least 2", origin, c.head_dim);
  // partial_rotary_factor: top level, or inside rope_parameters (transformers v5).
  double factor = r.number("partial_rotary_factor", 1e-6, 1.0, 0.5);
  if (const Json* rp = r.get("rope_parameters"); rp && rp->is_object() && rp->contains("partial_rotary_factor"))
    factor = Reader{*rp, origin}.number("partial_rotary_factor", 1e-6, 1.0);
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);  // int() as transformers
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
    fail("{}: partial_rotary_factor {} gives {} rotary dims of head_dim {} (must be even and at least 2)", origin,
         factor, c.rotary_dim, c.head_dim);
  c.attention_bias = r.boolean("attention_bias", false);
  c.qk_norm = r.boolean("use_qk_norm", false);
  c.max_position_embeddings = r.integer("max_position_embeddings", 1, kMaxPositions, 131072);
  c.rms_norm_eps = static_cast<float>(r.number("rms_norm_eps", 1e-12, 1.0, 1e-5));
  c.rope_theta = parse_rope_theta(r);
  c.num_nextn_predict_layers = r.integer("num_nextn_predict_layers", 0, 1, 0);
  parse_silu_untied_and_special_tokens(r, c);

  // The first first_k_dense_replace layers are dense, the rest MoE.
  const int64_t L = c.num_hidden_layers;
  const int64_t k = r.integer("first_k_dense_replace", 0, L, 1);
  c.layer_is_moe.assign(static_cast<size_t>(L), false);
  for (int64_t i = 0; i < L; ++i) c.layer_is_moe[static_cast<size_t>(i)] = i >= k;
  c.layer_indexer_full.assign(static_cast<size_t>(L), false);
  parse_quantization(r, c);
}

// YaRN's attention-magnitude correction: 0.1 * m * ln(s) + 1 (1 for s <= 1).
double yarn_mscale(double s, double m) { return s <= 1.0 ? 1.0 : 0.1 * m * std::log(s) + 1.0; }

// deepseek_v3's RoPE: rope_theta plus an optional rope_scaling (or, in
// transformers v5, rope_parameters) of type "yarn" (or "default"). Any other
// type is refused. Sets the YaRN fields of `c` (needs qk_rope_head_dim and
// max_position_embeddings).
void parse_deepseek_rope(const Reader& r, ModelConfig& c) {
  const std::string& origin = r.origin;
  c.rope_theta = r.number("rope_theta", 1.0, 1e12, 10000.0);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const Json* rp = r.get(key);
    if (!rp) continue;
    if (!rp->is_object()) fail("{}: field \"{}\" must be an object", origin, key);
    Reader rr{*rp, origin};
    if (rp->contains("rope_theta")) c.rope_theta = rr.number("rope_theta", 1.0, 1e12);
    const Json* type = rr.get("rope_type");
    if (!type) type = rr.get("type");
    const std::string t = type && type->is_string() ? type->get<std::string>() : std::string();
    if (!type || t == "default") continue;
    if (t != "yarn")
      fail("{}: {}.rope_type {} is not supported (only \"yarn\" or \"default\")", origin, key, type->dump());
    if (!rr.boolean("truncate", true))
      fail("{}: {}.truncate=false is not supported (the correction range is floored / ceiled)", origin, key);
    // Bounds: the real checkpoints use 32..64 (factor), 4096 (original
    // context), 32 / 1 or 1 / 1 (beta_fast / beta_slow), 1 (mscale).
    const double factor = rr.number("factor", 1.0, 1e4);
    const int64_t orig = rr.integer("original_max_position_embeddings", 1, kMaxPositions, c.max_position_embeddings);
    if (rp->contains("original_max_position_embeddings")) {
      // transformers blends the frequencies with max_position_embeddings /
      // original_max_position_embeddings but scales the softmax with factor:
      // one number only when they agree (they do in every released config).
      const double ratio = static_cast<double>(c.max_position_embeddings) / static_cast<double>(orig);
      if (std::fabs(ratio - factor) > 1e-9 * factor)
        fail("{}: {}.factor {} differs from max_position_embeddings / original_max_position_embeddings = {} / {} "
             "(not supported: transformers would use the ratio for the frequencies and factor for the softmax)",
             origin, key, factor, c.max_position_embeddings, orig);
    }
    const double beta_fast = rr.number("beta_fast", 1e-6, 1e6, 32.0);
    const double beta_slow = rr.number("beta_slow", 1e-6, 1e6, 1.0);
    const double mscale = rr.number("mscale", 0.0, 1e3, 0.0);
    const double mscale_all = rr.number("mscale_all_dim", 0.0, 1e3, 0.0);
    const Json* af = rr.get("attention_factor");
    const double attention_factor = af ? rr.number("attention_factor", 1e-6, 1e3)
                                    : (mscale != 0.0 && mscale_all != 0.0)
                                        ? yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all)
                                        : yarn_mscale(factor, 1.0);
    // The dim whose wavelength makes `rot` turns over the original context.
    const double d = static_cast<double>(c.qk_rope_head_dim), base = c.rope_theta;
    auto correction_dim = [&](double rot) {
      return d * std::log(static_cast<double>(orig) / (rot * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
    };
    c.rope_yarn = true;
    c.yarn_factor = factor;
    c.yarn_low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
    c.yarn_high = std::min(std::ceil(correction_dim(beta_slow)), d - 1.0);
    c.yarn_original_context = orig;
    c.yarn_beta_fast = beta_fast, c.yarn_beta_slow = beta_slow;
    c.rope_attention_factor = static_cast<float>(attention_factor);
    if (mscale_all != 0.0) {
      const double m = yarn_mscale(factor, mscale_all);
      c.softmax_scale_mult = static_cast<float>(m * m);
    }
  }
}

// The MLA widths (GLM-5 and DeepSeek-V3 alike): the low-rank query and
// key/value, the per-head nope / rope / value dims, context and norm epsilon.
void parse_mla_dims(const Reader& r, ModelConfig& c) {
  const std::string& origin = r.origin;
  c.q_lora_rank = r.integer("q_lora_rank", 1, kMaxWidth);
  c.kv_lora_rank = r.integer("kv_lora_rank", 1, kMaxHeadDim);
  c.qk_nope_head_dim = r.integer("qk_nope_head_dim", 0, kMaxHeadDim);
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim", 2, kMaxHeadDim);
  if (c.qk_rope_head_dim % 2 != 0) fail("{}: qk_rope_head_dim {} must be even", origin, c.qk_rope_head_dim);
  c.v_head_dim = r.integer("v_head_dim", 1, kMaxHeadDim);
  c.max_position_embeddings = r.integer("max_position_embeddings", 1, kMaxPositions, 4096);
  c.rms_norm_eps = static_cast<float>(r.number("rms_norm_eps", 1e-12, 1.0, 1e-6));
}

// The DSA indexer's widths and top-k (glm_moe_dsa, deepseek_v32); needs
// qk_rope_head_dim (the indexer rotates its first qk_rope_head_dim dims).
void parse_indexer_dims(const Reader& r, ModelConfig& c) {
  c.index_n_heads = r.integer("index_n_heads", 1, kMaxHeads);
  c.index_head_dim = r.integer("index_head_dim", 1, kMaxHeadDim);
  if (c.index_head_dim < c.qk_rope_head_dim)
    fail("{}: index_head_dim {} is smaller than qk_rope_head_dim {}", r.origin, c.index_head_dim,
         c.qk_rope_head_dim);
  c.index_topk = r.integer("index_topk", 1, kMaxPositions);
}

// mlp_layer_types ("dense" / "sparse" per decoder layer) into layer_is_moe;
// false when the config has none.
bool parse_mlp_layer_types(const Reader& r, ModelConfig& c) {
  const Json* types = r.get("mlp_layer_types");
  if (!types) return false;
  const int64_t L = c.num_hidden_layers;
  if (!types->is_array() || static_cast<int64_t>(types->size()) != L)
    fail("{}: mlp_layer_types must be an array of num_hidden_layers ({}) strings", r.origin, L);
  c.layer_is_moe.assign(static_cast<size_t>(L), true);
  for (int64_t i = 0; i < L; ++i) {
    const Json& t = (*types)[static_cast<size_t>(i)];
    // (compared as std::string: GCC 12 warns -Warray-bounds, wrongly, on json == "literal" inlined here)
    const std::string kind = t.is_string() ? t.get<std::string>() : std::string();
    if (kind != "dense" && kind != "sparse")
      fail("{}: mlp_layer_types[{}] = {} must be \"dense\" or \"sparse\"", r.origin, i, t.dump());
    c.layer_is_moe[static_cast<size_t>(i)] = kind == "sparse";
  }
  return true;
}

// deepseek_v3 (DeepSeek-V3, R1, V3.1, Kimi-K2): glm_moe_dsa's MLA without
// the DSA indexer, YaRN rope scaling (also rescaling the softmax), the
// sigmoid group-limited router (noaux_tc) with correction bias and routed
// scaling, shared experts, the first first_k_dense_replace layers dense, an
// MTP layer when num_nextn_predict_layers = 1. Fields whose transformers
// default differs from the router's generic default are required.
void parse_deepseek_v3(const Reader& r, ModelConfig& c) {
  const std::string& origin = r.origin;
  c.attention = AttentionKind::Mla;
  c.vocab_size = r.integer("vocab_size", 1, kMaxVocab);
  c.hidden_size = r.integer("hidden_size", 1, kMaxHidden);
  c.num_hidden_layers = r.integer("num_hidden_layers", 1, kMaxLayers);
  c.intermediate_size = r.integer("intermediate_size", 1, kMaxWidth);
  c.moe_intermediate_size = r.integer("moe_intermediate_size", 1, kMaxWidth);
  for (const char* key : {"n_routed_experts", "num_experts_per_tok", "n_group", "topk_group", "routed_scaling_factor"})
    if (!r.get(key)) fail("{}: missing required field \"{}\"", origin, key);
  parse_sigmoid_router(r, c, 1);
  if (const Json* m = r.get("topk_method"); m && (!m->is_string() || m->get<std::string>() != "noaux_tc"))
    fail("{}: topk_method {} is not supported (only \"noaux_tc\")", origin, m->dump());

  c.num_attention_heads = r.integer("num_attention_heads", 1, kMaxHeads);
  if (!r.get("q_lora_rank"))
    fail("{}: q_lora_rank null or missing is not supported (strata's MLA needs the q_a / q_b low-rank query)",
         origin);
  parse_mla_dims(r, c);
  if (!r.boolean("rope_interleave", true))
    fail("{}: rope_interleave=false is not supported (DeepSeek-V3 checkpoints rotate adjacent pairs)", origin);
  if (r.boolean("attention_bias", false)) fail("{}: attention_bias=true is not supported for deepseek_v3", origin);
  parse_deepseek_rope(r, c);
  c.num_nextn_predict_layers = r.integer("num_nextn_predict_layers", 0, 1, 0);
  parse_silu_untied_and_special_tokens(r, c);

  // The first first_k_dense_replace layers are dense, the rest MoE.
  const int64_t L = c.num_hidden_layers;
  const int64_t k = r.integer("first_k_dense_replace", 0, L, 3);
  if (r.integer("moe_layer_freq", 1, L, 1) != 1)
    fail("{}: moe_layer_freq other than 1 is not supported (every layer from first_k_dense_replace on is MoE)",
         origin);
  c.layer_is_moe.assign(static_cast<size_t>(L), false);
  for (int64_t i = 0; i < L; ++i) c.layer_is_moe[static_cast<size_t>(i)] = i >= k;
  c.layer_indexer_full.assign(static_cast<size_t>(L), false);
  parse_quantization(r, c);
}

// deepseek_v32 (DeepSeek-V3.2, V3.2-Exp): deepseek_v3 plus the DSA indexer in
// every layer (the MTP layer too), whose rope rotates split halves
// (transformers' DeepseekV32Indexer); index_n_heads / index_head_dim /
// index_topk are required. transformers' config may list mlp_layer_types
// (it derives them from first_k_dense_replace when absent); GLM-5.2's shared
// indexer schedule does not exist in this family and is refused.
void parse_deepseek_v32(const Reader& r, ModelConfig& c) {
  const std::string& origin = r.origin;
  parse_deepseek_v3(r, c);
  parse_mlp_layer_types(r, c);
  parse_indexer_dims(r, c);
  if (r.boolean("indexer_rope_interleave", false))
    fail("{}: indexer_rope_interleave=true is not supported for deepseek_v32 (its indexer rotates split halves)",
         origin);
  c.index_rope_half = true;
  for (const char* key : {"indexer_types", "index_topk_pattern", "index_topk_freq", "index_skip_topk_offset"})
    if (r.get(key))
      fail("{}: field \"{}\" is not supported for deepseek_v32 (every layer has its own indexer)", origin, key);
  if (r.boolean("index_share_for_mtp_iteration", false))
    fail("{}: index_share_for_mtp_iteration=true is not supported for deepseek_v32", origin);
  c.layer_indexer_full.assign(static_cast<size_t>(c.num_hidden_layers), true);
}

// glm_moe_dsa (GLM-5, GLM-5.2): MLA with the DSA indexer, sigmoid routing with
// a correction bias and groups, shared experts, first dense layers, MTP layer.
void parse_glm_moe_dsa(const Reader& r, ModelConfig& c) {
  const std::string& origin = r.origin;

  c.vocab_size = r.integer("vocab_size", 1, kMaxVocab);
  c.hidden_size = r.integer("hidden_size", 1, kMaxHidden);
  c.num_hidden_layers = r.integer("num_hidden_layers", 1, kMaxLayers);
  c.intermediate_size = r.integer("intermediate_size", 1, kMaxWidth);
  c.moe_intermediate_size = r.integer("moe_intermediate_size", 1, kMaxWidth);
  parse_sigmoid_router(r, c, 0);

  c.num_attention_heads = r.integer("num_attention_heads", 1, kMaxHeads);
  parse_mla_dims(r, c);
  if (!r.boolean("rope_interleave", true))
    fail("{}: rope_interleave=false is not supported (GLM-5 uses interleaved RoPE)", origin);
  if (!r.boolean("indexer_rope_interleave", true))
    fail("{}: indexer_rope_interleave=false is not supported", origin);

  c.rope_theta = parse_rope_theta(r);  // only the default rope type exists in the GLM-5 family

  parse_indexer_dims(r, c);
  c.index_share_for_mtp_iteration = r.boolean("index_share_for_mtp_iteration", false);
  c.num_nextn_predict_layers = r.integer("num_nextn_predict_layers", 0, 1, 0);
  if (r.boolean("tie_word_embeddings", false))
    fail("{}: tie_word_embeddings=true is not supported (GLM-5 has a separate lm_head)", origin);

  parse_special_tokens(r, c);

  // Dense/MoE schedule: mlp_layer_types if given, else first_k_dense_replace
  // and moe_layer_freq.
  const int64_t L = c.num_hidden_layers;
  c.layer_is_moe.assign(static_cast<size_t>(L), true);
  if (!parse_mlp_layer_types(r, c)) {
    int64_t k = r.integer("first_k_dense_replace", 0, L, 0);
    int64_t freq = r.integer("moe_layer_freq", 1, L, 1);
    for (int64_t i = 0; i < L; ++i) c.layer_is_moe[static_cast<size_t>(i)] = i >= k && i % freq == 0;
  }

  // Indexer schedule (GLM-5.2 IndexShare): pattern string, else freq/offset.
  c.layer_indexer_full.assign(static_cast<size_t>(L), true);
  if (const Json* types = r.get("indexer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != L)
      fail("{}: indexer_types must be an array of num_hidden_layers ({}) strings", origin, L);
    for (int64_t i = 0; i < L; ++i) {
      const Json& t = (*types)[static_cast<size_t>(i)];
      if (!t.is_string() || (t != "full" && t != "shared"))
        fail("{}: indexer_types[{}] = {} must be \"full\" or \"shared\"", origin, i, t.dump());
      c.layer_indexer_full[static_cast<size_t>(i)] = t == "full";
    }
  } else if (const Json* pat = r.get("index_topk_pattern")) {
    if (!pat->is_string() || static_cast<int64_t>(pat->get<std::string>().size()) != L)
      fail("{}: index_topk_pattern must be a string of num_hidden_layers ({}) letters F/S", origin, L);
    const std::string p = pat->get<std::string>();
    for (int64_t i = 0; i < L; ++i) {
      char ch = p[static_cast<size_t>(i)];
      if (ch != 'F' && ch != 'S') fail("{}: index_topk_pattern[{}] = '{}' must be F or S", origin, i, ch);
      c.layer_indexer_full[static_cast<size_t>(i)] = ch == 'F';
    }
  } else {
    int64_t freq = r.integer("index_topk_freq", 1, kMaxLayers, 1);
    int64_t offset = r.integer("index_skip_topk_offset", 0, kMaxLayers, 2);
    for (int64_t i = 0; i < L; ++i)
      c.layer_indexer_full[static_cast<size_t>(i)] = std::max<int64_t>(i - offset + 1, 0) % freq == 0;
  }
  if (!c.layer_indexer_full[0])
    fail("{}: layer 0 shares the indexer top-k, but no earlier layer computes one", origin);

  parse_quantization(r, c);
}

}  // namespace

ModelConfig parse_model_config(const Json& j, const std::string& origin) {
  if (!j.is_object()) fail("{}: config is not a JSON object", origin);
  Reader r{j, origin};
  ModelConfig c;
  const Json* mt = r.get("model_type");
  if (!mt || !mt->is_string()) fail("{}: missing string field \"model_type\"", origin);
  c.model_type = mt->get<std::string>();
  if (c.model_type == "glm_moe_dsa")
    parse_glm_moe_dsa(r, c);
  else if (c.model_type == "qwen3_moe")
    parse_qwen3_moe(r, c);
  else if (c.model_type == "glm4_moe")
    parse_glm4_moe(r, c);
  else if (c.model_type == "deepseek_v3")
    parse_deepseek_v3(r, c);
  else if (c.model_type == "deepseek_v32")
    parse_deepseek_v32(r, c);
  else
    fail("{}: model_type \"{}\" is not supported (strata runs \"glm_moe_dsa\", \"deepseek_v3\", \"deepseek_v32\", "
         "\"qwen3_moe\" and \"glm4_moe\")",
         origin, c.model_type);
  return c;
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  return parse_model_config(parse_json(read_small_file(path, 4u << 20), path), path);
}

}  // namespace strata
