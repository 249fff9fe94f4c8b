// The one score -> softmax -> weighted-sum step every attention form shares
// (absorbed decode, naive prefill): per query, over the keys it may see.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/qgemm.h"
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

// Positions per chunk of the GQA keys and values (attention_gqa.cpp): the
// sums pass over a chunk once per tile of heads and columns, and 256
// positions of a head_dim-128 kv head are 128 KiB of floats, in L2.
constexpr int64_t kGqaChunk = 256;

// A key set's rows as floats (an f32 cache, or halves converted once for a
// whole call) or as halves (an f16 cache, read by the kernels directly).
struct AnyRows {
  FRows f;
  HRows h;
  bool half = false;
  static AnyRows floats(FRows f) { return AnyRows{f, {}, false}; }
  static AnyRows halves(HRows h) { return AnyRows{{}, h, true}; }
  AnyRows from(int64_t j0) const { return half ? halves(h.from(j0)) : floats(f.from(j0)); }
};
// KernelTable::gemm_f32_rows or gemm_f16_rows, as the rows are held (the
// same floats either way for the same values).
inline void score_rows(const KernelTable& kt, AnyRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows,
                       float* y, int64_t ldy) {
  if (w.half)
    kt.gemm_f16_rows(w.h, nw, cols, x, nrows, y, ldy);
  else
    kt.gemm_f32_rows(w.f, nw, cols, x, nrows, y, ldy);
}
// KernelTable::wsum_f32 or wsum_f16, likewise.
inline void sum_rows(const KernelTable& kt, const float* p, int64_t ldp, int64_t nh, AnyRows v, int64_t K, int64_t c0,
                     int64_t c1, float* y, int64_t ldy, bool acc) {
  if (v.half)
    kt.wsum_f16(p, ldp, nh, v.h, K, c0, c1, y, ldy, acc);
  else
    kt.wsum_f32(p, ldp, nh, v.f, K, c0, c1, y, ldy, acc);
}

}  // namespace strata
