// core/system_info: the CPU-time readings `strata bench` reports as cores
// busy while decoding (this process, the rest of the machine, steal).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/system_info.h"

namespace strata {
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

}  // namespace
}  // namespace strata
