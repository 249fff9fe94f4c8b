// What the CPU can do, and which kernel paths it runs. Which path a matmul
// uses is a value (kernels/matmul.h, Compute) chosen when an engine opens;
// it never changes a result: every path computes the scalar reference's
// numbers bit for bit (docs/kernels.md).
#pragma once
#include <optional>
#include <string>

namespace strata {

struct CpuFeatures {
  bool avx2 = false, fma = false;
  bool f16c = false;  // vcvtph2ps on xmm/ymm (the AVX2 path's half conversion when present)
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avxvnni = false;
  bool amx_tile = false, amx_int8 = false;  // reported only: no AMX kernel yet
  // AArch64 (getauxval): Advanced SIMD, SDOT/UDOT (HWCAP_ASIMDDP), SMMLA (HWCAP2_I8MM).
  bool asimd = false, asimddp = false, i8mm = false;
};

// The running CPU (cpuid with the OS's register-state support), detected once.
const CpuFeatures& cpu_features();

enum class KernelPath { Scalar, Avx2, Avx512, Avx512Vnni, Neon, NeonDotprod, NeonI8mm };

// Every path, whichever architecture this build is for (the others are
// never supported()).
inline constexpr KernelPath kAllKernelPaths[] = {KernelPath::Scalar,     KernelPath::Avx2,        KernelPath::Avx512,
                                                 KernelPath::Avx512Vnni, KernelPath::Neon,        KernelPath::NeonDotprod,
                                                 KernelPath::NeonI8mm};

// "scalar", "avx2", "avx512", "avx512-vnni", "neon", "neon-dotprod", "neon-i8mm"
const char* kernel_path_name(KernelPath p);
std::optional<KernelPath> parse_kernel_path(const std::string& name);
bool kernel_path_supported(KernelPath p);
// The fastest path this CPU runs (what an engine uses unless told otherwise).
KernelPath best_kernel_path();

// One line for the start-up banner about path `p`, e.g.
// "kernels: avx512-vnni (cpu: avx2 fma avx512f avx512bw avx512vl avx512vnni avx512bf16; amx: no)",
// "kernels: neon-i8mm (cpu: asimd asimddp i8mm)" on AArch64.
std::string kernel_description(KernelPath p);

}  // namespace strata
