// Facts about the machine that decide how fast strata runs (`strata doctor`,
// `strata plan`, `strata bench`): the CPU's name and cores, memory (RAM,
// a cgroup limit, swap, transparent huge pages) and a short bounded
// measurement of memory read bandwidth. Everything is read from /proc and
// /sys when asked; nothing is cached.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

struct MemoryInfo {
  uint64_t total_bytes = 0;      // MemTotal
  uint64_t available_bytes = 0;  // MemAvailable
  uint64_t swap_total_bytes = 0, swap_free_bytes = 0;
  // The tightest memory limit of this process's cgroup (v2 memory.max or v1
  // memory.limit_in_bytes); 0 when there is none (or it is above the RAM).
  uint64_t cgroup_limit_bytes = 0;
  std::string cgroup_version;  // "v2", "v1" or "none"
  // /sys/kernel/mm/transparent_hugepage/enabled, the selected word
  // ("always", "madvise", "never"), or "unknown".
  std::string thp;
};

MemoryInfo memory_info();

// The CPU's model name (/proc/cpuinfo "model name", or the AArch64 "CPU
// part" line), "unknown" when absent; and the cores this process may run on.
std::string cpu_model_name();
int usable_cores();

// Multi-threaded streaming read of a `bytes` buffer (much larger than the
// last-level cache), in GB/s (1e9 bytes per second): the best of `tries`
// tries, each of which reads the buffer three times, every thread reading its
// share as 1, 2 and 4 sequential streams at once. The buffer is allocated,
// faulted in and freed here.
double memory_read_gb_s(size_t bytes, int threads, int tries);

// CPU time so far, in seconds: this process's (user + system, every thread;
// getrusage) and the whole machine's from /proc/stat's "cpu" line: busy
// (user, nice, system, irq, softirq: work done on this machine, by any
// process or kernel thread) and steal (time the hypervisor gave this
// machine's CPUs to someone else). machine_known is false where /proc/stat
// cannot be read. Differences of two readings say, over an interval, how
// many cores this process kept busy and how many went to everything else
// (e.g. a loop device copying the reads of an emulated disk).
struct CpuTimes {
  double process_s = 0.0;
  double machine_busy_s = 0.0, machine_steal_s = 0.0;
  bool machine_known = false;
};
CpuTimes cpu_times();

}  // namespace strata
