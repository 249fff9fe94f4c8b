// matmul throughput per weight format and kernel path, GEMV (S=1) and small
// GEMM (S=8), against the engine's previous path (expand each row with
// Weight::row_f32, then the scalar 16-lane dot) measured in the same run.
//
//   build/strata_kernel_bench --benchmark_filter=Matmul [--benchmark_min_time=0.3]
//
// Counters: GB/s of weight bytes read (data + scales) and GMAC/s. Each
// benchmark cycles through enough distinct matrices (>= 192 MB) that the
// weights come from memory, as in decode, not from cache.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/qgemm.h"
#include "core/numeric.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace strata {
namespace {

// An expert's gate/up projection in GLM-5.2: [2048, 6144].
constexpr int64_t kRows = 2048, kCols = 6144, kHotRows = 256;
constexpr size_t kWorkingSet = size_t{192} << 20;

struct Fmt {
  const char* name;
  WeightFormat format;
  int64_t group;
};
const Fmt kFormats[] = {{"f32", WeightFormat::F32, 0},       {"bf16", WeightFormat::BF16, 0},
                        {"int8", WeightFormat::INT8, 0},     {"int4g32", WeightFormat::INT4, 32},
                        {"int4g64", WeightFormat::INT4, 64}, {"int4g128", WeightFormat::INT4, 128}};

Weight make_weight(const Fmt& f, int64_t rows, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 0.02f);
  Weight w;
  w.format = f.format;
  w.rows = rows;
  w.cols = kCols;
  w.group = f.group;
  std::vector<float> row(kCols);
  switch (f.format) {
    case WeightFormat::F32:
    case WeightFormat::BF16: {
      const size_t es = f.format == WeightFormat::F32 ? 4 : 2;
      w.data.resize(static_cast<size_t>(rows * kCols) * es);
      for (int64_t i = 0; i < rows * kCols; ++i) {
        const float v = nd(rng);
        if (es == 4) {
          std::memcpy(w.data.data() + 4 * i, &v, 4);
        } else {
          const uint16_t h = f32_to_bf16(v);
          std::memcpy(w.data.data() + 2 * i, &h, 2);
        }
      }
      break;
    }
    default: {
      const QuantBits b = f.format == WeightFormat::INT8 ? QuantBits::Int8 : QuantBits::Int4;
      const int64_t rb = quant_row_bytes(b, kCols), ng = quant_groups(kCols, f.group);
      w.data.resize(static_cast<size_t>(rows * rb));
      w.scales.resize(static_cast<size_t>(rows * ng));
      for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = nd(rng);
        quantize_row(b, f.group, row.data(), kCols, w.data.data() + r * rb, w.scales.data() + r * ng);
      }
    }
  }
  return w;
}

// Distinct matrices per format, built once and shared by every benchmark.
// hot: one small matrix (256 rows, ~0.4-6 MB) used over and over, so it
// sits in cache and the kernels' arithmetic, not memory, sets the pace.
const std::vector<Weight>& weights(int fi, bool hot) {
  static std::vector<Weight> v;  // one set at a time: the benchmarks run format by format
  static int held = -1;
  const int key = fi * 2 + hot;
  if (held != key) {
    v.clear();
    held = key;
    std::mt19937 rng(42 + fi);
    v.push_back(make_weight(kFormats[fi], hot ? kHotRows : kRows, rng));
    const size_t n = hot ? 1 : std::max<size_t>(2, kWorkingSet / v[0].bytes());
    for (size_t i = 1; i < n; ++i) {
      Weight c = v[0];  // copies: distinct memory, same numbers (the speed does not depend on them)
      v.push_back(std::move(c));
    }
  }
  return v;
}

// The engine's previous matmul: row_f32, then the scalar 16-lane dot.
float legacy_dot(const float* a, const float* b, int64_t n) {
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

void legacy_matmul(const Weight& W, const float* x, int64_t nrows, float* y, ThreadPool* pool) {
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
      for (int64_t r = 0; r < nrows; ++r) y[r * out + o] = legacy_dot(w, x + r * in, in);
    }
  };
  if (pool)
    pool->parallel_for(out, body);
  else
    body(0, out);
}

// path < 0: the legacy path.
// single_row: int8 calls of several rows take the single-row kernel (the
// baseline of the multi-row one).
void BM_Matmul(benchmark::State& state, int fi, int path, int64_t nrows, int threads, bool hot,
               bool single_row = false) {
  if (path >= 0 && !kernel_path_supported(static_cast<KernelPath>(path))) {
    state.SkipWithError("this CPU lacks the path");
    return;
  }
  const auto& ws = weights(fi, hot);
  const int64_t rows = ws[0].rows;
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  std::vector<float> x(static_cast<size_t>(nrows * kCols)), y(static_cast<size_t>(nrows * rows));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);
  size_t i = 0;
  ComputeOptions co;
  if (path >= 0) co.path = static_cast<KernelPath>(path);
  co.multi_row = !single_row;
  const Compute compute(pool.get(), co);
  MatmulScratch scratch;
  for (auto _ : state) {
    const Weight& w = ws[i++ % ws.size()];
    if (path < 0)
      legacy_matmul(w, x.data(), nrows, y.data(), pool.get());
    else
      matmul(compute, w, x.data(), nrows, y.data(), scratch);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(ws[0].bytes()) * it / 1e9, benchmark::Counter::kIsRate);
  state.counters["GMAC/s"] =
      benchmark::Counter(static_cast<double>(rows * kCols * nrows) * it / 1e9, benchmark::Counter::kIsRate);
}

// The absorbed attention's kv_b products (attention_absorbed.cpp) on
// GLM-5.2's shapes: per head, W_UK's 192 rows as deq_axpy (q_nope against
// them: 512 outputs) and W_UV's 256 rows as deq_gemm against S latent rows.
// One layer's kv_b (64 heads x 448 rows x 512 columns, ~8 MB at int4 gs32)
// sits in L3, so the dequantizing arithmetic sets the pace. One thread;
// GMAC/s counts the products run. what: "kvb" both as deq kernels, "uk"
// W_UK alone, "uv" W_UV alone as deq_gemm, "uv-int" W_UV alone as
// matmul_qrows (int8 activations: what the engine runs with its default
// integer activations).
void BM_Deq(benchmark::State& state, int fi, int path, int64_t nrows, std::string what) {
  if (!kernel_path_supported(static_cast<KernelPath>(path))) {
    state.SkipWithError("this CPU lacks the path");
    return;
  }
  constexpr int64_t H = 64, nope = 192, vd = 256, kvl = 512;
  const Fmt& f = kFormats[fi];
  Weight w;
  w.format = f.format;
  w.rows = H * (nope + vd);
  w.cols = kvl;
  w.group = f.group;
  {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    const QuantBits b = f.format == WeightFormat::INT8 ? QuantBits::Int8 : QuantBits::Int4;
    const int64_t rb = quant_row_bytes(b, kvl), ng = quant_groups(kvl, f.group);
    w.data.resize(static_cast<size_t>(w.rows * rb));
    w.scales.resize(static_cast<size_t>(w.rows * ng));
    std::vector<float> row(kvl);
    for (int64_t r = 0; r < w.rows; ++r) {
      for (auto& v : row) v = nd(rng);
      quantize_row(b, f.group, row.data(), kvl, w.data.data() + r * rb, w.scales.data() + r * ng);
    }
  }
  const KernelTable& kt = kernel_table(static_cast<KernelPath>(path));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(nrows * H * (nope + 64))), lat(static_cast<size_t>(nrows * kvl));
  for (auto& v : q) v = nd(rng);
  for (auto& v : lat) v = nd(rng);
  std::vector<float> qabs(static_cast<size_t>(nrows * H * kvl)), o(static_cast<size_t>(nrows * H * vd));
  ComputeOptions co;
  co.path = static_cast<KernelPath>(path);
  const Compute compute(nullptr, co);
  MatmulScratch scratch;
  const bool uk = what == "kvb" || what == "uk", uv = what == "kvb" || what == "uv", uv_int = what == "uv-int";
  for (auto _ : state) {
    std::fill(qabs.begin(), qabs.end(), 0.0f);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hs = nope + vd;
      if (uk)
        kt.deq_axpy(qweight_rows(w, h * hs, nope), q.data() + h * (nope + 64), H * (nope + 64), nrows,
                    qabs.data() + h * kvl, H * kvl);
      if (uv) kt.deq_gemm(qweight_rows(w, h * hs + nope, vd), lat.data(), nrows, o.data() + h * vd, H * vd);
      if (uv_int)
        matmul_qrows(compute, qweight_rows(w, h * hs + nope, vd), lat.data(), nrows, o.data() + h * vd, H * vd,
                     scratch);
    }
    benchmark::DoNotOptimize(qabs.data());
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  const int64_t macs = H * ((uk ? nope : 0) + (uv || uv_int ? vd : 0)) * kvl * nrows;
  state.counters["GMAC/s"] = benchmark::Counter(
      static_cast<double>(macs) * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

const bool registered = [] {
#if defined(__aarch64__)
  const int paths[] = {-1, static_cast<int>(KernelPath::Scalar), static_cast<int>(KernelPath::Neon),
                       static_cast<int>(KernelPath::NeonDotprod), static_cast<int>(KernelPath::NeonI8mm)};
#else
  const int paths[] = {-1, static_cast<int>(KernelPath::Scalar), static_cast<int>(KernelPath::Avx2),
                       static_cast<int>(KernelPath::Avx512), static_cast<int>(KernelPath::Avx512Vnni)};
#endif
  // Single-threaded rates are per CPU-second (the machine is shared); the
  // two-thread ones per wall-clock second.
  for (int fi = 0; fi < static_cast<int>(std::size(kFormats)); ++fi)
    for (bool hot : {false, true})
      for (int64_t s : {1, 8, 64})
        for (int path : paths) {
          if (s == 64 && (!hot || path < 0 || path == static_cast<int>(KernelPath::Scalar))) continue;  // prefill-sized, cache-resident only
          const std::string pn = path < 0 ? "legacy" : kernel_path_name(static_cast<KernelPath>(path));
          const std::string name = std::string("Matmul/") + kFormats[fi].name + (hot ? "/hot" : "/mem") + "/S" +
                                   std::to_string(s) + "/" + pn;
          benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, fi, path, s, 1, hot, false)
              ->Unit(benchmark::kMillisecond);
          const KernelTable* kt = path >= 0 && kernel_path_supported(static_cast<KernelPath>(path))
                                      ? &kernel_table(static_cast<KernelPath>(path))
                                      : nullptr;
          const bool has_multi = kt && kFormats[fi].format == WeightFormat::INT8 && kt->gemm_q8_multi != nullptr;
          if (s > 1 && has_multi)
            benchmark::RegisterBenchmark((name + "/single-row-kernel").c_str(), BM_Matmul, fi, path, s, 1, hot, true)
                ->Unit(benchmark::kMillisecond);
          if (!hot && s == 1 && (path < 0 || path == static_cast<int>(best_kernel_path())))
            benchmark::RegisterBenchmark((name + "/2threads").c_str(), BM_Matmul, fi, path, s, 2, hot, false)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
  for (int fi : {2, 3})
    for (int64_t s : {1, 4, 8, 64, 512})
      for (int path : paths)
        for (const char* what : {"kvb", "uk", "uv", "uv-int"}) {
          if (path < 0) continue;
          const std::string name = std::string("Deq/") + what + "/" + kFormats[fi].name + "/S" + std::to_string(s) +
                                   "/" + kernel_path_name(static_cast<KernelPath>(path));
          benchmark::RegisterBenchmark(name.c_str(), BM_Deq, fi, path, s, std::string(what))
              ->Unit(benchmark::kMillisecond);
        }
  return true;
}();

}  // namespace
}  // namespace strata
