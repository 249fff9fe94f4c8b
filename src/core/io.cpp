#include "core/io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace strata {

// ---------------------------------------------------------------------------
// Descriptors

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

void Fd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Fd::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("{}: close failed: {}", path_, std::strerror(errno));
}

Fd try_open_file(const std::string& path, int flags, mode_t mode) {
  std::string p = path;  // copied first: nothing may touch errno after open(2)
  const int fd = ::open(p.c_str(), flags | O_CLOEXEC, mode);
  const int err = errno;
  Fd f(fd, std::move(p));
  errno = err;
  return f;
}

Fd open_file(const std::string& path, int flags, mode_t mode) {
  Fd f = try_open_file(path, flags, mode);
  if (!f) fail("{}: cannot {}: {}", path, (flags & O_CREAT) ? "create" : "open", std::strerror(errno));
  return f;
}

Fd create_new_file(const std::string& path, mode_t mode) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW;
  Fd f = try_open_file(path, kFlags, mode);
  if (!f && errno == EEXIST) {
    ::unlink(path.c_str());
    f = try_open_file(path, kFlags, mode);
  }
  if (!f) fail("{}: cannot create: {}", path, std::strerror(errno));
  return f;
}

// ---------------------------------------------------------------------------
// Transfers

IoResult try_pread_full(int fd, void* dst, size_t n, uint64_t off) noexcept {
  auto* p = static_cast<uint8_t*>(dst);
  IoResult r;
  while (r.bytes < n) {
    const ssize_t k = ::pread(fd, p + r.bytes, n - r.bytes, static_cast<off_t>(off + r.bytes));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      r.error = errno;
      break;
    }
    if (k == 0) break;  // end of file
    r.bytes += static_cast<size_t>(k);
  }
  return r;
}

IoResult try_pwrite_full(int fd, const void* src, size_t n, uint64_t off) noexcept {
  const auto* p = static_cast<const uint8_t*>(src);
  IoResult r;
  while (r.bytes < n) {
    const ssize_t k = ::pwrite(fd, p + r.bytes, n - r.bytes, static_cast<off_t>(off + r.bytes));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      r.error = k < 0 ? errno : EIO;
      break;
    }
    r.bytes += static_cast<size_t>(k);
  }
  return r;
}

IoResult try_write_full(int fd, const void* src, size_t n) noexcept {
  const auto* p = static_cast<const uint8_t*>(src);
  IoResult r;
  while (r.bytes < n) {
    const ssize_t k = ::write(fd, p + r.bytes, n - r.bytes);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      r.error = k < 0 ? errno : EIO;
      break;
    }
    r.bytes += static_cast<size_t>(k);
  }
  return r;
}

size_t pread_full(const Fd& fd, void* dst, size_t n, uint64_t off, std::string_view what) {
  const IoResult r = try_pread_full(fd.get(), dst, n, off);
  if (r.error)
    fail("{}{}: read of {} bytes at offset {} failed: {}", fd.path(), what, n, off, std::strerror(r.error));
  return r.bytes;
}

void pread_exact(const Fd& fd, void* dst, size_t n, uint64_t off, std::string_view what) {
  const size_t got = pread_full(fd, dst, n, off, what);
  if (got < n)
    fail("{}{}: read of {} bytes at offset {} ended early after {} bytes (file truncated?)", fd.path(), what, n, off,
         got);
}

namespace {

[[noreturn]] void fail_write(const std::string& path, const IoResult& r, size_t n, uint64_t off,
                             std::string_view advice = {}) {
  const bool full = r.error == ENOSPC || r.error == EDQUOT;
  fail("{}: write failed at byte {} (writing {} bytes at offset {}): {}{}{}{}", path, off + r.bytes, n, off,
       std::strerror(r.error), full ? " (the disk is full" : "", full && !advice.empty() ? "; " : "",
       full ? std::string(advice) + ")" : "");
}

}  // namespace

void pwrite_full(const Fd& fd, const void* src, size_t n, uint64_t off) {
  const IoResult r = try_pwrite_full(fd.get(), src, n, off);
  if (r.error) fail_write(fd.path(), r, n, off);
}

void write_full(const Fd& fd, const void* src, size_t n, uint64_t pos) {
  const IoResult r = try_write_full(fd.get(), src, n);
  if (r.error) fail_write(fd.path(), r, n, pos);
}

void fsync_file(const Fd& fd, bool data_only) {
  if ((data_only ? ::fdatasync(fd.get()) : ::fsync(fd.get())) != 0)
    fail("{}: fsync failed: {}", fd.path(), std::strerror(errno));
}

void fsync_dir(const std::string& dir) {
  Fd fd = try_open_file(dir, O_RDONLY | O_DIRECTORY);
  if (!fd) fail("{}: cannot open directory: {}", dir, std::strerror(errno));
  const int rc = ::fsync(fd.get()), err = errno;
  fd.reset();
  // Some file systems cannot fsync a directory (EINVAL); the data is synced.
  if (rc != 0 && err != EINVAL) fail("{}: cannot sync directory: {}", dir, std::strerror(err));
}

std::string read_small_file(const std::string& path, size_t max_bytes) {
  const Fd fd = open_file(path, O_RDONLY);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) fail("{}: file is {} bytes, limit is {}", path, st.st_size, max_bytes);
  std::string out(static_cast<size_t>(st.st_size), '\0');
  pread_exact(fd, out.data(), out.size(), 0);
  return out;
}

// ---------------------------------------------------------------------------
// Hashing

Xxh3::Xxh3() : st_(XXH3_createState()) {
  if (!st_) throw std::bad_alloc();
  reset();
}
Xxh3::~Xxh3() { XXH3_freeState(st_); }
void Xxh3::reset() { XXH3_64bits_reset(st_); }
void Xxh3::update(const void* p, size_t n) {
  if (n) XXH3_64bits_update(st_, p, n);
}
uint64_t Xxh3::digest() const { return XXH3_64bits_digest(st_); }

FileDigest hash_file(const std::string& path) {
  const Fd fd = open_file(path, O_RDONLY);
  std::vector<uint8_t> buf(AtomicFileWriter::kDefaultBuffer);
  Xxh3 h;
  FileDigest d;
  for (;;) {
    const size_t n = pread_full(fd, buf.data(), buf.size(), d.bytes);
    h.update(buf.data(), n);
    d.bytes += n;
    if (n < buf.size()) break;
  }
  d.xxh3 = h.digest();
  return d;
}

// ---------------------------------------------------------------------------
// Atomic files

namespace {

std::string parent_dir(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, std::string disk_full_advice, size_t buffer_bytes)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), advice_(std::move(disk_full_advice)) {
  fd_ = create_new_file(tmp_, 0644);
  buf_.resize(buffer_bytes);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  fd_.reset();
  ::unlink(tmp_.c_str());
}

void AtomicFileWriter::put(const uint8_t* p, size_t n, uint64_t at) {
  const IoResult r = try_write_full(fd_.get(), p, n);
  if (r.error) fail_write(tmp_, r, n, at, advice_);
}

void AtomicFileWriter::flush() {
  put(buf_.data(), used_, pos_ - used_);
  used_ = 0;
}

void AtomicFileWriter::write(const void* p, size_t n) {
  hash_.update(p, n);
  const auto* src = static_cast<const uint8_t*>(p);
  if (buf_.empty()) {  // unbuffered
    put(src, n, pos_);
    pos_ += n;
  }
  while (!buf_.empty() && n > 0) {
    const size_t k = std::min(n, buf_.size() - used_);
    std::memcpy(buf_.data() + used_, src, k);
    used_ += k;
    src += k;
    n -= k;
    pos_ += k;
    if (used_ == buf_.size()) flush();
  }
  if (pos_ >= kill_at_) {  // test hook: die with the file half written
    flush();
    ::raise(SIGKILL);
  }
}

void AtomicFileWriter::zeros(uint64_t n) {
  static const uint8_t kZero[4096] = {};
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof kZero));
    write(kZero, k);
    n -= k;
  }
}

uint64_t AtomicFileWriter::commit() {
  flush();
  fsync_file(fd_);
  fd_.close();
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail("{}: cannot rename into place: {}", path_, std::strerror(errno));
  committed_ = true;
  fsync_dir(parent_dir(path_));
  return hash_.digest();
}

void write_file_atomic(const std::string& path, std::string_view text) {
  AtomicFileWriter w(path, {}, 0);
  w.write(text.data(), text.size());
  w.commit();
}

}  // namespace strata
