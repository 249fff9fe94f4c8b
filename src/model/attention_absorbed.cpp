// The absorbed form of MLA (the decode form): kv_b's key half folds into the
// query (q_abs = q_nope . W_UK per head), scores are taken against the cached
// latent directly, and the value half (W_UV) is applied to the weighted sum
// of latents. No key is ever expanded.
#include <algorithm>
#include <cmath>

#include "kernels/matmul_pool.h"
#include "model/attend.h"
#include "model/forward.h"
#include "model/workspace.h"

namespace strata {

void ModelRunner::attend_absorbed(int64_t L, std::span<const Row> rows) {
  const ModelConfig& c = m_.config;
  const AttentionWeights& aw = m_.weights.layers[static_cast<size_t>(L)].attn;
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t H = c.num_attention_heads, nope = c.qk_nope_head_dim, rd = c.qk_rope_head_dim;
  const int64_t qk = nope + rd, vd = c.v_head_dim, kvl = c.kv_lora_rank, hs = nope + vd;
  // softmax_scale_mult: YaRN's mscale^2 (deepseek_v3); exactly 1 elsewhere.
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk)) * c.softmax_scale_mult;
  const float* q = ws_.q.data();
  float* o = ws_.o.data();
  const KernelTable& kt = compute_.kernels();
  // A step of under kMatmulParallelMadds multiply-adds runs on the caller, as
  // a small matmul does (a small model's decode row: waking the pool costs
  // more than the second core saves). Any split gives the same floats, so
  // the pieces are balanced between the threads at run time (as matmul rows
  // are; per-part scratch is the running thread's). grain: keys in 16s.
  const auto parts = [&](int64_t madds, int64_t count, const auto& fn, int64_t grain = 1) {
    if (matmul_on_pool(1, madds, 1))
      pool_.parallel_parts_balanced(count, grain, fn);
    else
      fn(0, 0, count);
  };

  // q_abs[r,h,:] = sum_d q_nope[r,h,d] * kv_b[h*hs + d, :], one fma per d in
  // d order. int8/int4 kv_b: deq_axpy, the rows dequantized in registers
  // (the same floats as expanding them with row_f32); other formats: rows
  // expanded to f32 and the same fma chain written out (the fma the
  // -march=native build always contracted `+= a * w` to; a build without FMA
  // instructions now computes it too).
  //
  // A long batch (a prefill chunk) runs in blocks of kAbsorbedBlockRows
  // rows, each through all three steps below: q_abs and the latent outputs
  // of a block ([rows, H, kv_lora_rank] each, 8 MiB at 64 rows on GLM-5)
  // stay in the last-level cache between the steps, and the scratch does
  // not grow with the chunk. Every row's floats are the same in any block.
  const bool qkvb = aw.kv_b.format == WeightFormat::INT8 || aw.kv_b.format == WeightFormat::INT4;
  // W_UV in integers (matmul's int8 activations, as every other integer
  // weight) where matmul would multiply kv_b in integers; the F32 activation
  // mode keeps deq_gemm's exact W8A32 floats.
  const bool uv_int = qkvb && has_int_kernel(compute_, aw.kv_b);
  const int64_t block = std::min(n, kAbsorbedBlockRows);
  // A scores buffer: all heads of the most keys a row can ever attend (DSA:
  // index_topk; else its session's capacity), and at least one
  // capacity-long row: one size for both paths, so a context that grows by a
  // key per step, or a step that takes the other path, never reallocates it.
  const auto score_room = [&](const Row& row, int64_t keys) {
    const int64_t cap = row.seq->capacity();
    const int64_t most = std::max(keys, ws_.most_keys > 0 ? std::min(cap, ws_.most_keys) : cap);
    return static_cast<size_t>(std::max(H * most, cap));
  };
  // An f16 session's halves are read by the kernels for halves
  // (gemm_f16_rows, wsum_f16: their f32 values, the same floats), with no
  // scratch. Where those kernels convert into a buffer rather than in
  // registers (the paths without AVX-512), a session with at least
  // kWholeRows rows here (a prefill chunk) has every key up to its last
  // row's position converted to f32 once for the call instead, so that its
  // rows do not each convert the keys they attend (2048 per row with DSA at
  // long context); the rows then pick from it as from an f32 cache. On
  // AVX-512 reading the halves measured faster than that conversion
  // (docs/kernels.md). The buffers are kept only while a call uses them: a
  // call without such a session frees them.
  constexpr int64_t kWholeRows = 32;
  ws_.f16_seqs.clear();
  {
    std::vector<int64_t>& counts = ws_.f16_rows;
    std::vector<int64_t>& keys = ws_.f16_keys;
    counts.clear();
    keys.clear();
    for (int64_t r = 0; r < n; ++r) {
      const Session* sq = rows[r].seq;
      if (sq->kv_type() != KvType::F16) continue;
      const auto it = std::find(ws_.f16_seqs.begin(), ws_.f16_seqs.end(), sq);
      const size_t i = static_cast<size_t>(it - ws_.f16_seqs.begin());
      if (it == ws_.f16_seqs.end()) {
        ws_.f16_seqs.push_back(sq);
        counts.push_back(0);
        keys.push_back(0);
      }
      ++counts[i];
      keys[i] = std::max<int64_t>(keys[i], rows[r].pos + 1);
    }
    size_t kept = 0;
    for (size_t i = 0; i < ws_.f16_seqs.size(); ++i) {
      if (counts[i] < kWholeRows || kt.halves_in_registers) continue;
      const Session* sq = ws_.f16_seqs[i];
      if (ws_.f16_lat.size() <= kept) {
        ws_.f16_lat.resize(kept + 1);
        ws_.f16_rope.resize(kept + 1);
      }
      float* l32 = grow(ws_.f16_lat[kept], static_cast<size_t>(keys[i] * kvl));
      float* r32 = grow(ws_.f16_rope[kept], static_cast<size_t>(keys[i] * rd));
      const LayerCache& cache = sq->layer(L);
      parts(keys[i] * (kvl + rd) / 8, keys[i], [&](int, int64_t b, int64_t e) {  // a conversion ~ 1/8 multiply-add
        kt.f16_to_f32(cache.latent16.data() + b * kvl, l32 + b * kvl, (e - b) * kvl);
        kt.f16_to_f32(cache.rope_key16.data() + b * rd, r32 + b * rd, (e - b) * rd);
      }, 16);
      ws_.f16_seqs[kept++] = sq;
    }
    ws_.f16_seqs.resize(kept);
    ws_.f16_lat.resize(kept);  // frees the buffers of sessions no longer converted whole
    ws_.f16_rope.resize(kept);
  }
  // Where a session's keys were converted for the whole call: its index, or -1.
  const auto whole_of = [&](const Session* sq) -> int64_t {
    const auto it = std::find(ws_.f16_seqs.begin(), ws_.f16_seqs.end(), sq);
    return it == ws_.f16_seqs.end() ? -1 : it - ws_.f16_seqs.begin();
  };
  // Every part's scratch is sized here, on the caller, for anything a piece
  // of this call may ask of it: the pieces are balanced at run time, so which
  // thread -- and so which part's buffers -- runs a piece changes from call
  // to call, and a buffer grown only inside the pieces could first grow many
  // steps later (an allocation in a warmed-up decode step: seen under load in
  // Allocation.DecodeStepWithSpeculationAllocatesNothing).
  size_t room = 0;
  for (int64_t r = 0; r < n; ++r) room = std::max(room, score_room(rows[r], keys_of(ws_, rows, r).size()));
  for (Workspace::Part& ps : ws_.parts) {
    grow(ps.scores, room);
    grow(ps.scores2, room);
    grow(ps.qrope, static_cast<size_t>(H * rd));
    grow(ps.xh, static_cast<size_t>(block * kvl));
    if (uv_int) ps.mm.reserve(block, kvl);
    if (!qkvb) {
      grow(ps.wrow, static_cast<size_t>(kvl));
      grow(ps.wv, static_cast<size_t>(vd * kvl));
    }
  }
  float* qabs = grow(ws_.qabs, static_cast<size_t>(block * H * kvl));
  float* olat = grow(ws_.olat, static_cast<size_t>(block * H * kvl));
  for (int64_t r0 = 0; r0 < n; r0 += block) {
    const int64_t nb = std::min(block, n - r0);
    const float* qb = q + r0 * H * qk;  // the block's queries
    if (qkvb) {
      parts(nb * H * nope * kvl, H, [&](int, int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h)
          kt.deq_axpy(qweight_rows(aw.kv_b, h * hs, nope), qb + h * qk, H * qk, nb, qabs + h * kvl, H * kvl);
      });
    } else {
      std::fill(qabs, qabs + nb * H * kvl, 0.0f);
      parts(nb * H * nope * kvl, H, [&](int part, int64_t h0, int64_t h1) {
        float* wrow = grow(ws_.parts[static_cast<size_t>(part)].wrow, static_cast<size_t>(kvl));
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t d = 0; d < nope; ++d) {
            aw.kv_b.row_f32(h * hs + d, wrow);
            for (int64_t r = 0; r < nb; ++r) {
              const float a = qb[(r * H + h) * qk + d];
              float* dst = qabs + (r * H + h) * kvl;
              for (int64_t i = 0; i < kvl; ++i) dst[i] = std::fma(a, wrow[i], dst[i]);
            }
          }
      });
    }

    // Per row, every head at once over the row's keys (each key read once for
    // all heads): scores = two gemm_f32_rows (or gemm_f16_rows over an f16
    // cache) over the picked latent and rope rows (dot16 of a key row and a
    // query row, the scores score_keys computes), a softmax per head, then
    // the weighted sum of the latents (wsum_f32 or wsum_f16: per output one
    // fma per key in key order, softmax_sum's chain). Prefill (several rows): one task per row. Decode (few rows): the
    // row's keys, heads and latent columns split over the pool in turn. The
    // same floats either way, in any split.
    const bool by_row = nb >= std::max<int64_t>(4, static_cast<int64_t>(pool_.size()));
    // Row r's picked latent and rope rows, and its rope queries packed [H, rd].
    // An f16 cache: the halves themselves, read by the kernels for halves
    // (their f32 values, exact: the floats an f32 cache of those values
    // gives), or the session's keys converted whole for this call.
    const auto key_rows = [&](int64_t r, const KeySet& ks, AnyRows& lat, AnyRows& rope) {
      const LayerCache& cache = rows[r].seq->layer(L);
      const int32_t* idx = ks.sel ? ks.sel->data() : nullptr;
      if (rows[r].seq->kv_type() == KvType::F16) {
        if (const int64_t w = whole_of(rows[r].seq); w >= 0) {
          lat = AnyRows::floats(FRows{ws_.f16_lat[static_cast<size_t>(w)].data(), idx, kvl});
          rope = AnyRows::floats(FRows{ws_.f16_rope[static_cast<size_t>(w)].data(), idx, rd});
          return;
        }
        lat = AnyRows::halves(HRows{cache.latent16.data(), idx, kvl});
        rope = AnyRows::halves(HRows{cache.rope_key16.data(), idx, rd});
        return;
      }
      lat = AnyRows::floats(FRows{cache.latent.data(), idx, kvl});
      rope = AnyRows::floats(FRows{cache.rope_key.data(), idx, rd});
    };
    const auto pack_rope = [&](int64_t r, float* qp) {
      for (int64_t h = 0; h < H; ++h) std::copy_n(q + (r * H + h) * qk + nope, rd, qp + h * rd);
    };
    // Keys [j0, j1) of a row's scores s[H, K]: (latent part + rope part) * scale.
    const auto scores = [&](AnyRows lat, AnyRows rope, const float* qp, int64_t r, int64_t K, int64_t j0, int64_t j1,
                            float* s, float* s2) {
      score_rows(kt, lat.from(j0), j1 - j0, kvl, qabs + (r - r0) * H * kvl, H, s + j0, K);
      score_rows(kt, rope.from(j0), j1 - j0, rd, qp, H, s2 + j0, K);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = j0; j < j1; ++j) s[h * K + j] = (s[h * K + j] + s2[h * K + j]) * scale;
    };
    // Row r's keys, its score buffers (part ps's) and its rope queries, packed.
    struct RowWork {
      KeySet ks;
      int64_t K;
      AnyRows lat, rope;
      float *s, *s2, *qp;
    };
    const auto row_work = [&](int64_t r, Workspace::Part& ps) {
      RowWork w{keys_of(ws_, rows, r), 0, {}, {}, nullptr, nullptr, nullptr};
      w.K = w.ks.size();
      key_rows(r, w.ks, w.lat, w.rope);
      w.s = grow(ps.scores, score_room(rows[r], w.K));
      w.s2 = grow(ps.scores2, score_room(rows[r], w.K));
      w.qp = grow(ps.qrope, static_cast<size_t>(H * rd));
      pack_rope(r, w.qp);
      return w;
    };
    if (by_row) {
      pool_.parallel_parts_balanced(nb, 1, [&](int part, int64_t b, int64_t e) {  // later rows: more keys
        Workspace::Part& ps = ws_.parts[static_cast<size_t>(part)];
        for (int64_t r = r0 + b; r < r0 + e; ++r) {
          const RowWork w = row_work(r, ps);
          scores(w.lat, w.rope, w.qp, r, w.K, 0, w.K, w.s, w.s2);
          for (int64_t h = 0; h < H; ++h) kt.softmax(w.s + h * w.K, w.K);
          sum_rows(kt, w.s, w.K, H, w.lat, w.K, 0, kvl, olat + (r - r0) * H * kvl, kvl, false);
        }
      });
    } else {
      // One row at a time, its buffers part 0's (each pool part writes its own
      // keys, heads or columns of them).
      Workspace::Part& p0 = ws_.parts[0];
      for (int64_t r = r0; r < r0 + nb; ++r) {
        const RowWork w = row_work(r, p0);
        const int64_t K = w.K;
        parts(
            K * H * (kvl + rd), K,
            [&](int, int64_t j0, int64_t j1) { scores(w.lat, w.rope, w.qp, r, K, j0, j1, w.s, w.s2); }, 16);
        parts(H * K * 16, H, [&](int, int64_t h0, int64_t h1) {  // an exp ~ 16 multiply-adds
          for (int64_t h = h0; h < h1; ++h) kt.softmax(w.s + h * K, K);
        });
        // Latent columns in whole vectors of 16 per part.
        parts(K * H * kvl, (kvl + 15) / 16, [&](int, int64_t v0, int64_t v1) {
          sum_rows(kt, w.s, K, H, w.lat, K, v0 * 16, std::min(kvl, v1 * 16), olat + (r - r0) * H * kvl, kvl, false);
        });
      }
    }

    // o[r,h,d] = W_UV row . olat[r,h]: per head, its W_UV rows against the
    // rows' latents. Integer kv_b: matmul's integer kernel over the head's
    // rows (the latents quantized per 32 columns, as any matmul input), or
    // with F32 activations deq_gemm (dequantized in registers). Other
    // formats: gemm_f32 over the rows expanded to f32, deq_gemm's floats.
    parts(nb * H * vd * kvl, H, [&](int part, int64_t h0, int64_t h1) {
      Workspace::Part& ps = ws_.parts[static_cast<size_t>(part)];
      float* wv = qkvb ? nullptr : grow(ps.wv, static_cast<size_t>(vd * kvl));
      float* xh = grow(ps.xh, static_cast<size_t>(nb * kvl));
      float* ob = o + r0 * H * vd;
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t r = 0; r < nb; ++r) std::copy_n(olat + (r * H + h) * kvl, kvl, xh + r * kvl);
        if (uv_int) {
          matmul_qrows(compute_, qweight_rows(aw.kv_b, h * hs + nope, vd), xh, nb, ob + h * vd, H * vd, ps.mm);
        } else if (qkvb) {
          kt.deq_gemm(qweight_rows(aw.kv_b, h * hs + nope, vd), xh, nb, ob + h * vd, H * vd);
        } else {
          for (int64_t d = 0; d < vd; ++d) aw.kv_b.row_f32(h * hs + nope + d, wv + d * kvl);
          kt.gemm_f32(wv, vd, kvl, xh, nb, ob + h * vd, H * vd);
        }
      }
    });
  }  // row blocks
}

}  // namespace strata
