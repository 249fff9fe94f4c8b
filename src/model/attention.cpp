// MLA attention with the DSA lightning indexer.
//
// Keys are cached compressed: per position the normalised kv latent and the
// roped shared key (kv_lora_rank + qk_rope_head_dim values), plus the
// indexer key. Two equivalent forms attend over that cache: the absorbed form
// folds kv_b into the query and output (the decode form), the naive form
// expands k_nope/v per key (the prefill form).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/qgemm.h"
#include "model/forward.h"

namespace strata {

namespace {

template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// The keys row r attends to, in ascending order: all causal keys or the
// indexer's selection.
struct KeySet {
  const std::vector<int32_t>* sel;
  int32_t count_all;
  int64_t size() const { return sel ? static_cast<int64_t>(sel->size()) : count_all; }
  int32_t operator[](int64_t i) const { return sel ? (*sel)[static_cast<size_t>(i)] : static_cast<int32_t>(i); }
};

// q/k layernorm-free RMSNorm eps used by transformers for q_a/kv_a norms.
constexpr float kLatentNormEps = 1e-6f;
constexpr float kIndexerNormEps = 1e-6f;

}  // namespace

void ModelRunner::attention(int64_t L, std::span<const Row> rows, const ForwardOptions& opts) {
  const ModelConfig& c = m_.config;
  const AttentionWeights& aw = m_.weights.layers[static_cast<size_t>(L)].attn;
  const int64_t n = static_cast<int64_t>(rows.size()), D = c.hidden_size;
  const int64_t H = c.num_attention_heads, nope = c.qk_nope_head_dim, rd = c.qk_rope_head_dim;
  const int64_t qk = nope + rd, vd = c.v_head_dim, kvl = c.kv_lora_rank, hs = nope + vd;
  const float* xn = ws_.xn.data();

  float* rc = grow(ws_.rope_cos, static_cast<size_t>(n * rd / 2));
  float* rsn = grow(ws_.rope_sin, static_cast<size_t>(n * rd / 2));
  for (int64_t r = 0; r < n; ++r) rope_angles(rows[r].pos, c.rope_theta, rd, rc + r * rd / 2, rsn + r * rd / 2);

  float* q_lat = grow(ws_.q_lat, static_cast<size_t>(n * c.q_lora_rank));
  matmul(aw.q_a, xn, n, q_lat, &pool_);
  for (int64_t r = 0; r < n; ++r)
    rmsnorm(q_lat + r * c.q_lora_rank, aw.q_a_norm.data(), c.q_lora_rank, kLatentNormEps, q_lat + r * c.q_lora_rank);
  float* q = grow(ws_.q, static_cast<size_t>(n * H * qk));
  matmul(aw.q_b, q_lat, n, q, &pool_);
  float* kv = grow(ws_.kv, static_cast<size_t>(n * (kvl + rd)));
  matmul(aw.kv_a, xn, n, kv, &pool_);

  for (int64_t r = 0; r < n; ++r) {
    LayerCache& cache = rows[r].seq->layer(L);
    const int64_t p = rows[r].pos;
    const float* cs = rc + r * rd / 2;
    const float* sn = rsn + r * rd / 2;
    rmsnorm(kv + r * (kvl + rd), aw.kv_a_norm.data(), kvl, kLatentNormEps, cache.latent.data() + p * kvl);
    float* kr = cache.rope_key.data() + p * rd;
    std::memcpy(kr, kv + r * (kvl + rd) + kvl, rd * sizeof(float));
    rope_interleaved(kr, cs, sn, rd);
    for (int64_t h = 0; h < H; ++h) rope_interleaved(q + (r * H + h) * qk + nope, cs, sn, rd);
  }

  if (aw.has_indexer) {
    const IndexerWeights& iw = aw.indexer;
    const int64_t Hi = c.index_n_heads, Di = c.index_head_dim;
    float* iq = grow(ws_.idx_q, static_cast<size_t>(n * Hi * Di));
    float* ik = grow(ws_.idx_k, static_cast<size_t>(n * Di));
    float* iwt = grow(ws_.idx_w, static_cast<size_t>(n * Hi));
    matmul(iw.wq_b, q_lat, n, iq, &pool_);
    matmul(iw.wk, xn, n, ik, &pool_);
    matmul(iw.weights_proj, xn, n, iwt, &pool_);
    const float wscale = 1.0f / std::sqrt(static_cast<float>(Hi));
    for (int64_t r = 0; r < n; ++r) {
      const float* cs = rc + r * rd / 2;
      const float* sn = rsn + r * rd / 2;
      float* key = rows[r].seq->layer(L).index_key.data() + rows[r].pos * Di;
      layernorm(ik + r * Di, iw.k_norm_weight.data(), iw.k_norm_bias.data(), Di, kIndexerNormEps, key);
      rope_interleaved(key, cs, sn, rd);  // the indexer's rope dims come first
      for (int64_t h = 0; h < Hi; ++h) rope_interleaved(iq + (r * Hi + h) * Di, cs, sn, rd);
      for (int64_t h = 0; h < Hi; ++h) iwt[r * Hi + h] *= wscale;
    }
  }
  select_keys(L, rows, opts);

  const float scale = 1.0f / std::sqrt(static_cast<float>(qk));
  float* o = grow(ws_.o, static_cast<size_t>(n * H * vd));
  auto keys_of = [&](int64_t r) {
    return ws_.select_all[static_cast<size_t>(r)] ? KeySet{nullptr, rows[r].pos + 1}
                                                  : KeySet{&ws_.selection[static_cast<size_t>(r)], 0};
  };

  if (opts.form == AttentionForm::Absorbed) {
    // q_abs[r,h,:] = sum_d q_nope[r,h,d] * kv_b[h*hs + d, :]
    float* qabs = grow(ws_.qabs, static_cast<size_t>(n * H * kvl));
    float* olat = grow(ws_.olat, static_cast<size_t>(n * H * kvl));
    std::fill(qabs, qabs + n * H * kvl, 0.0f);
    pool_.parallel_for(H, [&](int64_t h0, int64_t h1) {
      thread_local std::vector<float> wrow;
      grow(wrow, static_cast<size_t>(kvl));
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t d = 0; d < nope; ++d) {
          aw.kv_b.row_f32(h * hs + d, wrow.data());
          for (int64_t r = 0; r < n; ++r) {
            const float a = q[(r * H + h) * qk + d];
            float* dst = qabs + (r * H + h) * kvl;
            for (int64_t i = 0; i < kvl; ++i) dst[i] += a * wrow[static_cast<size_t>(i)];
          }
        }
    });
    // Prefill (several rows): one task per row, and where the row attends
    // to every causal key, the scores of all its heads as two f32 GEMMs over
    // the cache (each key read once for 64 heads). gemm_f32 is dot16 of a
    // key row and a query row, exactly what dot_f32 gives below: the same
    // floats either way.
    const KernelTable& kt = kernel_table(active_kernel_path());
    const bool by_row = n >= std::max<int64_t>(4, static_cast<int64_t>(pool_.size()));
    if (by_row) {
      pool_.parallel_for(n, [&](int64_t b, int64_t e) {
        thread_local std::vector<float> sc, sr, qr;
        for (int64_t r = b; r < e; ++r) {
          const LayerCache& cache = rows[r].seq->layer(L);
          const KeySet ks = keys_of(r);
          const int64_t K = ks.size();
          float* s = grow(sc, static_cast<size_t>(H * K));
          if (!ks.sel) {
            float* s2 = grow(sr, static_cast<size_t>(H * K));
            float* qp = grow(qr, static_cast<size_t>(H * rd));
            for (int64_t h = 0; h < H; ++h)
              std::copy_n(q + (r * H + h) * qk + nope, rd, qp + h * rd);
            kt.gemm_f32(cache.latent.data(), K, kvl, qabs + r * H * kvl, H, s, K);
            kt.gemm_f32(cache.rope_key.data(), K, rd, qp, H, s2, K);
            for (int64_t i = 0; i < H * K; ++i) s[i] = (s[i] + s2[i]) * scale;
          } else {
            for (int64_t h = 0; h < H; ++h) {
              const float* qa = qabs + (r * H + h) * kvl;
              const float* qp = q + (r * H + h) * qk + nope;
              for (int64_t j = 0; j < K; ++j) {
                const int64_t t = ks[j];
                s[h * K + j] = (dot_f32(qa, cache.latent.data() + t * kvl, kvl) +
                                dot_f32(qp, cache.rope_key.data() + t * rd, rd)) *
                               scale;
              }
            }
          }
          for (int64_t h = 0; h < H; ++h) {
            float* sh = s + h * K;
            softmax(sh, K);
            float* ol = olat + (r * H + h) * kvl;
            std::fill(ol, ol + kvl, 0.0f);
            for (int64_t j = 0; j < K; ++j) {
              const float* lat = cache.latent.data() + ks[j] * kvl;
              for (int64_t i = 0; i < kvl; ++i) ol[i] += sh[j] * lat[i];
            }
          }
        }
      });
    }
    if (!by_row) pool_.parallel_for(n * H, [&](int64_t b, int64_t e) {
      thread_local std::vector<float> sc;
      for (int64_t rh = b; rh < e; ++rh) {
        const int64_t r = rh / H;
        const LayerCache& cache = rows[r].seq->layer(L);
        const KeySet ks = keys_of(r);
        float* s = grow(sc, static_cast<size_t>(ks.size()));
        const float* qa = qabs + rh * kvl;
        const float* qp = q + rh * qk + nope;
        for (int64_t j = 0; j < ks.size(); ++j) {
          const int64_t t = ks[j];
          s[j] = (dot_f32(qa, cache.latent.data() + t * kvl, kvl) + dot_f32(qp, cache.rope_key.data() + t * rd, rd)) *
                 scale;
        }
        softmax(s, ks.size());
        float* ol = olat + rh * kvl;
        std::fill(ol, ol + kvl, 0.0f);
        for (int64_t j = 0; j < ks.size(); ++j) {
          const float* lat = cache.latent.data() + ks[j] * kvl;
          for (int64_t i = 0; i < kvl; ++i) ol[i] += s[j] * lat[i];
        }
      }
    });
    // o[r,h,d] = dot16(W_UV row, olat[r,h]): per head, its W_UV rows as f32
    // against the rows' latents as one gemm_f32 (the same floats as dot_f32).
    pool_.parallel_for(H, [&](int64_t h0, int64_t h1) {
      thread_local std::vector<float> wbuf, xbuf;
      float* wv = grow(wbuf, static_cast<size_t>(vd * kvl));
      float* xh = grow(xbuf, static_cast<size_t>(n * kvl));
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t d = 0; d < vd; ++d) aw.kv_b.row_f32(h * hs + nope + d, wv + d * kvl);
        for (int64_t r = 0; r < n; ++r) std::copy_n(olat + (r * H + h) * kvl, kvl, xh + r * kvl);
        kt.gemm_f32(wv, vd, kvl, xh, n, o + h * vd, H * vd);
      }
    });
  } else {
    // Naive form, per sequence in the batch: expand every key up to the
    // sequence's last position once, then attend.
    std::vector<Session*> seqs;
    for (const Row& r : rows)
      if (std::find(seqs.begin(), seqs.end(), r.seq) == seqs.end()) seqs.push_back(r.seq);
    for (Session* sq : seqs) {
      int64_t keys = 0;
      for (const Row& r : rows)
        if (r.seq == sq) keys = std::max<int64_t>(keys, r.pos + 1);
      const LayerCache& cache = sq->layer(L);
      float* ex = grow(ws_.expanded, static_cast<size_t>(keys * H * hs));
      matmul(aw.kv_b, cache.latent.data(), keys, ex, &pool_);
      pool_.parallel_for(n * H, [&](int64_t b, int64_t e) {
        thread_local std::vector<float> sc;
        for (int64_t rh = b; rh < e; ++rh) {
          const int64_t r = rh / H, h = rh % H;
          if (rows[r].seq != sq) continue;
          const KeySet ks = keys_of(r);
          float* s = grow(sc, static_cast<size_t>(ks.size()));
          const float* qn = q + rh * qk;
          for (int64_t j = 0; j < ks.size(); ++j) {
            const int64_t t = ks[j];
            s[j] = (dot_f32(qn, ex + (t * H + h) * hs, nope) + dot_f32(qn + nope, cache.rope_key.data() + t * rd, rd)) *
                   scale;
          }
          softmax(s, ks.size());
          float* dst = o + rh * vd;
          std::fill(dst, dst + vd, 0.0f);
          for (int64_t j = 0; j < ks.size(); ++j) {
            const float* v = ex + (ks[j] * H + h) * hs + nope;
            for (int64_t d = 0; d < vd; ++d) dst[d] += s[j] * v[d];
          }
        }
      });
    }
  }
  float* out = grow(ws_.attn_out, static_cast<size_t>(n * D));
  matmul(aw.o, o, n, out, &pool_);
}

void ModelRunner::select_keys(int64_t L, std::span<const Row> rows, const ForwardOptions& opts) {
  const ModelConfig& c = m_.config;
  const int64_t n = static_cast<int64_t>(rows.size());
  if (ws_.selection.size() < static_cast<size_t>(n)) ws_.selection.resize(static_cast<size_t>(n));
  grow(ws_.select_all, static_cast<size_t>(n));
  // Shared layers (GLM-5.2 IndexShare) reuse the selection of the most recent
  // full layer, which is still in the workspace.
  if (!c.indexer_full(L)) return;
  const int64_t Hi = c.index_n_heads, Di = c.index_head_dim;
  const float qscale = 1.0f / std::sqrt(static_cast<float>(Di));
  const float* iq = ws_.idx_q.data();
  const float* iwt = ws_.idx_w.data();
  pool_.parallel_for(n, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> score;
    thread_local std::vector<int32_t> order;
    for (int64_t r = b; r < e; ++r) {
      const int64_t nkeys = rows[r].pos + 1;
      if (opts.dense_attention || nkeys <= c.index_topk) {
        ws_.select_all[static_cast<size_t>(r)] = 1;
        continue;
      }
      ws_.select_all[static_cast<size_t>(r)] = 0;
      const float* keys = rows[r].seq->layer(L).index_key.data();
      float* s = grow(score, static_cast<size_t>(nkeys));
      int32_t* ord = grow(order, static_cast<size_t>(nkeys));
      for (int64_t t = 0; t < nkeys; ++t) {
        float acc = 0.0f;
        for (int64_t h = 0; h < Hi; ++h) {
          const float d = dot_f32(iq + (r * Hi + h) * Di, keys + t * Di, Di) * qscale;
          acc += iwt[r * Hi + h] * std::max(d, 0.0f);
        }
        s[t] = acc;
        ord[t] = static_cast<int32_t>(t);
      }
      // Highest scores first, lower position on exact ties (deterministic).
      std::nth_element(ord, ord + c.index_topk - 1, ord + nkeys, [&](int32_t a, int32_t b2) {
        return s[a] != s[b2] ? s[a] > s[b2] : a < b2;
      });
      auto& sel = ws_.selection[static_cast<size_t>(r)];
      sel.assign(ord, ord + c.index_topk);
      std::sort(sel.begin(), sel.end());
    }
  });
}

}  // namespace strata
