#include "experts/disk_probe.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include <xxhash.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/io.h"

namespace strata {

namespace {

std::string fs_name(uint64_t magic) {
  switch (magic) {
    case 0xEF53: return "ext4";  // ext2/3/4 share the magic
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlay";
    case 0x6969: return "nfs";
    case 0xFF534D42: return "cifs";
    case 0x65735546: return "fuse";
    case 0x2FC12FC1: return "zfs";
    case 0xF2F52010: return "f2fs";
    case 0x4D44: return "vfat";
    case 0x5346544E: return "ntfs";
    case 0x7366746E: return "ntfs3";
    case 0x2011BAB0: return "exfat";
    case 0x858458F6: return "ramfs";
    case 0x01021997: return "9p";
    default: {
      char b[32];
      std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(magic));
      return b;
    }
  }
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, AlignedFree>;

Buffer aligned_buffer(size_t n) {
  void* p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  if (!p) fail("disk probe: cannot allocate {} bytes", n);
  return Buffer(static_cast<uint8_t*>(p));
}

uint64_t mix(uint64_t& s) {  // splitmix64
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// io_uring: `depth` reads in flight, each completion replaced by a new read
// at a random slot until the time is up.
DiskReadRate read_uring(int fd, uint64_t slots, uint64_t size, int depth, double seconds, std::string& err) {
  DiskReadRate r;
  r.depth = depth;
  io_uring ring;
  const int rc = io_uring_queue_init(static_cast<unsigned>(depth), &ring, 0);
  if (rc < 0) {
    err = std::strerror(-rc);
    return r;
  }
  std::vector<Buffer> bufs;
  for (int i = 0; i < depth; ++i) bufs.push_back(aligned_buffer(size));
  uint64_t seed = 0x5eed + static_cast<uint64_t>(depth);
  const uint64_t t0 = now_ns(), limit = static_cast<uint64_t>(seconds * 1e9);
  auto submit = [&](int i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, fd, bufs[static_cast<size_t>(i)].get(), static_cast<unsigned>(size), mix(seed) % slots * size);
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(i));
  };
  for (int i = 0; i < depth; ++i) submit(i);
  io_uring_submit(&ring);
  int inflight = depth;
  bool stop = false;
  while (inflight > 0) {
    io_uring_cqe* cqe = nullptr;
    const int w = io_uring_wait_cqe(&ring, &cqe);
    if (w == -EINTR) continue;
    if (w < 0) {
      err = std::strerror(-w);
      break;
    }
    const int res = cqe->res;
    const int i = static_cast<int>(io_uring_cqe_get_data64(cqe));
    io_uring_cqe_seen(&ring, cqe);
    --inflight;
    if (res < 0) {
      err = std::strerror(-res);
      stop = true;
      continue;
    }
    r.bytes += static_cast<uint64_t>(res);
    ++r.reads;
    if (!stop && now_ns() - t0 < limit) {
      submit(i);
      io_uring_submit(&ring);
      ++inflight;
    } else {
      stop = true;
    }
  }
  r.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  io_uring_queue_exit(&ring);
  if (err.empty() && r.seconds > 0) r.gb_s = static_cast<double>(r.bytes) / r.seconds / 1e9;
  return r;
}

// `depth` threads, each one synchronous pread at a time.
DiskReadRate read_threads(int fd, uint64_t slots, uint64_t size, int depth, double seconds, std::string& err) {
  DiskReadRate r;
  r.depth = depth;
  std::atomic<uint64_t> bytes{0}, reads{0};
  std::atomic<int> error{0};
  const uint64_t t0 = now_ns(), limit = static_cast<uint64_t>(seconds * 1e9);
  std::vector<std::thread> th;
  for (int k = 0; k < depth; ++k)
    th.emplace_back([&, k] {
      Buffer b = aligned_buffer(size);
      uint64_t seed = 0x5eed + static_cast<uint64_t>(depth) * 131 + static_cast<uint64_t>(k);
      while (now_ns() - t0 < limit && !error.load()) {
        const IoResult got = try_pread_full(fd, b.get(), size, mix(seed) % slots * size);
        if (got.error) {
          error = got.error;
          break;
        }
        bytes += got.bytes;
        ++reads;
      }
    });
  for (auto& t : th) t.join();
  r.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  r.bytes = bytes.load();
  r.reads = reads.load();
  if (error.load()) err = std::strerror(error.load());
  else if (r.seconds > 0) r.gb_s = static_cast<double>(r.bytes) / r.seconds / 1e9;
  return r;
}

}  // namespace

DiskProbe probe_disk(const DiskProbeOptions& o) {
  namespace fs = std::filesystem;
  DiskProbe p;
  std::error_code ec;
  if (!fs::is_directory(o.dir, ec)) fail("--dir {}: not a directory", o.dir);
  p.dir = fs::absolute(o.dir, ec).lexically_normal().string();

  struct statfs sf {};
  if (::statfs(o.dir.c_str(), &sf) == 0) p.filesystem = fs_name(static_cast<uint64_t>(sf.f_type));
  struct statvfs sv {};
  if (::statvfs(o.dir.c_str(), &sv) == 0) {
    p.free_bytes = static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
    p.total_bytes = static_cast<uint64_t>(sv.f_blocks) * sv.f_frsize;
  }

  // io_uring: can a ring be set up at all (seccomp in containers and
  // kernel.io_uring_disabled block it)?
  {
    io_uring ring;
    const int rc = io_uring_queue_init(4, &ring, 0);
    p.io_uring = rc == 0;
    if (rc == 0) io_uring_queue_exit(&ring);
    else p.io_uring_error = std::strerror(-rc);
  }

  // The one temp file: created new (never through a planted link), removed
  // on every path out of this function.
  const std::string path = (fs::path(o.dir) / (".strata-doctor-" + std::to_string(::getpid()) + ".tmp")).string();
  struct Remove {
    const std::string& path;
    bool armed = false;
    ~Remove() {
      if (armed) ::unlink(path.c_str());
    }
  } remove{path};
  try {
    Fd w = create_new_file(path, 0600);
    remove.armed = true;
    // O_DIRECT: open the file with it and write one aligned page (some
    // filesystems accept the flag and fail the transfer).
    Buffer page = aligned_buffer(4096);
    std::memset(page.get(), 0x5a, 4096);
    Fd d = try_open_file(path, O_RDWR | O_DIRECT);
    if (!d) {
      p.o_direct_error = std::strerror(errno);
    } else {
      const IoResult io = try_pwrite_full(d.get(), page.get(), 4096, 0);
      if (io.error) p.o_direct_error = std::strerror(io.error);
      else p.o_direct = true;
    }

    uint64_t size = std::max<uint64_t>(4096, o.read_bytes / 4096 * 4096);
    uint64_t want = std::min({o.file_bytes, kMaxProbeFileBytes, p.free_bytes / 10});
    want = want / size * size;
    if (!o.measure || want < size) {
      if (o.measure) p.error = "not enough free space for a probe file of one read";
    } else {
      // Pseudo-random contents (no sparse or compressed shortcut), written
      // straight to the disk where O_DIRECT works; otherwise flushed and
      // dropped from the page cache so reads come from the disk.
      Buffer b = aligned_buffer(size);
      uint64_t seed = 42;
      for (uint64_t i = 0; i + 8 <= size; i += 8) {
        const uint64_t v = mix(seed);
        std::memcpy(b.get() + i, &v, 8);
      }
      const int wfd = p.o_direct ? d.get() : w.get();
      const uint64_t t0 = now_ns();
      for (uint64_t off = 0; off < want; off += size) {
        b.get()[0] = static_cast<uint8_t>(off >> 20);
        const IoResult io = try_pwrite_full(wfd, b.get(), size, off);
        if (io.error) fail("{}: write at {}: {}", path, off, std::strerror(io.error));
      }
      if (::fdatasync(wfd) != 0) fail("{}: fdatasync: {}", path, std::strerror(errno));
      p.write_seconds = static_cast<double>(now_ns() - t0) / 1e9;
      p.file_bytes = want;
      ::posix_fadvise(w.get(), 0, 0, POSIX_FADV_DONTNEED);

      Fd r = p.o_direct ? try_open_file(path, O_RDONLY | O_DIRECT) : Fd{};
      p.reads_direct = r.valid();
      if (!r) r = open_file(path, O_RDONLY);
      p.read_method = p.io_uring ? "io_uring" : "threads";
      const uint64_t slots = want / size;
      for (int depth : o.depths) {
        std::string err;
        DiskReadRate rate = p.io_uring ? read_uring(r.get(), slots, size, depth, o.seconds_per_depth, err)
                                       : read_threads(r.get(), slots, size, depth, o.seconds_per_depth, err);
        if (!err.empty()) {
          p.error = "read at queue depth " + std::to_string(depth) + ": " + err;
          break;
        }
        p.reads.push_back(rate);
      }
    }
  } catch (const Error& e) {
    p.error = e.what();
  }
  if (remove.armed) {
    remove.armed = false;
    p.file_removed = ::unlink(path.c_str()) == 0;
  }
  return p;
}

ChecksumProbe probe_checksum(uint64_t expert_bytes, double seconds, uint64_t working_set_bytes) {
  if (expert_bytes == 0) fail("checksum probe: an expert of 0 bytes");
  ChecksumProbe p;
  p.expert_bytes = expert_bytes;
  const uint64_t ws = std::clamp<uint64_t>(working_set_bytes, expert_bytes, std::max(expert_bytes, kMaxChecksumWorkingSet));
  const uint64_t blocks = std::max<uint64_t>(1, ws / expert_bytes);
  p.working_set_bytes = blocks * expert_bytes;
  std::vector<uint8_t> buf(static_cast<size_t>(p.working_set_bytes));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  // Walk the buffer once untimed (its pages mapped), then time whole passes
  // block by block: after the first pass a block was last touched a working
  // set ago, so it comes from memory when the set is above the caches.
  uint64_t sink = 0;
  for (uint64_t b = 0; b < blocks; ++b) sink ^= XXH3_64bits(buf.data() + b * expert_bytes, expert_bytes);
  const uint64_t t0 = now_ns();
  uint64_t b = 0;
  for (;;) {
    sink ^= XXH3_64bits(buf.data() + b * expert_bytes, expert_bytes);
    ++p.hashes;
    b = b + 1 == blocks ? 0 : b + 1;
    if (p.hashes >= 8 && (p.hashes & 7) == 0 && static_cast<double>(now_ns() - t0) / 1e9 >= seconds) break;
  }
  p.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  volatile uint64_t keep = sink;  // the hashes are used
  (void)keep;
  p.gb_s = p.seconds > 0 ? static_cast<double>(p.hashes * expert_bytes) / p.seconds / 1e9 : 0.0;
  p.us_per_expert = p.hashes ? p.seconds * 1e6 / static_cast<double>(p.hashes) : 0.0;
  return p;
}

}  // namespace strata
