// Half -> f32 in AVX-512 (vcvtph2ps, exact), included into the AVX-512
// kernel files inside their target region and anonymous namespace.

// y[i] = f32(x[i]) for i < n: 16 lanes at a time, the tail under a mask.
static void k_f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
  }
}

// gemm_f16_rows (qgemm.h): the whole blocks of 16 keys transposed straight
// from the halves (the same dot16s as k_gemm_f32_rows over converted rows);
// the keys left over, or rows wider than kKeyColsMax, converted a block at a
// time for fgemm_tile (gemm_rows_tiles: no second transposed block on the
// stack under the conversion buffer).
static void k_gemm_f16_rows(HRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  const int64_t j0 = gemm_rows_keys16(w, nw, cols, x, nrows, y, ldy);
  if (j0 < nw) gemm_f16_rows_via<gemm_rows_tiles, k_f16_to_f32>(w.from(j0), nw - j0, cols, x, nrows, y + j0, ldy);
}

// wsum_f16 (qgemm.h): k_wsum_f32's tiles with each value vector loaded as
// halves and widened in the register.
static void k_wsum_f16(const float* p, int64_t ldp, int64_t nh, HRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                       int64_t ldy, bool acc) {
  wsum_blocks(p, ldp, nh, v, K, c0, c1, y, ldy, acc);
}
