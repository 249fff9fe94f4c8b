// Several reads of expert bytes in flight at once (docs/streaming.md). One
// thread owns a ReadEngine: it submits reads (never more than depth() in
// flight) and waits for their completions.
//
//   io_uring  one ring of depth() entries; the kernel does the reads.
//   pread     a pool of depth() threads, each with one pread(2) in flight:
//             where io_uring is unavailable (a build without liburing, an old
//             kernel, a seccomp filter, kernel.io_uring_disabled) or asked for.
//
// Completions follow the kernel's convention: bytes transferred, 0 at the end
// of file, -errno on failure. A short read is the caller's to continue.
#pragma once
#include <cerrno>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace strata {

struct ReadOp {
  int fd = -1;
  uint8_t* dst = nullptr;
  uint64_t off = 0;
  uint32_t len = 0;
  uint32_t tag = 0;  // handed back with the completion
  int32_t buf = -1;  // the registered buffer holding [dst, dst + len), or -1
};

struct ReadDone {
  uint32_t tag = 0;
  int64_t res = 0;  // bytes, 0 at the end of file, -errno
};

class ReadEngine {
 public:
  virtual ~ReadEngine() = default;
  // Starts ops; the caller keeps at most depth() in flight.
  virtual void submit(std::span<const ReadOp> ops) = 0;
  // Blocks until at least one op has completed; writes up to out.size()
  // completions and returns their count (at least 1 while any is in flight).
  virtual size_t wait(std::span<ReadDone> out) = 0;
  virtual int depth() const = 0;
  // "io_uring, 16 reads in flight", for the start-up line.
  virtual std::string describe() const = 0;

  // Registered buffers (io_uring): the kernel pins a buffer's pages once
  // instead of on every read into it (docs/streaming.md). reserve_buffers()
  // makes room for `n` (at most kMaxRegisteredBuffers); false, with the
  // reason, where the engine has none or the kernel refuses.
  virtual bool reserve_buffers(uint32_t n, std::string* why_not) {
    (void)n;
    *why_not = "not an io_uring engine";
    return false;
  }
  // Registers [base, base + len) as buffer `index` (< n); -errno where the
  // kernel refuses it (-ENOMEM: over RLIMIT_MEMLOCK), 0 on success. Reads into
  // it may then name it in ReadOp::buf. Not while a read names `index`.
  virtual int register_buffer(uint32_t index, void* base, size_t len) {
    (void)index, (void)base, (void)len;
    return -EOPNOTSUPP;
  }
};

// The kernel's limit on one ring's registered buffers.
constexpr uint32_t kMaxRegisteredBuffers = 1u << 14;

// An io_uring engine with `depth` reads in flight; nullptr, with the reason
// in *why_not, where io_uring cannot be used.
std::unique_ptr<ReadEngine> open_uring_engine(int depth, std::string* why_not);
// A pool of `depth` threads doing pread(2).
std::unique_ptr<ReadEngine> open_pread_engine(int depth);

}  // namespace strata
