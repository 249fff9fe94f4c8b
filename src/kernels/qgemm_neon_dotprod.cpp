// AArch64 NEON + dot product (SDOT) kernels; see qgemm_neon_impl.h. Built
// with -march=armv8.2-a+dotprod (CMakeLists.txt), run only where the kernel
// reports HWCAP_ASIMDDP (cpu_features.cpp).
#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/qgemm.h"

#ifndef __ARM_FEATURE_DOTPROD
#error "qgemm_neon_dotprod.cpp needs -march=armv8.2-a+dotprod"
#endif

namespace strata {
namespace {
#define STRATA_NEON_LEVEL 1
#include "kernels/qgemm_neon_impl.h"
#undef STRATA_NEON_LEVEL
}  // namespace

const KernelTable& kernel_table_neon_dotprod() {
  static const KernelTable t = neon_table(KernelPath::NeonDotprod);
  return t;
}

}  // namespace strata
