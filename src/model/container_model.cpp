// Loading a strata container: the manifest and the resident dense part. The
// routed experts stay on disk; DiskExpertStore reads them.
#include <fcntl.h>
#include <xxhash.h>

#include <cstring>

#include "format/container.h"
#include "model/model.h"
#include "core/error.h"
#include "core/io.h"

namespace strata {

namespace {

void read_whole(const std::string& path, uint8_t* dst, uint64_t n) {
  pread_exact(open_file(path, O_RDONLY), dst, n, 0);
}

class ContainerSource final : public TensorSource {
 public:
  ContainerSource(const Model& m, const std::string& origin) : m_(m), origin_(origin) {}

  bool has(const std::string& name) const override { return m_.manifest->tensors.count(name) != 0; }

  const TensorRecord& rec(const std::string& name, const std::vector<int64_t>& shape) const {
    auto it = m_.manifest->tensors.find(name);
    if (it == m_.manifest->tensors.end()) fail("{}: tensor \"{}\" is missing from the container", origin_, name);
    if (it->second.shape != shape)
      fail("{}: tensor \"{}\" has shape [{}], the config needs [{}]", origin_, name, fmt::join(it->second.shape, ", "),
           fmt::join(shape, ", "));
    if (it->second.file != "dense.bin")
      fail("{}: tensor \"{}\" lives in {}, expected dense.bin", origin_, name, it->second.file);
    return it->second;
  }

  Weight weight(const std::string& name, int64_t rows, int64_t cols) const override {
    return weight_view(rec(name, {rows, cols}), m_.dense_blob.data(), name);
  }

  std::vector<float> vec(const std::string& name, int64_t n) const override {
    const TensorRecord& t = rec(name, {n});
    std::vector<float> out(static_cast<size_t>(n));
    std::memcpy(out.data(), m_.dense_blob.data() + t.offset, t.bytes);
    return out;
  }

 private:
  const Model& m_;
  std::string origin_;
};

}  // namespace

std::unique_ptr<TensorSource> open_container(Model& m) {
  auto manifest = std::make_shared<Manifest>(read_manifest(m.dir));
  const std::string origin = m.dir + "/manifest.json";
  m.config = parse_model_config(manifest->config, origin + " (config)");
  const ModelConfig& c = m.config;

  const FileRecord* dense = nullptr;
  for (const auto& f : manifest->files)
    if (f.name == "dense.bin") dense = &f;
  if (!dense) fail("{}: no dense.bin listed", origin);
  m.dense_blob.resize(dense->bytes);
  read_whole(m.dir + "/dense.bin", m.dense_blob.data(), dense->bytes);
  if (XXH3_64bits(m.dense_blob.data(), m.dense_blob.size()) != dense->xxh)
    fail("{}/dense.bin: checksum mismatch (the file is corrupt or from another conversion)", m.dir);

  // Every MoE layer's experts must be listed with the shapes the config implies.
  const int64_t layers = c.num_weight_layers();
  for (int64_t L = 0; L < layers; ++L) {
    if (!c.is_moe(L)) continue;
    const ExpertLayerRecord* e = nullptr;
    for (const auto& x : manifest->expert_layers)
      if (x.layer == L) e = &x;
    if (!e) fail("{}: no routed experts listed for MoE layer {}", origin, L);
    const std::string where = fmt::format("{}: experts of layer {}", origin, L);
    if (e->count != c.n_routed_experts) fail("{}: count {} != n_routed_experts {}", where, e->count, c.n_routed_experts);
    const int64_t I = c.moe_intermediate_size, D = c.hidden_size;
    if (e->gate.shape != std::vector<int64_t>{I, D} || e->up.shape != std::vector<int64_t>{I, D} ||
        e->down.shape != std::vector<int64_t>{D, I})
      fail("{}: gate/up/down shapes do not match moe_intermediate_size {} and hidden_size {}", where, I, D);
  }
  // ... and nothing else: experts of a dense layer (or past the last layer)
  // would be opened, budgeted and read for nothing.
  for (const auto& x : manifest->expert_layers)
    if (x.layer >= layers || !c.is_moe(x.layer))
      fail("{}: experts are listed for layer {}, which is not an MoE layer of this config (layers {}, "
           "first_k_dense_replace and mlp_layer_types decide)",
           origin, x.layer, layers);
  m.manifest = manifest;
  m.experts_on_disk = true;
  return std::make_unique<ContainerSource>(m, origin);
}

size_t Model::resident_bytes() const {
  size_t b = dense_blob.size();
  if (dense_blob.empty()) {
    b += weights.embed.bytes() + weights.lm_head.bytes();
    for (const auto& l : weights.layers) {
      const auto& a = l.attn;
      b += a.q_a.bytes() + a.q_b.bytes() + a.kv_a.bytes() + a.kv_b.bytes() + a.o.bytes();
      b += a.indexer.wq_b.bytes() + a.indexer.wk.bytes() + a.indexer.weights_proj.bytes();
      b += l.dense.bytes() + l.shared.bytes() + l.router.gate.bytes() + l.eh_proj.bytes();
    }
  }
  for (const auto& layer : weights.experts)
    for (const auto& e : layer) b += e.bytes();
  return b;
}

}  // namespace strata
