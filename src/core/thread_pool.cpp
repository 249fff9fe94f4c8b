#include "core/thread_pool.h"

#include <chrono>

namespace strata {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Waits for done(): a short pure spin (the next job usually comes within a
// few microseconds), then yielding the core between checks until spin_us
// have passed, so an oversubscribed machine still runs whoever we wait for.
// True if done() became true.
template <typename Done>
bool spin_until(int spin_us, const Done& done) {
  if (spin_us <= 0) return done();
  for (int i = 0; i < 16; ++i) {
    if (done()) return true;
    cpu_relax();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::yield();
  }
}

void chunk(int64_t n, int parts, int id, int64_t* b, int64_t* e) {
  const int64_t base = n / parts, rem = n % parts;
  *b = id * base + (id < rem ? id : rem);
  *e = *b + base + (id < rem ? 1 : 0);
}

}  // namespace

ThreadPool::ThreadPool(int threads, int spin_us) : spin_us_(spin_us < 0 ? kDefaultSpinUs : spin_us) {
  shares_ = std::make_unique<Share[]>(static_cast<size_t>(threads > 1 ? threads : 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

// Sleeping and waking pair up Dekker-style on seq_cst atomics: the waker
// bumps generation_ then reads sleepers_; a sleeper bumps sleepers_ then
// reads generation_ (under mu_). One of them sees the other, so no wake-up
// is lost, and a job finds hot workers without taking the mutex.
void ThreadPool::run(int64_t n, Job job, int64_t grain) {
  if (n <= 0) return;
  const int parts = size();
  if (parts == 1 || n == 1) {
    job.call(job.fn, 0, 0, n);
    return;
  }
  job_ = job;
  job_n_ = n;
  const int64_t units = grain > 0 ? (n + grain - 1) / grain : 0;
  job_grain_ = units > 0 && units < (int64_t{1} << 31) ? grain : 0;
  if (job_grain_ > 0)
    for (int p = 0; p < parts; ++p) {
      int64_t b, e;
      chunk(units, parts, p, &b, &e);
      shares_[p].v.store(static_cast<uint64_t>(b) | static_cast<uint64_t>(e) << 32, std::memory_order_relaxed);
    }
  pending_.store(parts - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }  // a sleeper is now inside wait(): the notify reaches it
    cv_work_.notify_all();
  }
  run_share(0);
  if (!spin_until(spin_us_, [&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lk(mu_);
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    cv_done_.wait(lk, [&] { return pending_.load(std::memory_order_seq_cst) == 0; });
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
  job_ = Job{nullptr, nullptr};
}

void ThreadPool::run_share(int id) {
  if (job_grain_ > 0) return run_balanced(id);
  int64_t b, e;
  chunk(job_n_, size(), id, &b, &e);
  if (b < e) job_.call(job_.fn, id, b, e);
}

// Part id's share front to back, half of what is left at a time (so
// a thief arriving while a piece runs still finds as much again), then
// the back half of what is left of each other share, until none is left.
void ThreadPool::run_balanced(int id) {
  const int parts = size();
  const int64_t g = job_grain_, n = job_n_;
  const auto piece = [&](uint64_t u0, uint64_t u1) {
    const int64_t e = static_cast<int64_t>(u1) * g;
    job_.call(job_.fn, id, static_cast<int64_t>(u0) * g, e < n ? e : n);
  };
  for (int k = 0; k < parts; ++k) {
    std::atomic<uint64_t>& share = shares_[(id + k) % parts].v;
    uint64_t v = share.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t lo = v & 0xffffffffu, hi = v >> 32;
      if (lo >= hi) break;
      if (k == 0) {
        const uint64_t take = (hi - lo + 1) / 2;
        if (!share.compare_exchange_weak(v, (lo + take) | hi << 32, std::memory_order_acq_rel)) continue;
        piece(lo, lo + take);
      } else {
        const uint64_t take = (hi - lo + 1) / 2;
        if (!share.compare_exchange_weak(v, lo | (hi - take) << 32, std::memory_order_acq_rel)) continue;
        piece(hi - take, hi);
      }
      v = share.load(std::memory_order_acquire);
    }
  }
}

bool ThreadPool::wait_for_job(uint64_t* seen) {
  auto ready = [&] {
    return stop_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_acquire) != *seen;
  };
  if (!spin_until(spin_us_, ready)) {
    std::unique_lock<std::mutex> lk(mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    cv_work_.wait(lk, [&] { return stop_.load() || generation_.load(std::memory_order_seq_cst) != *seen; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (stop_.load()) return false;
  *seen = generation_.load(std::memory_order_acquire);
  return true;
}

void ThreadPool::worker_loop(int id) {
  uint64_t seen = 0;
  while (wait_for_job(&seen)) {
    run_share(id);
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 && caller_sleeping_.load(std::memory_order_seq_cst)) {
      { std::lock_guard<std::mutex> lk(mu_); }
      cv_done_.notify_one();
    }
  }
}

}  // namespace strata
