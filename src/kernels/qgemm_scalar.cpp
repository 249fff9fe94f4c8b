// The scalar reference of every kernel, the activation quantizer shared by all
// paths, and the path tables. Written for clarity: the SIMD paths are tested
// against these bit for bit (tests/unit/kernels_test.cpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/qgemm.h"

namespace strata {

namespace {

float dot16(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] = std::fma(a[i + j], b[i + j], acc[j]);
  for (int j = 0; i < n; ++i, ++j) acc[j] = std::fma(a[i], b[i], acc[j]);
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = acc[j] + acc[j + w];
  return acc[0];
}

void gemm_f32(const float* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  for (int64_t o = 0; o < nw; ++o)
    for (int64_t r = 0; r < nrows; ++r) y[r * ldy + o] = dot16(w + o * cols, x + r * cols, cols);
}

float bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// dot16 of a bf16 row (widened element by element) and x: the same
// operations as dot16 over the widened row.
float dot16_bf16(const uint16_t* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] = std::fma(bf16_value(a[i + j]), b[i + j], acc[j]);
  for (int j = 0; i < n; ++i, ++j) acc[j] = std::fma(bf16_value(a[i]), b[i], acc[j]);
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = acc[j] + acc[j + w];
  return acc[0];
}

void gemm_bf16(const uint16_t* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  for (int64_t o = 0; o < nw; ++o)
    for (int64_t r = 0; r < nrows; ++r) y[r * ldy + o] = dot16_bf16(w + o * cols, x + r * cols, cols);
}

int weight_value(const QWeight& w, const uint8_t* row, int64_t c) {
  if (w.bits == 8) return static_cast<int8_t>(row[c]);
  const int nib = (c % 2 == 0) ? (row[c / 2] & 0x0f) : (row[c / 2] >> 4);
  return nib >= 8 ? nib - 16 : nib;
}

void gemm_q(const QWeight& w, const QActs& a, float* y, int64_t ldy) {
  for (int64_t o = 0; o < w.rows; ++o) {
    const uint8_t* wrow = w.q + o * w.row_bytes;
    const ScaleRow ws = scale_row(w, o);
    for (int64_t r = 0; r < a.nrows; ++r) {
      const int8_t* xq = reinterpret_cast<const int8_t*>(a.q + r * a.qstride);  // ActLayout::Plain
      // dot16 over blocks of (float(isum_b), s_w * s_x), accumulated as the
      // blocks are computed: block b goes to lane b % 16.
      float acc[16] = {};
      for (int64_t b = 0; b < a.nblocks; ++b) {
        const int64_t c0 = b * kQBlock, c1 = std::min(w.cols, c0 + kQBlock);
        // Widened to int32 first: GCC 12.2 at -O3 with AVX-512 miscompiles the
        // fused signed-char dot product (treats the weight as unsigned).
        int32_t wv[kQBlock], xv[kQBlock], isum = 0;
        for (int64_t c = c0; c < c1; ++c) wv[c - c0] = weight_value(w, wrow, c), xv[c - c0] = xq[c];
        for (int64_t i = 0; i < c1 - c0; ++i) isum += wv[i] * xv[i];
        const float d = ws[w.group > 0 ? c0 / w.group : 0] * a.scale[r * a.bstride + b];
        acc[b % 16] = std::fma(static_cast<float>(isum), d, acc[b % 16]);
      }
      for (int lanes = 8; lanes > 0; lanes /= 2)
        for (int j = 0; j < lanes; ++j) acc[j] = acc[j] + acc[j + lanes];
      y[r * ldy + o] = acc[0];
    }
  }
}

// deq(o, c) of qgemm.h: the value Weight::row_f32 gives (one multiply).
float deq_value(const QWeight& w, int64_t o, int64_t c) {
  const float s = scale_row(w, o)[w.group > 0 ? c / w.group : 0];
  return static_cast<float>(weight_value(w, w.q + o * w.row_bytes, c)) * s;
}

}  // namespace

void deq_axpy_ref(const QWeight& w, const float* a, int64_t lda, int64_t nrows, float* y, int64_t ldy) {
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) {
      float acc = 0.0f;
      for (int64_t o = 0; o < w.rows; ++o) acc = std::fma(a[r * lda + o], deq_value(w, o, c), acc);
      y[r * ldy + c] = acc;
    }
}

void deq_gemm_ref(const QWeight& w, const float* x, int64_t nrows, float* y, int64_t ldy) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t o = 0; o < w.rows; ++o) {
    for (int64_t c = 0; c < w.cols; ++c) row[static_cast<size_t>(c)] = deq_value(w, o, c);
    gemm_f32(row.data(), 1, w.cols, x, nrows, y + o, ldy);
  }
}

void gemm_f32_rows_ref(FRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  for (int64_t j = 0; j < nw; ++j) gemm_f32(w.row(j), 1, cols, x, nrows, y + j, ldy);
}

void wsum_f32_ref(const float* p, int64_t ldp, int64_t nh, FRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                  int64_t ldy, bool acc) {
  // Key by key over a head's output row: each output's chain in key order,
  // and a loop over columns the compiler can vectorise (the path for AVX2
  // and NEON, which have no kernel of their own).
  for (int64_t h = 0; h < nh; ++h) {
    float* out = y + h * ldy;
    if (!acc)
      for (int64_t c = c0; c < c1; ++c) out[c] = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      const float pj = p[h * ldp + j];
      const float* vr = v.row(j);
      for (int64_t c = c0; c < c1; ++c) out[c] = std::fma(pj, vr[c], out[c]);
    }
  }
}

void gemm_f32_lanes_ref(const float* t, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y,
                        int64_t ldy) {
  gemm_f32_lanes_via<gemm_f32_rows_ref>(t, nw, cols, x, nrows, y, ldy);
}

void gemm_f16_rows_ref(HRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  gemm_f16_rows_via<gemm_f32_rows_ref, f16_to_f32_ref>(w, nw, cols, x, nrows, y, ldy);
}

void wsum_f16_ref(const float* p, int64_t ldp, int64_t nh, HRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                  int64_t ldy, bool acc) {
  wsum_f16_via<wsum_f32_ref, f16_to_f32_ref>(p, ldp, nh, v, K, c0, c1, y, ldy, acc);
}

int64_t qacts_qstride(int64_t cols) { return (cols + kQSuper - 1) / kQSuper * kQSuper; }
int64_t qacts_bstride(int64_t cols) { return qacts_qstride(cols) / kQBlock; }

QActs quantize_acts(const float* x, int64_t nrows, int64_t cols, ActLayout layout, uint8_t* q, float* scale,
                    int32_t* sum8) {
  QActs a;
  a.nrows = nrows;
  a.cols = cols;
  a.nblocks = (cols + kQBlock - 1) / kQBlock;
  a.qstride = qacts_qstride(cols);
  a.bstride = qacts_bstride(cols);
  const bool offset = layout == ActLayout::Offset128 || layout == ActLayout::Offset128Dword;
  const uint8_t zero = offset ? 128 : 0;
  for (int64_t r = 0; r < nrows; ++r) {
    const float* xr = x + r * cols;
    uint8_t* qr = q + r * a.qstride;
    float* sr = scale + r * a.bstride;
    int32_t* mr = sum8 + r * a.bstride;
    for (int64_t i = 0; i < a.qstride; ++i) qr[i] = zero;
    for (int64_t b = 0; b < a.bstride; ++b) sr[b] = 0.0f, mr[b] = 0;
    for (int64_t b = 0; b < a.nblocks; ++b) {
      const int64_t c0 = b * kQBlock, c1 = std::min(cols, c0 + kQBlock);
      float amax = 0.0f;
      bool finite = true;
      for (int64_t c = c0; c < c1; ++c) {
        finite = finite && std::isfinite(xr[c]);
        amax = std::max(amax, std::fabs(xr[c]));
      }
      if (!finite) {  // the block's products become NaN, as a float dot product's would
        sr[b] = NAN;
        continue;
      }
      const float s = amax / 127.0f;
      sr[b] = s;
      if (s == 0.0f) continue;  // all zero (or too small to scale): q = 0
      int32_t sum = 0;
      for (int64_t c = c0; c < c1; ++c) {
        const int v = static_cast<int>(std::nearbyint(std::clamp(xr[c] / s, -127.0f, 127.0f)));
        sum += v;
        int64_t pos = c;
        if (layout == ActLayout::SplitNibble) {
          const int64_t i = c % 128;
          pos = c - i + (i % 2 ? 64 : 0) + i / 2;
        } else if (layout == ActLayout::Offset128Dword) {
          const int64_t i = c % kQSuper, j = i / kQBlock, k = (i % kQBlock) / 4, t = i % 4;
          pos = c - i + 64 * k + 4 * j + t;
        }
        qr[pos] = static_cast<uint8_t>(offset ? v + 128 : v);
      }
      mr[b] = 8 * sum;
    }
  }
  a.q = q;
  a.scale = scale;
  a.sum8 = sum8;
  return a;
}

const KernelTable& kernel_table_scalar() {
  static const KernelTable t{KernelPath::Scalar, dot16,           gemm_f32, gemm_bf16, gemm_q, gemm_q,
                             ActLayout::Plain,   ActLayout::Plain};
  return t;
}

const KernelTable& kernel_table(KernelPath p) {
  // Only this architecture's SIMD files are built (CMakeLists.txt); the
  // other paths are never supported, so they cannot be asked for.
  switch (p) {
#if defined(__x86_64__) || defined(__i386__)
    case KernelPath::Avx2: return kernel_table_avx2();
    case KernelPath::Avx512: return kernel_table_avx512();
    case KernelPath::Avx512Vnni: return kernel_table_avx512vnni();
#else
    case KernelPath::Avx2:
    case KernelPath::Avx512:
    case KernelPath::Avx512Vnni: break;
#endif
#if defined(__aarch64__)
    case KernelPath::Neon: return kernel_table_neon();
    case KernelPath::NeonDotprod: return kernel_table_neon_dotprod();
    case KernelPath::NeonI8mm: return kernel_table_neon_i8mm();
#else
    case KernelPath::Neon:
    case KernelPath::NeonDotprod:
    case KernelPath::NeonI8mm: break;
#endif
    case KernelPath::Scalar: break;
  }
  return kernel_table_scalar();
}

}  // namespace strata
