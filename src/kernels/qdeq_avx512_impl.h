// deq_axpy / deq_gemm (qgemm.h) for AVX-512: int8/int4 weight rows
// dequantized in registers, 16 values a vector, never written out. Included
// by qgemm_avx512.cpp and qgemm_avx512vnni.cpp right after
// qgemm_avx512_impl.h (its rules apply: no standard header, inside the
// file's anonymous namespace and target pragma).
//
// Numerics: the scalar references' bit for bit. A value is
// cvt(int) * scale (one vmulps, as Weight::row_f32's one multiply); deq_axpy
// keeps each output's fma chain over the weight rows in row order, deq_gemm
// is fgemm_tile's dot16 with the weight vector dequantized instead of loaded.
// Groups that are not 0 or a multiple of 16 (vectors would straddle two
// scales) go to the scalar reference.

// Lanes [0, n) of a 16-lane vector, n clamped to [0, 16].
inline __mmask16 deq_lanes(int64_t n) { return n <= 0 ? __mmask16(0) : lanes16(n); }

// Values c .. c + 15 of a weight row (c % 16 == 0), those in DeqMask's
// lanes (0 elsewhere; nothing read past them), times the scale sv.
struct DeqMask {
  __mmask16 lanes, bytes;  // values; int8 bytes = values, int4 bytes = (values + 1) / 2
  static DeqMask full(int BITS) { return {0xffff, BITS == 8 ? __mmask16(0xffff) : __mmask16(0x00ff)}; }
  static DeqMask of(int BITS, int64_t n) {
    DeqMask m;
    m.lanes = deq_lanes(n);
    m.bytes = BITS == 8 ? m.lanes : deq_lanes((n + 1) / 2);
    return m;
  }
};

// FULL: all 16 (plain loads; masked byte loads are slower on Zen 4).
template <int BITS, bool FULL>
inline __m512 deq16(const uint8_t* wrow, int64_t c, DeqMask m, __m512 sv) {
  __m512i v;
  if constexpr (BITS == 8) {
    const __m128i b = FULL ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + c))
                           : _mm_maskz_loadu_epi8(m.bytes, wrow + c);
    v = _mm512_cvtepi8_epi32(b);
  } else {
    // Byte i holds values 2i (low nibble) and 2i + 1 (high): each byte to
    // two lanes, then the nibble shifted to the top and back (sign-extended).
    const __m128i b = _mm_maskz_loadu_epi8(m.bytes, wrow + c / 2);
    const __m128i dup = _mm_shuffle_epi8(b, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    const __m512i sh = _mm512_setr_epi32(28, 24, 28, 24, 28, 24, 28, 24, 28, 24, 28, 24, 28, 24, 28, 24);
    v = _mm512_srai_epi32(_mm512_sllv_epi32(_mm512_cvtepu8_epi32(dup), sh), 28);
  }
  return _mm512_mul_ps(_mm512_cvtepi32_ps(v), sv);
}

// int4, all 16 lanes, by lookup instead of arithmetic: nib_table(sv) holds
// the 16 values a nibble stands for times the scale (the multiplication
// deq16 does, of the same two floats: the same products), and
// deq16_q4_lookup picks them per lane with vpermps, which reads an index's
// low 4 bits only. Byte i (values 2i and 2i + 1) goes to qword i, or-ed with
// itself shifted left by 28: dword 2i's low nibble is byte i's low one,
// dword 2i + 1's its high one. A table serves every vector of its group:
// 4 vector operations a value vector instead of deq16's 7.
inline __m512 nib_table(__m512 sv) {
  return _mm512_mul_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1), sv);
}
inline __m512 deq16_q4_lookup(const uint8_t* wrow, int64_t c, __m512 table) {
  const uint8_t* p = wrow + c / 2;
  __m512i v = _mm512_broadcastd_epi32(_mm_loadu_si32(p));
  v = _mm512_mask_broadcastd_epi32(v, 0xff00, _mm_loadu_si32(p + 4));
  const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
  return _mm512_permutexvar_ps(_mm512_srlv_epi32(v, sh), table);
}

inline bool deq_simd_group(const QWeight& w) { return w.group == 0 || w.group % 16 == 0; }

// deq_axpy's tiles walk the weight rows down one column span (a cache line
// or two of each row, rows row_bytes apart), a stride the hardware
// prefetchers did not keep ahead of: the tile waited on each row's first
// load. So each row asks for the span kDeqAxpyAhead rows further down, and
// its scales. Loads only: no value changes.
constexpr int64_t kDeqAxpyAhead = 16;
inline void deq_axpy_prefetch(const QWeight& w, int64_t o, int64_t byte0, int64_t nbytes, int64_t g0, int64_t g1) {
  if (o + kDeqAxpyAhead >= w.rows) return;
  const uint8_t* p = w.q + (o + kDeqAxpyAhead) * w.row_bytes + byte0;
  for (int64_t b = 0; b < nbytes; b += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + b), _MM_HINT_T0);
    __asm__ volatile("");  // keeps a loop of nothing but prefetches
  }
  _mm_prefetch(reinterpret_cast<const char*>(p + nbytes - 1), _MM_HINT_T0);
  const ScaleRow ws = scale_row(w, o + kDeqAxpyAhead);
  _mm_prefetch(static_cast<const char*>(ws.addr(g0)), _MM_HINT_T0);
  _mm_prefetch(static_cast<const char*>(ws.addr(g1)), _MM_HINT_T0);
}

// deq_axpy over activation rows [r0, r0 + NR) and columns [c0, c0 + 16 NV)
// (those below w.cols; FULL: all of them): NR x NV accumulators across
// every weight row.
template <int BITS, int NR, int NV, bool FULL>
void deq_axpy_tile(const QWeight& w, const float* a, int64_t lda, int64_t r0, int64_t c0, float* y, int64_t ldy) {
  int64_t gi[NV];
  DeqMask m[NV];
  for (int v = 0; v < NV; ++v) {
    const int64_t c = c0 + 16 * v;
    // A vector wholly past the last column reads group 0's scale (its lanes
    // are all masked off), never a scale past the row's last group.
    gi[v] = w.group > 0 && c < w.cols ? c / w.group : 0;
    m[v] = FULL ? DeqMask::full(BITS) : DeqMask::of(BITS, w.cols - c);
  }
  __m512 acc[NR][NV];
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const int64_t pf0 = c0 * BITS / 8, pfn = FULL ? 16 * NV * BITS / 8 : (w.cols - c0) * BITS / 8 + 1;
  for (int64_t o = 0; o < w.rows; ++o) {
    const uint8_t* wrow = w.q + o * w.row_bytes;
    const ScaleRow ws = scale_row(w, o);
    deq_axpy_prefetch(w, o, pf0, pfn, gi[0], gi[NV - 1]);
    __m512 wv[NV];
    if constexpr (BITS == 4 && FULL && NR <= 2) {
      // Vectors of one group (same gi, always adjacent) share a table.
      __m512 tab = nib_table(_mm512_set1_ps(ws[gi[0]]));
      for (int v = 0; v < NV; ++v) {
        if (v > 0 && gi[v] != gi[v - 1]) tab = nib_table(_mm512_set1_ps(ws[gi[v]]));
        wv[v] = deq16_q4_lookup(wrow, c0 + 16 * v, tab);
      }
    } else {
      for (int v = 0; v < NV; ++v) wv[v] = deq16<BITS, FULL>(wrow, c0 + 16 * v, m[v], _mm512_set1_ps(ws[gi[v]]));
    }
    for (int r = 0; r < NR; ++r) {
      const __m512 av = _mm512_set1_ps(a[(r0 + r) * lda + o]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, wv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(y + (r0 + r) * ldy + c0 + 16 * v, m[v].lanes, acc[r][v]);
}

// deq_axpy_tile for int4, all 16 NV columns below w.cols, groups of 32k
// (or 0), NR <= 2: per 32 columns one 16-byte load widened to 16 dwords
// (byte i, values 2i and 2i + 1, in lane i), looked up twice in the group's
// table (vpermps reads the low nibble; then the byte shifted right by 4):
// the even columns' values in one vector, the odd columns' in another, 3
// vector operations a value vector instead of deq16_q4_lookup's 4. The
// accumulators hold even and odd columns apart and are interleaved back
// only when stored: each output's fma chain over the weight rows is the
// same, so are its floats.
template <int NR, int NV>
void deq_axpy_tile_q4_pairs(const QWeight& w, const float* a, int64_t lda, int64_t r0, int64_t c0, float* y,
                            int64_t ldy) {
  static_assert(NV % 2 == 0);
  constexpr int NP = NV / 2;  // 32-column blocks
  int64_t gi[NP];
  for (int p = 0; p < NP; ++p) gi[p] = w.group > 0 ? (c0 + 32 * p) / w.group : 0;
  __m512 acc[NR][NV];  // [2p]: block p's even columns, [2p + 1]: its odd ones
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t o = 0; o < w.rows; ++o) {
    const uint8_t* wrow = w.q + o * w.row_bytes + c0 / 2;
    const ScaleRow ws = scale_row(w, o);
    deq_axpy_prefetch(w, o, c0 / 2, 16 * NP, gi[0], gi[NP - 1]);
    __m512 tab = nib_table(_mm512_set1_ps(ws[gi[0]]));
    __m512 wv[NV];
    for (int p = 0; p < NP; ++p) {
      if (p > 0 && gi[p] != gi[p - 1]) tab = nib_table(_mm512_set1_ps(ws[gi[p]]));
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + 16 * p)));
      wv[2 * p] = _mm512_permutexvar_ps(b, tab);
      wv[2 * p + 1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tab);
    }
    for (int r = 0; r < NR; ++r) {
      const __m512 av = _mm512_set1_ps(a[(r0 + r) * lda + o]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, wv[v], acc[r][v]);
    }
  }
  // Columns 32p + j: j even from the even vector's lane j / 2, odd from the
  // odd one's (index + 16 selects the second source).
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int r = 0; r < NR; ++r)
    for (int p = 0; p < NP; ++p) {
      float* dst = y + (r0 + r) * ldy + c0 + 32 * p;
      _mm512_storeu_ps(dst, _mm512_permutex2var_ps(acc[r][2 * p], lo, acc[r][2 * p + 1]));
      _mm512_storeu_ps(dst + 16, _mm512_permutex2var_ps(acc[r][2 * p], hi, acc[r][2 * p + 1]));
    }
}

template <int BITS>
void deq_axpy(const QWeight& w, const float* a, int64_t lda, int64_t nrows, float* y, int64_t ldy) {
  row_tiles<4>(0, nrows, [&](auto nr, int64_t r) {
    constexpr int NV = nr.n <= 2 ? 8 : 4;  // 16 accumulators at most
    int64_t c0 = 0;
    if constexpr (BITS == 4 && nr.n <= 2) {
      if (w.group == 0 || w.group % 32 == 0)
        for (; c0 + 16 * NV <= w.cols; c0 += 16 * NV) deq_axpy_tile_q4_pairs<nr.n, NV>(w, a, lda, r, c0, y, ldy);
    }
    for (; c0 + 16 * NV <= w.cols; c0 += 16 * NV) deq_axpy_tile<BITS, nr.n, NV, true>(w, a, lda, r, c0, y, ldy);
    if (c0 < w.cols) deq_axpy_tile<BITS, nr.n, NV, false>(w, a, lda, r, c0, y, ldy);
  });
}


// deq_gemm of weight rows [o, o + NW) against activation rows [r, r + NR).
template <int BITS, int NW, int NR>
void deq_gemm_tile(const QWeight& w, int64_t o0, const float* x, float* y, int64_t ldy) {
  const int64_t cols = w.cols;
  __m512 acc[NW][NR];
  for (int o = 0; o < NW; ++o)
    for (int r = 0; r < NR; ++r) acc[o][r] = _mm512_setzero_ps();
  const uint8_t* wr[NW];
  ScaleRow ws[NW];
  for (int o = 0; o < NW; ++o) wr[o] = w.q + (o0 + o) * w.row_bytes, ws[o] = scale_row(w, o0 + o);
  int64_t i = 0, gi = 0, k = 0;  // k: columns of group gi before i
  const auto next_group = [&] {
    k += 16;
    if (k == w.group) k = 0, ++gi;
  };
  if constexpr (BITS == 4 && NR <= 2) {
    // Whole groups of 32k columns (or one scale a row): a table per weight
    // row and group, for all the group's vectors.
    if (w.group == 0 || w.group % 32 == 0) {
      const int64_t step = w.group == 0 ? 32 : w.group;
      for (; i + step <= cols; i += step, ++gi) {
        __m512 tab[NW];
        for (int o = 0; o < NW; ++o) tab[o] = nib_table(_mm512_set1_ps(ws[o][w.group == 0 ? 0 : gi]));
        for (int64_t c = i; c < i + step; c += 16) {
          __m512 wv[NW];
          for (int o = 0; o < NW; ++o) wv[o] = deq16_q4_lookup(wr[o], c, tab[o]);
          for (int r = 0; r < NR; ++r) {
            const __m512 xv = _mm512_loadu_ps(x + r * cols + c);
            for (int o = 0; o < NW; ++o) acc[o][r] = _mm512_fmadd_ps(wv[o], xv, acc[o][r]);
          }
        }
      }
      if (w.group == 0) gi = 0;
    }
  }
  for (; i + 16 <= cols; i += 16, next_group()) {
    __m512 wv[NW];
    for (int o = 0; o < NW; ++o) wv[o] = deq16<BITS, true>(wr[o], i, DeqMask::full(BITS), _mm512_set1_ps(ws[o][gi]));
    for (int r = 0; r < NR; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * cols + i);
      for (int o = 0; o < NW; ++o) acc[o][r] = _mm512_fmadd_ps(wv[o], xv, acc[o][r]);
    }
  }
  if (i < cols) {
    const DeqMask m = DeqMask::of(BITS, cols - i);
    __m512 wv[NW];
    for (int o = 0; o < NW; ++o) wv[o] = deq16<BITS, false>(wr[o], i, m, _mm512_set1_ps(ws[o][gi]));
    for (int r = 0; r < NR; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(m.lanes, x + r * cols + i);
      for (int o = 0; o < NW; ++o) acc[o][r] = _mm512_mask3_fmadd_ps(wv[o], xv, acc[o][r], m.lanes);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int o = 0; o < NW; ++o) y[r * ldy + o0 + o] = tree16(acc[o][r]);
}

template <int BITS>
void deq_gemm(const QWeight& w, const float* x, int64_t nrows, float* y, int64_t ldy) {
  gemm_tiles<4, 4>(w.rows, nrows, row_block(w.cols * 4), [&](auto tw, auto tr, int64_t o, int64_t r) {
    deq_gemm_tile<BITS, tw.n, tr.n>(w, o, x + r * w.cols, y + r * ldy, ldy);
  });
}

// ---- Prefill-sized calls: dequantize once, then f32 tiles ----
// Above kDeqPanelRows activation rows every row tile would dequantize the
// same weight vectors again (a prefill of 512 rows: 128 times), so a panel
// of weight values is dequantized once into an f32 buffer on the stack
// (deq16: the same products) and each row tile loads it instead. The tiles
// keep the in-register kernels' arithmetic: deq_gemm's is fgemm_tile's
// dot16, deq_axpy's the same fma chain over the weight rows in row order
// (a chain that crosses a chunk of kAxpyChunk weight rows is stored to y
// and loaded back, which changes no float). So either form gives the same
// floats for any row count.
constexpr int64_t kDeqPanelRows = 8;     // nrows from which the panel forms run
constexpr int64_t kDeqPanelCols = 4096;  // deq_gemm: 4 weight rows of at most this many columns (64 KiB)
constexpr int64_t kAxpyChunk = 128;      // deq_axpy: weight rows per panel of 64 columns (32 KiB)

// Values [c0, c0 + 16 nv) of weight row o into dst (c0 % 16 == 0): those
// below w.cols dequantized, the rest 0.
template <int BITS>
inline void deq_span_f32(const QWeight& w, int64_t o, int64_t c0, int64_t nv, float* dst) {
  const uint8_t* wrow = w.q + o * w.row_bytes;
  const ScaleRow ws = scale_row(w, o);
  for (int64_t v = 0; v < nv; ++v) {
    const int64_t c = c0 + 16 * v;
    __m512 d = _mm512_setzero_ps();
    if (c + 16 <= w.cols)
      d = deq16<BITS, true>(wrow, c, DeqMask::full(BITS), _mm512_set1_ps(ws[w.group > 0 ? c / w.group : 0]));
    else if (c < w.cols)
      d = _mm512_maskz_mov_ps(deq_lanes(w.cols - c), deq16<BITS, false>(wrow, c, DeqMask::of(BITS, w.cols - c),
                                                                       _mm512_set1_ps(ws[w.group > 0 ? c / w.group : 0])));
    _mm512_storeu_ps(dst + 16 * v, d);
  }
}

// deq_axpy_tile over a panel of no weight rows (16 NV values each, the
// columns [c0, c0 + ncols) of y) for activation rows [r0, r0 + NR): the
// chain starts at 0 (first) or from what y holds.
template <int NR, int NV, bool FULL>
void axpy_panel_tile(const float* panel, int64_t no, const float* a, int64_t lda, int64_t r0, float* y, int64_t ldy,
                     bool first, int64_t ncols) {
  __mmask16 m[NV];
  for (int v = 0; v < NV; ++v) m[v] = FULL ? __mmask16(0xffff) : deq_lanes(ncols - 16 * v);
  __m512 acc[NR][NV];
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m[v], y + (r0 + r) * ldy + 16 * v);
  for (int64_t o = 0; o < no; ++o) {
    __m512 wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = _mm512_load_ps(panel + (o * NV + v) * 16);
    for (int r = 0; r < NR; ++r) {
      const __m512 av = _mm512_set1_ps(a[(r0 + r) * lda + o]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, wv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(y + (r0 + r) * ldy + 16 * v, m[v], acc[r][v]);
}

template <int BITS>
void deq_axpy_panel(const QWeight& w, const float* a, int64_t lda, int64_t nrows, float* y, int64_t ldy) {
  constexpr int NV = 4;
  alignas(64) float panel[kAxpyChunk * NV * 16];
  for (int64_t c0 = 0; c0 < w.cols; c0 += 16 * NV) {
    const int64_t ncols = w.cols - c0 < 16 * NV ? w.cols - c0 : 16 * NV;
    for (int64_t o0 = 0; o0 < w.rows; o0 += kAxpyChunk) {
      const int64_t no = w.rows - o0 < kAxpyChunk ? w.rows - o0 : kAxpyChunk;
      for (int64_t o = 0; o < no; ++o) deq_span_f32<BITS>(w, o0 + o, c0, NV, panel + o * NV * 16);
      row_tiles<4>(0, nrows, [&](auto nr, int64_t r) {
        if (ncols == 16 * NV)
          axpy_panel_tile<nr.n, NV, true>(panel, no, a + o0, lda, r, y + c0, ldy, o0 == 0, ncols);
        else
          axpy_panel_tile<nr.n, NV, false>(panel, no, a + o0, lda, r, y + c0, ldy, o0 == 0, ncols);
      });
    }
  }
}

template <int BITS>
void deq_gemm_panel(const QWeight& w, const float* x, int64_t nrows, float* y, int64_t ldy) {
  alignas(64) float panel[4 * kDeqPanelCols];
  const int64_t cols = w.cols, ld = (cols + 15) / 16 * 16;
  const int64_t rb = row_block(cols * 4);
  for (int64_t r0 = 0; r0 < nrows; r0 += rb) {
    const int64_t r1 = nrows - r0 < rb ? nrows : r0 + rb;
    for (int64_t o = 0; o < w.rows; o += 4) {
      const int nw = w.rows - o < 4 ? static_cast<int>(w.rows - o) : 4;
      const float* wr[4];
      for (int i = 0; i < nw; ++i) {
        deq_span_f32<BITS>(w, o + i, 0, ld / 16, panel + i * ld);
        wr[i] = panel + i * ld;
      }
      if (nw == 4) {
        row_tiles<4>(r0, r1, [&](auto nr, int64_t r) {
          fgemm_tile<false, 4, nr.n>(wr, cols, x + r * cols, y + r * ldy + o, ldy);
        });
      } else {
        for (int i = 0; i < nw; ++i)
          row_tiles<4>(r0, r1, [&](auto nr, int64_t r) {
            fgemm_tile<false, 1, nr.n>(wr + i, cols, x + r * cols, y + r * ldy + o + i, ldy);
          });
      }
    }
  }
}

void k_deq_axpy(const QWeight& w, const float* a, int64_t lda, int64_t nrows, float* y, int64_t ldy) {
  if (!deq_simd_group(w)) return deq_axpy_ref(w, a, lda, nrows, y, ldy);
  if (nrows >= kDeqPanelRows)
    return w.bits == 4 ? deq_axpy_panel<4>(w, a, lda, nrows, y, ldy) : deq_axpy_panel<8>(w, a, lda, nrows, y, ldy);
  if (w.bits == 4) return deq_axpy<4>(w, a, lda, nrows, y, ldy);
  deq_axpy<8>(w, a, lda, nrows, y, ldy);
}

void k_deq_gemm(const QWeight& w, const float* x, int64_t nrows, float* y, int64_t ldy) {
  if (!deq_simd_group(w)) return deq_gemm_ref(w, x, nrows, y, ldy);
  if (nrows >= kDeqPanelRows && w.cols <= kDeqPanelCols)
    return w.bits == 4 ? deq_gemm_panel<4>(w, x, nrows, y, ldy) : deq_gemm_panel<8>(w, x, nrows, y, ldy);
  if (w.bits == 4) return deq_gemm<4>(w, x, nrows, y, ldy);
  deq_gemm<8>(w, x, nrows, y, ldy);
}
