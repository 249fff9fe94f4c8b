// AVX-512 (F, BW, VL, DQ) kernels without VNNI; see qgemm_avx512_impl.h.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/qgemm.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi2")

namespace strata {
namespace {
#define STRATA_VNNI 0
#include "kernels/qgemm_avx512_impl.h"
#include "kernels/qdeq_avx512_impl.h"
#include "kernels/vexp_avx512_impl.h"
#include "kernels/half_avx512_impl.h"
#undef STRATA_VNNI
}  // namespace

#pragma GCC pop_options

// Generic code from here: the table may be built on any CPU.
const KernelTable& kernel_table_avx512() {
  static const KernelTable t = [] {
    KernelTable k{KernelPath::Avx512, k_dot_f32, k_gemm_f32, k_gemm_bf16,
        k_gemm_q8, k_gemm_q4, ActLayout::Plain, ActLayout::SplitNibble,
        nullptr, ActLayout::Plain, k_quantize_acts};
    k.deq_axpy = k_deq_axpy;
    k.deq_gemm = k_deq_gemm;
    k.gemm_f32_rows = k_gemm_f32_rows;
    k.gemm_f32_lanes = k_gemm_f32_lanes;
    k.wsum_f32 = k_wsum_f32;
    k.f16_to_f32 = k_f16_to_f32;
    k.gemm_f16_rows = k_gemm_f16_rows;
    k.wsum_f16 = k_wsum_f16;
    k.halves_in_registers = true;
    if (exp_kernel_matches_libm(k_exp_f32)) {  // else std::exp is not the expf exp16 computes
      k.exp_f32 = k_exp_f32;
      k.softmax = k_softmax;
      k.silu_mul = k_silu_mul;
    }
    return k;
  }();
  return t;
}

}  // namespace strata
