// Sequence state as a value (ARCHITECTURE.md §5): per weight layer (decoder
// layers, then MTP layers) the key cache of every position -- MLA: the
// normalised KV latent, the roped key and the indexer key; GQA: the normed,
// roped keys and the values of every kv head. Sized to the context once, at
// creation (ModelConfig::cache_widths).
//
// KvType::F16 (`--kv-type f16`): MLA stores the latent and the roped key as
// IEEE halves, GQA the keys and the values (f32_to_f16_sat: round to nearest
// even, saturating), half the bytes per context token; attention reads them
// back as the f32 values of those halves. The indexer key stays f32 (the DSA
// selection reads it every token over the whole context), stored in lanes
// (LaneRows). The default F32
// stores the floats the forward computed, bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "core/aligned.h"
#include "core/config.h"
#include "kernels/qgemm.h"

namespace strata {

enum class KvType : uint8_t { F32, F16 };
const char* kv_type_name(KvType t);

// A vector of IEEE halves starting on a 64-byte boundary.
using AlignedHalves = std::vector<uint16_t, AlignedAllocator<uint16_t>>;

// A cache of rows stored in lanes (kernels/qgemm.h, lanes_offset): blocks of
// 16 consecutive positions, a column's 16 values adjacent. The DSA indexer's
// key cache: the indexer scores every key of the context each token, and
// its kernel (KernelTable::gemm_f32_lanes) reads the keys in this layout as
// they are instead of transposing each block of 16 first. Room for the
// positions rounded up to 16; the rows past the last written one hold zeros
// or keys a truncation forgot (never read as keys).
class LaneRows {
 public:
  void assign(int64_t rows, int64_t width) {
    rows_ = rows;
    width_ = width;
    v_.assign(static_cast<size_t>((rows + 15) / 16 * 16 * width), 0.0f);
  }
  bool empty() const { return v_.empty(); }
  int64_t rows() const { return rows_; }
  int64_t width() const { return width_; }
  // Floats held, the padding to whole blocks of 16 rows included.
  size_t size() const { return v_.size(); }
  // Row 0's block: the rows from a block-aligned row j0 start at j0 * width().
  const float* data() const { return v_.data(); }
  void set_row(int64_t j, const float* x) {
    float* b = v_.data() + lanes_offset(j, 0, width_);
    for (int64_t c = 0; c < width_; ++c) b[c * 16] = x[c];
  }
  void get_row(int64_t j, float* x) const {
    const float* b = v_.data() + lanes_offset(j, 0, width_);
    for (int64_t c = 0; c < width_; ++c) x[c] = b[c * 16];
  }
  bool operator==(const LaneRows& o) const { return rows_ == o.rows_ && width_ == o.width_ && v_ == o.v_; }

 private:
  AlignedFloats v_;
  int64_t rows_ = 0, width_ = 0;
};

// Each on a cache line (core/aligned.h): rows a multiple of 16 floats wide
// are then read by whole-line vector loads.
struct LayerCache {
  AlignedFloats latent;     // [capacity, kv_lora_rank] (KvType::F32; empty with F16)
  AlignedFloats rope_key;   // [capacity, qk_rope_head_dim] (KvType::F32; empty with F16)
  AlignedHalves latent16;   // KvType::F16: the latent as halves, [capacity, kv_lora_rank]
  AlignedHalves rope_key16; // KvType::F16: the roped key as halves, [capacity, qk_rope_head_dim]
  LaneRows index_key;       // [capacity, index_head_dim] in lanes, full-indexer layers only
  AlignedFloats k, v;       // GQA: [capacity, num_key_value_heads * head_dim] each (KvType::F32)
  AlignedHalves k16, v16;   // GQA, KvType::F16: the keys and values as halves, shaped as k, v
};

class Session {
 public:
  // kv: how the MLA latent and roped key, or the GQA keys and values, are
  // stored.
  Session(const ModelConfig& c, int64_t capacity, bool with_mtp = true, KvType kv = KvType::F32);

  KvType kv_type() const { return kv_; }
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
  static size_t bytes_for(const ModelConfig& c, int64_t capacity, bool with_mtp, KvType kv = KvType::F32);
  // The key-cache bytes of one position in weight layer l (no MTP hidden state).
  static size_t layer_bytes_per_position(const ModelConfig& c, int64_t l, KvType kv);

 private:
  int64_t capacity_;
  int64_t num_decoder_layers_;
  KvType kv_;
  std::vector<LayerCache> layers_;
};

}  // namespace strata
