#include "model/session.h"

#include "core/error.h"

namespace strata {

Session::Session(const ModelConfig& c, int64_t capacity, bool with_mtp)
    : capacity_(capacity), num_decoder_layers_(c.num_hidden_layers) {
  if (capacity < 1 || capacity > c.max_position_embeddings)
    fail("context size {} is outside [1, max_position_embeddings={}]", capacity, c.max_position_embeddings);
  const int64_t n = c.num_hidden_layers + (with_mtp ? c.num_nextn_predict_layers : 0);
  layers_.resize(static_cast<size_t>(n));
  for (int64_t l = 0; l < n; ++l) {
    LayerCache& lc = layers_[static_cast<size_t>(l)];
    const auto w = c.cache_widths(l);
    lc.latent.assign(static_cast<size_t>(capacity * w[0]), 0.0f);
    lc.rope_key.assign(static_cast<size_t>(capacity * w[1]), 0.0f);
    lc.index_key.assign(static_cast<size_t>(capacity * w[2]), 0.0f);
    lc.k.assign(static_cast<size_t>(capacity * w[3]), 0.0f);
    lc.v.assign(static_cast<size_t>(capacity * w[4]), 0.0f);
  }
  if (has_mtp()) hidden.assign(static_cast<size_t>(capacity * c.hidden_size), 0.0f);
}

size_t Session::bytes() const {
  size_t b = 0;
  for (const auto& l : layers_)
    b += (l.latent.size() + l.rope_key.size() + l.index_key.size() + l.k.size() + l.v.size()) * sizeof(float);
  return b + hidden.size() * sizeof(float);
}

size_t Session::bytes_for(const ModelConfig& c, int64_t capacity, bool with_mtp) {
  const int64_t layers = c.num_hidden_layers + (with_mtp ? c.num_nextn_predict_layers : 0);
  int64_t per_pos = with_mtp && c.num_nextn_predict_layers > 0 ? c.hidden_size : 0;
  for (int64_t l = 0; l < layers; ++l) per_pos += c.cache_floats(l);
  return static_cast<size_t>(per_pos * capacity) * sizeof(float);
}

}  // namespace strata
