#include "kernels/matmul.h"

#include <vector>

#include "runtime/thread_pool.h"

namespace strata {

float dot_f32(const float* a, const float* b, int64_t n) {
  constexpr int L = 16;
  float acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  for (int w = L / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

void matmul(const Weight& W, const float* x, int64_t nrows, float* y, ThreadPool* pool) {
  const int64_t out = W.rows, in = W.cols;
  auto body = [&](int64_t o0, int64_t o1) {
    thread_local std::vector<float> wrow;
    if (static_cast<int64_t>(wrow.size()) < in) wrow.resize(static_cast<size_t>(in));
    for (int64_t o = o0; o < o1; ++o) {
      const float* w;
      if (W.format == WeightFormat::F32) {
        w = reinterpret_cast<const float*>(W.q()) + o * in;
      } else {
        W.row_f32(o, wrow.data());
        w = wrow.data();
      }
      for (int64_t r = 0; r < nrows; ++r) y[r * out + o] = dot_f32(w, x + r * in, in);
    }
  };
  if (pool && out * in * nrows > 32768)
    pool->parallel_for(out, body);
  else
    body(0, out);
}

}  // namespace strata
