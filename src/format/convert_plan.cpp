#include "format/convert_plan.h"

#include <xxhash.h>

#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/io.h"

namespace strata::conversion {

namespace fs = std::filesystem;

namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

WeightFormat format_of_bits(int bits) {
  switch (bits) {
    case 4: return WeightFormat::INT4;
    case 8: return WeightFormat::INT8;
    default: return WeightFormat::BF16;
  }
}

// A matrix record without its place: format, effective group, shape, sizes.
TensorRecord matrix_record(WeightFormat f, int64_t rows, int64_t cols, int64_t group_size, bool scales_bf16) {
  TensorRecord r;
  r.format = f;
  // A group as wide as the row (or wider) is one scale per row: written as
  // group 0, the per-row form every kernel supports.
  r.group = is_int(f) && group_size > 0 && group_size < cols ? group_size : 0;
  r.shape = {rows, cols};
  r.scales_bf16 = is_int(f) && scales_bf16;
  std::tie(r.bytes, r.scales_bytes) = tensor_bytes(f, rows, cols, r.group, 0, 0, r.scales_bf16 ? 2 : 4);
  return r;
}

// Places data then scales from `cursor`, each kTensorAlign-aligned.
void place(TensorRecord& r, uint64_t& cursor) {
  r.offset = align_up(cursor, kTensorAlign);
  cursor = r.offset + r.bytes;
  if (r.scales_bytes) {
    r.scales_offset = align_up(cursor, kTensorAlign);
    cursor = r.scales_offset + r.scales_bytes;
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string scale_name_of(const std::string& name) {
  std::string s = name;
  const std::string suffix = ".weight";
  if (s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
    s.resize(s.size() - suffix.size());
  return s + ".weight_scale_inv";
}

class Planner {
 public:
  // `ck` null: sizes from config.json alone (make_plan_from_config), no
  // source tensor is checked or counted.
  Planner(const Checkpoint* ck, const ModelConfig& c, bool scales_bf16)
      : ck_(ck), c_(c), scales_bf16_(scales_bf16) {}

  // Checks a source tensor's presence, shape and dtype; returns its bytes
  // (with the FP8 scale tensor) and marks both as used.
  uint64_t source(const std::string& name, const std::vector<int64_t>& shape, bool matrix) {
    if (!ck_) return 0;
    const Checkpoint& ck = *ck_;
    const TensorEntry& e = ck.entry(name);
    if (e.shape != shape)
      fail("{}: tensor \"{}\" has shape {}, expected {} (from config.json)", ck.file_of(name).path(), name,
           shape_str(e.shape), shape_str(shape));
    used_.insert(name);
    uint64_t bytes = e.bytes();
    switch (e.dtype) {
      case DType::F32:
      case DType::BF16:
      case DType::F16: break;
      case DType::F8_E4M3:
        if (matrix) {
          const std::string s = scale_name_of(name);
          if (!ck.has(s)) fail("{}: FP8 tensor \"{}\" has no scale tensor \"{}\"", ck.file_of(name).path(), name, s);
          used_.insert(s);
          bytes += ck.entry(s).bytes();
          break;
        }
        [[fallthrough]];
      default:
        fail("{}: tensor \"{}\" has dtype {}, expected BF16, F16, F32{}", ck.file_of(name).path(), name,
             dtype_name(e.dtype), matrix ? " or F8_E4M3" : "");
    }
    return bytes;
  }

  void matrix(const std::string& name, int64_t rows, int64_t cols, WeightFormat f, int64_t group) {
    DenseItem it;
    it.name = name;
    it.rows = rows;
    it.cols = cols;
    it.src_bytes = source(name, {rows, cols}, true);
    it.rec = matrix_record(f, rows, cols, group, scales_bf16_);
    it.rec.file = kDenseFile;
    place(it.rec, cursor_);
    dense.push_back(std::move(it));
  }
  void vector(const std::string& name, int64_t n) {
    DenseItem it;
    it.name = name;
    it.vector = true;
    it.rows = 1;
    it.cols = n;
    it.src_bytes = source(name, {n}, false);
    it.rec.format = WeightFormat::F32;
    it.rec.shape = {n};
    it.rec.bytes = static_cast<uint64_t>(n) * 4;
    it.rec.file = kDenseFile;
    place(it.rec, cursor_);
    dense.push_back(std::move(it));
  }
  void experts(int64_t layer, const std::string& prefix, WeightFormat f, int64_t group) {
    ExpertItem it;
    it.prefix = prefix;
    ExpertLayerRecord& r = it.rec;
    r.layer = layer;
    r.file = fmt::format("experts-{:03}.bin", layer);
    r.count = c_.n_routed_experts;
    const int64_t I = c_.moe_intermediate_size, D = c_.hidden_size;
    r.gate = matrix_record(f, I, D, group, scales_bf16_);
    r.up = matrix_record(f, I, D, group, scales_bf16_);
    r.down = matrix_record(f, D, I, group, scales_bf16_);
    uint64_t cur = 0;
    place(r.gate, cur);
    place(r.up, cur);
    place(r.down, cur);
    r.blob_bytes = cur;
    r.stride = align_up(cur, kExpertAlign);
    for (int64_t e = 0; e < r.count; ++e) {
      const std::string p = prefix + std::to_string(e);
      it.src_bytes += source(p + ".gate_proj.weight", {I, D}, true);
      it.src_bytes += source(p + ".up_proj.weight", {I, D}, true);
      it.src_bytes += source(p + ".down_proj.weight", {D, I}, true);
    }
    expert_items.push_back(std::move(it));
  }

  uint64_t dense_bytes() const { return cursor_; }
  const std::set<std::string>& used() const { return used_; }

  std::vector<DenseItem> dense;
  std::vector<ExpertItem> expert_items;

 private:
  const Checkpoint* ck_;
  const ModelConfig& c_;
  bool scales_bf16_ = false;
  uint64_t cursor_ = 0;
  std::set<std::string> used_;
};

std::string file_name_of(const std::string& path) { return fs::path(path).filename().string(); }

Json source_identity(const Checkpoint& ck, const std::string& in_dir, const std::string& config_text) {
  std::map<std::string, uint64_t> files;
  for (const std::string& n : ck.names()) {
    const SafetensorsFile& f = ck.file_of(n);
    files[file_name_of(f.path())] = f.file_size();
  }
  const fs::path index = fs::path(in_dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::is_regular_file(index, ec)) files[index.filename().string()] = fs::file_size(index, ec);
  files["config.json"] = config_text.size();
  Json j;
  fs::path dir = fs::absolute(fs::path(in_dir)).lexically_normal();
  if (dir.filename().empty() && dir.has_parent_path()) dir = dir.parent_path();  // trailing slash
  j["dir"] = dir.string();
  j["config_xxh3"] = xxh_hex(XXH3_64bits(config_text.data(), config_text.size()));
  j["files"] = Json::array();
  for (const auto& [name, bytes] : files) j["files"].push_back({{"name", name}, {"bytes", bytes}});
  return j;
}

}  // namespace

namespace {

// The plan's layout from config.json (and the checkpoint when there is one).
Plan layout(const Checkpoint* ckp, const ConvertOptions& o) {
  Plan plan;
  const std::string cfg_path = (fs::path(o.in_dir) / "config.json").string();
  const std::string cfg_text = read_small_file(cfg_path, 16u << 20);
  plan.config_json = parse_json(cfg_text, cfg_path);
  plan.cfg = parse_model_config(plan.config_json, cfg_path);
  plan.options = o.to_json();
  if (ckp) plan.source = source_identity(*ckp, o.in_dir, cfg_text);
  const ModelConfig& c = plan.cfg;

  const int64_t nh = c.num_hidden_layers;
  if (ckp && c.num_nextn_predict_layers > 0 && !ckp->has("model.layers." + std::to_string(nh) + ".eh_proj.weight"))
    fail("{}: config has num_nextn_predict_layers={} but the checkpoint has no MTP layer tensors "
         "(model.layers.{}.eh_proj.weight)",
         o.in_dir, c.num_nextn_predict_layers, nh);

  Planner P(ckp, c, o.scales == "bf16");
  const int64_t g = o.group_size, D = c.hidden_size, H = c.num_attention_heads;
  P.matrix("model.embed_tokens.weight", c.vocab_size, D, format_of_bits(o.embed_bits), g);
  for (int64_t L = 0; L < c.num_weight_layers(); ++L) {
    const bool mtp = L >= nh;
    auto fmt_for = [&](int bits) { return format_of_bits(mtp ? o.mtp_bits : bits); };
    const std::string p = "model.layers." + std::to_string(L);
    P.vector(p + ".input_layernorm.weight", D);
    P.vector(p + ".post_attention_layernorm.weight", D);
    const std::string ap = p + ".self_attn";
    if (c.attention == AttentionKind::Gqa) {
      const int64_t hd = c.head_dim, kvw = c.num_key_value_heads * c.head_dim;
      P.matrix(ap + ".q_proj.weight", H * hd, D, fmt_for(o.attn_bits), g);
      P.matrix(ap + ".k_proj.weight", kvw, D, fmt_for(o.attn_bits), g);
      P.matrix(ap + ".v_proj.weight", kvw, D, fmt_for(o.attn_bits), g);
      P.matrix(ap + ".o_proj.weight", D, H * hd, fmt_for(o.o_bits), g);
      if (c.qk_norm) {
        P.vector(ap + ".q_norm.weight", hd);
        P.vector(ap + ".k_norm.weight", hd);
      }
      if (c.attention_bias) {
        P.vector(ap + ".q_proj.bias", H * hd);
        P.vector(ap + ".k_proj.bias", kvw);
        P.vector(ap + ".v_proj.bias", kvw);
      }
    } else {
      P.matrix(ap + ".q_a_proj.weight", c.q_lora_rank, D, fmt_for(o.attn_bits), g);
      P.vector(ap + ".q_a_layernorm.weight", c.q_lora_rank);
      P.matrix(ap + ".q_b_proj.weight", H * c.qk_head_dim(), c.q_lora_rank, fmt_for(o.attn_bits), g);
      P.matrix(ap + ".kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, D, fmt_for(o.attn_bits), g);
      P.vector(ap + ".kv_a_layernorm.weight", c.kv_lora_rank);
      P.matrix(ap + ".kv_b_proj.weight", H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, fmt_for(o.kvb_bits),
               g);
      P.matrix(ap + ".o_proj.weight", D, H * c.v_head_dim, fmt_for(o.o_bits), g);
      if (c.indexer_full(L)) {
        const std::string ip = ap + ".indexer";
        P.matrix(ip + ".wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank, fmt_for(o.attn_bits), g);
        P.matrix(ip + ".wk.weight", c.index_head_dim, D, fmt_for(o.attn_bits), g);
        P.matrix(ip + ".weights_proj.weight", c.index_n_heads, D, WeightFormat::BF16, 0);
        P.vector(ip + ".k_norm.weight", c.index_head_dim);
        P.vector(ip + ".k_norm.bias", c.index_head_dim);
      }
    }
    const std::string mp = p + ".mlp";
    if (c.is_moe(L)) {
      P.matrix(mp + ".gate.weight", c.n_routed_experts, D, WeightFormat::F32, 0);
      // Without a checkpoint, assume the bias (every glm_moe_dsa checkpoint has it).
      if (c.router == RouterKind::SigmoidGroups && (!ckp || ckp->has(mp + ".gate.e_score_correction_bias")))
        P.vector(mp + ".gate.e_score_correction_bias", c.n_routed_experts);
      if (c.n_shared_experts > 0) {
        const int64_t w = c.moe_intermediate_size * c.n_shared_experts;
        const WeightFormat f = fmt_for(o.shared_bits);
        P.matrix(mp + ".shared_experts.gate_proj.weight", w, D, f, g);
        P.matrix(mp + ".shared_experts.up_proj.weight", w, D, f, g);
        P.matrix(mp + ".shared_experts.down_proj.weight", D, w, f, g);
      }
      P.experts(L, mp + ".experts.", format_of_bits(mtp ? o.mtp_bits : o.expert_bits), g);
    } else {
      const WeightFormat f = fmt_for(o.dense_mlp_bits);
      P.matrix(mp + ".gate_proj.weight", c.intermediate_size, D, f, g);
      P.matrix(mp + ".up_proj.weight", c.intermediate_size, D, f, g);
      P.matrix(mp + ".down_proj.weight", D, c.intermediate_size, f, g);
    }
    if (mtp) {
      P.vector(p + ".enorm.weight", D);
      P.vector(p + ".hnorm.weight", D);
      P.vector(p + ".shared_head.norm.weight", D);
      P.matrix(p + ".eh_proj.weight", D, 2 * D, format_of_bits(o.mtp_bits), g);
    }
  }
  P.vector("model.norm.weight", D);
  P.matrix("lm_head.weight", c.vocab_size, D, format_of_bits(o.head_bits), g);

  plan.dense = std::move(P.dense);
  plan.experts = std::move(P.expert_items);
  if (ckp)
    for (const std::string& n : ckp->names())
      if (!P.used().count(n)) plan.unused.push_back(n);

  FileItem dense{kDenseFile, FileKind::Dense, 0, P.dense_bytes(), 0};
  for (const DenseItem& d : plan.dense) dense.src_bytes += d.src_bytes;
  plan.files.push_back(dense);
  for (size_t i = 0; i < plan.experts.size(); ++i) {
    const ExpertItem& e = plan.experts[i];
    plan.files.push_back(
        {e.rec.file, FileKind::Experts, i, e.rec.stride * static_cast<uint64_t>(e.rec.count), e.src_bytes});
  }
  for (const char* name : kCopiedFiles) {
    const fs::path src = fs::path(o.in_dir) / name;
    std::error_code ec;
    if (!fs::exists(src, ec)) continue;
    if (!fs::is_regular_file(src, ec)) fail("{}: not a regular file", src.string());
    const uint64_t bytes = fs::file_size(src, ec);
    if (ec) fail("{}: cannot examine: {}", src.string(), ec.message());
    plan.files.push_back({name, FileKind::Copy, 0, bytes, 0});
  }
  for (const FileItem& f : plan.files) plan.total_src += f.src_bytes;
  return plan;
}


}  // namespace

Plan make_plan(const Checkpoint& ck, const ConvertOptions& o) { return layout(&ck, o); }

Plan make_plan_from_config(const ConvertOptions& o) { return layout(nullptr, o); }

}  // namespace strata::conversion
