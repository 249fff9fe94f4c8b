// Grouped-query attention (AttentionKind::Gqa: qwen3_moe, glm4_moe): q / k /
// v projections (+ bias when attention_bias), RMSNorm over head_dim on every
// q and k head when qk_norm, half-split RoPE over the first rotary_dim dims of
// each head (the rest pass through: glm4_moe's partial rotary), then softmax
// attention of each query head over the causal keys of its kv head (heads /
// kv_heads query heads share one).
//
// The cache holds per position the normed, roped keys and the values of
// every kv head (LayerCache::k, v; with KvType::F16 as halves, k16, v16). A
// row's keys are written before any row attends, so a batch may attend to
// positions it computes itself. A pool job is one (row, kv head), or a slice
// of the query heads sharing that kv head when there are fewer such jobs
// than twice the threads: the head's keys and values are read once for all
// the job's query heads (KernelTable::gemm_f32_rows for the scores, each
// exactly dot_f32's; wsum_f32 for the sums, each an fma chain in key order).
// Keys and values are read kGqaChunk positions at a time (the sums continuing
// their chains across chunks); an f16 session's halves by the kernels for
// halves (gemm_f16_rows, wsum_f16: their f32 values, exact), with no f32
// copy (the scores grow with the context: [heads of the job, keys] per pool
// part). Each (row, query head) is one
// fixed-order score -> softmax -> sum, so a row's output is the same whatever
// the batch, the thread count or the slicing.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/numeric.h"
#include "kernels/ops.h"
#include "kernels/qgemm.h"
#include "model/attend.h"
#include "model/forward.h"
#include "model/workspace.h"

namespace strata {

void ModelRunner::attention_gqa(int64_t L, std::span<const Row> rows) {
  if (rows.empty()) return;
  const ModelConfig& c = m_.config;
  const AttentionWeights& aw = m_.weights.layers[static_cast<size_t>(L)].attn;
  const int64_t n = static_cast<int64_t>(rows.size()), D = c.hidden_size;
  const int64_t H = c.num_attention_heads, KH = c.num_key_value_heads, hd = c.head_dim;
  const int64_t kvw = KH * hd, group = H / KH, rd = c.rotary_dim, half = rd / 2;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* xn = ws_.xn.data();

  float* rc = grow(ws_.rope_cos, static_cast<size_t>(n * half));
  float* rsn = grow(ws_.rope_sin, static_cast<size_t>(n * half));
  for (int64_t r = 0; r < n; ++r) rope_angles(rows[r].pos, c.rope_theta, rd, rc + r * half, rsn + r * half);

  float* q = grow(ws_.q, static_cast<size_t>(n * H * hd));
  float* kv = grow(ws_.kv, static_cast<size_t>(2 * n * kvw));
  float* k = kv;
  float* v = kv + n * kvw;
  // q, k and v as one pool job (the same floats as three matmuls).
  const MatmulTask qkv[] = {{&aw.q, xn, n, q}, {&aw.k, xn, n, k}, {&aw.v, xn, n, v}};
  matmul_batch(compute_, qkv, ws_.mmb);
  if (c.attention_bias) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < H * hd; ++i) q[r * H * hd + i] += aw.q_bias[static_cast<size_t>(i)];
      for (int64_t i = 0; i < kvw; ++i) {
        k[r * kvw + i] += aw.k_bias[static_cast<size_t>(i)];
        v[r * kvw + i] += aw.v_bias[static_cast<size_t>(i)];
      }
    }
  }

  for (int64_t r = 0; r < n; ++r) {
    LayerCache& cache = rows[r].seq->layer(L);
    const bool f16 = rows[r].seq->kv_type() == KvType::F16;
    const int64_t p = rows[r].pos;
    const float* cs = rc + r * half;
    const float* sn = rsn + r * half;
    for (int64_t h = 0; h < H; ++h) {
      float* qh = q + (r * H + h) * hd;
      if (c.qk_norm) rmsnorm(qh, aw.q_norm.data(), hd, c.rms_norm_eps, qh);
      rope_half(qh, cs, sn, rd);
    }
    for (int64_t h = 0; h < KH; ++h) {
      // f32: normed and roped in the cache; f16: in the batch's k row, then
      // stored rounded (the same floats rounded).
      float* kr = k + r * kvw + h * hd;
      float* kh = f16 ? kr : cache.k.data() + p * kvw + h * hd;
      if (c.qk_norm)
        rmsnorm(kr, aw.k_norm.data(), hd, c.rms_norm_eps, kh);
      else if (!f16)
        std::memcpy(kh, kr, static_cast<size_t>(hd) * sizeof(float));
      rope_half(kh, cs, sn, rd);
    }
    if (f16) {
      uint16_t* dk = cache.k16.data() + p * kvw;
      uint16_t* dv = cache.v16.data() + p * kvw;
      for (int64_t i = 0; i < kvw; ++i) {
        dk[i] = f32_to_f16_sat(k[r * kvw + i]);
        dv[i] = f32_to_f16_sat(v[r * kvw + i]);
      }
    } else {
      std::memcpy(cache.v.data() + p * kvw, v + r * kvw, static_cast<size_t>(kvw) * sizeof(float));
    }
  }

  // Jobs of (row, kv head, a slice of the heads sharing it): whole groups
  // unless that leaves fewer than two jobs per thread (a decode row).
  float* o = grow(ws_.o, static_cast<size_t>(n * H * hd));
  const KernelTable& kt = compute_.kernels();
  const int64_t want = (2 * static_cast<int64_t>(pool_.size()) + n * KH - 1) / (n * KH);
  const int64_t per = (group + std::clamp<int64_t>(want, 1, group) - 1) / std::clamp<int64_t>(want, 1, group);
  const int64_t slices = (group + per - 1) / per;
  pool_.parallel_parts(n * KH * slices, [&](int part, int64_t b, int64_t e) {
    Workspace::Part& ps = ws_.parts[static_cast<size_t>(part)];
    for (int64_t job = b; job < e; ++job) {
      const int64_t r = job / (KH * slices), kh = job / slices % KH, g0 = job % slices * per;
      const int64_t gn = std::min(per, group - g0), h0 = kh * group + g0;
      const Session& sq = *rows[r].seq;
      const LayerCache& cache = sq.layer(L);
      const int64_t T = rows[r].pos + 1;
      const float* qg = q + (r * H + h0) * hd;  // the slice's heads are consecutive
      float* og = o + (r * H + h0) * hd;
      float* s = grow_keys(ps.scores, static_cast<size_t>(gn * T), static_cast<size_t>(per * sq.capacity()));
      // Positions [t0, ...) of kv head kh's keys or values, floats or halves
      // (read by the kernels as their f32 values: the same floats).
      const bool half = sq.kv_type() == KvType::F16;
      const auto at = [&](const AlignedFloats& f32, const AlignedHalves& f16, int64_t t0) {
        return half ? AnyRows::halves(HRows{f16.data() + t0 * kvw + kh * hd, nullptr, kvw})
                    : AnyRows::floats(FRows{f32.data() + t0 * kvw + kh * hd, nullptr, kvw});
      };
      // By chunks as the sums below (each score is one dot16 whatever the chunk).
      for (int64_t t0 = 0; t0 < T; t0 += kGqaChunk)
        score_rows(kt, at(cache.k, cache.k16, t0), std::min(kGqaChunk, T - t0), hd, qg, gn, s + t0, T);
      for (int64_t i = 0; i < gn * T; ++i) s[i] *= scale;
      for (int64_t g = 0; g < gn; ++g) kt.softmax(s + g * T, T);
      // wsum passes over its keys once per tile of heads and columns: by
      // chunks, a chunk's values stay in L2 for all those passes, each
      // output's chain continuing across the chunks.
      for (int64_t t0 = 0; t0 < T; t0 += kGqaChunk)
        sum_rows(kt, s + t0, T, gn, at(cache.v, cache.v16, t0), std::min(kGqaChunk, T - t0), 0, hd, og, hd, t0 > 0);
    }
  });
  float* out = grow(ws_.attn_out, static_cast<size_t>(n * D));
  mm(aw.o, o, n, out);
}

}  // namespace strata
