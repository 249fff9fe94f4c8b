// The one score -> softmax -> weighted-sum step every attention form shares
// (absorbed decode, naive prefill): per query, over the keys it may see.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/forward.h"

namespace strata {

// The keys a row attends to, ascending: every causal key (0..count_all-1) or
// the indexer's selection.
struct KeySet {
  const std::vector<int32_t>* sel;
  int32_t count_all;
  int64_t size() const { return sel ? static_cast<int64_t>(sel->size()) : count_all; }
  int32_t operator[](int64_t i) const { return sel ? (*sel)[static_cast<size_t>(i)] : static_cast<int32_t>(i); }
};

// Row r's keys: all causal keys, or its selection (select_keys).
inline KeySet keys_of(const Workspace& ws, std::span<const Row> rows, int64_t r) {
  return ws.select_all[static_cast<size_t>(r)] ? KeySet{nullptr, rows[static_cast<size_t>(r)].pos + 1}
                                               : KeySet{&ws.selection[static_cast<size_t>(r)], 0};
}

// A matrix of per-position rows: row t starts at base + t * stride, n wide.
struct KeyRows {
  const float* base;
  int64_t stride;
  int64_t n;
  const float* operator[](int64_t t) const { return base + t * stride; }
};

// s[j] = (q_a . a[key j] + q_b . b[key j]) * scale: a query split in two
// parts (the latent or no-position part, and the rope part), each a dot16.
inline void score_keys(const Compute& c, const KeySet& ks, const float* qa, KeyRows a, const float* qb, KeyRows b,
                       float scale, float* s) {
  for (int64_t j = 0; j < ks.size(); ++j) {
    const int64_t t = ks[j];
    s[j] = (c.dot(qa, a[t], a.n) + c.dot(qb, b[t], b.n)) * scale;
  }
}

// Softmax over the scores, then out = sum_j s[j] * v[key j], in key order.
inline void softmax_sum(const Compute& c, float* s, const KeySet& ks, KeyRows v, float* out) {
  const int64_t K = ks.size();
  c.kernels().softmax(s, K);
  std::fill(out, out + v.n, 0.0f);
  for (int64_t j = 0; j < K; ++j) {
    const float* vr = v[ks[j]];
    for (int64_t i = 0; i < v.n; ++i) out[i] += s[j] * vr[i];
  }
}

// Positions per chunk of an f16 session's GQA keys and values converted to
// f32 (attention_gqa.cpp): 256 positions of a head_dim-128 kv head are 128
// KiB, in L2.
constexpr int64_t kGqaChunk = 256;

}  // namespace strata
