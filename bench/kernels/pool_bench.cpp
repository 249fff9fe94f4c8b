// The compute pool: wake-up latency and a per-expert matmul sequence, the
// spinning ThreadPool against the condition-variable pool it replaced
// (copied below as CondvarPool) and against itself with spinning off.
//
//   build/strata_kernel_bench --benchmark_filter=Pool
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/qgemm.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace strata {
namespace {

// The pool before this change, verbatim: every job and every completion
// goes through the mutex and the condition variables.
class CondvarPool {
 public:
  explicit CondvarPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  }
  ~CondvarPool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    const int parts = size();
    if (parts == 1 || n == 1) {
      fn(0, n);
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &fn;
      job_n_ = n;
      pending_ = parts - 1;
      ++generation_;
    }
    cv_work_.notify_all();
    int64_t b, e;
    chunk(n, parts, 0, &b, &e);
    if (b < e) fn(b, e);
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  static void chunk(int64_t n, int parts, int id, int64_t* b, int64_t* e) {
    const int64_t base = n / parts, rem = n % parts;
    *b = id * base + (id < rem ? id : rem);
    *e = *b + base + (id < rem ? 1 : 0);
  }
  void worker_loop(int id) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int64_t, int64_t)>* job;
      int64_t n;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_work_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
        n = job_n_;
      }
      int64_t b, e;
      chunk(n, size(), id, &b, &e);
      if (b < e) (*job)(b, e);
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (--pending_ == 0) cv_done_.notify_one();
      }
    }
  }
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

// Busy work on the caller between jobs, like the serial ops between matmuls.
void busy_us(double us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(us * 1000));
  while (std::chrono::steady_clock::now() < end) {
  }
}

template <typename Pool>
std::unique_ptr<Pool> make_pool(int kind) {
  if constexpr (std::is_same_v<Pool, CondvarPool>)
    return std::make_unique<CondvarPool>(2);
  else
    return std::make_unique<ThreadPool>(2, kind);  // kind: spin_us
}

// A round trip: hand both threads an empty chunk and wait for both. The
// machine is shared, so besides the mean the percentiles of single round
// trips are reported: p10/p50 show the latency when both threads have a
// core, p90 how often a thread had to be woken or rescheduled.
template <typename Pool>
void BM_PoolWake(benchmark::State& state, int spin_us, double gap_us) {
  auto pool = make_pool<Pool>(spin_us);
  std::vector<int64_t> sink(2);
  const std::function<void(int64_t, int64_t)> fn = [&](int64_t b, int64_t e) { sink[b] += e; };
  std::vector<double> ns;
  for (auto _ : state) {
    busy_us(gap_us);
    const auto t0 = std::chrono::steady_clock::now();
    pool->parallel_for(2, fn);
    const auto t1 = std::chrono::steady_clock::now();
    const double d = std::chrono::duration<double, std::nano>(t1 - t0).count();
    ns.push_back(d);
    state.SetIterationTime(d * 1e-9);
  }
  benchmark::DoNotOptimize(sink.data());
  std::sort(ns.begin(), ns.end());
  for (auto [name, q] : {std::pair{"p10_ns", 0.1}, {"p50_ns", 0.5}, {"p90_ns", 0.9}})
    state.counters[name] = ns.empty() ? 0.0 : ns[static_cast<size_t>(q * static_cast<double>(ns.size() - 1))];
}

// An MoE layer's expert work at decode: per expert, gate and up [F, D] then
// down [D, F], int4 group 32, one activation row, with the serial SiLU
// between them on the caller.
struct Expert {
  std::vector<uint8_t> gq, uq, dq;
  std::vector<float> gs, us, ds;
};

QWeight view(const std::vector<uint8_t>& q, const std::vector<float>& s, int64_t rows, int64_t cols) {
  QWeight w;
  w.q = q.data();
  w.s = s.data();
  w.rows = rows;
  w.cols = cols;
  w.bits = 4;
  w.row_bytes = quant_row_bytes(QuantBits::Int4, cols);
  w.group = 32;
  w.ngroups = quant_groups(cols, 32);
  return w;
}

template <typename Pool>
void expert_matmul(Pool& pool, const KernelTable& kt, const QWeight& w, const float* x, float* y) {
  thread_local std::vector<uint8_t> q;
  thread_local std::vector<float> sc;
  thread_local std::vector<int32_t> s8;
  q.resize(static_cast<size_t>(qacts_qstride(w.cols)));
  sc.resize(static_cast<size_t>(qacts_bstride(w.cols)));
  s8.resize(sc.size());
  const QActs a = quantize_acts(x, 1, w.cols, kt.q4_layout, q.data(), sc.data(), s8.data());
  pool.parallel_for(w.rows, [&](int64_t o0, int64_t o1) {
    QWeight part = w;
    part.q += o0 * w.row_bytes;
    part.s += o0 * w.ngroups;
    part.rows = o1 - o0;
    kt.gemm_q4(part, a, y + o0, w.rows);
  });
}

template <typename Pool>
void BM_PoolExperts(benchmark::State& state, int spin_us, int64_t D, int64_t F) {
  constexpr int kExperts = 8;
  auto pool = make_pool<Pool>(spin_us);
  const KernelTable& kt = kernel_table(best_kernel_path());
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<Expert> ex(kExperts);
  std::vector<float> row(static_cast<size_t>(std::max(D, F)));
  auto fill = [&](std::vector<uint8_t>& q, std::vector<float>& s, int64_t rows, int64_t cols) {
    const int64_t rb = quant_row_bytes(QuantBits::Int4, cols), ng = quant_groups(cols, 32);
    q.resize(static_cast<size_t>(rows * rb));
    s.resize(static_cast<size_t>(rows * ng));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) row[c] = nd(rng);
      quantize_row(QuantBits::Int4, 32, row.data(), cols, q.data() + r * rb, s.data() + r * ng);
    }
  };
  for (auto& e : ex) fill(e.gq, e.gs, F, D), fill(e.uq, e.us, F, D), fill(e.dq, e.ds, D, F);
  std::vector<float> x(static_cast<size_t>(D)), g(static_cast<size_t>(F)), u(static_cast<size_t>(F)),
      y(static_cast<size_t>(D));
  for (auto& v : x) v = nd(rng) * 50.0f;
  for (auto _ : state) {
    for (auto& e : ex) {
      expert_matmul(*pool, kt, view(e.gq, e.gs, F, D), x.data(), g.data());
      expert_matmul(*pool, kt, view(e.uq, e.us, F, D), x.data(), u.data());
      for (int64_t i = 0; i < F; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      expert_matmul(*pool, kt, view(e.dq, e.ds, D, F), g.data(), y.data());
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["matmuls/s"] = benchmark::Counter(3.0 * kExperts * state.iterations(), benchmark::Counter::kIsRate);
}

double min_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

const bool registered = [] {
  for (double gap : {0.0, 20.0}) {
    const std::string g = "/gap" + std::to_string(static_cast<int>(gap)) + "us";
    benchmark::RegisterBenchmark(("PoolWake/condvar" + g).c_str(), BM_PoolWake<CondvarPool>, 0, gap)
        ->UseManualTime()
        ->Iterations(20000);
    benchmark::RegisterBenchmark(("PoolWake/spin0" + g).c_str(), BM_PoolWake<ThreadPool>, 0, gap)
        ->UseManualTime()
        ->Iterations(20000);
    benchmark::RegisterBenchmark(("PoolWake/spin" + std::to_string(ThreadPool::kDefaultSpinUs) + g).c_str(),
                                 BM_PoolWake<ThreadPool>, ThreadPool::kDefaultSpinUs, gap)
        ->UseManualTime()
        ->Iterations(20000);
  }
  struct Shape {
    const char* name;
    int64_t D, F;
  };
  for (Shape s : {Shape{"small_D1024_F512", 1024, 512}, Shape{"glm52_D6144_F2048", 6144, 2048}}) {
    const std::string n = std::string("PoolExperts/") + s.name;
    benchmark::RegisterBenchmark((n + "/condvar").c_str(), BM_PoolExperts<CondvarPool>, 0, s.D, s.F)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime()
        ->Repetitions(5)
        ->ComputeStatistics("min", min_of);
    benchmark::RegisterBenchmark((n + "/spin0").c_str(), BM_PoolExperts<ThreadPool>, 0, s.D, s.F)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime()
        ->Repetitions(5)
        ->ComputeStatistics("min", min_of);
    benchmark::RegisterBenchmark((n + "/spin" + std::to_string(ThreadPool::kDefaultSpinUs)).c_str(),
                                 BM_PoolExperts<ThreadPool>, ThreadPool::kDefaultSpinUs, s.D, s.F)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime()
        ->Repetitions(5)
        ->ComputeStatistics("min", min_of);
  }
  return true;
}();

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  std::printf("%s\n", strata::kernel_description(strata::best_kernel_path()).c_str());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
