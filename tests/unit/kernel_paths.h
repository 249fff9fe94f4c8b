// Shared by the kernel tests: the CPU paths this machine runs, and float bit
// equality (any NaN equal to any NaN: payloads are not part of the kernels'
// contract).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu_features.h"

namespace strata::test_util {

inline std::vector<KernelPath> supported_paths() {
  std::vector<KernelPath> v;
  for (KernelPath p : kAllKernelPaths)  // x86 paths on x86, NEON paths on AArch64
    if (kernel_path_supported(p)) v.push_back(p);
  return v;
}

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b); }

}  // namespace strata::test_util
