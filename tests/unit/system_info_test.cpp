// core/system_info: the CPU-time readings `strata bench` reports as cores
// busy while decoding (this process, the rest of the machine, steal), and the
// memory-bandwidth probe.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/system_info.h"

namespace strata::system_info_test {
namespace {

// Keeps a core busy for about `ms` milliseconds of wall time.
void spin_for_ms(int ms) {
  std::atomic<unsigned long long> x{0};
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) x.fetch_add(1, std::memory_order_relaxed);
}

TEST(SystemInfo, CpuTimesCountThisProcessesWorkAndTheMachines) {
  const CpuTimes a = cpu_times();
  std::thread t([] { spin_for_ms(300); });  // another thread's time counts too
  spin_for_ms(300);
  t.join();
  const CpuTimes b = cpu_times();
  const double self = b.process_s - a.process_s;
  // Two threads spun 0.3 s each. A loaded host may deschedule them, so
  // only a lower bound well below 0.6 s, and an upper one (wall time x
  // threads, plus slack) that a wrong unit (ms, ticks) would break.
  EXPECT_GT(self, 0.15) << "getrusage did not see the threads' work";
  EXPECT_LT(self, 5.0);
  if (!std::filesystem::exists("/proc/stat")) {
    EXPECT_FALSE(b.machine_known);
    GTEST_SKIP() << "no /proc/stat here: the machine's busy time is not read";
  }
  ASSERT_TRUE(a.machine_known && b.machine_known);
  const double busy = b.machine_busy_s - a.machine_busy_s;
  // The machine was busy at least while this process was (clock ticks:
  // allow 0.1 s of rounding), and not more than every core for the interval.
  EXPECT_GE(busy, self - 0.1);
  const double cores = static_cast<double>(std::thread::hardware_concurrency());
  EXPECT_LT(busy, cores * 5.0);
  EXPECT_GE(b.machine_steal_s, a.machine_steal_s);
}

// The bandwidth probe reads its buffer as 1, 2 and 4 streams per thread and
// returns the best rate. The best of the three is at least the buffer's bytes
// over the whole call's wall time (which covers all three reads and the
// set-up), so a probe that returned 0, or lost its reads' time, fails here;
// reads the compiler dropped would give rates far above any two cores' cache
// bandwidth, which the upper bound catches.
TEST(SystemInfo, MemoryReadProbeReportsARateTheCallsTimeAllows) {
  constexpr size_t kBytes = size_t{64} << 20;
  const auto t0 = std::chrono::steady_clock::now();
  const double gb_s = memory_read_gb_s(kBytes, 2, 1);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The probe reads a multiple of 16 vectors per thread: at most 2 x 16 x 64
  // bytes fewer than the buffer.
  const double read_gb = static_cast<double>(kBytes - 2 * 16 * 64) / 1e9;
  EXPECT_GE(gb_s, read_gb / wall_s) << "wall " << wall_s << " s";
  EXPECT_LT(gb_s, 1000.0);
}

}  // namespace
}  // namespace strata::system_info_test
