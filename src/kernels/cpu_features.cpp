#include "kernels/cpu_features.h"

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define STRATA_X86 1
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#define STRATA_ARM64 1
// From the kernel's asm/hwcap.h (stable ABI), in case the headers are older.
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif
#endif

namespace strata {

namespace {

#ifdef STRATA_X86
uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#ifdef STRATA_X86
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
  if (!osxsave) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_ok = (xcr0 & 0x6) == 0x6;              // SSE + AVX state
  const bool zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM state
  const bool tile_ok = (xcr0 & 0x60000) == 0x60000;     // XTILECFG + XTILEDATA
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned b7 = b, c7 = c, d7 = d;
  __cpuid_count(7, 1, a, b, c, d);
  const unsigned a71 = a;
  f.fma = ymm_ok && fma;
  f.f16c = ymm_ok && f16c;
  f.avx2 = ymm_ok && ((b7 >> 5) & 1);
  f.avx512f = zmm_ok && ((b7 >> 16) & 1);
  f.avx512dq = f.avx512f && ((b7 >> 17) & 1);
  f.avx512bw = f.avx512f && ((b7 >> 30) & 1);
  f.avx512vl = f.avx512f && ((b7 >> 31) & 1);
  f.avx512vnni = f.avx512f && ((c7 >> 11) & 1);
  f.avx512bf16 = f.avx512f && ((a71 >> 5) & 1);
  f.avxvnni = ymm_ok && ((a71 >> 4) & 1);
  f.amx_tile = tile_ok && ((d7 >> 24) & 1);
  f.amx_int8 = f.amx_tile && ((d7 >> 25) & 1);
#endif
#ifdef STRATA_ARM64
  const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  f.asimd = (hw & HWCAP_ASIMD) != 0;
  f.asimddp = f.asimd && (hw & HWCAP_ASIMDDP) != 0;
  f.i8mm = f.asimd && (hw2 & HWCAP2_I8MM) != 0;
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

const char* kernel_path_name(KernelPath p) {
  switch (p) {
    case KernelPath::Scalar: return "scalar";
    case KernelPath::Avx2: return "avx2";
    case KernelPath::Avx512: return "avx512";
    case KernelPath::Avx512Vnni: return "avx512-vnni";
    case KernelPath::Neon: return "neon";
    case KernelPath::NeonDotprod: return "neon-dotprod";
    case KernelPath::NeonI8mm: return "neon-i8mm";
  }
  return "?";
}

std::optional<KernelPath> parse_kernel_path(const std::string& name) {
  for (KernelPath p : kAllKernelPaths)
    if (name == kernel_path_name(p)) return p;
  return std::nullopt;
}

bool kernel_path_supported(KernelPath p) {
  const CpuFeatures& f = cpu_features();
  switch (p) {
    case KernelPath::Scalar: return true;
    case KernelPath::Avx2: return f.avx2 && f.fma;
    case KernelPath::Avx512: return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma;
    case KernelPath::Avx512Vnni: return kernel_path_supported(KernelPath::Avx512) && f.avx512vnni;
    // The NEON kernels exist only in AArch64 builds (qgemm_neon*.cpp).
#ifdef __aarch64__
    case KernelPath::Neon: return f.asimd;
    case KernelPath::NeonDotprod: return f.asimd && f.asimddp;
    case KernelPath::NeonI8mm: return f.asimd && f.asimddp && f.i8mm;  // odd rows take the SDOT kernel
#else
    case KernelPath::Neon:
    case KernelPath::NeonDotprod:
    case KernelPath::NeonI8mm: return false;
#endif
  }
  return false;
}

KernelPath best_kernel_path() {
  for (KernelPath p : {KernelPath::Avx512Vnni, KernelPath::Avx512, KernelPath::Avx2, KernelPath::NeonI8mm,
                       KernelPath::NeonDotprod, KernelPath::Neon})
    if (kernel_path_supported(p)) return p;
  return KernelPath::Scalar;
}

std::string kernel_description(KernelPath p) {
  const CpuFeatures& f = cpu_features();
  std::string s = std::string("kernels: ") + kernel_path_name(p) + " (cpu:";
  const std::pair<bool, const char*> feats[] = {
      {f.avx2, "avx2"},         {f.fma, "fma"},           {f.f16c, "f16c"},             {f.avx512f, "avx512f"},
      {f.avx512bw, "avx512bw"},
      {f.avx512vl, "avx512vl"}, {f.avx512dq, "avx512dq"}, {f.avx512vnni, "avx512vnni"}, {f.avx512bf16, "avx512bf16"},
      {f.avxvnni, "avxvnni"},   {f.asimd, "asimd"},       {f.asimddp, "asimddp"},       {f.i8mm, "i8mm"}};
  bool any = false;
  for (const auto& [has, name] : feats)
    if (has) {
      s += std::string(" ") + name;
      any = true;
    }
  if (!any) s += " none";
#ifdef STRATA_X86
  s += f.amx_int8 ? "; amx-int8: yes, unused)" : "; amx: no)";
#else
  s += ")";
#endif
  return s;
}

}  // namespace strata
