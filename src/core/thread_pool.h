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
#include <memory>
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
  // Calls fn(begin, end) over [0, n) in pieces that begin at multiples of
  // grain, balanced at run time: each thread starts on its parallel_for
  // share, front to back, in shrinking pieces, and a thread that runs out
  // takes the back half of what is left of another's share. Which thread
  // runs which piece, and where pieces begin, depend on timing, so fn must
  // compute each index the same in any piece (the output rows of a matmul).
  // The threads' shares stay contiguous, so each still reads one stream;
  // a late or slower thread (a wake-up, a core the host took away) no longer
  // makes the others wait. docs/kernels.md has the measurements.
  template <typename F>
  void parallel_for_balanced(int64_t n, int64_t grain, const F& fn) {
    run(n, Job{&fn, [](const void* f, int, int64_t b, int64_t e) { (*static_cast<const F*>(f))(b, e); }},
        grain < 1 ? 1 : grain);
  }
  // The same, passing the number of the thread that runs the piece (< size();
  // a thread runs one piece at a time, so per-part scratch stays private to
  // the piece, but a part may run several pieces, of several shares).
  template <typename F>
  void parallel_parts_balanced(int64_t n, int64_t grain, const F& fn) {
    run(n, Job{&fn, [](const void* f, int p, int64_t b, int64_t e) { (*static_cast<const F*>(f))(p, b, e); }},
        grain < 1 ? 1 : grain);
  }

 private:
  // A callable by reference: what run() hands to the workers.
  struct Job {
    const void* fn;
    void (*call)(const void* fn, int part, int64_t b, int64_t e);
  };
  // grain > 0: balanced (parallel_for_balanced), in units of grain indices.
  void run(int64_t n, Job job, int64_t grain = 0);
  void run_share(int id);  // the job's pieces for part id
  void run_balanced(int id);
  void worker_loop(int id);
  bool wait_for_job(uint64_t* seen);  // false: stop

  std::vector<std::thread> workers_;
  const int spin_us_;
  // The job: written by the caller before generation_ is bumped, read by
  // workers after they see the new generation.
  Job job_{nullptr, nullptr};
  int64_t job_n_ = 0;
  int64_t job_grain_ = 0;  // 0: static shares
  // Balanced jobs: per part, the units [lo, hi) of its share not yet taken,
  // as lo | hi << 32, one cache line each (the owner takes from the front,
  // a thief from the back, both by compare-and-swap).
  struct alignas(64) Share {
    std::atomic<uint64_t> v{0};
  };
  std::unique_ptr<Share[]> shares_;
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
