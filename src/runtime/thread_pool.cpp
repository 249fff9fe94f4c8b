#include "runtime/thread_pool.h"

namespace strata {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

static void chunk(int64_t n, int parts, int id, int64_t* b, int64_t* e) {
  const int64_t base = n / parts, rem = n % parts;
  *b = id * base + (id < rem ? id : rem);
  *e = *b + base + (id < rem ? 1 : 0);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
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

void ThreadPool::worker_loop(int id) {
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

}  // namespace strata
