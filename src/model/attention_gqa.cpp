// Grouped-query attention (AttentionKind::Gqa: qwen3_moe, glm4_moe): q / k /
// v projections (+ bias when attention_bias), RMSNorm over head_dim on every
// q and k head when qk_norm, half-split RoPE over the first rotary_dim dims of
// each head (the rest pass through: glm4_moe's partial rotary), then softmax
// attention of each query head over the causal keys of its kv head (heads /
// kv_heads query heads share one).
//
// The cache holds per position the normed, roped keys and the values of
// every kv head (LayerCache::k, v). A row's keys are written before any row
// attends, so a batch may attend to positions it computes itself; each
// (row, head) is one fixed-order score -> softmax -> sum, so a row's output
// is the same whatever the batch or thread count.
#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "model/attend.h"
#include "model/forward.h"
#include "model/workspace.h"

namespace strata {

void ModelRunner::attention_gqa(int64_t L, std::span<const Row> rows) {
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
    const int64_t p = rows[r].pos;
    const float* cs = rc + r * half;
    const float* sn = rsn + r * half;
    for (int64_t h = 0; h < H; ++h) {
      float* qh = q + (r * H + h) * hd;
      if (c.qk_norm) rmsnorm(qh, aw.q_norm.data(), hd, c.rms_norm_eps, qh);
      rope_half(qh, cs, sn, rd);
    }
    for (int64_t h = 0; h < KH; ++h) {
      float* kh = cache.k.data() + p * kvw + h * hd;
      if (c.qk_norm)
        rmsnorm(k + r * kvw + h * hd, aw.k_norm.data(), hd, c.rms_norm_eps, kh);
      else
        std::memcpy(kh, k + r * kvw + h * hd, static_cast<size_t>(hd) * sizeof(float));
      rope_half(kh, cs, sn, rd);
    }
    std::memcpy(cache.v.data() + p * kvw, v + r * kvw, static_cast<size_t>(kvw) * sizeof(float));
  }

  float* o = grow(ws_.o, static_cast<size_t>(n * H * hd));
  pool_.parallel_parts(n * H, [&](int part, int64_t b, int64_t e) {
    Workspace::Part& ps = ws_.parts[static_cast<size_t>(part)];
    for (int64_t rh = b; rh < e; ++rh) {
      const int64_t r = rh / H, h = rh % H, kh = h / group;
      const Session& sq = *rows[r].seq;
      const LayerCache& cache = sq.layer(L);
      const KeySet ks{nullptr, rows[r].pos + 1};
      float* s = grow_keys(ps.scores, static_cast<size_t>(ks.size()), static_cast<size_t>(sq.capacity()));
      const float* qh = q + rh * hd;
      const KeyRows keys{cache.k.data() + kh * hd, kvw, hd};
      for (int64_t t = 0; t < ks.size(); ++t) s[t] = compute_.dot(qh, keys[t], hd) * scale;
      softmax_sum(compute_, s, ks, KeyRows{cache.v.data() + kh * hd, kvw, hd}, o + rh * hd);
    }
  });
  float* out = grow(ws_.attn_out, static_cast<size_t>(n * D));
  mm(aw.o, o, n, out);
}

}  // namespace strata
