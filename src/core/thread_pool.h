// An owned compute pool. Work is split into contiguous index ranges; every
// range is computed by exactly the same code whatever the thread count, so
// results never depend on how many threads ran (ARCHITECTURE.md §2, §6).
//
// Workers stay hot across the many small matmuls of a layer: after a job an
// idle worker spins (bounded, spin_us) on an atomic generation counter, then
// sleeps on a condition variable, so a long wait (disk, the next request)
// still yields the core. docs/kernels.md has the measurements.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  static constexpr int kDefaultSpinUs = 100;

  // threads <= 1: everything runs on the caller. spin_us < 0: kDefaultSpinUs;
  // 0: sleep at once (a plain condition-variable pool).
  explicit ThreadPool(int threads, int spin_us = -1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(begin, end) over [0, n) split into at most size() chunks, the
  // caller taking one; returns when all are done. Not reentrant. `fn` is
  // called by reference (never copied), so a call allocates nothing.
  template <typename F>
  void parallel_for(int64_t n, const F& fn) {
    run(n, Job{&fn, [](const void* f, int, int64_t b, int64_t e) { (*static_cast<const F*>(f))(b, e); }});
  }
  // The same, also passing the chunk's part number (< size(); no two chunks
  // of one call share it): the index of per-part scratch in a workspace.
  template <typename F>
  void parallel_parts(int64_t n, const F& fn) {
    run(n, Job{&fn, [](const void* f, int p, int64_t b, int64_t e) { (*static_cast<const F*>(f))(p, b, e); }});
  }

 private:
  // A callable by reference: what run() hands to the workers.
  struct Job {
    const void* fn;
    void (*call)(const void* fn, int part, int64_t b, int64_t e);
  };
  void run(int64_t n, Job job);
  void worker_loop(int id);
  bool wait_for_job(uint64_t* seen);  // false: stop

  std::vector<std::thread> workers_;
  const int spin_us_;
  // The job: written by the caller before generation_ is bumped, read by
  // workers after they see the new generation.
  Job job_{nullptr, nullptr};
  int64_t job_n_ = 0;
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};  // workers still running the job
  std::atomic<int> sleepers_{0};             // workers on (or heading for) cv_work_
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::condition_variable cv_done_;
};

}  // namespace strata
