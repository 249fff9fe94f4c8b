// The expert read engines (src/experts/read_engine.*) on one file, the way
// the expert store uses them: random expert-sized reads at 4 KiB-aligned
// offsets, each split into chunks, `depth` chunks in flight, O_DIRECT where
// the filesystem allows. Configurations alternate within each round, each
// reading experts no other run of that round reads; the page cache is dropped
// before each run when permitted (root). docs/streaming.md.
//
//   strata_io_bench FILE [--expert-mib 8] [--chunk-mib 1] [--experts 64] [--rounds 3]
//                        [--configs pread:1,uring:1,pread:4,uring:4,uring:16]
//
// Engines: pread, uring, and uring-reg (io_uring with each expert's buffer
// registered before the timed reads, as the store registers its cache slots).
// Each run prints GB/s and the process's CPU time (user + system) per GB read.
//
// FILE must exist (e.g. an experts-NNN.bin of a container, or
// `fallocate -l 4G F` + data); only whole experts inside it are read.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/aligned.h"
#include "core/io.h"
#include "experts/read_engine.h"

namespace {

struct Config {
  std::string engine;
  int depth;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

void drop_caches(int fd, bool* dropped) {
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::sync();
  FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
  *dropped = f && std::fputs("3\n", f) >= 0;
  if (f) std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [--expert-mib 8] [--chunk-mib 1] [--experts 64] [--rounds 3] "
                         "[--configs pread:1,uring:1,pread:4,uring:4,uring:16]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  double expert_mib = 8, chunk_mib = 1;
  int n_experts = 64, rounds = 3;
  std::string configs = "pread:1,uring:1,pread:4,uring:4,uring:16";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--expert-mib") expert_mib = std::atof(v.c_str());
    else if (k == "--chunk-mib") chunk_mib = std::atof(v.c_str());
    else if (k == "--experts") n_experts = std::atoi(v.c_str());
    else if (k == "--rounds") rounds = std::atoi(v.c_str());
    else if (k == "--configs") configs = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::vector<Config> cfgs;
  for (size_t i = 0; i < configs.size();) {
    size_t j = configs.find(',', i);
    if (j == std::string::npos) j = configs.size();
    const std::string c = configs.substr(i, j - i);
    const size_t colon = c.find(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "--configs: expected ENGINE:DEPTH, got %s\n", c.c_str());
      return 2;
    }
    cfgs.push_back({c.substr(0, colon), std::atoi(c.c_str() + colon + 1)});
    i = j + 1;
  }
  const uint64_t align = 4096;
  const uint64_t eb = static_cast<uint64_t>(expert_mib * (1 << 20)) / align * align;
  const uint64_t cb = static_cast<uint64_t>(chunk_mib * (1 << 20)) / align * align;
  strata::Fd fd = strata::try_open_file(path, O_RDONLY | O_DIRECT);
  const bool direct = fd.valid();
  if (!direct) fd = strata::open_file(path, O_RDONLY);
  struct stat st {};
  ::fstat(fd.get(), &st);
  const uint64_t slots = static_cast<uint64_t>(st.st_size) / eb;
  if (slots < static_cast<uint64_t>(n_experts) * cfgs.size()) {
    std::fprintf(stderr, "%s: %lld bytes hold %llu experts of %llu bytes; need %zu (experts x configs)\n", path.c_str(),
                 (long long)st.st_size, (unsigned long long)slots, (unsigned long long)eb,
                 static_cast<size_t>(n_experts) * cfgs.size());
    return 1;
  }
  for (const Config& c : cfgs)
    if (c.engine != "pread" && c.engine != "uring" && c.engine != "uring-reg") {
      std::fprintf(stderr, "--configs: engine %s: expected pread, uring or uring-reg\n", c.engine.c_str());
      return 2;
    }
  // One buffer per expert, allocated as the store allocates its cache slots.
  std::vector<uint8_t*> bufs(static_cast<size_t>(n_experts));
  for (uint8_t*& b : bufs) {
    b = static_cast<uint8_t*>(strata::alloc_streamed(eb, align));
    std::memset(b, 0, eb);  // faulted in before any timed read
  }
  std::vector<std::vector<double>> gbps(cfgs.size()), cpu(cfgs.size());
  bool dropped = false;
  std::printf("file %s, %s, experts %.1f MiB in %.2f MiB chunks, %d experts per run\n", path.c_str(),
              direct ? "O_DIRECT" : "buffered (no O_DIRECT)", eb / 1048576.0, cb / 1048576.0, n_experts);
  for (int r = 0; r < rounds; ++r) {
    // Each configuration of the round reads its own experts (a random partition).
    std::vector<uint64_t> perm(slots);
    for (uint64_t i = 0; i < slots; ++i) perm[i] = i;
    std::mt19937_64 rng(static_cast<uint64_t>(r) + 1);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (size_t ci0 = 0; ci0 < cfgs.size(); ++ci0) {
      const size_t ci = (r % 2 == 0) ? ci0 : cfgs.size() - 1 - ci0;  // alternate the order too
      const Config& c = cfgs[ci];
      std::string why;
      const bool reg = c.engine == "uring-reg";
      std::unique_ptr<strata::ReadEngine> eng =
          c.engine == "pread" ? strata::open_pread_engine(c.depth) : strata::open_uring_engine(c.depth, &why);
      if (!eng) {
        std::fprintf(stderr, "io_uring unavailable: %s\n", why.c_str());
        return 1;
      }
      if (reg) {
        if (!eng->reserve_buffers(static_cast<uint32_t>(n_experts), &why)) {
          std::fprintf(stderr, "registered buffers unavailable: %s\n", why.c_str());
          return 1;
        }
        for (int e = 0; e < n_experts; ++e)
          if (const int err = eng->register_buffer(static_cast<uint32_t>(e), bufs[static_cast<size_t>(e)], eb); err < 0) {
            std::fprintf(stderr, "registering buffer %d failed: %s\n", e, std::strerror(-err));
            return 1;
          }
      }
      drop_caches(fd.get(), &dropped);
      // All chunks of all experts, `depth` in flight.
      std::vector<strata::ReadOp> all;
      for (int e = 0; e < n_experts; ++e) {
        const uint64_t off = perm[ci * static_cast<size_t>(n_experts) + static_cast<size_t>(e)] * eb;
        for (uint64_t p = 0; p < eb; p += cb)
          all.push_back({fd.get(), bufs[static_cast<size_t>(e)] + p, off + p,
                         static_cast<uint32_t>(std::min(cb, eb - p)), static_cast<uint32_t>(all.size()),
                         reg ? e : -1});
      }
      std::vector<strata::ReadDone> done(static_cast<size_t>(c.depth));
      size_t next = 0, in_flight = 0;
      uint64_t bytes = 0;
      const double t0 = now_s(), c0 = cpu_s();
      while (next < all.size() || in_flight > 0) {
        const size_t k = std::min(all.size() - next, static_cast<size_t>(c.depth) - in_flight);
        if (k) eng->submit(std::span<const strata::ReadOp>(all.data() + next, k));
        next += k;
        in_flight += k;
        const size_t n = eng->wait(done);
        for (size_t i = 0; i < n; ++i) {
          if (done[i].res < 0) {
            std::fprintf(stderr, "read failed: %s\n", std::strerror(static_cast<int>(-done[i].res)));
            return 1;
          }
          bytes += static_cast<uint64_t>(done[i].res);
        }
        in_flight -= n;
      }
      const double dt = now_s() - t0, dc = cpu_s() - c0;
      gbps[ci].push_back(static_cast<double>(bytes) / dt / 1e9);
      cpu[ci].push_back(dc / (static_cast<double>(bytes) / 1e9));
      std::printf("round %d  %-9s depth %-3d  %7.3f GB/s  %6.1f CPU ms/GB  (%.0f MB in %.3f s)\n", r + 1,
                  c.engine.c_str(), c.depth, gbps[ci].back(), cpu[ci].back() * 1e3, bytes / 1e6, dt);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("page cache dropped before each run: %s\nmedian GB/s:", dropped ? "yes" : "no (not permitted)");
  for (size_t ci = 0; ci < cfgs.size(); ++ci)
    std::printf("  %s:%d %.3f", cfgs[ci].engine.c_str(), cfgs[ci].depth, median(gbps[ci]));
  std::printf("\nmedian CPU ms/GB:");
  for (size_t ci = 0; ci < cfgs.size(); ++ci)
    std::printf("  %s:%d %.1f", cfgs[ci].engine.c_str(), cfgs[ci].depth, median(cpu[ci]) * 1e3);
  std::printf("\n");
  for (uint8_t* b : bufs) strata::free_streamed(b);
  return 0;
}
