#include "experts/read_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/io.h"

#ifdef STRATA_HAVE_URING
#include <liburing.h>
#include <sys/uio.h>
#endif

namespace strata {

namespace {

#ifdef STRATA_HAVE_URING

class UringEngine final : public ReadEngine {
 public:
  explicit UringEngine(int depth) : depth_(depth) {}
  ~UringEngine() override {
    if (inited_) io_uring_queue_exit(&ring_);
  }
  UringEngine(const UringEngine&) = delete;
  UringEngine& operator=(const UringEngine&) = delete;

  bool init(std::string* why) {
    const int r = io_uring_queue_init(static_cast<unsigned>(depth_), &ring_, 0);
    if (r < 0) {
      *why = fmt::format("io_uring_queue_init failed: {}", std::strerror(-r));
      return false;
    }
    inited_ = true;
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    const bool reads = probe && io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe) io_uring_free_probe(probe);
    if (!reads) {
      *why = "the kernel's io_uring has no READ operation (Linux 5.6 or later needed)";
      return false;
    }
    return true;
  }

  void submit(std::span<const ReadOp> ops) override {
    for (const ReadOp& op : ops) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (!sqe) {  // the ring has depth() entries and the caller keeps at most depth() in flight
        flush();
        sqe = io_uring_get_sqe(&ring_);
        if (!sqe) fail("io_uring: no free submission entry (more than {} reads in flight)", depth_);
      }
      if (op.buf >= 0)
        io_uring_prep_read_fixed(sqe, op.fd, op.dst, op.len, op.off, op.buf);
      else
        io_uring_prep_read(sqe, op.fd, op.dst, op.len, op.off);
      io_uring_sqe_set_data64(sqe, op.tag);
    }
    flush();
  }

  size_t wait(std::span<ReadDone> out) override {
    io_uring_cqe* cqe = nullptr;
    for (;;) {
      const int r = io_uring_wait_cqe(&ring_, &cqe);
      if (r == 0) break;
      if (r != -EINTR && r != -EAGAIN) fail("io_uring: waiting for a read failed: {}", std::strerror(-r));
    }
    size_t n = 0;
    while (n < out.size() && io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe) {
      out[n].tag = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
      out[n].res = cqe->res;
      ++n;
      io_uring_cqe_seen(&ring_, cqe);
    }
    return n;
  }

  int depth() const override { return depth_; }
  std::string describe() const override { return fmt::format("io_uring, {} reads in flight", depth_); }

  bool reserve_buffers(uint32_t n, std::string* why_not) override {
    if (n == 0 || n > kMaxRegisteredBuffers) {
      *why_not = fmt::format("{} buffers: expected 1 to {}", n, kMaxRegisteredBuffers);
      return false;
    }
    const int r = io_uring_register_buffers_sparse(&ring_, n);  // Linux 5.19
    if (r < 0) {
      *why_not = fmt::format("io_uring_register_buffers_sparse failed: {}", std::strerror(-r));
      return false;
    }
    return true;
  }

  int register_buffer(uint32_t index, void* base, size_t len) override {
    iovec iov{base, len};
    const __u64 tag = 0;
    const int r = io_uring_register_buffers_update_tag(&ring_, index, &iov, &tag, 1);
    return r < 0 ? r : 0;
  }

 private:
  void flush() {
    for (;;) {
      const int r = io_uring_submit(&ring_);
      if (r >= 0) return;
      if (r != -EINTR && r != -EAGAIN && r != -EBUSY) fail("io_uring: submitting reads failed: {}", std::strerror(-r));
    }
  }

  int depth_;
  io_uring ring_{};
  bool inited_ = false;
};

#endif  // STRATA_HAVE_URING

// depth() threads, each with one pread(2) in flight. The queues are rings
// sized at start: submitting and completing never allocate.
class PreadEngine final : public ReadEngine {
 public:
  explicit PreadEngine(int depth) : depth_(depth) {
    ops_.resize(static_cast<size_t>(depth));
    done_.resize(static_cast<size_t>(depth));
    for (int i = 0; i < depth; ++i) workers_.emplace_back([this] { work(); });
  }
  ~PreadEngine() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  PreadEngine(const PreadEngine&) = delete;
  PreadEngine& operator=(const PreadEngine&) = delete;

  void submit(std::span<const ReadOp> ops) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (const ReadOp& op : ops) {
        if (n_ops_ + in_work_ + n_done_ >= ops_.size()) fail("pread pool: more than {} reads in flight", depth_);
        ops_[(ops_head_ + n_ops_++) % ops_.size()] = op;
      }
    }
    cv_work_.notify_all();
  }

  size_t wait(std::span<ReadDone> out) override {
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [&] { return n_done_ > 0; });
    const size_t n = std::min(out.size(), n_done_);
    std::copy(done_.begin(), done_.begin() + static_cast<std::ptrdiff_t>(n), out.begin());
    std::copy(done_.begin() + static_cast<std::ptrdiff_t>(n), done_.begin() + static_cast<std::ptrdiff_t>(n_done_),
              done_.begin());
    n_done_ -= n;
    return n;
  }

  int depth() const override { return depth_; }
  std::string describe() const override { return fmt::format("pread pool, {} reads in flight", depth_); }

 private:
  void work() {
    for (;;) {
      ReadOp op;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_work_.wait(lk, [&] { return stop_ || n_ops_ > 0; });
        if (stop_) return;
        op = ops_[ops_head_];
        ops_head_ = (ops_head_ + 1) % ops_.size();
        --n_ops_;
        ++in_work_;
      }
      // One pread, like one io_uring read: a short transfer is reported as
      // such and continued by the caller.
      ssize_t k;
      do {
        k = ::pread(op.fd, op.dst, op.len, static_cast<off_t>(op.off));
      } while (k < 0 && errno == EINTR);
      const ReadDone d{op.tag, k < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(k)};
      {
        std::lock_guard<std::mutex> lk(mu_);
        --in_work_;
        done_[n_done_++] = d;
      }
      cv_done_.notify_one();
    }
  }

  int depth_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::vector<ReadOp> ops_;  // ring of queued ops
  size_t ops_head_ = 0, n_ops_ = 0, in_work_ = 0;
  std::vector<ReadDone> done_;
  size_t n_done_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<ReadEngine> open_uring_engine(int depth, std::string* why_not) {
#ifdef STRATA_HAVE_URING
  auto e = std::make_unique<UringEngine>(depth);
  if (e->init(why_not)) return e;
  return nullptr;
#else
  (void)depth;
  *why_not = "this build has no liburing";
  return nullptr;
#endif
}

std::unique_ptr<ReadEngine> open_pread_engine(int depth) { return std::make_unique<PreadEngine>(depth); }

}  // namespace strata
