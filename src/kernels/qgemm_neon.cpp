// AArch64 baseline Advanced SIMD kernels (no SDOT/SMMLA: int8 products by
// widening multiplies); see qgemm_neon_impl.h. Every AArch64 CPU runs them.
#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/qgemm.h"

namespace strata {
namespace {
#define STRATA_NEON_LEVEL 0
#include "kernels/qgemm_neon_impl.h"
#undef STRATA_NEON_LEVEL
}  // namespace

const KernelTable& kernel_table_neon() {
  static const KernelTable t = neon_table(KernelPath::Neon);
  return t;
}

}  // namespace strata
