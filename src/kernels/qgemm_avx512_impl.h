// The AVX-512 kernels, compiled twice: qgemm_avx512.cpp (F, BW, VL, DQ) and
// qgemm_avx512vnni.cpp (+ VNNI), each under its own target pragma and inside
// an anonymous namespace, with STRATA_VNNI set to 0 or 1. Included only
// there, after every standard header (nothing here may pull one in: an
// inline library function compiled for AVX-512 could be picked by the linker
// for generic callers).
//
// Numerics: the scalar reference's, bit for bit (qgemm.h). f32 lanes map
// to dot16 lanes one to one; integer sums are exact, so the order in which
// vpdpbusd/vpmaddubsw add them is free; the f32 epilogue runs 16 blocks (one
// superblock) per vector, block b in lane b % 16, with masked FMAs on tails.

#include "kernels/gemm_driver.h"  // the shared tiling, compiled here for AVX-512

constexpr bool kVnni = STRATA_VNNI != 0;

inline float tree16(__m512 acc) {
  const __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  const __m128 a4 = _mm_add_ps(_mm256_castps256_ps128(a8), _mm256_extractf128_ps(a8, 1));
  const __m128 a2 = _mm_add_ps(a4, _mm_movehl_ps(a4, a4));
  return _mm_cvtss_f32(_mm_add_ss(a2, _mm_movehdup_ps(a2)));
}

inline __mmask16 lanes16(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u); }
inline __mmask64 lanes64(int64_t n) {
  return n >= 64 ? ~__mmask64(0) : n <= 0 ? __mmask64(0) : __mmask64((uint64_t{1} << n) - 1u);
}

float k_dot_f32(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  if (i < n) {
    const __mmask16 m = lanes16(n - i);
    acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc, m);
  }
  return tree16(acc);
}

// ---- f32 / bf16 weights: tiles of NW weight rows x NR activation rows ----

template <bool BF16>
inline __m512 load_w(const void* w, int64_t i) {
  if constexpr (BF16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  }
}

template <bool BF16>
inline __m512 load_w_tail(const void* w, int64_t i, __mmask16 m) {
  if constexpr (BF16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(w) + i);
  }
}

// Weight rows wr[0 .. NW) against activation rows x[0 .. NR) (`cols` apart).
template <bool BF16, int NW, int NR, class T>
void fgemm_tile(const T* const* wr, int64_t cols, const float* x, float* y, int64_t ldy) {
  __m512 acc[NW][NR];
  for (int o = 0; o < NW; ++o)
    for (int r = 0; r < NR; ++r) acc[o][r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    __m512 wv[NW];
    for (int o = 0; o < NW; ++o) wv[o] = load_w<BF16>(wr[o], i);
    for (int r = 0; r < NR; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * cols + i);
      for (int o = 0; o < NW; ++o) acc[o][r] = _mm512_fmadd_ps(wv[o], xv, acc[o][r]);
    }
  }
  if (i < cols) {
    const __mmask16 m = lanes16(cols - i);
    __m512 wv[NW];
    for (int o = 0; o < NW; ++o) wv[o] = load_w_tail<BF16>(wr[o], i, m);
    for (int r = 0; r < NR; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + r * cols + i);
      for (int o = 0; o < NW; ++o) acc[o][r] = _mm512_mask3_fmadd_ps(wv[o], xv, acc[o][r], m);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int o = 0; o < NW; ++o) y[r * ldy + o] = tree16(acc[o][r]);
}

template <bool BF16>
void fgemm(const void* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  using T = std::conditional_t<BF16, uint16_t, float>;
  const T* wt = static_cast<const T*>(w);
  gemm_tiles<4, 4>(nw, nrows, row_block(cols * 4), [&](auto tw, auto tr, int64_t o, int64_t r) {
    const T* wr[tw.n];
    for (int i = 0; i < tw.n; ++i) wr[i] = wt + (o + i) * cols;
    fgemm_tile<BF16, tw.n, tr.n>(wr, cols, x + r * cols, y + r * ldy + o, ldy);
  });
}

void k_gemm_f32(const float* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  fgemm<false>(w, nw, cols, x, nrows, y, ldy);
}
void k_gemm_bf16(const uint16_t* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  fgemm<true>(w, nw, cols, x, nrows, y, ldy);
}

// ---- gemm_f32_rows: keys in lanes ----
//
// Scoring every head against a set of keys (attention, the DSA indexer):
// fgemm_tile's dot16 ends each output in a tree16, one horizontal reduction
// (7 shuffles and adds) per 8 fmas at 128 columns, and measured ~15 GFMA/s
// per thread. Here 16 keys are transposed once into a column-major block
// t[c][key] (lane = key), and each head's dot16s run vertically: lane
// partial l of dot16 (the fma chain over columns c = l mod 16, in order) is
// one vector of 16 keys, and tree16's additions (lane l + lane l+8, then
// +4, +2, +1) become additions of whole vectors. Every output gets the same
// operations in the same order as dot16, so the same floats.

// 16 values from p as f32, the lanes outside m read as 0: floats, or halves
// (vcvtph2ps: exact, f16_to_f32's values).
inline __m512 load16(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(__mmask16 m, const uint16_t* p) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// t[l * 16 + j] = rows[j][c + l] for l < 16, j < 16 (columns from c + n
// on read as 0); rows of floats or of halves.
template <class T>
inline void transpose16(const T* const* rows, int64_t c, __mmask16 m, float* t) {
  __m512 r[16], q[16];
  for (int j = 0; j < 16; ++j) r[j] = load16(m, rows[j] + c);
  for (int j = 0; j < 16; j += 2) {
    q[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
    q[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
  }
  for (int j = 0; j < 16; j += 4) {
    r[j] = _mm512_shuffle_ps(q[j], q[j + 2], 0x44);
    r[j + 1] = _mm512_shuffle_ps(q[j], q[j + 2], 0xEE);
    r[j + 2] = _mm512_shuffle_ps(q[j + 1], q[j + 3], 0x44);
    r[j + 3] = _mm512_shuffle_ps(q[j + 1], q[j + 3], 0xEE);
  }
  for (int j = 0; j < 16; j += 8)
    for (int k = 0; k < 4; ++k) {
      q[j + k] = _mm512_shuffle_f32x4(r[j + k], r[j + k + 4], 0x88);
      q[j + k + 4] = _mm512_shuffle_f32x4(r[j + k], r[j + k + 4], 0xDD);
    }
  for (int k = 0; k < 8; ++k) {
    r[k] = _mm512_shuffle_f32x4(q[k], q[k + 8], 0x88);
    r[k + 8] = _mm512_shuffle_f32x4(q[k], q[k + 8], 0xDD);
  }
  for (int l = 0; l < 16; ++l) _mm512_store_ps(t + 16 * l, r[l]);
}

// Lane i < LG of lane group g: the groups split dot16's 16 lane partials so
// that a group's own additions start tree16. LG 2: {g, g + 8} (-> lane g of
// the 8-sum); LG 4: {g, g + 8, g + 4, g + 12} (-> lane g of the 4-sum).
template <int LG>
constexpr int key_lane(int g, int i) {
  return LG == 2 ? g + 8 * i : g + 8 * (i & 1) + 4 * (i >> 1);
}

// Heads x[0 .. NH) (`cols` apart) against the 16 KT keys of KT transposed
// blocks (transpose16's layout, `cols` rows each, block k at t + k * tstride):
// y[h * ldy + 16 k + j] = dot16(key j of block k, head h), j < 16. The lane
// partials of one group at a time, NH x LG x KT accumulators in registers;
// each key vector loaded is used by NH fmas, each head value broadcast by KT.
template <int NH, int LG, int KT = 1>
void keys16_heads(const float* t, int64_t tstride, int64_t cols, const float* x, float* y, int64_t ldy) {
  constexpr int G = 16 / LG;
  const int64_t nc = cols / 16, rem = cols % 16;
  __m512 sums[NH][KT][G];  // per head and block: lane g of the 8-sum (LG 2) or of the 4-sum (LG 4)
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    __m512 acc[NH][LG][KT];
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h)
#pragma GCC unroll 4
      for (int i = 0; i < LG; ++i)
#pragma GCC unroll 2
        for (int k = 0; k < KT; ++k) acc[h][i][k] = _mm512_setzero_ps();
    const auto step = [&](int64_t col, int i) {
      __m512 tv[KT];
#pragma GCC unroll 2
      for (int k = 0; k < KT; ++k) {
        tv[k] = _mm512_load_ps(t + k * tstride + col * 16);
        __asm__("" : "+v"(tv[k]));  // one load, NH uses (not folded into each fma)
      }
#pragma GCC unroll 8
      for (int h = 0; h < NH; ++h) {
        __m512 xb = _mm512_set1_ps(x[h * cols + col]);
        if constexpr (KT > 1) __asm__("" : "+v"(xb));  // one broadcast, KT uses
#pragma GCC unroll 2
        for (int k = 0; k < KT; ++k) acc[h][i][k] = _mm512_fmadd_ps(tv[k], xb, acc[h][i][k]);
      }
    };
    for (int64_t c = 0; c < nc; ++c) {
#pragma GCC unroll 4
      for (int i = 0; i < LG; ++i) step(16 * c + key_lane<LG>(g, i), i);
    }
#pragma GCC unroll 4
    for (int i = 0; i < LG; ++i)  // the last partial column block: lanes below rem
      if (key_lane<LG>(g, i) < rem) step(16 * nc + key_lane<LG>(g, i), i);
#pragma GCC unroll 8
    for (int h = 0; h < NH; ++h)
#pragma GCC unroll 2
      for (int k = 0; k < KT; ++k)
        sums[h][k][g] = LG == 2 ? _mm512_add_ps(acc[h][0][k], acc[h][1][k])
                                : _mm512_add_ps(_mm512_add_ps(acc[h][0][k], acc[h][1][k]),
                                                _mm512_add_ps(acc[h][2][k], acc[h][3][k]));
  }
#pragma GCC unroll 8
  for (int h = 0; h < NH; ++h)
#pragma GCC unroll 2
    for (int k = 0; k < KT; ++k) {
      __m512 a4[4];
      for (int i = 0; i < 4; ++i) a4[i] = LG == 2 ? _mm512_add_ps(sums[h][k][i], sums[h][k][i + 4]) : sums[h][k][i];
      const __m512 a2_0 = _mm512_add_ps(a4[0], a4[2]), a2_1 = _mm512_add_ps(a4[1], a4[3]);
      _mm512_storeu_ps(y + h * ldy + 16 * k, _mm512_add_ps(a2_0, a2_1));
    }
}

// The widest transposed block kept on the stack (32 KiB); wider rows take
// fgemm_tile. Rows up to half of it go two blocks at a time (keys16_heads
// with KT 2 and 4-head tiles: each head value broadcast once for 32 keys,
// 6 loads per 8 fmas instead of 9 per 8; docs/kernels.md, "Indexer keys
// two blocks at a time").
constexpr int64_t kKeyColsMax = 512;

// The whole blocks of 16 keys of gemm_f32_rows (qgemm.h), transposed, for
// rows of floats (FRows) or halves (HRows); returns the keys done (the rest,
// and everything where a row is wider than kKeyColsMax, is the caller's).
template <class Rows>
int64_t gemm_rows_keys16(Rows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  using T = std::remove_cv_t<std::remove_pointer_t<decltype(w.row(0))>>;
  int64_t j0 = 0;
  if (cols > kKeyColsMax) return 0;
  alignas(64) float t[kKeyColsMax * 16];
  const int64_t tstride = cols * 16;
  const bool pairs = cols <= kKeyColsMax / 2;
  while (j0 + 16 <= nw) {
    const int kt = pairs && j0 + 32 <= nw ? 2 : 1;
    for (int k = 0; k < kt; ++k) {
      const T* rows[16];
      for (int j = 0; j < 16; ++j) rows[j] = w.row(j0 + 16 * k + j);
      for (int64_t c = 0; c < cols; c += 16) transpose16(rows, c, lanes16(cols - c), t + k * tstride + c * 16);
    }
    int64_t h = 0;
    // The next step's key rows (up to 16 kt) fetched while this step's
    // heads compute, a share before each head tile: the keys of a long
    // context come from DRAM, and the transposes' strided reads alone left
    // the indexer's 32k-key scores waiting on memory (docs/kernels.md).
    // Narrow rows (the pairs: the indexer's 128 floats, the 64-wide roped
    // keys) into L1, at most 16 KiB for 32 keys; wide ones into L2.
    const int64_t nxt = j0 + 16 * kt, nfetch = std::min<int64_t>(16 * kt, (nw - nxt) / 16 * 16);
    const int64_t ntiles = kt == 2 ? (nrows + 3) / 4 : (nrows + 7) / 8;
    int64_t tile = 0;
    const auto fetch = [&] {
      const int64_t a = nfetch * tile / ntiles, b = nfetch * (tile + 1) / ntiles;
      ++tile;
      for (int64_t j = a; j < b; ++j) {
        const char* pr = reinterpret_cast<const char*>(w.row(nxt + j));
        for (int64_t o = 0; o < cols * static_cast<int64_t>(sizeof(T)); o += 64) {
          if (pairs)
            _mm_prefetch(pr + o, _MM_HINT_T0);
          else
            _mm_prefetch(pr + o, _MM_HINT_T1);
        }
      }
    };
    if (kt == 2) {
      for (; h + 4 <= nrows; h += 4) fetch(), keys16_heads<4, 2, 2>(t, tstride, cols, x + h * cols, y + h * ldy + j0, ldy);
      if (h < nrows) while (tile < ntiles) fetch();
      for (; h < nrows; ++h) keys16_heads<1, 4, 2>(t, tstride, cols, x + h * cols, y + h * ldy + j0, ldy);
    } else {
      for (; h + 8 <= nrows; h += 8) fetch(), keys16_heads<8, 2>(t, tstride, cols, x + h * cols, y + h * ldy + j0, ldy);
      if (h < nrows) while (tile < ntiles) fetch();
      if (h + 4 <= nrows) keys16_heads<4, 4>(t, tstride, cols, x + h * cols, y + h * ldy + j0, ldy), h += 4;
      for (; h < nrows; ++h) keys16_heads<1, 4>(t, tstride, cols, x + h * cols, y + h * ldy + j0, ldy);
    }
    j0 += 16 * kt;
  }
  return j0;
}

// gemm_f32 over picked rows by fgemm_tile alone, the row pointers looked
// up (the same dot16s as the transposed blocks).
void gemm_rows_tiles(FRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  gemm_tiles<4, 4>(nw, nrows, row_block(cols * 4), [&](auto tw, auto tr, int64_t o, int64_t r) {
    const float* wr[tw.n];
    for (int i = 0; i < tw.n; ++i) wr[i] = w.row(o + i);
    fgemm_tile<false, tw.n, tr.n>(wr, cols, x + r * cols, y + r * ldy + o, ldy);
  });
}

// gemm_f32 over picked rows (qgemm.h): whole blocks of 16 keys transposed,
// the keys left over (and rows wider than kKeyColsMax) by fgemm_tile.
void k_gemm_f32_rows(FRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  const int64_t j0 = gemm_rows_keys16(w, nw, cols, x, nrows, y, ldy);
  if (j0 < nw) gemm_rows_tiles(w.from(j0), nw - j0, cols, x, nrows, y + j0, ldy);
}

// gemm_f32_lanes (qgemm.h): rows already stored as transposed blocks, so
// keys16_heads reads them in place, two blocks at a time where two remain
// (gemm_rows_keys16's tiles without its transposes, whose shuffles and
// strided row reads took ~half the indexer's time at 32k keys: docs/kernels.md).
// A last partial block is scored whole into a stack row per head, its lanes
// past nw dropped. The same dot16s as gemm_f32_rows.
void k_gemm_f32_lanes(const float* t, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y,
                      int64_t ldy) {
  const int64_t tstride = cols * 16;
  int64_t j0 = 0;
  for (; j0 + 32 <= nw; j0 += 32) {
    const float* tb = t + j0 * cols;
    int64_t h = 0;
    for (; h + 4 <= nrows; h += 4) keys16_heads<4, 2, 2>(tb, tstride, cols, x + h * cols, y + h * ldy + j0, ldy);
    for (; h < nrows; ++h) keys16_heads<1, 4, 2>(tb, tstride, cols, x + h * cols, y + h * ldy + j0, ldy);
  }
  if (j0 + 16 <= nw) {
    const float* tb = t + j0 * cols;
    int64_t h = 0;
    for (; h + 8 <= nrows; h += 8) keys16_heads<8, 2>(tb, tstride, cols, x + h * cols, y + h * ldy + j0, ldy);
    if (h + 4 <= nrows) keys16_heads<4, 4>(tb, tstride, cols, x + h * cols, y + h * ldy + j0, ldy), h += 4;
    for (; h < nrows; ++h) keys16_heads<1, 4>(tb, tstride, cols, x + h * cols, y + h * ldy + j0, ldy);
    j0 += 16;
  }
  if (j0 < nw) {
    const float* tb = t + j0 * cols;
    alignas(64) float row[16];
    for (int64_t h = 0; h < nrows; ++h) {
      keys16_heads<1, 4>(tb, tstride, cols, x + h * cols, row, 16);
      for (int64_t j = 0; j < nw - j0; ++j) y[h * ldy + j0 + j] = row[j];
    }
  }
}

// wsum_f32 (qgemm.h) over heads [h0, h0 + NH) and columns [c, c + 16 NV):
// NH x NV accumulators, each one fma per key in key order, from 0 or (ACC)
// from y. FULL: all 16 NV columns; else m: the lanes of the last vector that
// are columns (the rest read as 0, never stored).
template <int NH, int NV, bool FULL, bool ACC, class Rows>
void wsum_tile(const float* p, int64_t ldp, Rows v, int64_t K, int64_t c, __mmask16 m, float* y, int64_t ldy) {
  __m512 acc[NH][NV];
  for (int h = 0; h < NH; ++h)
    for (int k = 0; k < NV; ++k) {
      float* yp = y + h * ldy + c + 16 * k;
      acc[h][k] = !ACC ? _mm512_setzero_ps() : FULL || k + 1 < NV ? _mm512_loadu_ps(yp) : _mm512_maskz_loadu_ps(m, yp);
    }
  for (int64_t j = 0; j < K; ++j) {
    const auto* vr = v.row(j) + c;
    __m512 vv[NV];
    for (int k = 0; k < NV; ++k) vv[k] = FULL || k + 1 < NV ? load16(vr + 16 * k) : load16(m, vr + 16 * k);
    for (int h = 0; h < NH; ++h) {
      const __m512 pb = _mm512_set1_ps(p[h * ldp + j]);
      for (int k = 0; k < NV; ++k) acc[h][k] = _mm512_fmadd_ps(pb, vv[k], acc[h][k]);
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int k = 0; k < NV; ++k) {
      if (FULL || k + 1 < NV)
        _mm512_storeu_ps(y + h * ldy + c + 16 * k, acc[h][k]);
      else
        _mm512_mask_storeu_ps(y + h * ldy + c + 16 * k, m, acc[h][k]);
    }
}

// Column tiles of 32 (the last of 16 or fewer), heads 8 at a time within a
// column tile; values as floats (FRows) or halves (HRows).
template <class Rows>
void wsum_rows(const float* p, int64_t ldp, int64_t nh, Rows v, int64_t K, int64_t c0, int64_t c1, float* y,
               int64_t ldy, bool acc) {
  const auto heads = [&](auto nv, auto full, int64_t c, __mmask16 m) {
    const auto run = [&](auto a) {
      int64_t h = 0;
      for (; h + 8 <= nh; h += 8) wsum_tile<8, nv.n, full.n != 0, a.n != 0>(p + h * ldp, ldp, v, K, c, m, y + h * ldy, ldy);
      for (; h < nh; ++h) wsum_tile<1, nv.n, full.n != 0, a.n != 0>(p + h * ldp, ldp, v, K, c, m, y + h * ldy, ldy);
    };
    if (acc)
      run(Extent<1>{});
    else
      run(Extent<0>{});
  };
  int64_t c = c0;
  for (; c + 32 <= c1; c += 32) heads(Extent<2>{}, Extent<1>{}, c, 0xffff);
  if (c1 - c > 16)
    heads(Extent<2>{}, Extent<0>{}, c, lanes16(c1 - c - 16));
  else if (c1 > c)
    heads(Extent<1>{}, Extent<0>{}, c, lanes16(c1 - c));
}

// wsum_rows over blocks of kSumKeyBlock keys in turn, every tile of a block
// before the next block's. A whole-K pass per tile (DSA's 2048 picked keys)
// re-read 512 KiB of weights (64 heads) per column tile and each key's
// value line once per head group, from beyond L2; a block's weights (64
// KiB) and its values' lines (16-32 KiB per column tile) stay in the near
// caches while its column tiles and head groups pass over them. 2048 keys
// picked from a 16384-key cache: 1.6-2.1x (f32) and 2-4x (f16) as fast
// (docs/kernels.md, "Weighted sums in blocks of keys"). Each output is
// still one fma chain in key order: the next block continues it from the
// stored partial (ACC), a float stored and loaded unchanged.
constexpr int64_t kSumKeyBlock = 256;
template <class Rows>
void wsum_blocks(const float* p, int64_t ldp, int64_t nh, Rows v, int64_t K, int64_t c0, int64_t c1, float* y,
                 int64_t ldy, bool acc) {
  if (K <= kSumKeyBlock) return wsum_rows(p, ldp, nh, v, K, c0, c1, y, ldy, acc);
  for (int64_t k0 = 0; k0 < K; k0 += kSumKeyBlock) {
    const int64_t nk = K - k0 < kSumKeyBlock ? K - k0 : kSumKeyBlock;
    wsum_rows(p + k0, ldp, nh, v.from(k0), nk, c0, c1, y, ldy, acc || k0 > 0);
  }
}

void k_wsum_f32(const float* p, int64_t ldp, int64_t nh, FRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                int64_t ldy, bool acc) {
  wsum_blocks(p, ldp, nh, v, K, c0, c1, y, ldy, acc);
}

// ---- int8 / int4 weights ----

// Two vectors of lanes holding blocks of width k -> one vector of blocks of
// width k / 2: a's blocks in lanes 0-7, b's in 8-15, each in order.
inline __m512i merge(__m512i a, __m512i b) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return _mm512_add_epi32(_mm512_permutex2var_epi32(a, ev, b), _mm512_permutex2var_epi32(a, od, b));
}

// A partial last superblock (a row of fewer columns than a superblock's
// multiple, e.g. 256 or 128): how many of its NV weight vectors hold any of
// the row's bytes (`avail` bytes from the superblock's start). The others
// are padding: their weights load as zero and the activations there are
// zero (quantize_acts pads rows to whole superblocks with q = 0, and the
// VNNI int8 path's 128 * sum(x) and the int4 path's 8 * sum(x) corrections
// count the row's columns only), so every product they add is 0 and the
// kernels skip them: the integer block sums are the same, exactly.
inline int live_vectors(int64_t avail, int nv_max) {
  const int64_t n = avail <= 0 ? 0 : (avail + 63) / 64;
  return n < nv_max ? static_cast<int>(n) : nv_max;
}

// merge's tree over 4 / 8 per-vector partial sums, where the parts from
// `live` on are zero (live_vectors): their merges are zero and are not
// computed. The same integers as the whole tree.
inline __m512i merge_parts4(const __m512i (&p)[4], int live) {
  const __m512i lo = merge(p[0], p[1]);
  return merge(lo, live > 2 ? merge(p[2], p[3]) : _mm512_setzero_si512());
}
inline __m512i merge_parts8(const __m512i (&p)[8], int live) {
  const __m512i lo = merge(merge(p[0], p[1]), merge(p[2], p[3]));
  return merge(lo, live > 4 ? merge(merge(p[4], p[5]), merge(p[6], p[7])) : _mm512_setzero_si512());
}

inline __m512i dot_u8s8(__m512i acc, __m512i u, __m512i s) {
  if constexpr (kVnni) {
    return _mm512_dpbusd_epi32(acc, u, s);
  } else {  // pairs stay below 2^15 for the operands used here (see callers)
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
  }
}

// Weight scale of each of the 16 blocks of superblock b0 (zero beyond nb).
struct WScales {
  int64_t m = 0;  // weight group / 32; 0 = one scale per row
  __m512i idx;
  __m512 get(const ScaleRow& ws, int64_t ngroups, int64_t b0, int64_t nb) const {
    if (m == 0) return _mm512_set1_ps(ws[0]);
    if (m == 1) {  // group 32: block j's scale is group b0 + j's (no division, no permute)
      const __mmask16 k = lanes16(ngroups - b0 < nb ? ngroups - b0 : nb);
      return ws.h ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, ws.h + b0)), 16))
                  : _mm512_maskz_loadu_ps(k, ws.f + b0);
    }
    if (m % 16 == 0) return _mm512_set1_ps(ws[b0 / m]);
    if (16 % m == 0) {
      const int64_t g0 = b0 / m, cnt = ngroups - g0 < 16 / m ? ngroups - g0 : 16 / m;
      // bf16 scales: widened exactly (the 16 bits above 16 zero bits).
      const __m512 v =
          ws.h ? _mm512_castsi512_ps(_mm512_slli_epi32(
                     _mm512_cvtepu16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(
                         static_cast<__mmask32>(lanes16(cnt)), ws.h + g0))),
                     16))
               : _mm512_maskz_loadu_ps(lanes16(cnt), ws.f + g0);
      return _mm512_maskz_permutexvar_ps(lanes16(nb), idx, v);
    }
    alignas(64) float t[16];
    for (int j = 0; j < 16; ++j) t[j] = j < nb ? ws[(b0 + j) / m] : 0.0f;
    return _mm512_load_ps(t);
  }
};

inline WScales make_wscales(const QWeight& w) {
  WScales s;
  s.m = w.group / kQBlock;
  alignas(64) int32_t ix[16];
  for (int j = 0; j < 16; ++j) ix[j] = s.m > 0 && 16 % s.m == 0 ? static_cast<int32_t>(j / s.m) : 0;
  s.idx = _mm512_load_si512(ix);
  return s;
}

// Software prefetch of the weight stream: the weight bytes kPrefetchBytes
// ahead of the superblock being computed (past the row's end: the next
// rows', which the tiles read next), and their block scales. A prefetch
// never faults and changes no arithmetic. Taken where it measured a gain
// (docs/kernels.md, "Software prefetch"): the int4 GEMV (the hardware
// prefetcher alone left decode's int4 matmuls well under the bus), the
// int8 multi-row kernel (2-11 rows) and the int8 GEMV's two-row walk
// (qgemv8_two_rows); not a one-stream int8 GEMV, which measured ~9% slower
// with it.
constexpr int64_t kPrefetchBytes = 2048;

// One weight row o against NR activation rows. BITS 4: the activations are
// SplitNibble; BITS 8: Plain.
template <int BITS, int NR>
void qgemm_tile(const QWeight& w, const WScales& wsc, int64_t o, const QActs& a, int64_t r0, float* y, int64_t ldy) {
  const uint8_t* wrow = w.q + o * w.row_bytes;
  const ScaleRow ws = scale_row(w, o);
  const int64_t nsuper = a.bstride / 16;
  constexpr int NV = BITS == 4 ? 4 : 8;  // weight vectors per superblock
  const __m512i m4 = _mm512_set1_epi8(0x0f), x8 = _mm512_set1_epi8(0x08);
  // Scale entries as far ahead of a superblock's as kPrefetchBytes of weights
  // (0: one scale per row, nothing to fetch ahead within it). The scales
  // are read at ws[b0 / (group / 32)], so ahead in the same units.
  const int64_t gm = w.group / kQBlock;
  const int64_t pf_groups = gm > 0 ? kPrefetchBytes * 8 / BITS / w.group : 0;  // int4 only, below
  __m512 facc[NR];
  for (int r = 0; r < NR; ++r) facc[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsuper; ++sb) {
    const int64_t b0 = sb * 16, nb = a.nblocks - b0;
    const __mmask16 bm = lanes16(nb);
    const int64_t off = sb * (kQSuper * BITS / 8);  // weight bytes before this superblock
    if constexpr (BITS == 4) {
      const char* pf = reinterpret_cast<const char*>(wrow + off + kPrefetchBytes);
      for (int k = 0; k < NV; ++k) _mm_prefetch(pf + 64 * k, _MM_HINT_T0);
      if (pf_groups > 0) _mm_prefetch(static_cast<const char*>(ws.addr(b0 / gm + pf_groups)), _MM_HINT_T0);
    }
    const __m512 wsv = wsc.get(ws, w.ngroups, b0, nb);
    const bool full = off + 64 * NV <= w.row_bytes;
    const int nv = full ? NV : live_vectors(w.row_bytes - off, NV);
    __m512i wv[NV];
    for (int k = 0; k < NV; ++k)
      wv[k] = full ? _mm512_loadu_si512(wrow + off + 64 * k)
                   : _mm512_maskz_loadu_epi8(lanes64(w.row_bytes - off - 64 * k), wrow + off + 64 * k);
    // BITS 4: u = nibble ^ 8 = value + 8 in [0, 15] (unsigned operand), the
    // +8 removed below with sum8; products < 2^15 without VNNI (15 * 127 * 2).
    // BITS 8, VNNI: (w + 128) * x, i.e. w ^ 0x80 as the unsigned operand, the
    // 128 * sum(x) removed below with 16 * sum8 (one vpxor per weight vector;
    // until 2026-12-04 the activations were offset instead, which needed
    // -128 * sum(w) per block: a vpdpbusd, a shift and a subtraction per
    // weight vector); without VNNI: |w| * (x with w's sign), pairs
    // <= 2 * 128 * 127 < 2^15. Every block sum is exact in int32 either way.
    __m512i lo[BITS == 4 ? NV : 1], hi[BITS == 4 ? NV : 1], uw[BITS == 8 && kVnni ? NV : 1],
        absw[BITS == 8 && !kVnni ? NV : 1];
    __mmask64 neg[BITS == 8 && !kVnni ? NV : 1];
    for (int k = 0; k < NV; ++k) {
      if constexpr (BITS == 4) {
        // (w & 0x0f) ^ 0x08 in one vpternlogd (truth table 0x6a).
        lo[k] = _mm512_ternarylogic_epi32(wv[k], m4, x8, 0x6a);
        hi[k] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(wv[k], 4), m4, x8, 0x6a);
      } else if constexpr (kVnni) {
        uw[k] = _mm512_xor_si512(wv[k], _mm512_set1_epi8(static_cast<char>(0x80)));
      } else {
        absw[k] = _mm512_abs_epi8(wv[k]);
        neg[k] = _mm512_movepi8_mask(wv[k]);
      }
    }
    for (int r = 0; r < NR; ++r) {
      const uint8_t* xq = a.q + (r0 + r) * a.qstride + sb * kQSuper;
      __m512i part[NV];
      for (int k = 0; k < NV; ++k) {
        if (k >= nv) {  // weights past the row, activations zero: adds 0
          part[k] = _mm512_setzero_si512();
          continue;
        }
        if constexpr (BITS == 4) {
          const __m512i xe = _mm512_loadu_si512(xq + 128 * k), xo = _mm512_loadu_si512(xq + 128 * k + 64);
          if constexpr (kVnni) {
            part[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[k], xe), hi[k], xo);
          } else {
            const __m512i p = _mm512_add_epi16(_mm512_maddubs_epi16(lo[k], xe), _mm512_maddubs_epi16(hi[k], xo));
            part[k] = _mm512_madd_epi16(p, _mm512_set1_epi16(1));
          }
        } else if constexpr (kVnni) {
          part[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), uw[k], _mm512_loadu_si512(xq + 64 * k));
        } else {
          const __m512i xv = _mm512_loadu_si512(xq + 64 * k);
          const __m512i sx = _mm512_mask_sub_epi8(xv, neg[k], _mm512_setzero_si512(), xv);
          part[k] = dot_u8s8(_mm512_setzero_si512(), absw[k], sx);
        }
      }
      __m512i isum;
      if constexpr (BITS == 4) {
        isum = merge_parts4(part, nv);
        isum = _mm512_sub_epi32(isum, _mm512_loadu_si512(a.sum8 + (r0 + r) * a.bstride + b0));
      } else {
        isum = merge_parts8(part, nv);
        if constexpr (kVnni)  // 128 * sum(x) = 16 * sum8
          isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(_mm512_loadu_si512(a.sum8 + (r0 + r) * a.bstride + b0), 4));
      }
      const __m512 d = _mm512_mul_ps(wsv, _mm512_loadu_ps(a.scale + (r0 + r) * a.bstride + b0));
      facc[r] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(isum), d, facc[r], bm);
    }
  }
  for (int r = 0; r < NR; ++r) y[(r0 + r) * ldy + o] = tree16(facc[r]);
}

// The int4 GEMV and calls of up to 4 activation rows on two weight rows at
// once, o1 and o2, far apart: qgemm_tile<4, NR>'s arithmetic for each,
// superblock by superblock in turn, so the core reads two sequential weight
// streams instead of one. From DRAM one stream ran at ~19-21 GB/s per core
// and two at ~28-31 (a second stream keeps more lines in flight than the
// prefetchers and the 2 KiB software prefetch give one; docs/kernels.md,
// "Two weight streams"). Each output takes qgemm_tile's operations in its
// order: the same floats.
// Superblocks [sb0, sb1) of rows o1 and o2 into facc: the partial last
// superblock of qgemv4_rows (until 2026-12-06 the whole rows' loop).
template <int NR>
void qgemm4_two_rows_span(const QWeight& w, const WScales& wsc, int64_t o1, int64_t o2, const QActs& a, int64_t sb0,
                          int64_t sb1, __m512 (&facc)[2][NR]) {
  const uint8_t* const wrows[2] = {w.q + o1 * w.row_bytes, w.q + o2 * w.row_bytes};
  const ScaleRow ws[2] = {scale_row(w, o1), scale_row(w, o2)};
  constexpr int64_t kSuperBytes = kQSuper / 2;
  const __m512i m4 = _mm512_set1_epi8(0x0f), x8 = _mm512_set1_epi8(0x08);
  const int64_t gm = w.group / kQBlock, pf_groups = gm > 0 ? kPrefetchBytes * 2 / w.group : 0;  // as qgemm_tile
  for (int64_t sb = sb0; sb < sb1; ++sb) {
    const int64_t b0 = sb * 16, nb = a.nblocks - b0, off = sb * kSuperBytes;
    const __mmask16 bm = lanes16(nb);
    const bool full = off + kSuperBytes <= w.row_bytes;
    const int nv = full ? 4 : live_vectors(w.row_bytes - off, 4);
    for (int i = 0; i < 2; ++i) {
      const uint8_t* wrow = wrows[i];
      const char* pf = reinterpret_cast<const char*>(wrow + off + kPrefetchBytes);
      for (int k = 0; k < 4; ++k) _mm_prefetch(pf + 64 * k, _MM_HINT_T0);
      if (pf_groups > 0) _mm_prefetch(static_cast<const char*>(ws[i].addr(b0 / gm + pf_groups)), _MM_HINT_T0);
      const __m512 wsv = wsc.get(ws[i], w.ngroups, b0, nb);
      __m512i lo[4], hi[4];
      for (int k = 0; k < 4; ++k) {
        const __m512i wv = full ? _mm512_loadu_si512(wrow + off + 64 * k)
                                : _mm512_maskz_loadu_epi8(lanes64(w.row_bytes - off - 64 * k), wrow + off + 64 * k);
        lo[k] = _mm512_ternarylogic_epi32(wv, m4, x8, 0x6a);  // as qgemm_tile
        hi[k] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(wv, 4), m4, x8, 0x6a);
      }
      for (int r = 0; r < NR; ++r) {
        const uint8_t* xq = a.q + r * a.qstride + sb * kQSuper;
        __m512i part[4];
        for (int k = 0; k < 4; ++k) {
          if (k >= nv) {  // padding (live_vectors): adds 0
            part[k] = _mm512_setzero_si512();
            continue;
          }
          const __m512i xe = _mm512_loadu_si512(xq + 128 * k), xo = _mm512_loadu_si512(xq + 128 * k + 64);
          if constexpr (kVnni) {
            part[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[k], xe), hi[k], xo);
          } else {
            const __m512i p = _mm512_add_epi16(_mm512_maddubs_epi16(lo[k], xe), _mm512_maddubs_epi16(hi[k], xo));
            part[k] = _mm512_madd_epi16(p, _mm512_set1_epi16(1));
          }
        }
        const __m512i isum = _mm512_sub_epi32(merge_parts4(part, nv), _mm512_loadu_si512(a.sum8 + r * a.bstride + b0));
        const __m512 d = _mm512_mul_ps(wsv, _mm512_loadu_ps(a.scale + r * a.bstride + b0));
        facc[i][r] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(isum), d, facc[i][r], bm);
      }
    }
  }
}

// The int4 GEMV and calls of 2-4 activation rows on weight rows o[0..NW),
// for NR activation rows: qgemm_tile<4, NR>'s operations for each output, in
// its order (the same floats), written for the whole superblocks (all 16
// blocks and all bytes in the row) so that the compiler keeps everything in
// registers. The previous loop (qgemm4_two_rows_span, which still takes a
// partial last superblock) kept its float accumulators on the stack (a load
// and a masked store per row and superblock), its row pointers in vector
// registers and WScales::get's branches in the loop; here the accumulators
// are variables, one activation row's superblock is loaded once for all NW
// weight rows, the mask is all lanes (mask3_fmadd with every lane set is
// fmadd), and SK says how the 16 weight scales are read: 0 through
// WScales::get (any group), 1 / 2 as group-32 floats / bf16 (widened
// exactly) at the superblock's first block, which is what WScales::get
// returns for a whole superblock (m == 1, ngroups - b0 = nb >= 16).
// slice-int4 decode 1.05-1.37x (docs/kernels.md, "The small int GEMMs in
// registers").
template <int SK, int NW, int NR>
void qgemv4_rows(const QWeight& w, const WScales& wsc, const int64_t (&o)[NW], const QActs& a, float* y, int64_t ldy) {
  static_assert(NW % 2 == 0, "rows go to the general loop's tail in pairs");
  constexpr int64_t kSuperBytes = kQSuper / 2;
  const int64_t nsuper = a.bstride / 16;
  int64_t nfull = w.row_bytes / kSuperBytes;  // (no std::min here: this file instantiates no library template)
  if (a.nblocks / 16 < nfull) nfull = a.nblocks / 16;
  if (nsuper < nfull) nfull = nsuper;
  const uint8_t* wr[NW];
  ScaleRow sr[NW];
  __m512 f[NW][NR];
  for (int i = 0; i < NW; ++i) {
    wr[i] = w.q + o[i] * w.row_bytes;
    sr[i] = scale_row(w, o[i]);
    for (int r = 0; r < NR; ++r) f[i][r] = _mm512_setzero_ps();
  }
  const __m512i m4 = _mm512_set1_epi8(0x0f), x8 = _mm512_set1_epi8(0x08);
  const int64_t gm = w.group / kQBlock, pf_groups = gm > 0 ? kPrefetchBytes * 2 / w.group : 0;  // as qgemm_tile
  for (int64_t sb = 0; sb < nfull; ++sb) {
    const int64_t b0 = sb * 16, nb = a.nblocks - b0, off = sb * kSuperBytes;
    // One activation row: its superblock loaded once for all NW weight rows.
    __m512i xe1[4], xo1[4];
    if constexpr (NR == 1) {
      const uint8_t* xq = a.q + sb * kQSuper;
      for (int k = 0; k < 4; ++k) {
        xe1[k] = _mm512_loadu_si512(xq + 128 * k);
        xo1[k] = _mm512_loadu_si512(xq + 128 * k + 64);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NW; ++i) {
      const uint8_t* wrow = wr[i];
      const ScaleRow& ws = sr[i];
      const char* pf = reinterpret_cast<const char*>(wrow + off + kPrefetchBytes);
      for (int k = 0; k < 4; ++k) _mm_prefetch(pf + 64 * k, _MM_HINT_T0);
      if (pf_groups > 0) _mm_prefetch(static_cast<const char*>(ws.addr(b0 / gm + pf_groups)), _MM_HINT_T0);
      __m512 wsv;
      if constexpr (SK == 1)
        wsv = _mm512_loadu_ps(ws.f + b0);
      else if constexpr (SK == 2)
        wsv = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws.h + b0))), 16));
      else
        wsv = wsc.get(ws, w.ngroups, b0, nb);
      __m512i lo[4], hi[4];
      for (int k = 0; k < 4; ++k) {
        const __m512i wv = _mm512_loadu_si512(wrow + off + 64 * k);
        lo[k] = _mm512_ternarylogic_epi32(wv, m4, x8, 0x6a);  // as qgemm_tile
        hi[k] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(wv, 4), m4, x8, 0x6a);
      }
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        const uint8_t* xq = a.q + r * a.qstride + sb * kQSuper;
        __m512i part[4];
        for (int k = 0; k < 4; ++k) {
          const __m512i xe = NR == 1 ? xe1[k] : _mm512_loadu_si512(xq + 128 * k);
          const __m512i xo = NR == 1 ? xo1[k] : _mm512_loadu_si512(xq + 128 * k + 64);
          if constexpr (kVnni) {
            part[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[k], xe), hi[k], xo);
          } else {
            const __m512i p = _mm512_add_epi16(_mm512_maddubs_epi16(lo[k], xe), _mm512_maddubs_epi16(hi[k], xo));
            part[k] = _mm512_madd_epi16(p, _mm512_set1_epi16(1));
          }
        }
        const __m512i isum = _mm512_sub_epi32(merge(merge(part[0], part[1]), merge(part[2], part[3])),
                                              _mm512_loadu_si512(a.sum8 + r * a.bstride + b0));
        const __m512 d = _mm512_mul_ps(wsv, _mm512_loadu_ps(a.scale + r * a.bstride + b0));
        f[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, f[i][r]);
      }
    }
  }
  for (int i = 0; i < NW; i += 2) {
    if (nfull < nsuper) {
      __m512 facc[2][NR];
      for (int r = 0; r < NR; ++r) {
        facc[0][r] = f[i][r];
        facc[1][r] = f[i + 1][r];
      }
      qgemm4_two_rows_span<NR>(w, wsc, o[i], o[i + 1], a, nfull, nsuper, facc);
      for (int r = 0; r < NR; ++r) {
        f[i][r] = facc[0][r];
        f[i + 1][r] = facc[1][r];
      }
    }
    for (int r = 0; r < NR; ++r) {
      y[r * ldy + o[i]] = tree16(f[i][r]);
      y[r * ldy + o[i + 1]] = tree16(f[i + 1][r]);
    }
  }
}

// The int4 GEMV and calls of up to 4 activation rows over weight rows [0,
// rows): rows o and h + o together (h = rows / 2), two sequential weight
// streams per core, the odd last row alone. Four rows at a time (four
// streams) measured no faster for the GEMV (docs/kernels.md).
template <int SK, int NR>
void qgemm4_small(const QWeight& w, const WScales& wsc, const QActs& a, float* y, int64_t ldy) {
  const int64_t h = w.rows / 2;
  for (int64_t o = 0; o < h; ++o) {
    const int64_t rows[2] = {o, h + o};
    qgemv4_rows<SK, 2, NR>(w, wsc, rows, a, y, ldy);
  }
  if (w.rows % 2) qgemm_tile<4, NR>(w, wsc, w.rows - 1, a, 0, y, ldy);
}

#if STRATA_VNNI
// The int8 GEMV (VNNI) the same way: qgemm_tile<8, 1>'s operations on rows
// o1 and o2 in turn, superblock by superblock, each prefetching 2 KiB ahead
// in its own row (the one-stream GEMV measured slower with the prefetch;
// two streams need it: without, half the speed). The same floats.
// SK: how a whole superblock's weight scales are read, as in qgemv4_rows
// (0: WScales::get; 1 / 2: group-32 floats / bf16 at the first block), for
// the superblocks whose 16 blocks and bytes are all in the row; the rest
// take the masked loads below. With SK and the loop over the two rows
// unrolled, the accumulators stay in registers (they went through the stack).
template <int SK>
void qgemv8_two_rows(const QWeight& w, const WScales& wsc, int64_t o1, int64_t o2, const QActs& a, float* y) {
  const uint8_t* const wrows[2] = {w.q + o1 * w.row_bytes, w.q + o2 * w.row_bytes};
  const ScaleRow ws[2] = {scale_row(w, o1), scale_row(w, o2)};
  const int64_t nsuper = a.bstride / 16;
  int64_t nfull = w.row_bytes / kQSuper;
  if (a.nblocks / 16 < nfull) nfull = a.nblocks / 16;
  if (nsuper < nfull) nfull = nsuper;
  const int64_t gm = w.group / kQBlock, pf_groups = gm > 0 ? kPrefetchBytes / w.group : 0;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 facc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t sb = 0; sb < nfull; ++sb) {
    const int64_t b0 = sb * 16, nb = a.nblocks - b0, off = sb * kQSuper;
    const uint8_t* xq = a.q + sb * kQSuper;
    const __m512 sx = _mm512_loadu_ps(a.scale + b0);
    const __m512i sum128 = _mm512_slli_epi32(_mm512_loadu_si512(a.sum8 + b0), 4);  // 128 * sum(x)
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i) {
      const uint8_t* wrow = wrows[i];
      const char* pf = reinterpret_cast<const char*>(wrow + off + kPrefetchBytes);
      for (int k = 0; k < 8; ++k) _mm_prefetch(pf + 64 * k, _MM_HINT_T0);
      if (pf_groups > 0) _mm_prefetch(static_cast<const char*>(ws[i].addr(b0 / gm + pf_groups)), _MM_HINT_T0);
      __m512 wsv;
      if constexpr (SK == 1)
        wsv = _mm512_loadu_ps(ws[i].f + b0);
      else if constexpr (SK == 2)
        wsv = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws[i].h + b0))), 16));
      else
        wsv = wsc.get(ws[i], w.ngroups, b0, nb);
      __m512i part[8];
      for (int k = 0; k < 8; ++k)
        part[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(_mm512_loadu_si512(wrow + off + 64 * k), flip),
                                      _mm512_loadu_si512(xq + 64 * k));
      const __m512i isum = _mm512_sub_epi32(merge(merge(merge(part[0], part[1]), merge(part[2], part[3])),
                                                  merge(merge(part[4], part[5]), merge(part[6], part[7]))),
                                            sum128);
      facc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(wsv, sx), facc[i]);
    }
  }
  for (int64_t sb = nfull; sb < nsuper; ++sb) {
    const int64_t b0 = sb * 16, nb = a.nblocks - b0, off = sb * kQSuper;
    const __mmask16 bm = lanes16(nb);
    const bool full = off + kQSuper <= w.row_bytes;
    const int nv = full ? 8 : live_vectors(w.row_bytes - off, 8);
    const uint8_t* xq = a.q + sb * kQSuper;
    const __m512 sx = _mm512_loadu_ps(a.scale + b0);
    const __m512i sum128 = _mm512_slli_epi32(_mm512_loadu_si512(a.sum8 + b0), 4);  // 128 * sum(x)
    for (int i = 0; i < 2; ++i) {
      const uint8_t* wrow = wrows[i];
      const char* pf = reinterpret_cast<const char*>(wrow + off + kPrefetchBytes);
      for (int k = 0; k < 8; ++k) _mm_prefetch(pf + 64 * k, _MM_HINT_T0);
      if (pf_groups > 0) _mm_prefetch(static_cast<const char*>(ws[i].addr(b0 / gm + pf_groups)), _MM_HINT_T0);
      const __m512 wsv = wsc.get(ws[i], w.ngroups, b0, nb);
      __m512i part[8];
      for (int k = 0; k < 8; ++k) {
        if (k >= nv) {  // padding (live_vectors): adds 0
          part[k] = _mm512_setzero_si512();
          continue;
        }
        const __m512i wv = full ? _mm512_loadu_si512(wrow + off + 64 * k)
                                : _mm512_maskz_loadu_epi8(lanes64(w.row_bytes - off - 64 * k), wrow + off + 64 * k);
        part[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(wv, flip), _mm512_loadu_si512(xq + 64 * k));
      }
      const __m512i isum = _mm512_sub_epi32(merge_parts8(part, nv), sum128);
      facc[i] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(wsv, sx), facc[i], bm);
    }
  }
  y[o1] = tree16(facc[0]);
  y[o2] = tree16(facc[1]);
}
#endif

template <int BITS>
void qgemm(const QWeight& w, const QActs& a, float* y, int64_t ldy) {
  const WScales wsc = make_wscales(w);
  if constexpr (BITS == 4) {
    if (a.nrows >= 1 && a.nrows <= 4 && w.rows >= 2) {  // rows o and h + o together
      const auto run = [&](auto nr) {
        if (wsc.m == 1 && w.sb) qgemm4_small<2, nr.n>(w, wsc, a, y, ldy);
        else if (wsc.m == 1) qgemm4_small<1, nr.n>(w, wsc, a, y, ldy);
        else qgemm4_small<0, nr.n>(w, wsc, a, y, ldy);
      };
      switch (a.nrows) {
        case 1: run(Extent<1>{}); return;
        case 2: run(Extent<2>{}); return;
        case 3: run(Extent<3>{}); return;
        default: run(Extent<4>{}); return;
      }
    }
  }
#if STRATA_VNNI
  if constexpr (BITS == 8) {
    if (a.nrows == 1 && w.rows >= 2) {  // the int8 GEMV: rows o and h + o together
      const int64_t h = w.rows / 2;
      if (wsc.m == 1 && w.sb) {
        for (int64_t o = 0; o < h; ++o) qgemv8_two_rows<2>(w, wsc, o, h + o, a, y);
      } else if (wsc.m == 1) {
        for (int64_t o = 0; o < h; ++o) qgemv8_two_rows<1>(w, wsc, o, h + o, a, y);
      } else {
        for (int64_t o = 0; o < h; ++o) qgemv8_two_rows<0>(w, wsc, o, h + o, a, y);
      }
      if (w.rows % 2) qgemm_tile<8, 1>(w, wsc, w.rows - 1, a, 0, y, ldy);
      return;
    }
  }
#endif
  gemm_tiles<1, 4>(w.rows, a.nrows, row_block(a.qstride),
                   [&](auto, auto tr, int64_t o, int64_t r) { qgemm_tile<BITS, tr.n>(w, wsc, o, a, r, y, ldy); });
}

// ---- activation quantization (quantize_acts' bytes and floats, 32 columns a step) ----
//
// The same arithmetic as the scalar: amax of |x| (exact), s = amax / 127,
// q = nearbyint(clamp(x / s, -127, 127)) with an IEEE division; a block with
// a non-finite value gets s = NaN and q = 0. Columns past the end read as 0
// and quantize to 0, which is what the scalar leaves there, so whole blocks
// are stored.
QActs k_quantize_acts(const float* x, int64_t nrows, int64_t cols, ActLayout layout, uint8_t* q, float* scale,
                      int32_t* sum8) {
  QActs a;
  a.nrows = nrows;
  a.cols = cols;
  a.nblocks = (cols + kQBlock - 1) / kQBlock;
  a.qstride = qacts_qstride(cols);
  a.bstride = qacts_bstride(cols);
  const bool offset = layout == ActLayout::Offset128 || layout == ActLayout::Offset128Dword;
  const __m512i off = _mm512_set1_epi32(offset ? 128 : 0);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t r = 0; r < nrows; ++r) {
    const float* xr = x + r * cols;
    uint8_t* qr = q + r * a.qstride;
    float* sr = scale + r * a.bstride;
    int32_t* mr = sum8 + r * a.bstride;
    const __m512i fill = _mm512_set1_epi8(static_cast<char>(offset ? 128 : 0));
    for (int64_t i = 0; i < a.qstride; i += 64) _mm512_storeu_si512(qr + i, fill);
    for (int64_t b = 0; b < a.bstride; b += 16) {
      _mm512_storeu_ps(sr + b, _mm512_setzero_ps());
      _mm512_storeu_si512(mr + b, _mm512_setzero_si512());
    }
    for (int64_t b = 0; b < a.nblocks; ++b) {
      const int64_t c0 = b * kQBlock, n = cols - c0;
      const __mmask16 m0 = lanes16(n), m1 = n > 16 ? lanes16(n - 16) : __mmask16(0);
      const __m512 x0 = _mm512_maskz_loadu_ps(m0, xr + c0), x1 = _mm512_maskz_loadu_ps(m1, xr + c0 + 16);
      if ((_mm512_fpclass_ps_mask(x0, 0x99) | _mm512_fpclass_ps_mask(x1, 0x99)) != 0) {  // NaN or +-Inf
        sr[b] = __builtin_nanf("");
        continue;
      }
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
      const float s = amax / 127.0f;
      sr[b] = s;
      if (s == 0.0f) continue;
      const __m512 sv = _mm512_set1_ps(s);
      constexpr int kNear = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
      const __m512i v0 = _mm512_cvtps_epi32(
          _mm512_roundscale_ps(_mm512_min_ps(_mm512_max_ps(_mm512_div_ps(x0, sv), lo), hi), kNear));
      const __m512i v1 = _mm512_cvtps_epi32(
          _mm512_roundscale_ps(_mm512_min_ps(_mm512_max_ps(_mm512_div_ps(x1, sv), lo), hi), kNear));
      mr[b] = 8 * _mm512_reduce_add_epi32(_mm512_add_epi32(v0, v1));
      const __m512i u0 = _mm512_add_epi32(v0, off), u1 = _mm512_add_epi32(v1, off);
      if (layout == ActLayout::SplitNibble) {
        const int64_t i0 = c0 % 128, base = c0 - i0 + i0 / 2;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + base), _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(u0, ev, u1)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + base + 64),
                         _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(u0, od, u1)));
      } else if (layout == ActLayout::Offset128Dword) {
        alignas(16) uint32_t d[8];
        _mm_store_si128(reinterpret_cast<__m128i*>(d), _mm512_cvtepi32_epi8(u0));
        _mm_store_si128(reinterpret_cast<__m128i*>(d + 4), _mm512_cvtepi32_epi8(u1));
        const int64_t i = c0 % kQSuper, j = i / kQBlock;
        uint8_t* base = qr + (c0 - i) + 4 * j;
        for (int k = 0; k < 8; ++k) __builtin_memcpy(base + 64 * k, d + k, 4);
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + c0), _mm512_cvtepi32_epi8(u0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + c0 + 16), _mm512_cvtepi32_epi8(u1));
      }
    }
  }
  a.q = q;
  a.scale = scale;
  a.sum8 = sum8;
  return a;
}

#if STRATA_VNNI  // vpdpbusd: only in the VNNI build of this file
// ---- int8, several activation rows: weights turned dword-major in registers ----
//
// A superblock of a weight row is 8 vectors V[v] (v = block / 2), lane
// l = 8 (block % 2) + dword. Three rounds of vpermt2d over pairs of vectors
// turn it into T[k], lane j = dword k of block j: the activations' layout
// (ActLayout::Offset128Dword). Then block j's sum builds up in lane j over
// the 8 vpdpbusd of a row, with no per-row reduction; the transposition (24
// permutes) is shared by the NR rows of a tile. Integer sums are exact, so
// the result is the scalar reference's bit for bit.
struct DwordTranspose {
  __m512i idx[3][2];
  DwordTranspose() {
    alignas(64) int32_t t[16];
    for (int c = 0; c < 2; ++c) {
      // Rounds 0, 1: vector bit s (block bit s + 1) trades places with lane
      // bit s (dword bit s); round 2 also puts the lanes in block order.
      for (int s = 0; s < 2; ++s) {
        for (int i = 0; i < 16; ++i) t[i] = (((i >> s) & 1) ? 16 : 0) + ((i & ~(1 << s)) | (c << s));
        idx[s][c] = _mm512_load_si512(t);
      }
      for (int i = 0; i < 16; ++i)
        t[i] = (((i >> 3) & 1) ? 16 : 0) + (((i & 1) << 3) | (c << 2) | (((i >> 2) & 1) << 1) | ((i >> 1) & 1));
      idx[2][c] = _mm512_load_si512(t);
    }
  }
  void run(__m512i v[8]) const {
    for (int s = 0; s < 3; ++s) {
      const int bit = 1 << s;
      for (int v0 = 0; v0 < 8; ++v0) {
        if (v0 & bit) continue;
        const __m512i a = v[v0], b = v[v0 | bit];
        v[v0] = _mm512_permutex2var_epi32(a, idx[s][0], b);
        v[v0 | bit] = _mm512_permutex2var_epi32(a, idx[s][1], b);
      }
    }
  }
};

template <int NR>
void qgemm8_dword_tile(const QWeight& w, const WScales& wsc, const DwordTranspose& tr, int64_t o, const QActs& a,
                       int64_t r0, float* y, int64_t ldy) {
  const uint8_t* wrow = w.q + o * w.row_bytes;
  const ScaleRow ws = scale_row(w, o);
  const int64_t nsuper = a.bstride / 16;
  const __m512i ones = _mm512_set1_epi8(1);
  const int64_t gm = w.group / kQBlock, pf_groups = gm > 0 ? kPrefetchBytes / w.group : 0;  // as qgemm_tile
  __m512 facc[NR];
  for (int r = 0; r < NR; ++r) facc[r] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsuper; ++sb) {
    const int64_t b0 = sb * 16, nb = a.nblocks - b0;
    const __mmask16 bm = lanes16(nb);
    const int64_t off = sb * kQSuper;
    {
      const char* pf = reinterpret_cast<const char*>(wrow + off + kPrefetchBytes);
      for (int k = 0; k < 8; ++k) _mm_prefetch(pf + 64 * k, _MM_HINT_T0);
      if (pf_groups > 0) _mm_prefetch(static_cast<const char*>(ws.addr(b0 / gm + pf_groups)), _MM_HINT_T0);
    }
    const __m512 wsv = wsc.get(ws, w.ngroups, b0, nb);
    const bool full = off + kQSuper <= w.row_bytes;
    __m512i t[8];
    for (int k = 0; k < 8; ++k)
      t[k] = full ? _mm512_loadu_si512(wrow + off + 64 * k)
                  : _mm512_maskz_loadu_epi8(lanes64(w.row_bytes - off - 64 * k), wrow + off + 64 * k);
    tr.run(t);
    // (x + 128) * w summed, minus 128 * sum(w): start at -128 * sum(w) per block.
    __m512i wsum = _mm512_setzero_si512();
    for (int k = 0; k < 8; ++k) wsum = _mm512_dpbusd_epi32(wsum, ones, t[k]);
    const __m512i init = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(wsum, 7));
    __m512i acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = init;
    for (int k = 0; k < 8; ++k)
      for (int r = 0; r < NR; ++r)
        acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_loadu_si512(a.q + (r0 + r) * a.qstride + off + 64 * k), t[k]);
    for (int r = 0; r < NR; ++r) {
      const __m512 d = _mm512_mul_ps(wsv, _mm512_loadu_ps(a.scale + (r0 + r) * a.bstride + b0));
      facc[r] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), d, facc[r], bm);
    }
  }
  for (int r = 0; r < NR; ++r) y[(r0 + r) * ldy + o] = tree16(facc[r]);
}

// Rows of at most 256 bytes (one superblock of at most 8 blocks: the
// bundled model's 128- and 256-column matrices) fill half of
// qgemm8_dword_tile's lanes, the other half padding. Here two weight rows
// share one transposition: row o's 4 vectors take the places of blocks 0-7
// and row o + 1's those of blocks 8-15, so after DwordTranspose lane j holds
// block j of row o (j < 8) or block j - 8 of row o + 1, and each activation
// vector is used with its 8 blocks in both halves (vshufi64x2). Every lane
// gets qgemm8_dword_tile's integer sum, starting value, scale product and
// one fma into zero, and each output's tree16 sees its 8 lanes with zeros
// above, as there: the same floats, for half the transpositions,
// vpdpbusd and epilogues.
template <int NR>
void qgemm8_dword_pair_tile(const QWeight& w, const WScales& wsc, const DwordTranspose& tr, int64_t o, const QActs& a,
                            int64_t r0, float* y, int64_t ldy) {
  const __m512i ones = _mm512_set1_epi8(1);
  const __mmask16 bm = lanes16(a.nblocks);  // <= 8 blocks
  const __mmask16 bm2 = static_cast<__mmask16>(bm | (bm << 8));
  __m512i t[8];
  for (int i = 0; i < 2; ++i) {
    const uint8_t* wrow = w.q + (o + i) * w.row_bytes;
    for (int k = 0; k < 4; ++k) t[4 * i + k] = _mm512_maskz_loadu_epi8(lanes64(w.row_bytes - 64 * k), wrow + 64 * k);
  }
  tr.run(t);
  const __m512 ws0 = wsc.get(scale_row(w, o), w.ngroups, 0, a.nblocks);
  const __m512 ws1 = wsc.get(scale_row(w, o + 1), w.ngroups, 0, a.nblocks);
  const __m512 wsv = _mm512_shuffle_f32x4(ws0, ws1, 0x44);  // row o's lanes 0-7, then row o + 1's
  __m512i wsum = _mm512_setzero_si512();
  for (int k = 0; k < 8; ++k) wsum = _mm512_dpbusd_epi32(wsum, ones, t[k]);
  const __m512i init = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(wsum, 7));
  __m512i acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = init;
  for (int k = 0; k < 8; ++k)
    for (int r = 0; r < NR; ++r) {
      const __m512i x = _mm512_loadu_si512(a.q + (r0 + r) * a.qstride + 64 * k);
      acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_shuffle_i64x2(x, x, 0x44), t[k]);
    }
  for (int r = 0; r < NR; ++r) {
    const __m512 sx = _mm512_loadu_ps(a.scale + (r0 + r) * a.bstride);
    const __m512 d = _mm512_mul_ps(wsv, _mm512_shuffle_f32x4(sx, sx, 0x44));
    const __m512 facc = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), d, _mm512_setzero_ps(), bm2);
    y[(r0 + r) * ldy + o] = tree16(_mm512_maskz_mov_ps(0x00ff, facc));
    y[(r0 + r) * ldy + o + 1] = tree16(_mm512_maskz_mov_ps(0x00ff, _mm512_shuffle_f32x4(facc, facc, 0xee)));
  }
}

void k_gemm_q8_dword(const QWeight& w, const QActs& a, float* y, int64_t ldy) {
  static const DwordTranspose transpose;
  const WScales wsc = make_wscales(w);
  if (w.row_bytes <= kQSuper / 2 && a.nblocks <= 8) {
    gemm_tiles<2, 8>(w.rows, a.nrows, row_block(a.qstride, 8), [&](auto tw, auto tr, int64_t o, int64_t r) {
      if constexpr (tw.n == 2)
        qgemm8_dword_pair_tile<tr.n>(w, wsc, transpose, o, a, r, y, ldy);
      else
        qgemm8_dword_tile<tr.n>(w, wsc, transpose, o, a, r, y, ldy);
    });
    return;
  }
  gemm_tiles<1, 8>(w.rows, a.nrows, row_block(a.qstride, 8), [&](auto, auto tr, int64_t o, int64_t r) {
    qgemm8_dword_tile<tr.n>(w, wsc, transpose, o, a, r, y, ldy);
  });
}


// ---- int8 and int4, prefill-sized calls: packed weights, register-blocked tiles ----
//
// The same arithmetic as qgemm8_dword_tile, blocked for reuse (GEMM-style
// blocking over rows, weight rows and superblocks). Activation rows go in
// blocks whose chunk of kPackK superblocks fits L2 (~512 KiB: 255 rows, the
// float accumulators' buffer's limit); for each block, NW = 4 weight rows
// are transposed dword-major chunk by chunk into a pack of kPackK
// superblocks (per superblock and weight row: the 8 vectors T[k], the
// starting sums -128 * sum(w) and the 16 block scales), and the block's rows
// run past the pack NR = 3 at a time. The pack is 10 KiB (kPackK 4): it has
// to stay in L1 while the tiles' activation rows stream through it; at 8
// superblocks (20 KiB) the GEMM ran at 33-40% of the VNNI peak, at 4 at
// 41-52% (docs/kernels.md, "Packed GEMM: a pack that stays in L1").
// A tile keeps NW x NR integer and NW x NR float accumulators in registers
// (24 + 4 + 1 of 32 zmm): each vpdpbusd's activation vector is used NW times
// and each weight vector NR times, both loaded once into a register (left to
// itself the compiler folded the weight loads into the vpdpbusd, loading each
// weight vector NR times: 148 loads per 96 vpdpbusd); the float accumulators
// go through memory only between chunks. Every output's float accumulator
// takes one fma per superblock in superblock order (d = s_w * s_x,
// fma(float(isum), d, acc) masked to the row's blocks), exactly the dword
// kernel's, then tree16: the scalar reference's floats bit for bit, whichever
// tile, chunk and block computed it.
constexpr int kPackW = 4, kPackR = 3;
constexpr int64_t kPackK = 4;     // superblocks per chunk (2048 columns)
constexpr int kPackVecs = 10;     // per superblock and weight row: T[0..7], init, scales
constexpr int64_t kPackMaxRows = 256;  // rows per block at most (the float accumulators' buffer)

// An int4 superblock (512 columns in 256 bytes) straight into the packed
// dword-major vectors, without unpacking it in column order first and
// transposing 512 bytes (24 dword permutes): T[k] lane j holds block j's
// columns 32j + 4k .. 32j + 4k + 3, which are the 16-bit word 8j + k of the
// int4 bytes (2 columns a byte). So the words are transposed instead (half
// the bytes: 4 + 8 word permutes), each landing in the low half of its
// dword, and a word's 4 nibbles spread into the dword's 4 bytes: bytes
// [b0, 0, b1, 0] (vpshufb), then (s | s << 4) & 0x0f0f per 16 bits puts
// b0's low nibble in byte 0 and its high one in byte 1 (b1 likewise), and
// a 16-entry vpshufb sign-extends each nibble ((n ^ 8) - 8). The same int8
// values in the same places as unpacking the row in column order and
// transposing it as int8 rows are (so the same floats: the packed kernel's
// exactness tests compare it with the unpacked kernels and fail when one
// vector's bytes are moved). About 5 operations a vector instead of 10.
// `avail`: the superblock's bytes inside the row (the rest read as zero).
struct Q4DwordUnpack {
  __m512i stage1[2], stage2[4], spread, nibbles, lut;
  Q4DwordUnpack() {
    alignas(64) int16_t t[32];
    // stage1[h]: of two inputs (blocks 0-3, 4-7 of 8), word kk * 8 + j is
    // word 8j + k of the pair, k = 4h + kk.
    for (int h = 0; h < 2; ++h) {
      for (int p = 0; p < 32; ++p) {
        const int kk = p / 8, j = p % 8, k = 4 * h + kk;
        t[p] = static_cast<int16_t>(j < 4 ? 8 * j + k : 32 + 8 * (j - 4) + k);
      }
      stage1[h] = _mm512_load_si512(t);
    }
    // stage2[kk]: of a stage-1 pair (blocks 0-7, 8-15), word 2j (and 2j + 1)
    // is block j's word kk * 8 + (j % 8).
    for (int kk = 0; kk < 4; ++kk) {
      for (int p = 0; p < 32; ++p) {
        const int j = p / 2;
        t[p] = static_cast<int16_t>(j < 8 ? kk * 8 + j : 32 + kk * 8 + (j - 8));
      }
      stage2[kk] = _mm512_load_si512(t);
    }
    alignas(64) int8_t b[64];
    for (int i = 0; i < 64; ++i) {
      const int d = (i % 16) / 4, e = i % 4;  // dword d of the 128-bit lane, byte e
      b[i] = static_cast<int8_t>(e == 0 ? 4 * d : e == 2 ? 4 * d + 1 : -128);
    }
    spread = _mm512_load_si512(b);
    for (int i = 0; i < 64; ++i) b[i] = static_cast<int8_t>(((i % 16) ^ 8) - 8);
    lut = _mm512_load_si512(b);
    nibbles = _mm512_set1_epi16(0x0f0f);
  }
  void run(const uint8_t* p, int64_t avail, __m512i t[8]) const {
    __m512i in[4];
    for (int q = 0; q < 4; ++q)
      in[q] = avail >= 64 * (q + 1) ? _mm512_loadu_si512(p + 64 * q) : _mm512_maskz_loadu_epi8(lanes64(avail - 64 * q), p + 64 * q);
    for (int h = 0; h < 2; ++h) {
      const __m512i a = _mm512_permutex2var_epi16(in[0], stage1[h], in[1]);
      const __m512i b = _mm512_permutex2var_epi16(in[2], stage1[h], in[3]);
      for (int kk = 0; kk < 4; ++kk) {
        const __m512i s = _mm512_shuffle_epi8(_mm512_permutex2var_epi16(a, stage2[kk], b), spread);
        const __m512i u = _mm512_ternarylogic_epi32(s, _mm512_slli_epi16(s, 4), nibbles, 0xA8);  // (s | s<<4) & m
        t[4 * h + kk] = _mm512_shuffle_epi8(lut, u);
      }
    }
  }
};

// Superblocks [sb0, sb0 + kc) of weight rows [o, o + NW) into pk. int4 rows
// become int8 values (Q4DwordUnpack), so both widths share the tiles below
// (the integer block sums, hence the floats, are the same either way).
template <int BITS, int NW>
void pack_q(const QWeight& w, const WScales& wsc, const DwordTranspose& tr, int64_t o, int64_t sb0, int64_t kc,
            int64_t nblocks, __m512i* pk) {
  static const Q4DwordUnpack q4;
  const __m512i ones = _mm512_set1_epi8(1);
  constexpr int64_t kSuperBytes = kQSuper * BITS / 8, kVecBytes = 64 * BITS / 8;
  for (int64_t j = 0; j < kc; ++j) {
    const int64_t sb = sb0 + j, b0 = sb * 16, nb = nblocks - b0, off = sb * kSuperBytes;
    const bool full = off + kSuperBytes <= w.row_bytes;
    for (int i = 0; i < NW; ++i) {
      const uint8_t* wrow = w.q + (o + i) * w.row_bytes;
      __m512i t[8];
      if constexpr (BITS == 4) {
        q4.run(wrow + off, full ? kSuperBytes : w.row_bytes - off, t);
      } else {
        for (int k = 0; k < 8; ++k) {
          const int64_t at = off + kVecBytes * k;
          t[k] = full ? _mm512_loadu_si512(wrow + at) : _mm512_maskz_loadu_epi8(lanes64(w.row_bytes - at), wrow + at);
        }
        tr.run(t);
      }
      __m512i wsum = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) wsum = _mm512_dpbusd_epi32(wsum, ones, t[k]);
      __m512i* p = pk + (j * NW + i) * kPackVecs;
      for (int k = 0; k < 8; ++k) _mm512_store_si512(p + k, t[k]);
      _mm512_store_si512(p + 8, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(wsum, 7)));
      _mm512_store_si512(p + 9, _mm512_castps_si512(wsc.get(scale_row(w, o + i), w.ngroups, b0, nb)));
    }
  }
}

// Weight rows [o, o + NW) (superblocks [sb0, sb0 + kc) packed in pk) against
// activation rows [r0, r0 + NR). fa: the tile's float accumulators between
// chunks ([NR][NW][16]); first: start them at zero; last: finish into y,
// which points at output (r0, o). KC > 0: kc == KC, a whole chunk, known
// at compile time (the superblock loop unrolled, so one superblock's
// epilogue overlaps the next one's vpdpbusd); 0: kc at run time.
template <int NW, int NR, int KC>
void qgemm8_packed_tile(const __m512i* pk, int64_t sb0, int64_t kc_rt, const QActs& a, int64_t r0, float* fa,
                        bool first, bool last, float* y, int64_t ldy) {
  const int64_t kc = KC > 0 ? KC : kc_rt;
  __m512 f[NW][NR];
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NW; ++i) f[i][r] = first ? _mm512_setzero_ps() : _mm512_load_ps(fa + 16 * (r * NW + i));
  const uint8_t* xq = a.q + r0 * a.qstride + sb0 * kQSuper;
  const float* xs = a.scale + r0 * a.bstride + sb0 * 16;
  for (int64_t j = 0; j < kc; ++j) {
    const __m512i* p = pk + j * NW * kPackVecs;
    __m512i acc[NW][NR];
    for (int i = 0; i < NW; ++i) {
      const __m512i init = _mm512_load_si512(p + i * kPackVecs + 8);
      for (int r = 0; r < NR; ++r) acc[i][r] = init;
    }
    const uint8_t* xb = xq + j * kQSuper;
    for (int k = 0; k < 8; ++k) {
      __m512i wv[NW];
      for (int i = 0; i < NW; ++i) {
        wv[i] = _mm512_load_si512(p + i * kPackVecs + k);
        __asm__("" : "+v"(wv[i]));  // a register, not a memory operand (above)
      }
      for (int r = 0; r < NR; ++r) {
        __m512i xv = _mm512_loadu_si512(xb + r * a.qstride + 64 * k);
        __asm__("" : "+v"(xv));
        for (int i = 0; i < NW; ++i) acc[i][r] = _mm512_dpbusd_epi32(acc[i][r], xv, wv[i]);
      }
    }
    const __mmask16 bm = lanes16(a.nblocks - (sb0 + j) * 16);
    for (int r = 0; r < NR; ++r) {
      const __m512 sx = _mm512_loadu_ps(xs + r * a.bstride + j * 16);
      for (int i = 0; i < NW; ++i) {
        const __m512 d = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_load_si512(p + i * kPackVecs + 9)), sx);
        f[i][r] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(acc[i][r]), d, f[i][r], bm);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < NW; ++i) {
      if (last)
        y[r * ldy + i] = tree16(f[i][r]);
      else
        _mm512_store_ps(fa + 16 * (r * NW + i), f[i][r]);
    }
}

// The weight bytes and scales the next pack_q will read (superblocks from
// sb of the tile's rows [o, o + nw), or, past the rows' end, the next
// tile's first chunk), asked for while the tiles compute the current pack:
// left to the hardware prefetchers, pack_q waited on them (its loads had
// most of its samples, the weights coming from DRAM).
template <int BITS>
inline void prefetch_next_pack(const QWeight& w, int64_t o, int64_t nw, int64_t sb, int64_t nsuper) {
  if (sb >= nsuper) o += nw, sb = 0, nw = kPackW;
  constexpr int64_t kSuperBytes = kQSuper * BITS / 8;
  const int64_t kc = nsuper - sb < kPackK ? nsuper - sb : kPackK;
  const int64_t off = sb * kSuperBytes;
  const int64_t len = (w.row_bytes - off < kc * kSuperBytes ? w.row_bytes - off : kc * kSuperBytes);
  const int64_t g0 = w.group > 0 ? sb * 16 * kQBlock / w.group : 0;
  const int64_t g1 = w.group > 0 ? (sb + kc) * 16 * kQBlock / w.group : 1;
  // Every cache line of [b, e). The empty asm keeps the loop: a loop of
  // nothing but prefetches is one GCC may drop as doing nothing (it did here).
  const auto lines = [](const void* b, const void* e) {
    for (uintptr_t q = reinterpret_cast<uintptr_t>(b) & ~uintptr_t{63}; q < reinterpret_cast<uintptr_t>(e); q += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(q), _MM_HINT_T0);
      __asm__ volatile("");
    }
  };
  for (int64_t i = o; i < o + nw && i < w.rows; ++i) {
    const uint8_t* p = w.q + i * w.row_bytes + off;
    lines(p, p + len);
    const ScaleRow ws = scale_row(w, i);
    lines(ws.addr(g0), ws.addr(g1 < w.ngroups ? g1 : w.ngroups));
  }
}

template <int BITS>
void gemm_packed(const QWeight& w, const QActs& a, float* y, int64_t ldy) {
  static const DwordTranspose transpose;
  const int64_t nsuper = a.bstride / 16;
  const WScales wsc = make_wscales(w);
  alignas(64) __m512i pk[kPackW * kPackK * kPackVecs];
  alignas(64) float fa[kPackMaxRows * kPackW * 16];
  // Rows per block: the block's chunk (kPackK superblocks a row) ~512 KiB at
  // most, the rows shared evenly between the blocks (each block packs every
  // weight tile again: 512 rows are two blocks of 171, not 255 + 255 + 2).
  int64_t rb_max = (512 << 10) / (kPackK * kQSuper) / kPackR * kPackR;
  if (rb_max > kPackMaxRows / kPackR * kPackR) rb_max = kPackMaxRows / kPackR * kPackR;
  const int64_t nblk = (a.nrows + rb_max - 1) / rb_max;
  const int64_t rb = ((a.nrows + nblk - 1) / nblk + kPackR - 1) / kPackR * kPackR;  // <= rb_max
  for (int64_t r0 = 0; r0 < a.nrows; r0 += rb) {
    const int64_t r1 = a.nrows - r0 < rb ? a.nrows : r0 + rb;
    row_tiles<kPackW>(0, w.rows, [&](auto nw, int64_t o) {
      constexpr int NW = decltype(nw)::n;
      for (int64_t sb0 = 0; sb0 < nsuper; sb0 += kPackK) {
        const int64_t kc = nsuper - sb0 < kPackK ? nsuper - sb0 : kPackK;
        const bool first = sb0 == 0, last = sb0 + kc == nsuper;
        pack_q<BITS, NW>(w, wsc, transpose, o, sb0, kc, a.nblocks, pk);
        if constexpr (BITS == 4) prefetch_next_pack<BITS>(w, o, NW, sb0 + kc, nsuper);
        row_tiles<kPackR>(r0, r1, [&](auto nr, int64_t r) {
          float* const fr = fa + (r - r0) * NW * 16;
          if (kc == kPackK)
            qgemm8_packed_tile<NW, nr.n, kPackK>(pk, sb0, kc, a, r, fr, first, last, y + r * ldy + o, ldy);
          else
            qgemm8_packed_tile<NW, nr.n, 0>(pk, sb0, kc, a, r, fr, first, last, y + r * ldy + o, ldy);
        });
      }
    });
  }
}

void k_gemm_q8_packed(const QWeight& w, const QActs& a, float* y, int64_t ldy) { gemm_packed<8>(w, a, y, ldy); }
void k_gemm_q4_packed(const QWeight& w, const QActs& a, float* y, int64_t ldy) { gemm_packed<4>(w, a, y, ldy); }

#endif  // STRATA_VNNI

void k_gemm_q8(const QWeight& w, const QActs& a, float* y, int64_t ldy) { qgemm<8>(w, a, y, ldy); }
void k_gemm_q4(const QWeight& w, const QActs& a, float* y, int64_t ldy) { qgemm<4>(w, a, y, ldy); }
