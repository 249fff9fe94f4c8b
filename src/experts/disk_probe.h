// What the disk under a directory can do for streamed experts (`strata
// doctor`, `strata plan`): its filesystem, free space, whether O_DIRECT and
// io_uring work there, and random-read throughput with expert-sized reads at
// several queue depths. The probe writes ONE temporary file in the directory
// (at most DiskProbeOptions::file_bytes, capped at kMaxProbeFileBytes) and
// deletes it before returning, also when a step fails; each read probe runs
// for at most `seconds_per_depth`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

constexpr uint64_t kMaxProbeFileBytes = 256ull << 20;

struct DiskProbeOptions {
  std::string dir = ".";
  uint64_t file_bytes = 256ull << 20;  // temp file size (clamped to kMaxProbeFileBytes and to a tenth of free space)
  uint64_t read_bytes = 4ull << 20;    // one read, about one routed expert of a full-size model
  std::vector<int> depths = {1, 4, 16};
  double seconds_per_depth = 0.7;
  bool measure = true;  // false: facts only, no file is written
};

struct DiskReadRate {
  int depth = 0;
  uint64_t reads = 0, bytes = 0;
  double seconds = 0.0;
  double gb_s = 0.0;  // 1e9 bytes per second
};

struct DiskProbe {
  std::string dir;         // as resolved (absolute)
  std::string filesystem;  // "ext4", "xfs", "tmpfs", "overlay", ... or "0x..." when unknown
  uint64_t free_bytes = 0, total_bytes = 0;
  bool o_direct = false;
  std::string o_direct_error;  // why not, when false
  bool io_uring = false;
  std::string io_uring_error;  // why not (e.g. "Operation not permitted": blocked by seccomp or sysctl)
  // The method the read probe used: "io_uring" (requests in flight = depth)
  // or "threads" (depth threads each issuing one pread at a time).
  std::string read_method;
  bool reads_direct = false;  // reads bypassed the page cache (O_DIRECT)
  uint64_t file_bytes = 0;    // size of the temp file written (0: none)
  double write_seconds = 0.0;
  std::vector<DiskReadRate> reads;
  std::string error;  // the measurement failed (facts above are still valid)
  bool file_removed = true;
};

// Throws strata::Error only when `dir` is not a directory.
DiskProbe probe_disk(const DiskProbeOptions& o);

// The CPU time the expert store spends on every miss besides the read: it
// verifies each expert that lands with XXH3 (experts/disk_expert_store.cpp,
// on the thread that waits for it, so the time counts as expert wait) over
// bytes the disk just wrote to memory, not yet in the CPU's caches. The probe
// hashes `expert_bytes` blocks of a `working_set_bytes` buffer (default 64
// MiB: above the last-level cache of common CPUs, so each block comes from
// memory as a fresh read's does), one after another, for about `seconds`
// (at least 8 blocks). Memory: the buffer only; no file.
struct ChecksumProbe {
  uint64_t expert_bytes = 0, working_set_bytes = 0;
  uint64_t hashes = 0;
  double seconds = 0.0;
  double gb_s = 0.0;        // 1e9 bytes hashed per second
  double us_per_expert = 0.0;
};
constexpr uint64_t kMaxChecksumWorkingSet = 256ull << 20;
ChecksumProbe probe_checksum(uint64_t expert_bytes, double seconds, uint64_t working_set_bytes = 64ull << 20);

}  // namespace strata
