// The elementwise exp kernels (KernelTable::exp_f32, softmax, silu_mul): on
// every CPU path the scalar references' floats bit for bit. The AVX-512 paths
// compute glibc's expf algorithm in SIMD, so the exp test sweeps the float
// line against std::exp: every value where the algorithm changes branch
// (overflow, underflow, subnormal results, NaN, infinities), the ranges a
// softmax and a silu meet densely, and a stride over all 2^32 bit patterns.
// STRATA_EXP_EXHAUSTIVE=1 checks all 2^32 of them (~14 s per AVX-512 path on
// 2 cores; ctest runs it as vexp_exhaustive in optimized builds, not in the
// sanitizer one, where it would take minutes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/qgemm.h"
#include "kernel_paths.h"

namespace strata::vexp_test {
namespace {

using test_util::bits_of;
using test_util::same;
using test_util::supported_paths;

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Checks exp_f32 of path p against std::exp on the bit patterns
// [first, last] stepping by `step` (in chunks); returns the first mismatch.
std::string exp_mismatch(const KernelTable& kt, uint64_t first, uint64_t last, uint64_t step) {
  constexpr size_t kChunk = 4096;
  std::vector<float> x, y(kChunk);
  x.reserve(kChunk);
  uint64_t u = first;
  while (u <= last) {
    x.clear();
    for (; u <= last && x.size() < kChunk; u += step) x.push_back(float_of(static_cast<uint32_t>(u)));
    // odd lengths too: the masked tail
    const int64_t n = static_cast<int64_t>(x.size());
    kt.exp_f32(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = std::exp(x[static_cast<size_t>(i)]);
      if (!same(want, y[static_cast<size_t>(i)])) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "exp(%a) [bits %08x]: want %a, got %a", static_cast<double>(x[static_cast<size_t>(i)]),
                      bits_of(x[static_cast<size_t>(i)]), static_cast<double>(want),
                      static_cast<double>(y[static_cast<size_t>(i)]));
        return buf;
      }
    }
  }
  return "";
}

TEST(KernelVexp, ExpIsStdExpBitForBit) {
  const bool exhaustive = std::getenv("STRATA_EXP_EXHAUSTIVE") != nullptr;
  if (!exhaustive)
    std::printf("[ note ] a sweep of the float line here; all 2^32 values: STRATA_EXP_EXHAUSTIVE=1 (ctest's "
                "vexp_exhaustive in a release build)\n");
  // Bit-pattern ranges, both signs: |x| in [2^-30, 2^-10] every 97th
  // value, [2^-10, 32] every 31st (a softmax's and a silu's arguments),
  // [87, 105] every value (glibc's branch points: overflow above
  // log(2^128) ~ 88.72, the subnormal results, the underflow below
  // log(2^-150) ~ -103.97), the infinities and the NaNs next to them, and
  // all 2^32 patterns every 4099th.
  struct Range {
    uint64_t first, last, step;
  };
  const uint32_t inf_bits = bits_of(std::numeric_limits<float>::infinity());
  std::vector<Range> ranges;
  if (exhaustive) {
    ranges.push_back({0, 0xffffffffu, 1});
  } else {
    for (uint32_t sign : {0u, 0x80000000u}) {
      ranges.push_back({sign | bits_of(0x1p-30f), sign | bits_of(0x1p-10f), 97});
      ranges.push_back({sign | bits_of(0x1p-10f), sign | bits_of(32.0f), 31});
      ranges.push_back({sign | bits_of(87.0f), sign | bits_of(105.0f), 1});
      ranges.push_back({sign | (inf_bits - 4096), sign | (inf_bits + 4096), 1});
    }
    ranges.push_back({0, 0xffffffffu, 4099});
  }
  // Each range split over the cores (the exhaustive run: ~12 s on 2).
  const uint64_t parts = std::max(1u, std::thread::hardware_concurrency());
  for (KernelPath p : supported_paths()) {
    const KernelTable& kt = kernel_table(p);
    if (exhaustive && kt.exp_f32 == exp_f32_ref) {
      std::printf("[ note ] %s calls std::exp itself: not swept\n", kernel_path_name(p));
      continue;
    }
    for (const Range& r : ranges) {
      const uint64_t count = (r.last - r.first) / r.step + 1;
      std::vector<std::string> bad(parts);
      std::vector<std::thread> threads;
      for (uint64_t t = 0; t < parts; ++t) {
        const uint64_t b = count * t / parts, e = count * (t + 1) / parts;
        if (b < e)
          threads.emplace_back([&, t, b, e] { bad[t] = exp_mismatch(kt, r.first + b * r.step, r.first + (e - 1) * r.step, r.step); });
      }
      for (std::thread& th : threads) th.join();
      for (const std::string& m : bad) EXPECT_TRUE(m.empty()) << kernel_path_name(p) << ": " << m;
    }
  }
}

// glibc on x86-64 picks its FMA expf on any CPU with AVX-512 (which has FMA
// and AVX2), the one exp16 computes: there the AVX-512 tables must use their
// SIMD exps (a start-up check that always refused them would leave every
// test above comparing std::exp with itself).
TEST(KernelVexp, AvxTablesUseTheSimdExpOnGlibc) {
#if defined(__GLIBC__) && defined(__x86_64__)
  int checked = 0;
  for (KernelPath p : {KernelPath::Avx512, KernelPath::Avx512Vnni}) {
    if (!kernel_path_supported(p)) continue;
    const KernelTable& kt = kernel_table(p);
    EXPECT_NE(kt.exp_f32, &exp_f32_ref) << kernel_path_name(p);
    EXPECT_NE(kt.softmax, &softmax) << kernel_path_name(p);
    EXPECT_NE(kt.silu_mul, &silu_mul_ref) << kernel_path_name(p);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "this CPU has no AVX-512 path";
#else
  GTEST_SKIP() << "not glibc on x86-64: the SIMD exps are used only where std::exp proves to be glibc's expf";
#endif
}

TEST(KernelVexp, SoftmaxAndSiluMulAreTheReferenceOnEveryPath) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  int cases = 0;
  for (int64_t n : {0, 1, 2, 15, 16, 17, 31, 33, 64, 100, 255, 512, 2049}) {
    for (float scale : {0.01f, 1.0f, 8.0f, 60.0f, 300.0f}) {
      for (int special = 0; special < 6; ++special) {
        if (n == 0 && special > 0) break;
        std::vector<float> x(static_cast<size_t>(n)), u(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = d(rng) * scale, u[static_cast<size_t>(i)] = d(rng);
        // special 1: a masked score (-inf) and a +0 / -0 pair; 2: a NaN;
        // 3: every value -inf but one
        if (special == 1) {
          x[static_cast<size_t>(n / 2)] = -inf;
          x[0] = 0.0f;
          x[static_cast<size_t>(n - 1)] = -0.0f;
        }
        if (special == 2) x[static_cast<size_t>(n / 3)] = nan;
        if (special == 3)
          for (int64_t i = 1; i < n; ++i) x[static_cast<size_t>(i)] = -inf;
        // 4: a +inf; 5: every value <= 0, +0 first and -0 in another vector
        if (special == 4) x[static_cast<size_t>(n - 1)] = inf;
        if (special == 5) {
          for (float& v : x) v = -std::fabs(v) - 1.0f;
          x[0] = 0.0f;
          x[static_cast<size_t>(std::min<int64_t>(n - 1, 17))] = -0.0f;
        }
        std::vector<float> want = x;
        softmax(want.data(), n);
        std::vector<float> want_silu = x;
        silu_mul_ref(want_silu.data(), u.data(), n);
        for (KernelPath p : supported_paths()) {
          const KernelTable& kt = kernel_table(p);
          std::vector<float> got = x;
          kt.softmax(got.data(), n);
          std::vector<float> got_silu = x;
          kt.silu_mul(got_silu.data(), u.data(), n);
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_TRUE(same(want[static_cast<size_t>(i)], got[static_cast<size_t>(i)]))
                << "softmax, " << kernel_path_name(p) << ", n " << n << ", scale " << scale << ", case " << special
                << ", element " << i << ": want " << want[static_cast<size_t>(i)] << ", got "
                << got[static_cast<size_t>(i)];
            ASSERT_TRUE(same(want_silu[static_cast<size_t>(i)], got_silu[static_cast<size_t>(i)]))
                << "silu_mul, " << kernel_path_name(p) << ", n " << n << ", scale " << scale << ", case " << special
                << ", element " << i << ": want " << want_silu[static_cast<size_t>(i)] << ", got "
                << got_silu[static_cast<size_t>(i)];
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 0);
}

}  // namespace
}  // namespace strata::vexp_test
