#include "model/session.h"

#include "core/error.h"

namespace strata {

const char* kv_type_name(KvType t) { return t == KvType::F16 ? "f16" : "f32"; }

Session::Session(const ModelConfig& c, int64_t capacity, bool with_mtp, KvType kv)
    : capacity_(capacity), num_decoder_layers_(c.num_hidden_layers), kv_(kv) {
  if (capacity < 1 || capacity > c.max_position_embeddings)
    fail("context size {} is outside [1, max_position_embeddings={}]", capacity, c.max_position_embeddings);
  const int64_t n = c.num_hidden_layers + (with_mtp ? c.num_nextn_predict_layers : 0);
  layers_.resize(static_cast<size_t>(n));
  for (int64_t l = 0; l < n; ++l) {
    LayerCache& lc = layers_[static_cast<size_t>(l)];
    const auto w = c.cache_widths(l);
    if (kv == KvType::F16) {
      lc.latent16.assign(static_cast<size_t>(capacity * w[0]), 0);
      lc.rope_key16.assign(static_cast<size_t>(capacity * w[1]), 0);
      lc.k16.assign(static_cast<size_t>(capacity * w[3]), 0);
      lc.v16.assign(static_cast<size_t>(capacity * w[4]), 0);
    } else {
      lc.latent.assign(static_cast<size_t>(capacity * w[0]), 0.0f);
      lc.rope_key.assign(static_cast<size_t>(capacity * w[1]), 0.0f);
      lc.k.assign(static_cast<size_t>(capacity * w[3]), 0.0f);
      lc.v.assign(static_cast<size_t>(capacity * w[4]), 0.0f);
    }
    if (w[2] > 0) lc.index_key.assign(capacity, w[2]);
  }
  if (has_mtp()) hidden.assign(static_cast<size_t>(capacity * c.hidden_size), 0.0f);
}

size_t Session::bytes() const {
  size_t b = 0;
  for (const auto& l : layers_)
    b += (l.latent.size() + l.rope_key.size() + l.index_key.size() + l.k.size() + l.v.size()) * sizeof(float) +
         (l.latent16.size() + l.rope_key16.size() + l.k16.size() + l.v16.size()) * sizeof(uint16_t);
  return b + hidden.size() * sizeof(float);
}

size_t Session::layer_bytes_per_position(const ModelConfig& c, int64_t l, KvType kv) {
  const auto w = c.cache_widths(l);
  const int64_t halvable = w[0] + w[1] + w[3] + w[4];  // all but the indexer key
  return static_cast<size_t>(halvable * (kv == KvType::F16 ? 2 : 4) + w[2] * 4);
}

size_t Session::bytes_for(const ModelConfig& c, int64_t capacity, bool with_mtp, KvType kv) {
  const int64_t layers = c.num_hidden_layers + (with_mtp ? c.num_nextn_predict_layers : 0);
  size_t per_pos = with_mtp && c.num_nextn_predict_layers > 0 ? static_cast<size_t>(c.hidden_size) * sizeof(float) : 0;
  size_t index_widths = 0;  // the indexer keys' floats per position, all layers
  for (int64_t l = 0; l < layers; ++l) {
    per_pos += layer_bytes_per_position(c, l, kv);
    index_widths += static_cast<size_t>(c.cache_widths(l)[2]);
  }
  // The indexer keys are held in whole blocks of 16 positions (LaneRows).
  const size_t pad = static_cast<size_t>((capacity + 15) / 16 * 16 - capacity);
  return per_pos * static_cast<size_t>(capacity) + index_widths * sizeof(float) * pad;
}

}  // namespace strata
