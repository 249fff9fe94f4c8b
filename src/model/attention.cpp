// MLA attention: the projections, RoPE and the key cache writes, then one of
// two equivalent forms over the cache.
//
// Keys are cached compressed: per position the normalised kv latent and the
// roped shared key (kv_lora_rank + qk_rope_head_dim values), plus the DSA
// indexer key (indexer.cpp) where the family has one (glm_moe_dsa). The absorbed form (attention_absorbed.cpp) folds
// kv_b into the query and output (the decode form); the naive form
// (attention_naive.cpp) expands k_nope / v per key (the prefill form).
#include <cmath>
#include <cstring>

#include "core/clock.h"
#include "core/numeric.h"
#include "kernels/ops.h"
#include "model/forward.h"
#include "model/workspace.h"

namespace strata {

namespace {
// The RMSNorm eps transformers uses for the q_a / kv_a latent norms.
constexpr float kLatentNormEps = 1e-6f;
}  // namespace

void ModelRunner::rope_tables(std::span<const Row> rows) {
  const ModelConfig& c = m_.config;
  const int64_t n = static_cast<int64_t>(rows.size()), rd = c.qk_rope_head_dim;
  float* rc = grow(ws_.rope_cos, static_cast<size_t>(n * rd / 2));
  float* rsn = grow(ws_.rope_sin, static_cast<size_t>(n * rd / 2));
  for (int64_t r = 0; r < n; ++r) {
    if (c.rope_yarn)
      rope_angles_yarn(rows[r].pos, c.rope_theta, rd, c.yarn_factor, c.yarn_low, c.yarn_high, c.rope_attention_factor,
                       rc + r * rd / 2, rsn + r * rd / 2);
    else
      rope_angles(rows[r].pos, c.rope_theta, rd, rc + r * rd / 2, rsn + r * rd / 2);
  }
}

void ModelRunner::write_latent_key(int64_t L, const Row& row, float* kv, const float* cs, const float* sn) {
  const ModelConfig& c = m_.config;
  const AttentionWeights& aw = m_.weights.layers[static_cast<size_t>(L)].attn;
  const int64_t rd = c.qk_rope_head_dim, kvl = c.kv_lora_rank, p = row.pos;
  LayerCache& cache = row.seq->layer(L);
  if (row.seq->kv_type() == KvType::F16) {
    // The same floats, computed in the row's own kv scratch, then stored as
    // halves.
    rmsnorm(kv, aw.kv_a_norm.data(), kvl, kLatentNormEps, kv);
    rope_interleaved(kv + kvl, cs, sn, rd);
    uint16_t* dl = cache.latent16.data() + p * kvl;
    uint16_t* dr = cache.rope_key16.data() + p * rd;
    for (int64_t i = 0; i < kvl; ++i) dl[i] = f32_to_f16_sat(kv[i]);
    for (int64_t i = 0; i < rd; ++i) dr[i] = f32_to_f16_sat(kv[kvl + i]);
  } else {
    rmsnorm(kv, aw.kv_a_norm.data(), kvl, kLatentNormEps, cache.latent.data() + p * kvl);
    float* kr = cache.rope_key.data() + p * rd;
    std::memcpy(kr, kv + kvl, rd * sizeof(float));
    rope_interleaved(kr, cs, sn, rd);
  }
}

void ModelRunner::write_keys(int64_t L, std::span<const Row> rows, const float* h) {
  const ModelConfig& c = m_.config;
  const LayerWeights& lw = m_.weights.layers[static_cast<size_t>(L)];
  const AttentionWeights& aw = lw.attn;
  const int64_t n = static_cast<int64_t>(rows.size()), D = c.hidden_size;
  const int64_t rd = c.qk_rope_head_dim, kvl = c.kv_lora_rank;
  if (n == 0) return;
  ScopedTimer t{stats_.attention_ns};
  set_phase(Phase::Attention, n);
  float* xn = grow(ws_.xn, static_cast<size_t>(n * D));
  split(n, D, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) rmsnorm(h + r * D, lw.input_norm.data(), D, c.rms_norm_eps, xn + r * D);
  });
  rope_tables(rows);
  const float* rc = ws_.rope_cos.data();
  const float* rsn = ws_.rope_sin.data();
  float* kv = grow(ws_.kv, static_cast<size_t>(n * (kvl + rd)));
  mm(aw.kv_a, xn, n, kv);
  split(n, kvl + rd, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) write_latent_key(L, rows[r], kv + r * (kvl + rd), rc + r * rd / 2, rsn + r * rd / 2);
  });
  if (aw.has_indexer) {
    ScopedTimer ti{stats_.indexer_ns};
    indexer_keys(L, rows);
  }
  if (indexer_observer_ && aw.has_indexer) indexer_observer_->keys_written(L, rows);
}

void ModelRunner::attention(int64_t L, std::span<const Row> rows, const ForwardOptions& opts) {
  const ModelConfig& c = m_.config;
  if (c.attention == AttentionKind::Gqa) return attention_gqa(L, rows);
  const AttentionWeights& aw = m_.weights.layers[static_cast<size_t>(L)].attn;
  const int64_t n = static_cast<int64_t>(rows.size()), D = c.hidden_size;
  const int64_t H = c.num_attention_heads, nope = c.qk_nope_head_dim, rd = c.qk_rope_head_dim;
  const int64_t qk = nope + rd, kvl = c.kv_lora_rank;
  const float* xn = ws_.xn.data();

  rope_tables(rows);
  const float* rc = ws_.rope_cos.data();
  const float* rsn = ws_.rope_sin.data();

  float* q_lat = grow(ws_.q_lat, static_cast<size_t>(n * c.q_lora_rank));
  float* kv = grow(ws_.kv, static_cast<size_t>(n * (kvl + rd)));
  // q_a and kv_a read the same rows: one pool job, one quantization of xn.
  const MatmulTask down[] = {{&aw.q_a, xn, n, q_lat}, {&aw.kv_a, xn, n, kv}};
  matmul_batch(compute_, down, ws_.mmb);
  split(n, c.q_lora_rank, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      rmsnorm(q_lat + r * c.q_lora_rank, aw.q_a_norm.data(), c.q_lora_rank, kLatentNormEps, q_lat + r * c.q_lora_rank);
  });
  float* q = grow(ws_.q, static_cast<size_t>(n * H * qk));
  mm(aw.q_b, q_lat, n, q);

  // Every row writes its own (sequence, position) of the cache.
  split(n, kvl + H * rd, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* cs = rc + r * rd / 2;
      const float* sn = rsn + r * rd / 2;
      write_latent_key(L, rows[r], kv + r * (kvl + rd), cs, sn);
      for (int64_t h = 0; h < H; ++h) rope_interleaved(q + (r * H + h) * qk + nope, cs, sn, rd);
    }
  });

  // The indexer's own time (part of attention's): its projections and key
  // writes, then the scores and the top-k selection.
  if (aw.has_indexer) {
    ScopedTimer t{stats_.indexer_ns};
    indexer(L, rows);
  }
  if (indexer_observer_ && aw.has_indexer) indexer_observer_->keys_written(L, rows);
  {
    ScopedTimer t{stats_.indexer_ns};
    select_keys(L, rows, opts);
  }
  if (indexer_observer_ && c.indexer_full(L))
    indexer_observer_->selected(L, rows, ws_.selection, ws_.select_all.data());

  grow(ws_.o, static_cast<size_t>(n * H * c.v_head_dim));
  if (opts.form == AttentionForm::Absorbed)
    attend_absorbed(L, rows);
  else
    attend_naive(L, rows);
  float* out = grow(ws_.attn_out, static_cast<size_t>(n * D));
  mm(aw.o, ws_.o.data(), n, out);
}

}  // namespace strata
