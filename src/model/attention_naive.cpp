// The naive form of MLA (the prefill form): every key a sequence's rows can
// see is expanded once from the cached latent (k_nope and v per head, one
// matmul by kv_b), then ordinary attention per (row, head). Agrees with the
// absorbed form within 1e-4 (AbsorbedDecodeEqualsNaivePrefill).
#include <algorithm>
#include <cmath>

#include "model/attend.h"
#include "model/forward.h"
#include "model/workspace.h"

namespace strata {

void ModelRunner::attend_naive(int64_t L, std::span<const Row> rows) {
  const ModelConfig& c = m_.config;
  const AttentionWeights& aw = m_.weights.layers[static_cast<size_t>(L)].attn;
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t H = c.num_attention_heads, nope = c.qk_nope_head_dim, rd = c.qk_rope_head_dim;
  const int64_t qk = nope + rd, vd = c.v_head_dim, hs = nope + vd;
  // softmax_scale_mult: YaRN's mscale^2 (deepseek_v3); exactly 1 elsewhere.
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk)) * c.softmax_scale_mult;
  const float* q = ws_.q.data();
  float* o = ws_.o.data();

  std::vector<Session*>& seqs = ws_.sessions;
  seqs.clear();
  for (const Row& r : rows)
    if (std::find(seqs.begin(), seqs.end(), r.seq) == seqs.end()) seqs.push_back(r.seq);
  for (Session* sq : seqs) {
    int64_t keys = 0;
    for (const Row& r : rows)
      if (r.seq == sq) keys = std::max<int64_t>(keys, r.pos + 1);
    const LayerCache& cache = sq->layer(L);
    float* ex = grow(ws_.expanded, static_cast<size_t>(keys * H * hs));
    const float* latent = cache.latent.data();
    const float* rope_key = cache.rope_key.data();
    if (sq->kv_type() == KvType::F16) {  // the f32 values of the stored halves
      const int64_t kvl = c.kv_lora_rank;
      float* l32 = grow(ws_.lat32, static_cast<size_t>(keys * kvl));
      float* r32 = grow(ws_.rope32, static_cast<size_t>(keys * rd));
      const KernelTable& kt = compute_.kernels();
      pool_.parallel_parts(keys, [&](int, int64_t b, int64_t e) {
        kt.f16_to_f32(cache.latent16.data() + b * kvl, l32 + b * kvl, (e - b) * kvl);
        kt.f16_to_f32(cache.rope_key16.data() + b * rd, r32 + b * rd, (e - b) * rd);
      });
      latent = l32;
      rope_key = r32;
    }
    mm(aw.kv_b, latent, keys, ex);
    const KeyRows rope{rope_key, rd, rd};
    pool_.parallel_parts(n * H, [&](int part, int64_t b, int64_t e) {
      Workspace::Part& ps = ws_.parts[static_cast<size_t>(part)];
      for (int64_t rh = b; rh < e; ++rh) {
        const int64_t r = rh / H, h = rh % H;
        if (rows[r].seq != sq) continue;
        const KeySet ks = keys_of(ws_, rows, r);
        float* s = grow_keys(ps.scores, static_cast<size_t>(ks.size()), static_cast<size_t>(sq->capacity()));
        const float* qn = q + rh * qk;
        score_keys(compute_, ks, qn, KeyRows{ex + h * hs, H * hs, nope}, qn + nope, rope, scale, s);
        softmax_sum(compute_, s, ks, KeyRows{ex + h * hs + nope, H * hs, vd}, o + rh * vd);
      }
    });
  }
}

}  // namespace strata
