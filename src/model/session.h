// Sequence state as a value (ARCHITECTURE.md §5): per weight layer (decoder
// layers, then MTP layers) the key cache of every position -- MLA: the
// normalised KV latent, the roped key and the indexer key; GQA: the normed,
// roped keys and the values of every kv head. Sized to the context once, at
// creation (ModelConfig::cache_widths).
#pragma once
#include <cstdint>
#include <vector>

#include "core/aligned.h"
#include "core/config.h"

namespace strata {

// Each on a cache line (core/aligned.h): rows a multiple of 16 floats wide
// are then read by whole-line vector loads.
struct LayerCache {
  AlignedFloats latent;     // [capacity, kv_lora_rank]
  AlignedFloats rope_key;   // [capacity, qk_rope_head_dim]
  AlignedFloats index_key;  // [capacity, index_head_dim], full-indexer layers only
  AlignedFloats k, v;       // GQA: [capacity, num_key_value_heads * head_dim] each
};

class Session {
 public:
  Session(const ModelConfig& c, int64_t capacity, bool with_mtp = true);

  int64_t capacity() const { return capacity_; }
  LayerCache& layer(int64_t l) { return layers_[static_cast<size_t>(l)]; }
  const LayerCache& layer(int64_t l) const { return layers_[static_cast<size_t>(l)]; }
  bool has_mtp() const { return static_cast<int64_t>(layers_.size()) > num_decoder_layers_; }

  // Positions [0, n_past) of the main model hold valid keys; likewise for the
  // MTP layer. Truncating forgets later positions (rejected drafts, :reset).
  int64_t n_past = 0;
  int64_t mtp_n_past = 0;
  // With the MTP layer: the main model's final hidden state of each position
  // ([capacity, hidden_size], valid for [0, hidden_n)). The MTP layer's state
  // at p needs hidden state p and the token at p + 1, so when a later prompt
  // changes the token after a reused prefix, the MTP state is recomputed from
  // these (one MTP row per position) instead of the main model's.
  std::vector<float> hidden;
  int64_t hidden_n = 0;
  void truncate(int64_t n) {
    if (n < n_past) n_past = n;
    if (n < mtp_n_past) mtp_n_past = n;
    if (n < hidden_n) hidden_n = n;
  }
  size_t bytes() const;
  // What a session of `capacity` positions holds, bytes (= bytes() of one).
  static size_t bytes_for(const ModelConfig& c, int64_t capacity, bool with_mtp);

 private:
  int64_t capacity_;
  int64_t num_decoder_layers_;
  std::vector<LayerCache> layers_;
};

}  // namespace strata
