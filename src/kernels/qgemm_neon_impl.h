// The AArch64 NEON kernels, compiled three times inside an anonymous
// namespace, after every standard header: qgemm_neon.cpp (baseline Advanced
// SIMD, STRATA_NEON_LEVEL 0), qgemm_neon_dotprod.cpp (+ SDOT, 1) and
// qgemm_neon_i8mm.cpp (+ SMMLA, 2). The two extended files are built with
// their own -march (CMakeLists.txt); nothing here instantiates a library
// template, so no inline library function compiled for a newer ISA can be
// picked by the linker for generic callers.
//
// Numerics: the scalar reference's, bit for bit (qgemm.h). The 16 f32 lanes
// of dot16 are four float32x4 (lanes 0-3, 4-7, 8-11, 12-15), every FMA is a
// fused vfmaq_f32 with the scalar operand order, tails are computed from
// zero-padded copies and blended in (untouched lanes keep their bits).
// Integer block sums are exact, so the order in which the instructions add
// them is free:
//   level 0: vmull_s8 + vmlal_high_s8 (two products per int16 lane, at most
//            2 * 128 * 127 = 32512: no overflow, even on -128 weights), then
//            pairwise widening adds to int32;
//   level 1: SDOT (signed x signed, so activations stay Plain, no offset);
//   level 2: SMMLA on 2 activation rows x 2 weight rows (8-byte chunks of
//            both rows interleaved), SDOT for a leftover row.
// int4 nibbles are sign-extended with shifts (no +8 offset), against the
// SplitNibble activations (even columns, then odd, per 128).

#include "kernels/gemm_driver.h"  // the shared tiling, compiled here for this level

constexpr int kLevel = STRATA_NEON_LEVEL;

inline float tree16(float32x4_t v0, float32x4_t v1, float32x4_t v2, float32x4_t v3) {
  const float32x4_t u = vaddq_f32(vaddq_f32(v0, v2), vaddq_f32(v1, v3));  // w = 8, then w = 4
  const float32x2_t p = vadd_f32(vget_low_f32(u), vget_high_f32(u));        // w = 2
  return vget_lane_f32(p, 0) + vget_lane_f32(p, 1);                          // w = 1
}

// Lanes first + j < n of a 4-lane vector.
inline uint32x4_t lane_mask(int64_t n, int first) {
  const uint32x4_t idx = {0, 1, 2, 3};
  const uint32_t lim = n <= 0 ? 0u : n >= 64 ? 64u : static_cast<uint32_t>(n);
  return vcltq_u32(vaddq_u32(idx, vdupq_n_u32(static_cast<uint32_t>(first))), vdupq_n_u32(lim));
}

float k_dot_f32(const float* a, const float* b, int64_t n) {
  float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 4; ++k) acc[k] = vfmaq_f32(acc[k], vld1q_f32(a + i + 4 * k), vld1q_f32(b + i + 4 * k));
  if (i < n) {
    alignas(16) float ta[16] = {}, tb[16] = {};
    std::memcpy(ta, a + i, static_cast<size_t>(n - i) * 4);
    std::memcpy(tb, b + i, static_cast<size_t>(n - i) * 4);
    for (int k = 0; k < 4; ++k)
      acc[k] = vbslq_f32(lane_mask(n - i, 4 * k), vfmaq_f32(acc[k], vld1q_f32(ta + 4 * k), vld1q_f32(tb + 4 * k)),
                         acc[k]);
  }
  return tree16(acc[0], acc[1], acc[2], acc[3]);
}

// ---- f32 / bf16 / f16 weights: tiles of NW weight rows x NR activation rows ----

// What a weight row holds: floats, bf16 (widened by a shift) or IEEE halves
// (an f16 key cache: widened by FCVTL, exact, f16_to_f32_ref's values).
enum WElem { kF32, kBF16, kF16 };
template <int E>
using WElemT = std::conditional_t<E == kF32, float, uint16_t>;

template <int E>
inline void load_w16(const WElemT<E>* p, float32x4_t* out) {
  if constexpr (E == kBF16) {
    const uint16x8_t h0 = vld1q_u16(p), h1 = vld1q_u16(p + 8);
    out[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16));
    out[1] = vreinterpretq_f32_u32(vshll_high_n_u16(h0, 16));
    out[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16));
    out[3] = vreinterpretq_f32_u32(vshll_high_n_u16(h1, 16));
  } else if constexpr (E == kF16) {
    const float16x8_t h0 = vreinterpretq_f16_u16(vld1q_u16(p)), h1 = vreinterpretq_f16_u16(vld1q_u16(p + 8));
    out[0] = vcvt_f32_f16(vget_low_f16(h0));
    out[1] = vcvt_high_f32_f16(h0);
    out[2] = vcvt_f32_f16(vget_low_f16(h1));
    out[3] = vcvt_high_f32_f16(h1);
  } else {
    for (int k = 0; k < 4; ++k) out[k] = vld1q_f32(p + 4 * k);
  }
}

// Weight rows wr[0..NW) (anywhere: a matrix's consecutive rows, or the keys
// of a key set) against NR activation rows `cols` apart.
template <int E, int NW, int NR>
void fgemm_tile(const WElemT<E>* const* wr, int64_t cols, const float* x, float* y, int64_t ldy) {
  using T = WElemT<E>;
  float32x4_t acc[NW][NR][4];
  for (int o = 0; o < NW; ++o)
    for (int r = 0; r < NR; ++r)
      for (int k = 0; k < 4; ++k) acc[o][r][k] = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    float32x4_t wv[NW][4];
    for (int o = 0; o < NW; ++o) load_w16<E>(wr[o] + i, wv[o]);
    for (int r = 0; r < NR; ++r) {
      float32x4_t xv[4];
      for (int k = 0; k < 4; ++k) xv[k] = vld1q_f32(x + r * cols + i + 4 * k);
      for (int o = 0; o < NW; ++o)
        for (int k = 0; k < 4; ++k) acc[o][r][k] = vfmaq_f32(acc[o][r][k], wv[o][k], xv[k]);
    }
  }
  if (i < cols) {
    const int64_t rem = cols - i;
    uint32x4_t m[4];
    for (int k = 0; k < 4; ++k) m[k] = lane_mask(rem, 4 * k);
    alignas(16) T tw[16];
    alignas(16) float tx[16];
    float32x4_t wv[NW][4];
    for (int o = 0; o < NW; ++o) {
      std::memset(tw, 0, sizeof tw);
      std::memcpy(tw, wr[o] + i, static_cast<size_t>(rem) * sizeof(T));
      load_w16<E>(tw, wv[o]);
    }
    for (int r = 0; r < NR; ++r) {
      std::memset(tx, 0, sizeof tx);
      std::memcpy(tx, x + r * cols + i, static_cast<size_t>(rem) * 4);
      float32x4_t xv[4];
      for (int k = 0; k < 4; ++k) xv[k] = vld1q_f32(tx + 4 * k);
      for (int o = 0; o < NW; ++o)
        for (int k = 0; k < 4; ++k)
          acc[o][r][k] = vbslq_f32(m[k], vfmaq_f32(acc[o][r][k], wv[o][k], xv[k]), acc[o][r][k]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int o = 0; o < NW; ++o) y[r * ldy + o] = tree16(acc[o][r][0], acc[o][r][1], acc[o][r][2], acc[o][r][3]);
}

// y[r * ldy + j] = dot16(row(j), x row r) for j < nw, r < nrows: a matrix's
// rows (row(j) = w + j * cols) or a key set's (PickedRows::row).
template <int E, class RowOf>
void fgemm(const RowOf& row, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  gemm_tiles<2, 2>(nw, nrows, row_block(cols * 4), [&](auto tw, auto tr, int64_t o, int64_t r) {
    const WElemT<E>* wr[tw.n];
    for (int i = 0; i < tw.n; ++i) wr[i] = row(o + i);
    fgemm_tile<E, tw.n, tr.n>(wr, cols, x + r * cols, y + r * ldy + o, ldy);
  });
}

void k_gemm_f32(const float* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  fgemm<kF32>([&](int64_t j) { return w + j * cols; }, nw, cols, x, nrows, y, ldy);
}
void k_gemm_bf16(const uint16_t* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  fgemm<kBF16>([&](int64_t j) { return w + j * cols; }, nw, cols, x, nrows, y, ldy);
}

// ---- attention over a key set (qgemm.h): gemm_*_rows, wsum_*, f16_to_f32 ----

void k_gemm_f32_rows(FRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  fgemm<kF32>([&](int64_t j) { return w.row(j); }, nw, cols, x, nrows, y, ldy);
}
void k_gemm_f16_rows(HRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  fgemm<kF16>([&](int64_t j) { return w.row(j); }, nw, cols, x, nrows, y, ldy);
}

// NH heads x the 16 columns [c, c + 16) (the first cw of them, cw < 16, in a
// row's last partial chunk: read from zero-padded copies, only those cw
// written): each output's fma chain over the keys in order, from y's value
// (acc) or 0, one fused vfmaq_f32 a step: wsum_f32_ref's floats.
template <int E, int NH>
void wsum_tile(const float* p, int64_t ldp, PickedRows<WElemT<E>> v, int64_t K, int64_t c, int64_t cw, float* y,
               int64_t ldy, bool acc) {
  using T = WElemT<E>;
  const bool full = cw == 16;
  float32x4_t a[NH][4];
  alignas(16) float to[16];
  for (int h = 0; h < NH; ++h) {
    const float* yr = y + h * ldy + c;
    if (!acc) {
      for (int k = 0; k < 4; ++k) a[h][k] = vdupq_n_f32(0.0f);
    } else if (full) {
      for (int k = 0; k < 4; ++k) a[h][k] = vld1q_f32(yr + 4 * k);
    } else {
      std::memset(to, 0, sizeof to);
      std::memcpy(to, yr, static_cast<size_t>(cw) * 4);
      for (int k = 0; k < 4; ++k) a[h][k] = vld1q_f32(to + 4 * k);
    }
  }
  alignas(16) T tv[16] = {};
  for (int64_t j = 0; j < K; ++j) {
    const T* vr = v.row(j) + c;
    if (!full) {
      std::memcpy(tv, vr, static_cast<size_t>(cw) * sizeof(T));
      vr = tv;
    }
    float32x4_t vv[4];
    load_w16<E>(vr, vv);
    for (int h = 0; h < NH; ++h) {
      const float32x4_t pj = vdupq_n_f32(p[h * ldp + j]);
      for (int k = 0; k < 4; ++k) a[h][k] = vfmaq_f32(a[h][k], pj, vv[k]);
    }
  }
  for (int h = 0; h < NH; ++h) {
    float* yr = y + h * ldy + c;
    if (full) {
      for (int k = 0; k < 4; ++k) vst1q_f32(yr + 4 * k, a[h][k]);
    } else {
      for (int k = 0; k < 4; ++k) vst1q_f32(to + 4 * k, a[h][k]);
      std::memcpy(yr, to, static_cast<size_t>(cw) * 4);
    }
  }
}

// Heads 4 at a time (the rest as one smaller tile), each against every
// 16-column chunk of [c0, c1).
template <int E>
void wsum(const float* p, int64_t ldp, int64_t nh, PickedRows<WElemT<E>> v, int64_t K, int64_t c0, int64_t c1,
          float* y, int64_t ldy, bool acc) {
  for (int64_t h = 0; h < nh;) {
    const int64_t n = nh - h < 4 ? nh - h : 4;
    for (int64_t c = c0; c < c1; c += 16) {
      const int64_t cw = c1 - c < 16 ? c1 - c : 16;
      const float* ph = p + h * ldp;
      float* yh = y + h * ldy;
      switch (n) {
        case 1: wsum_tile<E, 1>(ph, ldp, v, K, c, cw, yh, ldy, acc); break;
        case 2: wsum_tile<E, 2>(ph, ldp, v, K, c, cw, yh, ldy, acc); break;
        case 3: wsum_tile<E, 3>(ph, ldp, v, K, c, cw, yh, ldy, acc); break;
        default: wsum_tile<E, 4>(ph, ldp, v, K, c, cw, yh, ldy, acc); break;
      }
    }
    h += n;
  }
}

void k_wsum_f32(const float* p, int64_t ldp, int64_t nh, FRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                int64_t ldy, bool acc) {
  wsum<kF32>(p, ldp, nh, v, K, c0, c1, y, ldy, acc);
}
void k_wsum_f16(const float* p, int64_t ldp, int64_t nh, HRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                int64_t ldy, bool acc) {
  wsum<kF16>(p, ldp, nh, v, K, c0, c1, y, ldy, acc);
}

// y[i] = the f32 value of half x[i], 8 at a time by FCVTL (exact).
void k_f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(x + i));
    vst1q_f32(y + i, vcvt_f32_f16(vget_low_f16(h)));
    vst1q_f32(y + i + 4, vcvt_high_f32_f16(h));
  }
  if (i < n) f16_to_f32_ref(x + i, y + i, n - i);
}

// ---- int8 / int4 weights ----

// Block j (0..15) of a superblock as two int8x16 weight operands, matching
// the activation operands of x_block: int8 columns 32j..32j+15, +16..+31;
// int4 the block's even columns (low nibbles), then its odd ones (high).
template <int BITS>
inline void w_block(const uint8_t* wp, int j, int8x16_t& w0, int8x16_t& w1) {
  const int8_t* p = reinterpret_cast<const int8_t*>(wp);
  if constexpr (BITS == 8) {
    w0 = vld1q_s8(p + 32 * j);
    w1 = vld1q_s8(p + 32 * j + 16);
  } else {  // 128-column chunk j / 4 is 64 bytes; block j % 4 its bytes 16 (j % 4) ..
    const int8x16_t v = vld1q_s8(p + 64 * (j / 4) + 16 * (j % 4));
    w0 = vshrq_n_s8(vshlq_n_s8(v, 4), 4);
    w1 = vshrq_n_s8(v, 4);
  }
}

// xs: the superblock's activations (Plain for int8, SplitNibble for int4).
template <int BITS>
inline void x_block(const int8_t* xs, int j, int8x16_t& x0, int8x16_t& x1) {
  if constexpr (BITS == 8) {
    x0 = vld1q_s8(xs + 32 * j);
    x1 = vld1q_s8(xs + 32 * j + 16);
  } else {
    const int8_t* c = xs + 128 * (j / 4) + 16 * (j % 4);
    x0 = vld1q_s8(c);       // even columns
    x1 = vld1q_s8(c + 64);  // odd columns
  }
}

// Four int32 lanes whose sum is the block's sum of products.
inline int32x4_t block_dot(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1) {
#if STRATA_NEON_LEVEL >= 1
  return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1);
#else
  const int16x8_t p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), w0, x0);
  const int16x8_t p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), w1, x1);
  return vpadalq_s16(vpaddlq_s16(p0), p1);
#endif
}

// [sum p0, sum p1, sum p2, sum p3].
inline int32x4_t sum4(int32x4_t p0, int32x4_t p1, int32x4_t p2, int32x4_t p3) {
  return vpaddq_s32(vpaddq_s32(p0, p1), vpaddq_s32(p2, p3));
}

// facc = fma(float(isum), ws * sx, facc) on the lanes of real blocks.
inline float32x4_t epilogue(float32x4_t facc, int32x4_t isum, float32x4_t wsv, const float* sx, int64_t nb, int first) {
  const float32x4_t n = vfmaq_f32(facc, vcvtq_f32_s32(isum), vmulq_f32(wsv, vld1q_f32(sx)));
  return nb >= first + 4 ? n : vbslq_f32(lane_mask(nb, first), n, facc);
}

// One weight row o against NR activation rows (SDOT or widening multiplies).
template <int BITS, int NR>
void qgemm_tile(const QWeight& w, int64_t o, const QActs& a, int64_t r0, float* y, int64_t ldy) {
  constexpr int64_t SB = kQSuper * BITS / 8;
  const uint8_t* wrow = w.q + o * w.row_bytes;
  const ScaleRow ws = scale_row(w, o);
  const int64_t nsuper = a.bstride / 16, m = w.group / kQBlock;
  float32x4_t facc[NR][4];
  for (int r = 0; r < NR; ++r)
    for (int q = 0; q < 4; ++q) facc[r][q] = vdupq_n_f32(0.0f);
  alignas(16) uint8_t tail[SB];
  alignas(16) float wsb[16];
  for (int64_t sb = 0; sb < nsuper; ++sb) {
    const int64_t b0 = sb * 16, nb = a.nblocks - b0;
    const uint8_t* wp = super_weights<BITS>(w, wrow, sb, tail);
    block_scales(ws, b0, nb, m, wsb);
#pragma GCC unroll 4
    for (int qd = 0; qd < 4; ++qd) {  // blocks 4qd .. 4qd+3
      if (4 * qd >= nb) break;
      int8x16_t wv[4][2];
      for (int k = 0; k < 4; ++k) w_block<BITS>(wp, 4 * qd + k, wv[k][0], wv[k][1]);
      const float32x4_t wsv = vld1q_f32(wsb + 4 * qd);
      for (int r = 0; r < NR; ++r) {
        const int8_t* xs = reinterpret_cast<const int8_t*>(a.q + (r0 + r) * a.qstride + sb * kQSuper);
        int32x4_t p[4];
        for (int k = 0; k < 4; ++k) {
          int8x16_t x0, x1;
          x_block<BITS>(xs, 4 * qd + k, x0, x1);
          p[k] = block_dot(wv[k][0], wv[k][1], x0, x1);
        }
        const float* sx = a.scale + (r0 + r) * a.bstride + b0 + 4 * qd;
        facc[r][qd] = epilogue(facc[r][qd], sum4(p[0], p[1], p[2], p[3]), wsv, sx, nb, 4 * qd);
      }
    }
  }
  for (int r = 0; r < NR; ++r) y[(r0 + r) * ldy + o] = tree16(facc[r][0], facc[r][1], facc[r][2], facc[r][3]);
}

#if STRATA_NEON_LEVEL >= 2
inline int8x16_t zip1_64(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
inline int8x16_t zip2_64(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

// Weight rows o, o+1 against activation rows r0, r0+1 with SMMLA: per block,
// four 2x8 * 8x2 products (activation rows as the 2x8 operand, weight rows
// as the 8x2 one), giving [(r0,o), (r0,o+1), (r0+1,o), (r0+1,o+1)].
template <int BITS>
void qgemm_tile_mm(const QWeight& w, int64_t o, const QActs& a, int64_t r0, float* y, int64_t ldy) {
  constexpr int64_t SB = kQSuper * BITS / 8;
  const uint8_t* wrow[2] = {w.q + o * w.row_bytes, w.q + (o + 1) * w.row_bytes};
  const ScaleRow ws[2] = {scale_row(w, o), scale_row(w, o + 1)};
  const int64_t nsuper = a.bstride / 16, m = w.group / kQBlock;
  float32x4_t facc[4][4];  // [pair][quarter]
  for (int q = 0; q < 4; ++q)
    for (int k = 0; k < 4; ++k) facc[q][k] = vdupq_n_f32(0.0f);
  alignas(16) uint8_t tail[2][SB];
  alignas(16) float wsb[2][16];
  for (int64_t sb = 0; sb < nsuper; ++sb) {
    const int64_t b0 = sb * 16, nb = a.nblocks - b0;
    const uint8_t* wp[2];
    for (int i = 0; i < 2; ++i) {
      wp[i] = super_weights<BITS>(w, wrow[i], sb, tail[i]);
      block_scales(ws[i], b0, nb, m, wsb[i]);
    }
    const int8_t* xs[2];
    for (int i = 0; i < 2; ++i) xs[i] = reinterpret_cast<const int8_t*>(a.q + (r0 + i) * a.qstride + sb * kQSuper);
#pragma GCC unroll 4
    for (int qd = 0; qd < 4; ++qd) {
      if (4 * qd >= nb) break;
      int32x4_t blk[4];
      for (int k = 0; k < 4; ++k) {
        const int j = 4 * qd + k;
        int8x16_t wa0, wa1, wb0, wb1, xa0, xa1, xb0, xb1;
        w_block<BITS>(wp[0], j, wa0, wa1);
        w_block<BITS>(wp[1], j, wb0, wb1);
        x_block<BITS>(xs[0], j, xa0, xa1);
        x_block<BITS>(xs[1], j, xb0, xb1);
        int32x4_t acc = vmmlaq_s32(vdupq_n_s32(0), zip1_64(xa0, xb0), zip1_64(wa0, wb0));
        acc = vmmlaq_s32(acc, zip2_64(xa0, xb0), zip2_64(wa0, wb0));
        acc = vmmlaq_s32(acc, zip1_64(xa1, xb1), zip1_64(wa1, wb1));
        blk[k] = vmmlaq_s32(acc, zip2_64(xa1, xb1), zip2_64(wa1, wb1));
      }
      // Transpose: pair p's sums of blocks 4qd .. 4qd+3.
      const int32x4_t t0 = vtrn1q_s32(blk[0], blk[1]), t1 = vtrn2q_s32(blk[0], blk[1]);
      const int32x4_t t2 = vtrn1q_s32(blk[2], blk[3]), t3 = vtrn2q_s32(blk[2], blk[3]);
      int32x4_t isum[4];
      isum[0] = vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(t0), vreinterpretq_s64_s32(t2)));
      isum[1] = vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(t1), vreinterpretq_s64_s32(t3)));
      isum[2] = vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(t0), vreinterpretq_s64_s32(t2)));
      isum[3] = vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(t1), vreinterpretq_s64_s32(t3)));
      const float32x4_t wsv[2] = {vld1q_f32(wsb[0] + 4 * qd), vld1q_f32(wsb[1] + 4 * qd)};
      for (int q = 0; q < 4; ++q) {
        const float* sx = a.scale + (r0 + q / 2) * a.bstride + b0 + 4 * qd;
        facc[q][qd] = epilogue(facc[q][qd], isum[q], wsv[q % 2], sx, nb, 4 * qd);
      }
    }
  }
  for (int q = 0; q < 4; ++q)
    y[(r0 + q / 2) * ldy + o + q % 2] = tree16(facc[q][0], facc[q][1], facc[q][2], facc[q][3]);
}
#endif

// Level 2 takes weight rows in pairs, activation rows too: a 2 x 2 tile
// is one SMMLA tile, a pair against a single row two SDOT tiles (a GEMV
// never uses SMMLA).
template <int BITS>
void qgemm(const QWeight& w, const QActs& a, float* y, int64_t ldy) {
  constexpr int NW = kLevel >= 2 ? 2 : 1;
  gemm_tiles<NW, 2>(w.rows, a.nrows, row_block(a.qstride), [&](auto tw, auto tr, int64_t o, int64_t r) {
#if STRATA_NEON_LEVEL >= 2
    if constexpr (tw.n == 2 && tr.n == 2) {
      qgemm_tile_mm<BITS>(w, o, a, r, y, ldy);
      return;
    }
#endif
    for (int k = 0; k < tw.n; ++k) qgemm_tile<BITS, tr.n>(w, o + k, a, r, y, ldy);
  });
}

void k_gemm_q8(const QWeight& w, const QActs& a, float* y, int64_t ldy) { qgemm<8>(w, a, y, ldy); }
void k_gemm_q4(const QWeight& w, const QActs& a, float* y, int64_t ldy) { qgemm<4>(w, a, y, ldy); }

// The table of a NEON level: its integer and f32 kernels plus the key-set
// ones above (the halves widened in registers).
KernelTable neon_table(KernelPath path) {
  KernelTable k{path,      k_dot_f32, k_gemm_f32,       k_gemm_bf16,
                k_gemm_q8, k_gemm_q4, ActLayout::Plain, ActLayout::SplitNibble};
  k.gemm_f32_rows = k_gemm_f32_rows;
  k.gemm_f32_lanes = gemm_f32_lanes_via<k_gemm_f32_rows>;
  k.wsum_f32 = k_wsum_f32;
  k.gemm_f16_rows = k_gemm_f16_rows;
  k.wsum_f16 = k_wsum_f16;
  k.halves_in_registers = true;
  k.f16_to_f32 = k_f16_to_f32;
  return k;
}
