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
