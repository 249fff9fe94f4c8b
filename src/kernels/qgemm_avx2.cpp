// AVX2 + FMA kernels. The 16 f32 lanes of dot16 are two 8-lane vectors
// (lanes 0-7, 8-15); integer sums are exact; tails are computed from
// zero-padded copies and blended in, so untouched lanes keep their bits
// (a -0.0 stays -0.0), as in the scalar reference (qgemm.h).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/qgemm.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi2")

namespace strata {
namespace {
#include "kernels/gemm_driver.h"

inline float tree16(__m256 lo, __m256 hi) {
  const __m256 a8 = _mm256_add_ps(lo, hi);
  const __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
  const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
  return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

// Lanes j < n of an 8-lane vector starting at lane `first`.
inline __m256 lane_mask(int64_t n, int first) {
  const __m256i j = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(first));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), j));
}

float k_dot_f32(const float* a, const float* b, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
  }
  if (i < n) {
    alignas(32) float ta[16] = {}, tb[16] = {};
    std::memcpy(ta, a + i, static_cast<size_t>(n - i) * 4);
    std::memcpy(tb, b + i, static_cast<size_t>(n - i) * 4);
    lo = _mm256_blendv_ps(lo, _mm256_fmadd_ps(_mm256_load_ps(ta), _mm256_load_ps(tb), lo), lane_mask(n - i, 0));
    hi = _mm256_blendv_ps(hi, _mm256_fmadd_ps(_mm256_load_ps(ta + 8), _mm256_load_ps(tb + 8), hi), lane_mask(n - i, 8));
  }
  return tree16(lo, hi);
}

// ---- f32 / bf16 weights: tiles of NW weight rows x NR activation rows ----

inline __m256 bf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <bool BF16>
inline __m256 load_w8(const void* w, int64_t i) {
  if constexpr (BF16)
    return bf16x8(static_cast<const uint16_t*>(w) + i);
  else
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
}

// Weight rows wr[0 .. NW) against activation rows x[0 .. NR) (`cols` apart).
template <bool BF16, int NW, int NR, class T>
void fgemm_tile(const T* const* wr, int64_t cols, const float* x, float* y, int64_t ldy) {
  __m256 acc[NW][NR][2];
  for (int o = 0; o < NW; ++o)
    for (int r = 0; r < NR; ++r) acc[o][r][0] = acc[o][r][1] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    __m256 wv[NW][2];
    for (int o = 0; o < NW; ++o) wv[o][0] = load_w8<BF16>(wr[o], i), wv[o][1] = load_w8<BF16>(wr[o], i + 8);
    for (int r = 0; r < NR; ++r) {
      const __m256 x0 = _mm256_loadu_ps(x + r * cols + i), x1 = _mm256_loadu_ps(x + r * cols + i + 8);
      for (int o = 0; o < NW; ++o) {
        acc[o][r][0] = _mm256_fmadd_ps(wv[o][0], x0, acc[o][r][0]);
        acc[o][r][1] = _mm256_fmadd_ps(wv[o][1], x1, acc[o][r][1]);
      }
    }
  }
  if (i < cols) {
    const int64_t rem = cols - i;
    const __m256 m0 = lane_mask(rem, 0), m1 = lane_mask(rem, 8);
    alignas(32) T tw[16];
    alignas(32) float tx[16];
    __m256 wv[NW][2];
    for (int o = 0; o < NW; ++o) {
      std::memset(tw, 0, sizeof tw);
      std::memcpy(tw, wr[o] + i, static_cast<size_t>(rem) * sizeof(T));
      wv[o][0] = load_w8<BF16>(tw, 0), wv[o][1] = load_w8<BF16>(tw, 8);
    }
    for (int r = 0; r < NR; ++r) {
      std::memset(tx, 0, sizeof tx);
      std::memcpy(tx, x + r * cols + i, static_cast<size_t>(rem) * 4);
      const __m256 x0 = _mm256_load_ps(tx), x1 = _mm256_load_ps(tx + 8);
      for (int o = 0; o < NW; ++o) {
        acc[o][r][0] = _mm256_blendv_ps(acc[o][r][0], _mm256_fmadd_ps(wv[o][0], x0, acc[o][r][0]), m0);
        acc[o][r][1] = _mm256_blendv_ps(acc[o][r][1], _mm256_fmadd_ps(wv[o][1], x1, acc[o][r][1]), m1);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int o = 0; o < NW; ++o) y[r * ldy + o] = tree16(acc[o][r][0], acc[o][r][1]);
}

template <bool BF16>
void fgemm(const void* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  using T = std::conditional_t<BF16, uint16_t, float>;
  const T* wt = static_cast<const T*>(w);
  gemm_tiles<2, 2>(nw, nrows, row_block(cols * 4), [&](auto tw, auto tr, int64_t o, int64_t r) {
    const T* wr[tw.n];
    for (int i = 0; i < tw.n; ++i) wr[i] = wt + (o + i) * cols;
    fgemm_tile<BF16, tw.n, tr.n>(wr, cols, x + r * cols, y + r * ldy + o, ldy);
  });
}

// gemm_f32 over picked rows (qgemm.h): the same tiles, row pointers looked up.
void k_gemm_f32_rows(FRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  gemm_tiles<2, 2>(nw, nrows, row_block(cols * 4), [&](auto tw, auto tr, int64_t o, int64_t r) {
    const float* wr[tw.n];
    for (int i = 0; i < tw.n; ++i) wr[i] = w.row(o + i);
    fgemm_tile<false, tw.n, tr.n>(wr, cols, x + r * cols, y + r * ldy + o, ldy);
  });
}

void k_gemm_f32(const float* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  fgemm<false>(w, nw, cols, x, nrows, y, ldy);
}
void k_gemm_bf16(const uint16_t* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  fgemm<true>(w, nw, cols, x, nrows, y, ldy);
}

// ---- int8 / int4 weights ----

// Four vectors p0..p3 of 8 lanes, each lane a partial sum of one block of
// BW lanes (BW = 4: two blocks per vector; BW = 8: one). Returns the block
// sums in order: BW 4 -> 8 blocks (ymm), BW 8 -> 4 blocks (low xmm).
inline __m256i sum_blocks4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
  // 128-bit lane L of h: [p0, p1, p2, p3] summed over lanes 4L..4L+3 of each.
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
  return _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
inline __m128i sum_blocks8(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// One weight row o against NR activation rows: int4 SplitNibble (u = nibble
// ^ 8, pairs <= 2 * 15 * 127), int8 Plain (|w| * (x with w's sign), pairs
// <= 2 * 128 * 127): vpmaddubsw never saturates.
template <int BITS, int NR>
void qgemm_tile(const QWeight& w, int64_t o, const QActs& a, int64_t r0, float* y, int64_t ldy) {
  const uint8_t* wrow = w.q + o * w.row_bytes;
  const ScaleRow ws = scale_row(w, o);
  const int64_t nsuper = a.bstride / 16, m = w.group / kQBlock;
  constexpr int64_t SB = kQSuper * BITS / 8;  // weight bytes per superblock
  const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f), x8 = _mm256_set1_epi8(0x08);
  __m256 facc[NR][2];
  for (int r = 0; r < NR; ++r) facc[r][0] = facc[r][1] = _mm256_setzero_ps();
  alignas(32) uint8_t tail[SB];
  alignas(32) int32_t isum[NR][16];
  alignas(32) float wsb[16];
  for (int64_t sb = 0; sb < nsuper; ++sb) {
    const int64_t b0 = sb * 16, nb = a.nblocks - b0;
    const uint8_t* wp = super_weights<BITS>(w, wrow, sb, tail);
    block_scales(ws, b0, nb, m, wsb);
    if constexpr (BITS == 4) {
      for (int h = 0; h < 2; ++h) {  // blocks 8h .. 8h+7: weight bytes 128h .. 128h+127
        __m256i lo[4], hi[4];
        for (int k = 0; k < 4; ++k) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 128 * h + 32 * k));
          lo[k] = _mm256_xor_si256(_mm256_and_si256(v, m4), x8);
          hi[k] = _mm256_xor_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), x8);
        }
        for (int r = 0; r < NR; ++r) {
          const uint8_t* xq = a.q + (r0 + r) * a.qstride + sb * kQSuper;
          __m256i p[4];
          for (int k = 0; k < 4; ++k) {
            // Weight bytes 128h + 32k.. are columns 256h + 64k..; SplitNibble
            // keeps them in 128-column chunk 2h + k/2, half k % 2.
            const uint8_t* xc = xq + 128 * (2 * h + k / 2) + 32 * (k % 2);
            const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc));
            const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 64));
            p[k] = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo[k], xe), _mm256_maddubs_epi16(hi[k], xo)),
                                     ones);
          }
          _mm256_store_si256(reinterpret_cast<__m256i*>(isum[r] + 8 * h), sum_blocks4(p[0], p[1], p[2], p[3]));
        }
      }
    } else {
      for (int qd = 0; qd < 4; ++qd) {  // blocks 4qd .. 4qd+3
        __m256i wv[4], aw[4];
        for (int k = 0; k < 4; ++k) {
          wv[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 128 * qd + 32 * k));
          aw[k] = _mm256_abs_epi8(wv[k]);
        }
        for (int r = 0; r < NR; ++r) {
          const uint8_t* xq = a.q + (r0 + r) * a.qstride + sb * kQSuper + 128 * qd;
          __m256i p[4];
          for (int k = 0; k < 4; ++k) {
            const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * k));
            p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[k], _mm256_sign_epi8(xv, wv[k])), ones);
          }
          _mm_store_si128(reinterpret_cast<__m128i*>(isum[r] + 4 * qd), sum_blocks8(p[0], p[1], p[2], p[3]));
        }
      }
    }
    const __m256 w0 = _mm256_load_ps(wsb), w1 = _mm256_load_ps(wsb + 8);
    const bool full = nb >= 16;
    const __m256 k0 = lane_mask(nb, 0), k1 = lane_mask(nb, 8);
    for (int r = 0; r < NR; ++r) {
      __m256i i0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(isum[r]));
      __m256i i1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(isum[r] + 8));
      if constexpr (BITS == 4) {
        const int32_t* s8 = a.sum8 + (r0 + r) * a.bstride + b0;
        i0 = _mm256_sub_epi32(i0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s8)));
        i1 = _mm256_sub_epi32(i1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s8 + 8)));
      }
      const float* sx = a.scale + (r0 + r) * a.bstride + b0;
      const __m256 n0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps(w0, _mm256_loadu_ps(sx)), facc[r][0]);
      const __m256 n1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(w1, _mm256_loadu_ps(sx + 8)), facc[r][1]);
      facc[r][0] = full ? n0 : _mm256_blendv_ps(facc[r][0], n0, k0);
      facc[r][1] = full ? n1 : _mm256_blendv_ps(facc[r][1], n1, k1);
    }
  }
  for (int r = 0; r < NR; ++r) y[(r0 + r) * ldy + o] = tree16(facc[r][0], facc[r][1]);
}

template <int BITS>
void qgemm(const QWeight& w, const QActs& a, float* y, int64_t ldy) {
  gemm_tiles<1, 2>(w.rows, a.nrows, row_block(a.qstride),
                   [&](auto, auto tr, int64_t o, int64_t r) { qgemm_tile<BITS, tr.n>(w, o, a, r, y, ldy); });
}

void k_gemm_q8(const QWeight& w, const QActs& a, float* y, int64_t ldy) { qgemm<8>(w, a, y, ldy); }
void k_gemm_q4(const QWeight& w, const QActs& a, float* y, int64_t ldy) { qgemm<4>(w, a, y, ldy); }

}  // namespace

#pragma GCC pop_options

namespace {
// y[i] = f32(x[i]) by F16C's vcvtph2ps (exact, f16_to_f32_ref's values), 8
// at a time; the tail by the reference. Only set where the CPU has F16C
// (every AVX2 CPU made does, but the path does not require it).
__attribute__((target("avx2,f16c"))) void k_f16_to_f32_f16c(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  if (i < n) f16_to_f32_ref(x + i, y + i, n - i);
}
}  // namespace

const KernelTable& kernel_table_avx2() {
  static const KernelTable t = [] {
    KernelTable k{KernelPath::Avx2, k_dot_f32, k_gemm_f32,       k_gemm_bf16,
                  k_gemm_q8,        k_gemm_q4, ActLayout::Plain, ActLayout::SplitNibble};
    k.gemm_f32_rows = k_gemm_f32_rows;
    k.gemm_f32_lanes = gemm_f32_lanes_via<k_gemm_f32_rows>;
    k.gemm_f16_rows = gemm_f16_rows_via<k_gemm_f32_rows, f16_to_f32_ref>;
    if (cpu_features().f16c) {
      k.f16_to_f32 = k_f16_to_f32_f16c;
      k.gemm_f16_rows = gemm_f16_rows_via<k_gemm_f32_rows, k_f16_to_f32_f16c>;
      k.wsum_f16 = wsum_f16_via<wsum_f32_ref, k_f16_to_f32_f16c>;
    }
    return k;
  }();
  return t;
}

}  // namespace strata
