// The DSA lightning indexer: its own key cache (LayerNorm'd, roped keys of
// index_head_dim), and per query row the index_topk keys with the highest
// score sum_h w_h * relu(q_h . k / sqrt(d)). A row with at most index_topk
// causal keys (or --dense-attention) keeps them all. GLM-5.2 shared layers
// reuse the selection of the nearest full layer before them.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ops.h"
#include "model/forward.h"
#include "model/key_selection.h"
#include "model/workspace.h"

namespace strata {

namespace {
constexpr float kIndexerNormEps = 1e-6f;
// Keys per block of indexer scores (a block's per-head dots stay in L1/L2).
constexpr int64_t kIndexKeyBlock = 256;
// Rows of one sequence scored together against each key block (prefill,
// speculative verification): each block of keys is read once for all of
// them instead of once per row.
constexpr int64_t kIndexGroupRows = 8;
}  // namespace

namespace {
// The selection order: higher score first, the lower position on an exactly
// equal score (a strict total order where no score is NaN).
struct Before {
  const float* scores;
  bool operator()(int32_t a, int32_t b) const { return scores[a] != scores[b] ? scores[a] > scores[b] : a < b; }
};

// Scores sampled (evenly spaced) to place select_top_keys' threshold.
constexpr int64_t kSelectSample = 1024;

// select_top_keys for a long row, from candidates: a threshold t0 that
// about 1.25 k + 24 of the sample's proportion of scores reach; the
// positions whose score reaches it, ascending, are the candidates. When at
// least k reach it, the k-th score of the whole row is >= t0, so every key
// of the top k is a candidate, and the k-th key (pk, by the selection order)
// is found among the candidates alone; one pass over them in position order
// then keeps those before it -- a higher score, or the same score at a
// position <= pk -- and leaves the k positions ascending, with no sort. The
// same set as the full partition. false (out untouched) when fewer than k
// reach t0, or more than half of all (nothing to gain): the caller's full
// partition then decides.
bool select_from_candidates(const float* scores, int64_t n, int64_t k, int32_t* order, std::vector<int32_t>& out) {
  float sample[kSelectSample];
  for (int64_t i = 0; i < kSelectSample; ++i) {
    const float v = scores[i * n / kSelectSample];
    sample[i] = v == v ? v : -std::numeric_limits<float>::infinity();  // NaN: no order; sampled as the lowest
  }
  const int64_t expect = k * kSelectSample / n;
  const int64_t r = std::min<int64_t>(kSelectSample - 1, expect + expect / 4 + 24);
  std::nth_element(sample, sample + r, sample + kSelectSample, [](float a, float b) { return a > b; });
  const float t0 = sample[r];
  int32_t* cand = order;  // the positions scoring >= t0, ascending
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    cand[m] = static_cast<int32_t>(i);
    m += scores[i] >= t0;
  }
  if (m < k || 2 * m > n) return false;
  int32_t* work = order + m;  // the same positions, to partition
  std::copy_n(cand, m, work);
  std::nth_element(work, work + k - 1, work + m, Before{scores});
  const int32_t pk = work[k - 1];
  const float sk = scores[pk];
  out.resize(static_cast<size_t>(k));
  int32_t* o = out.data();
  int64_t j = 0;
  for (int64_t c = 0; c < m && j < k; ++c) {
    const int32_t p = cand[c];
    const float v = scores[p];
    if (v > sk || (v == sk && p <= pk)) o[j++] = p;
  }
  return j == k;  // always, where no score is NaN
}
}  // namespace

void select_top_keys(const float* scores, int64_t n, int64_t k, int32_t* order, std::vector<int32_t>& out) {
  // A long row with few keys kept (GLM-5: 2048 of up to 200k) from
  // candidates above a sampled threshold; measured 2-5x faster than the full
  // partition at 8k-32k keys (docs/kernels.md, "Key selection from
  // candidates").
  if (n >= 4 * kSelectSample && 4 * k <= n && select_from_candidates(scores, n, k, order, out)) return;
  for (int64_t t = 0; t < n; ++t) order[t] = static_cast<int32_t>(t);
  // A strict total order, so the k-th element's partition is the full
  // sort's first k.
  std::nth_element(order, order + k - 1, order + n, Before{scores});
  out.assign(order, order + k);
  std::sort(out.begin(), out.end());
}

void ModelRunner::indexer(int64_t L, std::span<const Row> rows) {
  const ModelConfig& c = m_.config;
  const IndexerWeights& iw = m_.weights.layers[static_cast<size_t>(L)].attn.indexer;
  const int64_t n = static_cast<int64_t>(rows.size()), rd = c.qk_rope_head_dim;
  const int64_t Hi = c.index_n_heads, Di = c.index_head_dim;
  const float* xn = ws_.xn.data();
  const float* rc = ws_.rope_cos.data();
  const float* rsn = ws_.rope_sin.data();
  float* iq = grow(ws_.idx_q, static_cast<size_t>(n * Hi * Di));
  float* ik = grow(ws_.idx_k, static_cast<size_t>(n * Di));
  float* iwt = grow(ws_.idx_w, static_cast<size_t>(n * Hi));
  grow(ws_.idx_kn, static_cast<size_t>(n * Di));  // the keys as written to the cache
  mm(iw.wq_b, ws_.q_lat.data(), n, iq);
  const MatmulTask kw[] = {{&iw.wk, xn, n, ik}, {&iw.weights_proj, xn, n, iwt}};  // one quantization of xn
  matmul_batch(compute_, kw, ws_.mmb);
  write_index_keys(L, rows);
  const float wscale = 1.0f / std::sqrt(static_cast<float>(Hi));
  const auto rope = c.index_rope_half ? rope_half : rope_interleaved;
  for (int64_t r = 0; r < n; ++r) {
    const float* cs = rc + r * rd / 2;
    const float* sn = rsn + r * rd / 2;
    for (int64_t h = 0; h < Hi; ++h) rope(iq + (r * Hi + h) * Di, cs, sn, rd);
    for (int64_t h = 0; h < Hi; ++h) iwt[r * Hi + h] *= wscale;
  }
}

void ModelRunner::indexer_keys(int64_t L, std::span<const Row> rows) {
  const ModelConfig& c = m_.config;
  const IndexerWeights& iw = m_.weights.layers[static_cast<size_t>(L)].attn.indexer;
  const int64_t n = static_cast<int64_t>(rows.size()), Di = c.index_head_dim;
  grow(ws_.idx_kn, static_cast<size_t>(n * Di));
  mm(iw.wk, ws_.xn.data(), n, grow(ws_.idx_k, static_cast<size_t>(n * Di)));
  write_index_keys(L, rows);
}

void ModelRunner::write_index_keys(int64_t L, std::span<const Row> rows) {
  const ModelConfig& c = m_.config;
  const IndexerWeights& iw = m_.weights.layers[static_cast<size_t>(L)].attn.indexer;
  const int64_t n = static_cast<int64_t>(rows.size()), rd = c.qk_rope_head_dim, Di = c.index_head_dim;
  const float* ik = ws_.idx_k.data();
  float* kn = ws_.idx_kn.data();  // the keys as written to the cache
  // The indexer's rope dims come first; adjacent pairs (glm_moe_dsa) or
  // split halves (deepseek_v32), with MLA's cos / sin (YaRN included).
  const auto rope = c.index_rope_half ? rope_half : rope_interleaved;
  for (int64_t r = 0; r < n; ++r) {
    float* key = kn + r * Di;
    layernorm(ik + r * Di, iw.k_norm_weight.data(), iw.k_norm_bias.data(), Di, kIndexerNormEps, key);
    rope(key, ws_.rope_cos.data() + r * rd / 2, ws_.rope_sin.data() + r * rd / 2, rd);
    rows[r].seq->layer(L).index_key.set_row(rows[r].pos, key);
  }
}

void ModelRunner::select_keys(int64_t L, std::span<const Row> rows, const ForwardOptions& opts) {
  const ModelConfig& c = m_.config;
  const int64_t n = static_cast<int64_t>(rows.size());
  // Each row's selection holds index_topk keys: reserved when the row slot
  // first appears, so a later selection never allocates.
  while (ws_.selection.size() < static_cast<size_t>(n)) ws_.selection.emplace_back().reserve(static_cast<size_t>(c.index_topk));
  uint8_t* all = grow(ws_.select_all, static_cast<size_t>(n));
  if (!c.has_dsa()) {  // deepseek_v3 and GQA: no indexer, every row attends every causal key
    std::fill(all, all + n, uint8_t{1});
    ws_.most_keys = 0;
    return;
  }
  ws_.most_keys = opts.dense_attention ? 0 : c.index_topk;
  // Shared layers (GLM-5.2 IndexShare) reuse the selection of the most recent
  // full layer, which is still in the workspace.
  if (!c.indexer_full(L)) return;
  const int64_t Hi = c.index_n_heads, Di = c.index_head_dim;
  const float qscale = 1.0f / std::sqrt(static_cast<float>(Di));
  const float* iq = ws_.idx_q.data();
  const float* iwt = ws_.idx_w.data();
  // Row r's scores of keys [t0, t1) into s[t0 .. t1): per block of keys,
  // every head's dots as one gemm_f32_rows (dot16 of a query and a key row,
  // what Compute::dot computes), then the weighted relu sum over the heads in
  // head order.
  const auto score = [&](int64_t r, int64_t t0, int64_t t1, float* s, Workspace::Part& ps) {
    const float* keys = rows[r].seq->layer(L).index_key.data();
    float* d = grow(ps.idot, static_cast<size_t>(Hi * kIndexKeyBlock));
    for (int64_t b0 = t0; b0 < t1; b0 += kIndexKeyBlock) {  // t0: a multiple of 16 (the keys' blocks)
      const int64_t nb = std::min(kIndexKeyBlock, t1 - b0);
      compute_.kernels().gemm_f32_lanes(keys + b0 * Di, nb, Di, iq + r * Hi * Di, Hi, d, nb);
      float* sb = s + b0;
      for (int64_t j = 0; j < nb; ++j) sb[j] = 0.0f;
      for (int64_t h = 0; h < Hi; ++h) {
        const float wh = iwt[r * Hi + h];
        const float* dh = d + h * nb;
        for (int64_t j = 0; j < nb; ++j) sb[j] += wh * std::max(dh[j] * qscale, 0.0f);
      }
    }
  };
  // Rows [r0, r0 + m) of one sequence, each needing scores: row r0 + i's
  // scores of its keys [0, pos + 1) into s + i * stride. One gemm_f32_rows
  // per key block over every row's heads (the same dot16 per query and key
  // as score() computes, whatever the number of queries), then each row's
  // weighted relu sum over its own keys in head order: the same floats.
  const auto score_group = [&](int64_t r0, int64_t m, float* s, size_t stride, Workspace::Part& ps) {
    const float* keys = rows[r0].seq->layer(L).index_key.data();
    int64_t t1 = 0;
    for (int64_t i = 0; i < m; ++i) t1 = std::max<int64_t>(t1, rows[r0 + i].pos + 1);
    float* d = grow(ps.idot, static_cast<size_t>(kIndexGroupRows * Hi * kIndexKeyBlock));
    for (int64_t b0 = 0; b0 < t1; b0 += kIndexKeyBlock) {
      const int64_t nb = std::min(kIndexKeyBlock, t1 - b0);
      compute_.kernels().gemm_f32_lanes(keys + b0 * Di, nb, Di, iq + r0 * Hi * Di, m * Hi, d, nb);
      for (int64_t i = 0; i < m; ++i) {
        const int64_t r = r0 + i, nr = std::min(nb, rows[r].pos + 1 - b0);
        if (nr <= 0) continue;
        float* sb = s + static_cast<size_t>(i) * stride + b0;
        for (int64_t j = 0; j < nr; ++j) sb[j] = 0.0f;
        for (int64_t h = 0; h < Hi; ++h) {
          const float wh = iwt[r * Hi + h];
          const float* dh = d + (i * Hi + h) * nb;
          for (int64_t j = 0; j < nr; ++j) sb[j] += wh * std::max(dh[j] * qscale, 0.0f);
        }
      }
    }
  };
  // Whether row r keeps every causal key (no scores needed).
  const auto keeps_all = [&](int64_t r) { return opts.dense_attention || rows[r].pos + 1 <= c.index_topk; };
  // Every part's block of dots, whichever path this step takes: sized at the
  // first forward, so no later one allocates.
  for (auto& ps : ws_.parts) grow(ps.idot, static_cast<size_t>(kIndexGroupRows * Hi * kIndexKeyBlock));
  // Prefill and verification (several rows): the rows split over the pool,
  // consecutive rows of one sequence scored in groups (score_group). Decode
  // (fewer rows than pool parts): a row's keys split over the pool, its
  // buffers part 0's. The same floats either way.
  if (n >= static_cast<int64_t>(pool_.size())) {
    pool_.parallel_parts(n, [&](int part, int64_t b, int64_t e) {
      Workspace::Part& ps = ws_.parts[static_cast<size_t>(part)];
      for (int64_t r = b; r < e;) {
        int64_t m = 1;
        if (!keeps_all(r))
          while (m < kIndexGroupRows && r + m < e && rows[r + m].seq == rows[r].seq && !keeps_all(r + m)) ++m;
        size_t most = 0;
        for (int64_t i = 0; i < m; ++i) most = std::max(most, static_cast<size_t>(rows[r + i].pos + 1));
        // Capacity-long (a group's worth) from the first row on, so the step
        // whose context first passes index_topk allocates nothing either.
        const size_t stride = std::max(most, static_cast<size_t>(rows[r].seq->capacity()));
        float* s = opts.dense_attention ? nullptr : grow(ps.iscore, stride * kIndexGroupRows);
        int32_t* ord = opts.dense_attention ? nullptr : grow(ps.order, stride);
        ws_.select_all[static_cast<size_t>(r)] = keeps_all(r) ? 1 : 0;
        if (keeps_all(r)) {
          ++r;
          continue;
        }
        score_group(r, m, s, stride, ps);
        for (int64_t i = 0; i < m; ++i) {
          ws_.select_all[static_cast<size_t>(r + i)] = 0;
          const int64_t nkeys = rows[r + i].pos + 1;
          select_top_keys(s + static_cast<size_t>(i) * stride, nkeys, c.index_topk, ord,
                          ws_.selection[static_cast<size_t>(r + i)]);
        }
        r += m;
      }
    });
    return;
  }
  Workspace::Part& p0 = ws_.parts[0];
  for (int64_t r = 0; r < n; ++r) {
    const int64_t nkeys = rows[r].pos + 1;
    const size_t cap = static_cast<size_t>(rows[r].seq->capacity());
    float* s = opts.dense_attention ? nullptr : grow_keys(p0.iscore, static_cast<size_t>(nkeys), cap);
    int32_t* ord = opts.dense_attention ? nullptr : grow_keys(p0.order, static_cast<size_t>(nkeys), cap);
    ws_.select_all[static_cast<size_t>(r)] = keeps_all(r) ? 1 : 0;
    if (keeps_all(r)) continue;
    // Pieces of whole blocks of 16 keys (the cache's lanes), balanced at run
    // time: every key's score is the same floats in any piece.
    pool_.parallel_parts_balanced(nkeys, 16, [&](int part, int64_t t0, int64_t t1) {
      score(r, t0, t1, s, ws_.parts[static_cast<size_t>(part)]);
    });
    select_top_keys(s, nkeys, c.index_topk, ord, ws_.selection[static_cast<size_t>(r)]);
  }
}

}  // namespace strata
