// Monotonic time for the counters every layer keeps (ARCHITECTURE.md §8).
#pragma once
#include <chrono>
#include <cstdint>

namespace strata {

// Nanoseconds on the steady clock.
inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// Adds the lifetime of the scope to a counter.
struct ScopedTimer {
  uint64_t& acc;
  uint64_t t0 = now_ns();
  ~ScopedTimer() { acc += now_ns() - t0; }
};

}  // namespace strata
