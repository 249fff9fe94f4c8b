// exp, softmax and silu(g) * u (qgemm.h's exp_f32 / softmax / silu_mul) for
// AVX-512. Included by qgemm_avx512.cpp and qgemm_avx512vnni.cpp after
// qgemm_avx512_impl.h (its rules apply: no standard header, inside the
// file's anonymous namespace and target pragma; built with
// -ffp-contract=off, so every fma below is one written out).
//
// Numerics: the scalar references' bit for bit, std::exp included. The
// scalar paths call glibc's expf; exp16 computes glibc's expf algorithm (the
// one x86-64 glibc has used since 2.27, its FMA build) with the same double
// operations in the same order, 8 lanes at a time:
//   k + r = x * 32 / ln 2 (k an integer, by the 1.5 * 2^52 shift),
//   2^(k/32) from a table of 2^(j/32), j = k mod 32, and k's exponent bits,
//   exp(x) = 2^(k/32) * (1 + c2 r + (c0 r + c1) r^2), rounded once to float.
// Checked against std::exp on all 2^32 inputs (KernelVexp.* in
// tests/unit/vexp_test.cpp: a sweep; STRATA_EXP_EXHAUSTIVE=1 all of them).
// Lanes past glibc's range take its results: +inf above log(2^128), +0
// below log(2^-150), x + x for a NaN. The tables use these only where
// exp_kernel_matches_libm (ops.h) finds std::exp to be that expf.

// 2^(j/32) for j < 32, each the double nearest to it (glibc's table holds the
// same values, less j << 47 in the bits).
alignas(64) constexpr double kPow2Frac32[32] = {
    0x1.0000000000000p+0, 0x1.059b0d3158574p+0, 0x1.0b5586cf9890fp+0, 0x1.11301d0125b51p+0,
    0x1.172b83c7d517bp+0, 0x1.1d4873168b9aap+0, 0x1.2387a6e756238p+0, 0x1.29e9df51fdee1p+0,
    0x1.306fe0a31b715p+0, 0x1.371a7373aa9cbp+0, 0x1.3dea64c123422p+0, 0x1.44e086061892dp+0,
    0x1.4bfdad5362a27p+0, 0x1.5342b569d4f82p+0, 0x1.5ab07dd485429p+0, 0x1.6247eb03a5585p+0,
    0x1.6a09e667f3bcdp+0, 0x1.71f75e8ec5f74p+0, 0x1.7a11473eb0187p+0, 0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0, 0x1.93737b0cdc5e5p+0, 0x1.9c49182a3f090p+0, 0x1.a5503b23e255dp+0,
    0x1.ae89f995ad3adp+0, 0x1.b7f76f2fb5e47p+0, 0x1.c199bdd85529cp+0, 0x1.cb720dcef9069p+0,
    0x1.d5818dcfba487p+0, 0x1.dfc97337b9b5fp+0, 0x1.ea4afa2a490dap+0, 0x1.f50765b6e4540p+0};

// exp of 8 floats, in double: the main path only (no range fix-ups).
inline __m256 exp8_core(__m256 x) {
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d inv = _mm512_set1_pd(0x1.71547652b82fep+5);  // 32 / ln 2
  const __m512d shift = _mm512_set1_pd(0x1.8p+52);
  const __m512d kshift = _mm512_fmadd_pd(xd, inv, shift);  // k + shift, k rounded to nearest
  const __m512i ki = _mm512_castpd_si512(kshift);          // k in the low bits
  const __m512d r = _mm512_fmsub_pd(inv, xd, _mm512_sub_pd(kshift, shift));
  // 2^(j/32) for j = k & 31 (4 index bits per permute, bit 4 picks the pair),
  // times 2^(k >> 5) added into the exponent field.
  const __m512d lo = _mm512_permutex2var_pd(_mm512_load_pd(kPow2Frac32), ki, _mm512_load_pd(kPow2Frac32 + 8));
  const __m512d hi = _mm512_permutex2var_pd(_mm512_load_pd(kPow2Frac32 + 16), ki, _mm512_load_pd(kPow2Frac32 + 24));
  const __m512d tab = _mm512_mask_blend_pd(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
  const __m512d s = _mm512_castsi512_pd(
      _mm512_add_epi64(_mm512_castpd_si512(tab), _mm512_slli_epi64(_mm512_srli_epi64(ki, 5), 52)));
  const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.c6af84b912394p-20), _mm512_set1_pd(0x1.ebfce50fac4f3p-13));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.62e42ff0c52d6p-6), _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

// std::exp of 16 floats.
inline __m512 exp16(__m512 x) {
  __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(exp8_core(_mm512_castps512_ps256(x))),
                                exp8_core(_mm512_extractf32x8_ps(x, 1)), 1);
  const __mmask16 over = _mm512_cmp_ps_mask(x, _mm512_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ);
  const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  y = _mm512_mask_mov_ps(y, over, _mm512_set1_ps(__builtin_inff()));
  y = _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
  return _mm512_mask_add_ps(y, nan, x, x);
}

void k_exp_f32(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = lanes16(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// softmax(): the max (any order: a NaN never wins, as with std::max, and a
// +0 / -0 max gives the same differences' exps), the exps, their sum in
// double in index order (one add per value, as the reference), one multiply
// by the float reciprocal.
void k_softmax(float* x, int64_t n) {
  __m512 mv = _mm512_set1_ps(-__builtin_inff());
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) mv = _mm512_max_ps(_mm512_loadu_ps(x + i), mv);
  if (i < n) {
    const __mmask16 m = lanes16(n - i);
    mv = _mm512_mask_max_ps(mv, m, _mm512_maskz_loadu_ps(m, x + i), mv);
  }
  const __m512 mb = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
  double s = 0.0;
  for (i = 0; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(x + i, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mb)));
    for (int64_t k = i; k < i + 16; ++k) s += x[k];
  }
  if (i < n) {
    const __mmask16 m = lanes16(n - i);
    _mm512_mask_storeu_ps(x + i, m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mb)));
    for (int64_t k = i; k < n; ++k) s += x[k];
  }
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / s));
  for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
  if (i < n) {
    const __mmask16 m = lanes16(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

// g = silu(g) * u = g / (1 + exp(-g)) * u, the reference's three roundings.
inline __m512 silu_mul16(__m512 g, __m512 u) {
  const __m512 e = exp16(_mm512_xor_ps(g, _mm512_set1_ps(-0.0f)));  // -g exactly
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

void k_silu_mul(float* g, const float* u, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(g + i, silu_mul16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
  if (i < n) {
    const __mmask16 m = lanes16(n - i);
    _mm512_mask_storeu_ps(g + i, m, silu_mul16(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
  }
}
