// File I/O: the one place strata opens and closes files (open(2), close(2))
// and loops over pread / pwrite / write / fsync. Everything else holds an Fd
// and uses the helpers here, so every descriptor is closed exactly once
// (RAII, also on exceptions), every read and write survives EINTR and short
// transfers, and every failure is a strata::Error naming the file, the
// offset and the size involved. (Terminals and sockets are not files: the
// chat's stdin and the HTTP server keep their own calls.)
//
// Writes that must never leave a half-written file under the final name go
// through AtomicFileWriter (NAME.tmp, fsync, rename, fsync of the directory)
// or write_file_atomic for a small file held in memory.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct XXH3_state_s;  // xxhash.h: the streaming state, used only in io.cpp

namespace strata {

// An open file descriptor and the path it was opened from (for messages).
// Movable, not copyable; closes on destruction.
class Fd {
 public:
  Fd() = default;
  Fd(int fd, std::string path) noexcept : fd_(fd), path_(std::move(path)) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  const std::string& path() const { return path_; }

  // Closes now, ignoring errors: for descriptors only read from, and for
  // error paths where the first error is the one to report.
  void reset() noexcept;
  // Closes now; a failure (a delayed write error) throws naming the file.
  void close();

 private:
  int fd_ = -1;
  std::string path_;
};

// open(2) with O_CLOEXEC added. Throws "PATH: cannot open: REASON" ("cannot
// create" when flags hold O_CREAT).
Fd open_file(const std::string& path, int flags, mode_t mode = 0644);
// The same without throwing: an invalid Fd with errno set, for callers that
// fall back (O_DIRECT) or word the failure themselves.
Fd try_open_file(const std::string& path, int flags, mode_t mode = 0644);

// Creates `path` for writing as a new file that nothing else holds: O_CREAT |
// O_EXCL | O_NOFOLLOW, so a symlink planted under that name (in a directory
// others can write, such as a shared --kv-dir) is never followed. A stale file
// or link of that name is removed first (unlink never follows a link); if the
// name is taken again before the create, it throws rather than write through it.
Fd create_new_file(const std::string& path, mode_t mode = 0644);

// The outcome of a transfer loop that does not throw.
struct IoResult {
  size_t bytes = 0;  // transferred before the end of file or the error
  int error = 0;     // errno of the failing call; 0 when all bytes moved or a read hit the end of file
};
// pread / pwrite / write until all n bytes moved, retrying EINTR and short
// transfers. A read that returns fewer bytes with error == 0 hit the end of
// file; a write that makes no progress reports EIO.
IoResult try_pread_full(int fd, void* dst, size_t n, uint64_t off) noexcept;
IoResult try_pwrite_full(int fd, const void* src, size_t n, uint64_t off) noexcept;
IoResult try_write_full(int fd, const void* src, size_t n) noexcept;

// Reads n bytes at `off`; returns the count read, fewer than n only at end of
// file. An error throws "PATH<what>: read of N bytes at offset OFF failed:
// REASON"; `what` qualifies the path (e.g. ` (tensor "x")`).
size_t pread_full(const Fd& fd, void* dst, size_t n, uint64_t off, std::string_view what = {});
// Like pread_full, and the end of file before n bytes throws too: "... ended
// early after K bytes (file truncated?)".
void pread_exact(const Fd& fd, void* dst, size_t n, uint64_t off, std::string_view what = {});
// Writes all n bytes at `off`; throws "PATH: write failed at byte B (writing
// N bytes at offset OFF): REASON".
void pwrite_full(const Fd& fd, const void* src, size_t n, uint64_t off);
// Appends all n bytes at the file position, which is `pos` (for the message).
void write_full(const Fd& fd, const void* src, size_t n, uint64_t pos);
// fsync (fdatasync when data_only); throws "PATH: fsync failed: REASON".
void fsync_file(const Fd& fd, bool data_only = false);
// fsyncs a directory so renames inside it are durable. File systems that
// cannot sync a directory (EINVAL) are accepted.
void fsync_dir(const std::string& dir);

// Reads a whole (small) regular file, refusing files larger than `max_bytes`.
std::string read_small_file(const std::string& path, size_t max_bytes);

// Streaming XXH3-64 (seed 0).
class Xxh3 {
 public:
  Xxh3();
  ~Xxh3();
  Xxh3(const Xxh3&) = delete;
  Xxh3& operator=(const Xxh3&) = delete;
  void reset();
  void update(const void* p, size_t n);
  uint64_t digest() const;

 private:
  XXH3_state_s* st_;
};

// A whole file's size and XXH3-64; throws naming it if it cannot be read.
struct FileDigest {
  uint64_t bytes = 0, xxh3 = 0;
};
FileDigest hash_file(const std::string& path);

// One output file written as `path`.tmp (created anew: create_new_file), buffered,
// hashed as it goes; commit() flushes, fsyncs and renames it to `path`, then
// fsyncs the directory. Destroyed without commit() (an error was thrown), the
// .tmp is removed, so no half-written file is ever left under the final name.
// Write errors (disk full, quota, I/O) throw strata::Error naming the file;
// `disk_full_advice` is added to the message when the disk or quota is full.
class AtomicFileWriter {
 public:
  static constexpr size_t kDefaultBuffer = size_t{4} << 20;
  // buffer_bytes == 0 writes straight through (for small files).
  explicit AtomicFileWriter(std::string path, std::string disk_full_advice = {}, size_t buffer_bytes = kDefaultBuffer);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* p, size_t n);
  void zeros(uint64_t n);
  void pad_to(uint64_t align) { zeros((align - pos_ % align) % align); }
  uint64_t pos() const { return pos_; }
  // Test hook: once pos() reaches `at`, flush and SIGKILL the process.
  void arm_kill_at(uint64_t at) { kill_at_ = at; }
  // Returns the XXH3-64 of the whole file.
  uint64_t commit();
  const std::string& path() const { return path_; }

 private:
  void flush();
  void put(const uint8_t* p, size_t n, uint64_t at);
  std::string path_, tmp_, advice_;
  Fd fd_;
  uint64_t pos_ = 0;
  uint64_t kill_at_ = UINT64_MAX;
  std::vector<uint8_t> buf_;
  size_t used_ = 0;
  Xxh3 hash_;
  bool committed_ = false;
};

// Writes a small file atomically: `path`.tmp, fsync, rename, fsync of the
// directory. Throws naming the file; never leaves the .tmp behind.
void write_file_atomic(const std::string& path, std::string_view text);

}  // namespace strata
