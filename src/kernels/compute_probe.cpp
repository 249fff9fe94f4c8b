#include "kernels/compute_probe.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "core/weight.h"
#include "kernels/matmul.h"

namespace strata {

namespace {

double now_seconds() { return static_cast<double>(now_ns()) * 1e-9; }

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Seconds per call of `fa` and of `fb`: batches of each in turn (so a load
// that changes meanwhile weighs on both alike) until `budget` seconds are
// spent (at least 5 of each), the median batch's time per call of each.
template <typename A, typename B>
std::pair<double, double> per_call2(double budget, const A& fa, const B& fb) {
  int calls = 1;
  for (;;) {  // batches of about 1/40 of the budget
    const double t0 = now_seconds();
    for (int i = 0; i < calls; ++i) fa();
    const double dt = now_seconds() - t0;
    if (dt >= budget / 40 || calls >= (1 << 24)) break;
    calls *= 2;
  }
  std::vector<double> va, vb;
  const double start = now_seconds();
  while (va.size() < 5 || now_seconds() - start < budget) {
    double t0 = now_seconds();
    for (int i = 0; i < calls; ++i) fa();
    va.push_back((now_seconds() - t0) / calls);
    t0 = now_seconds();
    for (int i = 0; i < calls; ++i) fb();
    vb.push_back((now_seconds() - t0) / calls);
    if (va.size() >= 200) break;
  }
  return {median(va), median(vb)};
}

template <typename F>
double per_call(double budget, const F& fn) {
  return per_call2(budget, fn, [] {}).first;
}

}  // namespace

ComputeProbe probe_compute(int threads, double seconds, uint64_t working_set_bytes) {
  const double t_start = now_seconds();
  ComputeProbe p;
  p.threads = std::max(1, threads);
  ThreadPool pool(p.threads);
  const Compute c(&pool);
  const double each = std::max(0.003, seconds / 4);

  // Int8 matrices of `rows` x 256 (group 32) laid end to end over the working
  // set; each call takes the next one.
  constexpr int64_t kCols = 256;
  p.working_set_bytes = std::clamp<uint64_t>(working_set_bytes, 2 * 128 * kCols, 256ull << 20);
  std::vector<uint8_t> pool_bytes(static_cast<size_t>(p.working_set_bytes));
  for (size_t i = 0; i < pool_bytes.size(); ++i) pool_bytes[i] = static_cast<uint8_t>((i * 37 + 11) & 0x7f);
  std::vector<float> scales(static_cast<size_t>(128 * quant_groups(kCols, 32)), 0.01f);
  std::vector<float> x(static_cast<size_t>(kCols)), y(128);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
  MatmulScratch scratch;
  // Each call takes the next matrix of its size in the working set.
  struct Walk {
    Weight w;
    size_t bytes = 0, n = 0, next = 0;
  };
  auto walk = [&](int64_t rows) {
    Walk k;
    k.w.format = WeightFormat::INT8;
    k.w.rows = rows;
    k.w.cols = kCols;
    k.w.group = 32;
    k.w.view_scales = scales.data();
    k.bytes = static_cast<size_t>(rows * quant_row_bytes(QuantBits::Int8, kCols));
    k.w.view_bytes = k.bytes;
    k.n = pool_bytes.size() / k.bytes;
    return k;
  };
  Walk w32 = walk(32), w128 = walk(128);
  auto step = [&](Walk& k) {
    k.w.view_data = pool_bytes.data() + k.next * k.bytes;
    k.next = k.next + 1 == k.n ? 0 : k.next + 1;
    matmul(c, k.w, x.data(), 1, y.data(), scratch);
  };
  // Two sizes 4x apart, so the fit's slope stands above the batches' noise.
  const auto [t32, t128] = per_call2(2 * each, [&] { step(w32); }, [&] { step(w128); });
  const double madds32 = 32.0 * kCols;
  p.matmul_madd_s = std::max(0.0, (t128 - t32) / (3 * madds32));
  p.matmul_call_s = std::max(0.0, t32 - p.matmul_madd_s * madds32);

  std::vector<float> sink(static_cast<size_t>(p.threads) * 16, 0.0f);
  p.region_s = per_call(each, [&] {
    pool.parallel_parts(p.threads, [&](int part, int64_t, int64_t) { sink[static_cast<size_t>(part) * 16] += 1.0f; });
  });

  // 64 keys of 576 floats (a GLM-5 latent + rope key, 144 KiB) against one
  // query, as attention scores them, on this thread (a region's own cost is
  // region_s, not dot work).
  constexpr int64_t kKeys = 64, kDim = 576;
  std::vector<float> keys(static_cast<size_t>((kKeys + 1) * kDim));
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<float>(i % 29) * 0.01f;
  const double dot_s = per_call(each, [&] {
    float acc = 0.0f;
    for (int64_t j = 0; j < kKeys; ++j) acc += c.dot(keys.data() + kKeys * kDim, keys.data() + j * kDim, kDim);
    sink[0] += acc;
  });
  p.dot_gmadd_s = static_cast<double>(p.threads * kKeys * kDim) / dot_s / 1e9;
  p.seconds = now_seconds() - t_start;
  return p;
}

}  // namespace strata
