// AArch64 NEON + int8 matrix multiply (SMMLA) kernels, SDOT for single rows;
// see qgemm_neon_impl.h. Built with -march=armv8.2-a+dotprod+i8mm
// (CMakeLists.txt), run only where the kernel reports HWCAP_ASIMDDP and
// HWCAP2_I8MM (cpu_features.cpp).
#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/qgemm.h"

#if !defined(__ARM_FEATURE_DOTPROD) || !defined(__ARM_FEATURE_MATMUL_INT8)
#error "qgemm_neon_i8mm.cpp needs -march=armv8.2-a+dotprod+i8mm"
#endif

namespace strata {
namespace {
#define STRATA_NEON_LEVEL 2
#include "kernels/qgemm_neon_impl.h"
#undef STRATA_NEON_LEVEL
}  // namespace

const KernelTable& kernel_table_neon_i8mm() {
  static const KernelTable t = neon_table(KernelPath::NeonI8mm);
  return t;
}

}  // namespace strata
