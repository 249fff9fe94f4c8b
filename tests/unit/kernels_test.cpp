// The kernels behind matmul: every CPU path equals the scalar reference bit
// for bit (odd sizes, tails, extreme values), integer formats stay within
// their stated error bound of the dequantized reference, results never depend
// on batch, threads or path, and the thread pool runs every index once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "experts/expert_store.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "core/numeric.h"
#include "core/aligned.h"
#include "kernels/qgemm.h"
#include "model/forward.h"
#include "model/model.h"
#include "core/quant.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernel_paths.h"

namespace strata::kernels_test {
namespace {

using test_util::bits_of;
using test_util::same;
using test_util::supported_paths;

::testing::AssertionResult all_same(const std::vector<float>& want, const std::vector<float>& got) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < want.size(); ++i)
    if (!same(want[i], got[i]))
      return ::testing::AssertionFailure() << "element " << i << ": want " << want[i] << " (bits " << bits_of(want[i])
                                           << "), got " << got[i] << " (bits " << bits_of(got[i]) << ")";
  return ::testing::AssertionSuccess();
}

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = d(rng);
  return v;
}

Weight make_float_weight(WeightFormat f, int64_t rows, int64_t cols, std::mt19937& rng) {
  Weight w;
  w.format = f;
  w.rows = rows;
  w.cols = cols;
  const auto v = random_floats(rng, rows * cols);
  if (f == WeightFormat::F32) {
    w.data.resize(v.size() * 4);
    std::memcpy(w.data.data(), v.data(), w.data.size());
  } else if (f == WeightFormat::BF16) {
    w.data.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = f32_to_bf16(v[i]);
      std::memcpy(w.data.data() + 2 * i, &h, 2);
    }
  } else {  // FP8_BLOCK, 4x8 blocks so tails and several blocks appear
    w.block_rows = 4;
    w.block_cols = 8;
    w.data.resize(v.size());
    for (auto& b : w.data) {
      b = static_cast<uint8_t>(rng());
      if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
    }
    const int64_t nbr = (rows + 3) / 4, nbc = (cols + 7) / 8;
    w.scales = random_floats(rng, nbr * nbc);
    for (auto& s : w.scales) s = std::fabs(s);
  }
  return w;
}

// Random int8/int4 bytes over the whole range (including -128 and -8, which
// the quantizer never writes but a kernel must still get right).
Weight make_int_weight(int bits, int64_t group, int64_t rows, int64_t cols, std::mt19937& rng) {
  Weight w;
  w.format = bits == 8 ? WeightFormat::INT8 : WeightFormat::INT4;
  w.rows = rows;
  w.cols = cols;
  w.group = group;
  const QuantBits b = bits == 8 ? QuantBits::Int8 : QuantBits::Int4;
  w.data.resize(static_cast<size_t>(rows * quant_row_bytes(b, cols)));
  for (auto& x : w.data) x = static_cast<uint8_t>(rng());
  w.scales = random_floats(rng, rows * quant_groups(cols, group), 0.01f);
  for (size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = i % 7 == 3 ? 0.0f : std::fabs(w.scales[i]);
  return w;
}

std::vector<float> run_matmul(const Weight& w, const std::vector<float>& x, int64_t nrows, KernelPath p,
                              ThreadPool* pool = nullptr) {
  std::vector<float> y(static_cast<size_t>(nrows * w.rows), -1.0f);
  ComputeOptions o;
  o.path = p;
  matmul(Compute(pool, o), w, x.data(), nrows, y.data());
  return y;
}

TEST(KernelPaths, DetectionChoiceAndDescription) {
  EXPECT_TRUE(kernel_path_supported(KernelPath::Scalar));
  EXPECT_TRUE(kernel_path_supported(best_kernel_path()));
  const KernelPath before = best_kernel_path();
  EXPECT_EQ(Compute(nullptr).path(), before);  // the default is the best path
  for (KernelPath p : supported_paths()) {
    ComputeOptions o;
    o.path = p;
    EXPECT_EQ(Compute(nullptr, o).path(), p);
    EXPECT_EQ(parse_kernel_path(kernel_path_name(p)), p);
  }
  EXPECT_FALSE(parse_kernel_path("sse4").has_value());
  // Every path has a name, also the other architecture's (never supported there).
  for (KernelPath p : kAllKernelPaths) EXPECT_EQ(parse_kernel_path(kernel_path_name(p)), p);
#if defined(__x86_64__)
  for (KernelPath p : {KernelPath::Neon, KernelPath::NeonDotprod, KernelPath::NeonI8mm}) {
    EXPECT_FALSE(kernel_path_supported(p)) << kernel_path_name(p);
    ComputeOptions o;
    o.path = p;
    EXPECT_THROW(Compute(nullptr, o), strata::Error) << kernel_path_name(p);
  }
#endif
  const std::string d = kernel_description(before);
  EXPECT_NE(d.find(kernel_path_name(before)), std::string::npos) << d;
  std::printf("  %s\n", d.c_str());
}

TEST(KernelDot, EveryPathMatchesTheScalarOrder) {
  std::mt19937 rng(1);
  const KernelTable& ref = kernel_table(KernelPath::Scalar);
  for (int64_t n : {0, 1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 100, 127, 1000, 4099}) {
    auto a = random_floats(rng, n), b = random_floats(rng, n, 3.0f);
    for (int64_t i = 0; i < n; i += 5) a[i] = -0.0f;
    const float want = ref.dot_f32(a.data(), b.data(), n);
    for (KernelPath p : supported_paths())
      EXPECT_TRUE(same(want, kernel_table(p).dot_f32(a.data(), b.data(), n))) << kernel_path_name(p) << " n=" << n;
  }
  // Non-finite values propagate the same way.
  std::vector<float> a(19, 1.0f), b(19, 1.0f);
  a[17] = INFINITY;
  for (KernelPath p : supported_paths())
    EXPECT_EQ(kernel_table(p).dot_f32(a.data(), b.data(), 19), INFINITY) << kernel_path_name(p);
  a[3] = -INFINITY;
  for (KernelPath p : supported_paths())
    EXPECT_TRUE(std::isnan(kernel_table(p).dot_f32(a.data(), b.data(), 19))) << kernel_path_name(p);
}

TEST(KernelDot, DotF32IsTheDocumentedOrder) {
  // 16 lanes with fused multiply-adds, then the tree: written out here.
  std::mt19937 rng(2);
  const int64_t n = 37;
  const auto a = random_floats(rng, n), b = random_floats(rng, n);
  float acc[16] = {};
  for (int64_t i = 0; i < n; ++i) acc[i % 16] = std::fma(a[i], b[i], acc[i % 16]);
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  EXPECT_TRUE(same(acc[0], dot_f32(a.data(), b.data(), n)));
}

TEST(KernelGemm, FloatFormatsMatchScalarOnEveryPath) {
  std::mt19937 rng(3);
  for (WeightFormat f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK})
    for (int64_t rows : {1, 3, 6})
      for (int64_t cols : {1, 15, 16, 17, 33, 100, 515})
        for (int64_t nrows : {1, 2, 3, 5, 9}) {
          const Weight w = make_float_weight(f, rows, cols, rng);
          const auto x = random_floats(rng, nrows * cols);
          const auto want = run_matmul(w, x, nrows, KernelPath::Scalar);
          // The scalar path is dot16 of the expanded row.
          std::vector<float> row(static_cast<size_t>(cols));
          for (int64_t o = 0; o < rows; ++o) {
            w.row_f32(o, row.data());
            for (int64_t r = 0; r < nrows; ++r)
              ASSERT_TRUE(same(want[r * rows + o],
                               kernel_table(KernelPath::Scalar).dot_f32(row.data(), x.data() + r * cols, cols)));
          }
          for (KernelPath p : supported_paths())
            EXPECT_TRUE(all_same(want, run_matmul(w, x, nrows, p)))
                << weight_format_name(f) << " " << kernel_path_name(p) << " rows=" << rows << " cols=" << cols
                << " nrows=" << nrows;
        }
}

TEST(KernelQGemm, IntFormatsMatchScalarOnEveryPath) {
  std::mt19937 rng(4);
  int cases = 0;
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 64, 96, 128, 256, 512})
      for (int64_t cols : {1, 31, 32, 33, 63, 100, 127, 129, 511, 512, 513, 1000, 1537}) {
        const int64_t rows = 1 + static_cast<int64_t>(rng() % 5), nrows = 1 + static_cast<int64_t>(rng() % 7);
        const Weight w = make_int_weight(bits, group, rows, cols, rng);
        auto x = random_floats(rng, nrows * cols);
        for (int64_t i = 0; i < nrows * cols; i += 13) x[i] *= 50.0f;  // outliers
        const auto want = run_matmul(w, x, nrows, KernelPath::Scalar);
        for (KernelPath p : supported_paths())
          EXPECT_TRUE(all_same(want, run_matmul(w, x, nrows, p)))
              << "int" << bits << " group " << group << " " << kernel_path_name(p) << " rows=" << rows
              << " cols=" << cols << " nrows=" << nrows;
        ++cases;
      }
  EXPECT_EQ(cases, 2 * 7 * 13);
}

// Rows whose last superblock is partial by whole 64-byte weight vectors
// (the bundled model's 128- and 256-column matrices, Qwen3-30B-A3B's 768,
// GLM-4.5-Air's 1408): the SIMD kernels skip the vectors that hold only
// padding (live_vectors), which must leave every output the scalar's. Each
// width with 1-4 activation rows (the GEMV and the small-call kernels) and
// odd and even weight row counts (the two-row walks and their odd last row).
TEST(KernelQGemm, PartialSuperblocksSkipOnlyPadding) {
  std::mt19937 rng(11);
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 64})
      for (int64_t cols : {64, 128, 192, 256, 320, 448, 640, 768, 1408})
        for (int64_t rows : {2, 5, 8})
          for (int64_t nrows : {1, 2, 3, 4}) {
            const Weight w = make_int_weight(bits, group, rows, cols, rng);
            auto x = random_floats(rng, nrows * cols);
            for (int64_t i = cols - 1; i < nrows * cols; i += cols) x[static_cast<size_t>(i)] *= 50.0f;  // last column
            const auto want = run_matmul(w, x, nrows, KernelPath::Scalar);
            for (KernelPath p : supported_paths())
              EXPECT_TRUE(all_same(want, run_matmul(w, x, nrows, p)))
                  << "int" << bits << " group " << group << " " << kernel_path_name(p) << " rows=" << rows
                  << " cols=" << cols << " nrows=" << nrows;
          }
}

TEST(KernelQGemm, MultiRowKernelsMatchScalarForEveryTileSize) {
  // Paths with multi-row int8/int4 kernels (their own activation layouts)
  // take them from 2 rows on: 1..17 rows cover every tile size and remainder.
  std::mt19937 rng(11);
  for (int bits : {8, 4})
  for (int64_t group : {0, 32, 128})
    for (int64_t cols : {32, 500, 1024, 1537})
      for (int64_t nrows = 1; nrows <= 17; ++nrows) {
        const Weight w = make_int_weight(bits, group, 3, cols, rng);
        auto x = random_floats(rng, nrows * cols);
        const auto want = run_matmul(w, x, nrows, KernelPath::Scalar);
        for (KernelPath p : supported_paths())
          ASSERT_TRUE(all_same(want, run_matmul(w, x, nrows, p)))
              << kernel_path_name(p) << " int" << bits << " group " << group << " cols " << cols << " nrows " << nrows;
      }
}

std::vector<float> run_matmul_with(const Weight& w, const std::vector<float>& x, int64_t nrows, const ComputeOptions& o,
                                   ThreadPool* pool = nullptr) {
  std::vector<float> y(static_cast<size_t>(nrows * w.rows), -1.0f);
  matmul(Compute(pool, o), w, x.data(), nrows, y.data());
  return y;
}

TEST(KernelQGemm, PackedPrefillKernelIsBitIdenticalOnOddShapes) {
  // The packed int8 and int4 kernels (prefill: weight tiles of 4 rows packed
  // 4 superblocks at a time per block of up to 255 activation rows, int4
  // rows unpacked to int8 values while packing, 4 x 3 register tiles, float
  // accumulators kept across chunks) against the unpacked kernels (int8:
  // multi-row; int4: the SplitNibble one) and the scalar reference, == on
  // every element, odd int4 widths (a row ending mid-byte) included: rows
  // M = 1..20 (matmul packs from 12 on) and past tiles and row blocks up to
  // 600, weight rows not a multiple of the tile, columns from under one
  // superblock to many chunks, partial superblocks and chunks, group sizes of
  // every scale-gathering case, 1-3 threads.
  std::vector<KernelPath> packed8, packed4;
  for (KernelPath p : supported_paths()) {
    if (kernel_table(p).gemm_q8_packed) packed8.push_back(p);
    if (kernel_table(p).gemm_q4_packed) packed4.push_back(p);
  }
  if (packed8.empty() && packed4.empty()) GTEST_SKIP() << "no path with a packed int8/int4 kernel on this CPU";
  std::mt19937 rng(16);
  ThreadPool two(2), three(3);
  std::vector<int64_t> ms;
  for (int64_t m = 1; m <= 20; ++m) ms.push_back(m);
  for (int64_t m : {23, 47, 85, 91, 128, 255, 600}) ms.push_back(m);
  struct Case {
    int64_t n, k, group;
  };
  const Case cases[] = {{5, 128, 32},   {6, 300, 0},     {3, 512, 64},    {2, 1000, 32},   {1, 2048, 0},
                        {4, 2100, 32},  {7, 3000, 96},   {9, 6001, 128},  {5, 12300, 512}, {3, 33000, 64}};
  int compared = 0;
  for (int bits : {8, 4})
  for (const Case& c : cases) {
    const std::vector<KernelPath>& packed = bits == 8 ? packed8 : packed4;
    const Weight w = make_int_weight(bits, c.group, c.n, c.k, rng);
    for (int64_t m : ms) {
      // Keeps the test fast: row blocks (255 rows) are crossed at 600 rows.
      if ((c.k > 2100 && m > 128 && !(c.k == 6001 && m == 600)) || (c.k > 6001 && m > 91)) continue;
      auto x = random_floats(rng, m * c.k);
      for (int64_t i = 0; i < m * c.k; i += 17) x[static_cast<size_t>(i)] *= 40.0f;  // outliers
      for (KernelPath p : packed) {
        ComputeOptions on, off;
        on.path = off.path = p;
        on.packed = true;
        off.packed = false;
        const auto want = run_matmul_with(w, x, m, off);
        ASSERT_TRUE(all_same(want, run_matmul_with(w, x, m, on)))
            << kernel_path_name(p) << " int" << bits << " n " << c.n << " k " << c.k << " group " << c.group
            << " m " << m;
        ASSERT_TRUE(all_same(want, run_matmul_with(w, x, m, on, &two))) << "2 threads, m " << m << " k " << c.k;
        if (m % 5 == 0) {
          ASSERT_TRUE(all_same(want, run_matmul_with(w, x, m, on, &three))) << "3 threads, m " << m << " k " << c.k;
        }
        if (m <= 7 || m == 85) {
          ComputeOptions sc;
          sc.path = KernelPath::Scalar;
          ASSERT_TRUE(all_same(run_matmul_with(w, x, m, sc), want)) << "scalar, m " << m << " k " << c.k;
        }
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 200);
}

TEST(KernelQGemm, SimdActivationQuantizerWritesTheScalarBytes) {
  // A path's own quantize_acts must write exactly the scalar one's bytes,
  // scales (bitwise) and sums for every layout, padding included: matmul
  // results alone would not see a wrong padding byte or an unused sum.
  std::mt19937 rng(12);
  int compared = 0;
  for (KernelPath p : supported_paths()) {
    const KernelTable& kt = kernel_table(p);
    if (!kt.quantize) continue;
    for (ActLayout layout : {ActLayout::Plain, ActLayout::Offset128, ActLayout::SplitNibble, ActLayout::Offset128Dword})
      for (int64_t cols : {1, 31, 32, 33, 500, 512, 513, 1537}) {
        const int64_t nrows = 3;
        auto x = random_floats(rng, nrows * cols);
        for (int64_t i = 0; i < nrows * cols; i += 7) x[static_cast<size_t>(i)] *= 1e-30f;  // tiny / denormal
        x[0] = -0.0f;
        if (cols > 40) {
          x[static_cast<size_t>(cols + 35)] = NAN;        // row 1, block 1
          x[static_cast<size_t>(2 * cols + 3)] = INFINITY;  // row 2, block 0
          for (int64_t c = 64; c < 96 && c < cols; ++c) x[static_cast<size_t>(c)] = 0.0f;  // an all-zero block
        }
        const size_t qn = static_cast<size_t>(nrows * qacts_qstride(cols)), bn = static_cast<size_t>(nrows * qacts_bstride(cols));
        std::vector<uint8_t> q0(qn, 0xee), q1(qn, 0xdd);
        std::vector<float> s0(bn, 1.0f), s1(bn, 2.0f);
        std::vector<int32_t> m0(bn, 5), m1(bn, 6);
        quantize_acts(x.data(), nrows, cols, layout, q0.data(), s0.data(), m0.data());
        kt.quantize(x.data(), nrows, cols, layout, q1.data(), s1.data(), m1.data());
        EXPECT_EQ(q0, q1) << kernel_path_name(p) << " layout " << static_cast<int>(layout) << " cols " << cols;
        EXPECT_EQ(0, std::memcmp(s0.data(), s1.data(), bn * sizeof(float)))
            << kernel_path_name(p) << " layout " << static_cast<int>(layout) << " cols " << cols;
        EXPECT_EQ(m0, m1) << kernel_path_name(p) << " layout " << static_cast<int>(layout) << " cols " << cols;
        ++compared;
      }
  }
  if (compared == 0) std::printf("no path with its own activation quantizer on this CPU: nothing to compare\n");
}

TEST(KernelGemm, LargeShapesCrossTileAndRowBlockBoundaries) {
  // Wide rows make the kernels split the activation rows into blocks (to
  // stay in L2) and tiles: results must not move with either.
  std::mt19937 rng(8);
  const int64_t rows = 6, cols = 6001, nrows = 45;
  std::vector<Weight> ws;
  ws.push_back(make_float_weight(WeightFormat::F32, rows, cols, rng));
  ws.push_back(make_float_weight(WeightFormat::BF16, rows, cols, rng));
  ws.push_back(make_int_weight(8, 0, rows, cols, rng));
  ws.push_back(make_int_weight(4, 64, rows, cols, rng));
  const auto x = random_floats(rng, nrows * cols);
  for (const Weight& w : ws) {
    const auto want = run_matmul(w, x, nrows, KernelPath::Scalar);
    for (KernelPath p : supported_paths())
      EXPECT_TRUE(all_same(want, run_matmul(w, x, nrows, p)))
          << weight_format_name(w.format) << " " << kernel_path_name(p);
  }
}

TEST(KernelQGemm, ExtremeValuesAreExact) {
  // Every weight at the format's most negative code, every activation at
  // +-127 after quantization: the integer sums are exact and the result is
  // the closed form.
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 128})
      for (float xv : {1.0f, -1.0f}) {
        const int64_t rows = 3, cols = 4096, nrows = 2;
        Weight w;
        w.format = bits == 8 ? WeightFormat::INT8 : WeightFormat::INT4;
        w.rows = rows;
        w.cols = cols;
        w.group = group;
        const QuantBits b = bits == 8 ? QuantBits::Int8 : QuantBits::Int4;
        w.data.assign(static_cast<size_t>(rows * quant_row_bytes(b, cols)), bits == 8 ? 0x80 : 0x88);
        w.scales.assign(static_cast<size_t>(rows * quant_groups(cols, group)), 1.0f);
        const std::vector<float> x(static_cast<size_t>(nrows * cols), xv * 127.0f);  // s_x = 1, q = +-127
        const float wmin = bits == 8 ? -128.0f : -8.0f;
        const float want = wmin * 127.0f * xv * static_cast<float>(cols);
        for (KernelPath p : supported_paths()) {
          const auto y = run_matmul(w, x, nrows, p);
          for (float v : y) EXPECT_EQ(v, want) << "int" << bits << " group " << group << " " << kernel_path_name(p);
        }
        // The most positive codes.
        w.data.assign(w.data.size(), bits == 8 ? 0x7f : 0x77);
        const float want_pos = (bits == 8 ? 127.0f : 7.0f) * 127.0f * xv * static_cast<float>(cols);
        for (KernelPath p : supported_paths())
          for (float v : run_matmul(w, x, nrows, p)) EXPECT_EQ(v, want_pos) << kernel_path_name(p);
      }
}

TEST(KernelQGemm, ZeroScalesZeroActivationsAndNonFinite) {
  std::mt19937 rng(5);
  for (int bits : {8, 4}) {
    Weight w = make_int_weight(bits, 32, 4, 200, rng);
    std::vector<float> x(2 * 200, 0.0f);
    for (KernelPath p : supported_paths())
      for (float v : run_matmul(w, x, 2, p)) EXPECT_EQ(v, 0.0f) << kernel_path_name(p);
    x = random_floats(rng, 2 * 200);
    std::fill(w.scales.begin(), w.scales.end(), 0.0f);
    const auto want = run_matmul(w, x, 2, KernelPath::Scalar);
    for (float v : want) EXPECT_EQ(v, 0.0f);
    for (KernelPath p : supported_paths()) EXPECT_TRUE(all_same(want, run_matmul(w, x, 2, p))) << kernel_path_name(p);
    // A non-finite activation makes its row NaN, as a float dot would; the other row is untouched.
    w = make_int_weight(bits, 0, 4, 200, rng);
    for (auto& s : w.scales) s = 1.0f;
    x[200 + 150] = INFINITY;
    for (KernelPath p : supported_paths()) {
      const auto y = run_matmul(w, x, 2, p);
      for (int o = 0; o < 4; ++o) {
        EXPECT_TRUE(std::isfinite(y[o])) << kernel_path_name(p);
        EXPECT_TRUE(std::isnan(y[4 + o])) << kernel_path_name(p);
      }
    }
  }
}

TEST(KernelQGemm, ActivationQuantizationErrorWithinStatedBound) {
  // docs/kernels.md: |y_int - y_deq| <= sum_b (s_x[b] / 2) * sum_{c in b} |w'_c|
  // (w' the dequantized weight), plus f32 rounding of the epilogue.
  std::mt19937 rng(6);
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 128}) {
      const int64_t rows = 8, cols = 1000, nrows = 3;
      const Weight w = make_int_weight(bits, group, rows, cols, rng);
      auto x = random_floats(rng, nrows * cols);
      for (int64_t i = 0; i < nrows * cols; i += 97) x[i] *= 30.0f;
      const auto y = run_matmul(w, x, nrows, best_kernel_path());
      std::vector<float> wr(static_cast<size_t>(cols));
      double worst = 0.0;
      for (int64_t o = 0; o < rows; ++o) {
        w.row_f32(o, wr.data());
        for (int64_t r = 0; r < nrows; ++r) {
          const float* xr = x.data() + r * cols;
          double exact = 0.0, bound = 0.0, mag = 0.0;
          for (int64_t c0 = 0; c0 < cols; c0 += 32) {
            const int64_t c1 = std::min(cols, c0 + 32);
            float amax = 0.0f;
            double wabs = 0.0;
            for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(xr[c]));
            for (int64_t c = c0; c < c1; ++c) {
              exact += static_cast<double>(wr[c]) * xr[c];
              wabs += std::fabs(wr[c]);
              mag += std::fabs(static_cast<double>(wr[c]) * xr[c]);
            }
            bound += wabs * (amax / 127.0) / 2.0;
          }
          const double err = std::fabs(y[r * rows + o] - exact);
          EXPECT_LE(err, bound * (1 + 1e-5) + 1e-6 * mag) << "int" << bits << " group " << group;
          worst = std::max(worst, bound > 0 ? err / bound : 0.0);
        }
      }
      std::printf("  int%d group %lld: worst error / bound = %.3f\n", bits, static_cast<long long>(group), worst);
    }
}

TEST(KernelMatmul, RowsAreBatchThreadAndPathInvariant) {
  std::mt19937 rng(7);
  std::vector<Weight> ws;
  ws.push_back(make_float_weight(WeightFormat::F32, 37, 300, rng));
  ws.push_back(make_float_weight(WeightFormat::BF16, 37, 300, rng));
  ws.push_back(make_float_weight(WeightFormat::FP8_BLOCK, 37, 300, rng));
  for (int64_t g : {0, 32, 64, 128}) ws.push_back(make_int_weight(8, g, 37, 300, rng));
  for (int64_t g : {0, 32, 64, 128, 48}) ws.push_back(make_int_weight(4, g, 37, 300, rng));  // 48: expanded path
  ThreadPool two(2), three(3);
  const int64_t N = 11;
  const auto x = random_floats(rng, N * 300);
  for (const Weight& w : ws) {
    const auto whole = run_matmul(w, x, N, KernelPath::Scalar, &two);
    for (KernelPath p : supported_paths()) {
      EXPECT_TRUE(all_same(whole, run_matmul(w, x, N, p, &two))) << kernel_path_name(p);
      EXPECT_TRUE(all_same(whole, run_matmul(w, x, N, p, &three))) << kernel_path_name(p);
      for (int64_t r = 0; r < N; ++r) {
        const std::vector<float> xr(x.begin() + r * 300, x.begin() + (r + 1) * 300);
        const auto one = run_matmul(w, xr, 1, p);
        const std::vector<float> want(whole.begin() + r * 37, whole.begin() + (r + 1) * 37);
        EXPECT_TRUE(all_same(want, one)) << weight_format_name(w.format) << " group " << w.group << " "
                                         << kernel_path_name(p) << " row " << r;
      }
    }
  }
}

TEST(KernelMatmul, BatchOfTasksIsEachMatmulBitForBit) {
  // matmul_batch (a layer's experts, q/k/v as one pool job): every task's y
  // is what matmul() gives it alone, whatever the path, thread count, row
  // count (1: single-row kernel, 3: multi-row, 40 and 130: the packed
  // kernel, and at 130 the quantization split over the pool) and format
  // (bf16 and the 48-column int4 group have no integer kernel: run one by
  // one). Tasks 0-3 read the same x: 0 and 1 share one quantization, the
  // bf16 task sits between them and the int4 task 3, which shares it only
  // where its layout is the int8 one's (the packed kernel's).
  std::mt19937 rng(11);
  std::vector<Weight> ws;
  ws.push_back(make_int_weight(8, 32, 37, 300, rng));
  ws.push_back(make_int_weight(8, 0, 5, 300, rng));
  ws.push_back(make_float_weight(WeightFormat::BF16, 9, 300, rng));
  ws.push_back(make_int_weight(4, 32, 64, 300, rng));
  ws.push_back(make_int_weight(4, 48, 7, 300, rng));
  ws.push_back(make_int_weight(8, 64, 130, 300, rng));
  ThreadPool two(2), three(3);
  for (int64_t nrows : {1, 3, 40, 130}) {
    std::vector<std::vector<float>> xs;
    for (size_t i = 0; i < ws.size(); ++i) xs.push_back(random_floats(rng, nrows * 300));
    for (size_t i = 1; i < 4; ++i) xs[i] = xs[0];
    for (KernelPath p : supported_paths()) {
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two, &three}) {
        ComputeOptions o;
        o.path = p;
        const Compute c(pool, o);
        std::vector<std::vector<float>> ys(ws.size());
        std::vector<MatmulTask> tasks;
        for (size_t i = 0; i < ws.size(); ++i) {
          ys[i].assign(static_cast<size_t>(nrows * ws[i].rows), -1.0f);
          tasks.push_back({&ws[i], xs[i < 4 ? 0 : i].data(), nrows, ys[i].data()});
        }
        MatmulBatchScratch scratch;
        matmul_batch(c, tasks, scratch);
        matmul_batch(c, tasks, scratch);  // reused scratch: the same again
        for (size_t i = 0; i < ws.size(); ++i)
          EXPECT_TRUE(all_same(run_matmul(ws[i], xs[i], nrows, p, pool), ys[i]))
              << kernel_path_name(p) << " task " << i << " rows " << nrows << " threads " << (pool ? pool->size() : 1);
      }
    }
  }
}

TEST(KernelMatmul, GatheredQuantizedRowsAreTheRowsQuantizedAgain) {
  // A long batch's MoE input is quantized once (quantize_rows) and each
  // routed expert's rows copied out of it (copy_qrows) for its gate and up
  // (MatmulTask::qx): every task's y must be what matmul() gives the gathered
  // float rows, on every path and weight width, for row counts on the
  // single-row, multi-row and packed kernels (the layout int_act_layout
  // names for that count; the forward quantizes the batch in each layout
  // its experts ask for, so only counts in the batch's layout are run here).
  std::mt19937 rng(23);
  std::vector<Weight> ws;
  ws.push_back(make_int_weight(8, 32, 37, 300, rng));
  ws.push_back(make_int_weight(4, 32, 64, 300, rng));
  ws.push_back(make_int_weight(4, 0, 9, 300, rng));
  const int64_t N = 60;
  const auto x = random_floats(rng, N * 300);
  ThreadPool two(2);
  int ran = 0;
  for (KernelPath p : supported_paths()) {
    ComputeOptions o;
    o.path = p;
    const Compute c(&two, o);
    for (const Weight& w : ws) {
      const std::optional<ActLayout> whole = int_act_layout(c, w, N);
      ASSERT_TRUE(whole.has_value());
      QRows all, some;
      quantize_rows(c, x.data(), N, w.cols, *whole, all);
      for (int64_t m : {1, 3, 13, 41}) {
        if (int_act_layout(c, w, m) != whole) continue;
        std::vector<int32_t> rows;
        std::vector<float> xg;
        for (int64_t j = 0; j < m; ++j) {
          const int32_t r = static_cast<int32_t>((j * 7 + 5) % 23);  // out of order, twice from m = 24 on
          rows.push_back(r);
          xg.insert(xg.end(), x.begin() + r * 300, x.begin() + (r + 1) * 300);
        }
        copy_qrows(all.a, rows.data(), m, some);
        // Gate and up sharing one qx, a task quantizing its floats between
        // them (the batch's own quantization sharing and output offsets).
        std::vector<float> y(static_cast<size_t>(m * w.rows), -1.0f), y2 = y, y3 = y;
        const MatmulTask t[] = {{&w, nullptr, m, y.data(), &some.a}, {&w, xg.data(), m, y2.data()},
                                {&w, nullptr, m, y3.data(), &some.a}};
        MatmulBatchScratch scratch;
        matmul_batch(c, t, scratch);
        const auto want = run_matmul(w, xg, m, p, &two);
        const std::string what = std::string(kernel_path_name(p)) + " int" +
                                 (w.format == WeightFormat::INT4 ? "4" : "8") + " group " + std::to_string(w.group) +
                                 " rows " + std::to_string(m);
        EXPECT_TRUE(all_same(want, y)) << what;
        EXPECT_TRUE(all_same(want, y2)) << what << " (the float task)";
        EXPECT_TRUE(all_same(want, y3)) << what << " (the second qx task)";
        ++ran;
      }
      // Activations of the wrong shape are refused, naming both.
      const MatmulTask bad[] = {{&w, nullptr, N - 1, nullptr, &all.a}};
      MatmulBatchScratch scratch;
      EXPECT_THROW(matmul_batch(c, bad, scratch), Error);
    }
  }
  EXPECT_GT(ran, 0);
  // A weight without an integer kernel has no layout to quantize for.
  const Weight bf = make_float_weight(WeightFormat::BF16, 9, 300, rng);
  EXPECT_FALSE(int_act_layout(Compute(&two, {}), bf, N).has_value());
}

TEST(KernelMatmul, Int4HeadShapedMatchesTheDequantizedCodesOnEveryPath) {
  // An lm_head-shaped int4 weight (--head-bits 4: thousands of rows, split
  // across threads, a row count that fills no tile): every path, 1-3 threads
  // and 1 or 3 activation rows, equals a reference written from the
  // documented arithmetic alone (docs/kernels.md): the weight codes read back
  // through dequantize_row with unit scales, activations quantized per
  // 32-column block (s = amax/127, q = round(x/s)), one integer sum per block
  // scaled by s_w * s_x and accumulated into 16 lanes (block b into lane
  // b % 16), the lanes summed pairwise.
  std::mt19937 rng(16);
  const int64_t rows = 3001, cols = 384;
  ThreadPool two(2), three(3);
  for (int64_t group : {32, 0}) {
    const Weight w = make_int_weight(4, group, rows, cols, rng);
    const int64_t ng = quant_groups(cols, group), nb = (cols + 31) / 32;
    for (int64_t nrows : {1, 3}) {
      const auto x = random_floats(rng, nrows * cols);
      std::vector<float> want(static_cast<size_t>(nrows * rows));
      std::vector<float> codes(static_cast<size_t>(cols)), xq(static_cast<size_t>(nrows * cols)), xs;
      const std::vector<float> ones(static_cast<size_t>(ng), 1.0f);
      for (int64_t r = 0; r < nrows; ++r)
        for (int64_t b = 0; b < nb; ++b) {
          float amax = 0.0f;
          for (int64_t c = b * 32; c < std::min(cols, b * 32 + 32); ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
          const float sx = amax / 127.0f;
          xs.push_back(sx);
          for (int64_t c = b * 32; c < std::min(cols, b * 32 + 32); ++c)
            xq[r * cols + c] = sx == 0.0f ? 0.0f : std::nearbyint(std::clamp(x[r * cols + c] / sx, -127.0f, 127.0f));
        }
      for (int64_t o = 0; o < rows; ++o) {
        dequantize_row(QuantBits::Int4, group, w.data.data() + o * quant_row_bytes(QuantBits::Int4, cols), ones.data(),
                       cols, codes.data());
        for (int64_t r = 0; r < nrows; ++r) {
          float lane[16] = {};
          for (int64_t b = 0; b < nb; ++b) {
            int32_t isum = 0;
            for (int64_t c = b * 32; c < std::min(cols, b * 32 + 32); ++c)
              isum += static_cast<int32_t>(codes[c]) * static_cast<int32_t>(xq[r * cols + c]);
            const float sw = w.scales[o * ng + (group > 0 ? b * 32 / group : 0)];
            lane[b % 16] = std::fma(static_cast<float>(isum), sw * xs[r * nb + b], lane[b % 16]);
          }
          for (int k = 8; k > 0; k /= 2)
            for (int j = 0; j < k; ++j) lane[j] = lane[j] + lane[j + k];
          want[r * rows + o] = lane[0];
        }
      }
      for (KernelPath p : supported_paths())
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two, &three})
          EXPECT_TRUE(all_same(want, run_matmul(w, x, nrows, p, pool)))
              << kernel_path_name(p) << " group " << group << " nrows " << nrows;
    }
  }
}

TEST(KernelMatmul, ModelLogitsAreIdenticalOnEveryPath) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-bf16";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "fixture missing";
  const auto model = load_model(dir);
  const std::vector<int32_t> ids = {1, 5, 9, 2, 7, 3, 8, 4};
  const int64_t V = model->config.vocab_size;
  std::vector<float> first;
  for (KernelPath p : supported_paths()) {
    ComputeOptions o;
    o.path = p;
    ThreadPool pool(2);
    ResidentExpertStore store(model->weights.experts);
    ModelRunner runner(*model, store, pool, o);
    Session s(model->config, static_cast<int64_t>(ids.size()), false);
    std::vector<Row> rows;
    for (size_t i = 0; i < ids.size(); ++i) rows.push_back({&s, static_cast<int32_t>(i), ids[i], true});
    std::vector<float> logits(ids.size() * static_cast<size_t>(V));
    runner.forward(rows, {}, logits.data(), nullptr);
    if (first.empty())
      first = logits;
    else
      EXPECT_TRUE(all_same(first, logits)) << kernel_path_name(p);
  }
}

// Every index of every job runs exactly once -- checked per index and per
// job, so a chunk run twice plus a chunk skipped (same total) fails -- with the
// default spin, with spin_us=0 (workers and caller sleep on the condition
// variables at once: the plain wake-up path) and with a 1 us spin.
TEST(KernelThreadPool, EveryIndexRunsOnceAcrossManySmallJobs) {
  for (int spin_us : {-1, 0, 1}) {
    for (int threads : {1, 2, 3, 4}) {
      ThreadPool pool(threads, spin_us);
      EXPECT_EQ(pool.size(), std::max(1, threads));
      std::vector<std::atomic<int>> hits(64);
      const std::function<void(int64_t, int64_t)> job = [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
      };
      int bad_jobs = 0;
      for (int it = 0; it < 3000; ++it) {
        const int64_t n = 1 + it % 37;
        for (auto& h : hits) h.store(0, std::memory_order_relaxed);
        pool.parallel_for(n, job);
        // parallel_for has returned: every worker is done with this job.
        bool ok = true;
        for (int64_t i = 0; i < static_cast<int64_t>(hits.size()); ++i) {
          const int want = i < n ? 1 : 0, got = hits[static_cast<size_t>(i)].load(std::memory_order_relaxed);
          if (got != want) {
            ok = false;
            if (bad_jobs < 5)
              ADD_FAILURE() << "spin_us " << spin_us << ", " << threads << " threads, job " << it << " (n=" << n
                            << "): index " << i << " ran " << got << " times, expected " << want;
          }
        }
        bad_jobs += !ok;
        // Now and then let the workers fall asleep, so both wake-up paths run.
        if (it % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      }
      EXPECT_EQ(bad_jobs, 0) << "spin_us " << spin_us << ", " << threads << " threads";
    }
  }
}

TEST(KernelThreadPool, ChunksAreContiguousAndIndependentOfTiming) {
  ThreadPool pool(3);
  for (int64_t n : {2, 3, 4, 10, 1001}) {
    std::vector<std::pair<int64_t, int64_t>> ranges(3, {-1, -1});
    std::mutex mu;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lk(mu);
      for (auto& r : ranges)
        if (r.first < 0) {
          r = {b, e};
          break;
        }
    });
    std::sort(ranges.begin(), ranges.end());
    int64_t next = 0;
    for (const auto& r : ranges)
      if (r.first >= 0) {
        EXPECT_EQ(r.first, next);
        next = r.second;
      }
    EXPECT_EQ(next, n);
  }
}

// parallel_for_balanced: every index exactly once, in pieces that begin at
// multiples of the grain (the last one ends at n), for any thread count,
// spin and grain -- also when one thread stalls, so the others take pieces
// of its share (checked below).
TEST(KernelThreadPool, BalancedRunsEveryIndexOnceInGrainAlignedPieces) {
  for (int spin_us : {-1, 0}) {
    for (int threads : {1, 2, 3, 4}) {
      ThreadPool pool(threads, spin_us);
      std::vector<std::atomic<int>> hits(300);
      int bad_jobs = 0;
      for (int it = 0; it < 1500; ++it) {
        const int64_t n = 1 + (it * 7) % 299, grain = 1 + it % 5;
        for (auto& h : hits) h.store(0, std::memory_order_relaxed);
        std::atomic<int> misaligned{0};
        pool.parallel_for_balanced(n, grain, [&](int64_t b, int64_t e) {
          if (b % grain != 0 || b >= e || e > n || (e != n && e % grain != 0)) misaligned.fetch_add(1);
          if (it % 50 == 0 && b == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));  // a late thread
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
        });
        bool ok = misaligned.load() == 0;
        for (int64_t i = 0; i < static_cast<int64_t>(hits.size()); ++i)
          if (hits[static_cast<size_t>(i)].load(std::memory_order_relaxed) != (i < n ? 1 : 0)) ok = false;
        if (!ok && bad_jobs++ < 5)
          ADD_FAILURE() << "spin_us " << spin_us << ", " << threads << " threads, job " << it << " (n=" << n
                        << ", grain " << grain << "): an index not run exactly once, or " << misaligned.load()
                        << " pieces off the grain";
      }
      EXPECT_EQ(bad_jobs, 0) << "spin_us " << spin_us << ", " << threads << " threads";
    }
  }
}

// A thread that stalls in its first piece has the rest of its share taken by
// the other: with the caller (share [0, 64)) asleep for 30 ms in its first
// piece, the worker runs indices below 64. Timing decides who runs what, so
// the test allows a few tries (a loaded machine may not run the worker at
// all for 30 ms); with static shares (parallel_for) it never happens.
TEST(KernelThreadPool, BalancedHandsAStalledThreadsShareToTheOther) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  bool stolen = false;
  for (int attempt = 0; attempt < 5 && !stolen; ++attempt) {
    std::atomic<int> worker_low{0};
    pool.parallel_for_balanced(128, 4, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() == caller) {
        if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      } else if (b < 64) {
        worker_low.fetch_add(static_cast<int>(std::min<int64_t>(e, 64) - b));
      }
    });
    stolen = worker_low.load() > 0;
  }
  EXPECT_TRUE(stolen) << "the worker never ran a piece of the stalled caller's share in 5 tries";
  std::atomic<int> worker_low{0};
  pool.parallel_for(128, [&](int64_t b, int64_t) {
    if (std::this_thread::get_id() == caller) {
      if (b == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    } else if (b < 64) {
      worker_low.fetch_add(1);
    }
  });
  EXPECT_EQ(worker_low.load(), 0) << "parallel_for's shares are static";
}

}  // namespace

// ---- gemm_f32_rows / wsum_f32: attention over a picked key set ----

namespace {

// One case of the key-set kernels over rows v (K picked rows, `cols` wide)
// and nh heads: random heads x and weights p, a column range [c0, c1), and
// the references: gemm_*_rows as dot16 of each row and head, wsum_* as one
// fma chain per output in key order from 0, and (acc: a sum over keys taken
// in chunks, each call continuing the chain) from y's values `init`.
struct KeySetCase {
  int64_t K, cols, nh, ldp, ldy, c0, c1;
  std::vector<float> x, p, init, want_s, want_y, want_a;
  KeySetCase(std::mt19937& rng, FRows v, int64_t K_, int64_t cols_, int64_t nh_, int64_t ldy_)
      : K(K_), cols(cols_), nh(nh_), ldp(K_ + 2), ldy(ldy_) {
    x = random_floats(rng, nh * cols);
    p = random_floats(rng, nh * ldp);
    c0 = cols > 2 ? static_cast<int64_t>(rng() % (cols / 2)) : 0;
    c1 = cols - (cols > 4 ? static_cast<int64_t>(rng() % (cols / 4)) : 0);
    init = random_floats(rng, nh * ldy);
    want_s.assign(static_cast<size_t>(nh * (K + 1)), -3.0f);
    want_y.assign(static_cast<size_t>(nh * ldy), -7.0f);
    want_a = init;
    for (int64_t r = 0; r < nh; ++r)
      for (int64_t j = 0; j < K; ++j)
        want_s[static_cast<size_t>(r * (K + 1) + j)] = dot_f32(v.row(j), x.data() + r * cols, cols);
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t c = c0; c < c1; ++c) {
        float acc = 0.0f, a = init[static_cast<size_t>(h * ldy + c)];
        for (int64_t j = 0; j < K; ++j) {
          acc = std::fma(p[static_cast<size_t>(h * ldp + j)], v.row(j)[c], acc);
          a = std::fma(p[static_cast<size_t>(h * ldp + j)], v.row(j)[c], a);
        }
        want_y[static_cast<size_t>(h * ldy + c)] = acc;
        want_a[static_cast<size_t>(h * ldy + c)] = a;
      }
  }
  // gemm(x, s, lds) and wsum(p, y, acc) on rows of either kind, against the
  // references; the outputs outside the rows' scores and the column range
  // stay untouched.
  template <class Gemm, class Wsum>
  void check(Gemm gemm, Wsum wsum, const std::string& what) const {
    std::vector<float> s(want_s.size(), -3.0f), y(want_y.size(), -7.0f), ya = init;
    gemm(x.data(), s.data(), K + 1);
    wsum(p.data(), y.data(), false);
    wsum(p.data(), ya.data(), true);
    const std::string at = " cols " + std::to_string(cols) + " [" + std::to_string(c0) + ", " + std::to_string(c1) +
                           ") K " + std::to_string(K) + " heads " + std::to_string(nh) + what;
    EXPECT_TRUE(all_same(want_s, s)) << "scores" << at;
    EXPECT_TRUE(all_same(want_y, y)) << "sums" << at;
    EXPECT_TRUE(all_same(want_a, ya)) << "sums (acc)" << at;
  }
};

}  // namespace

TEST(KernelKeySet, ScoresAndWeightedSumsEqualTheReferencesOnEveryPath) {
  // Every path's gemm_f32_rows and wsum_f32 against the references
  // (KeySetCase): key sets in order (idx null) and picked (repeats,
  // descending, far apart), odd widths (the 16- and 32-column tails; 576 is
  // wider than AVX-512's transposed key block), key counts below, at and
  // past whole blocks of 16 (the transposed keys, the rest by the row
  // tiles; rows up to 256 wide go two blocks at a time: 32 and 37 keys are
  // one pair, 48 and 55 a pair and a single block), head counts across the
  // 8-head and 4-head tiles and the pairs' 4-head and 1-head ones, column ranges
  // that start and end anywhere (a thread's share: the columns outside it
  // and the gaps between y rows stay untouched), values near the float
  // range, and K = 0 (the sums are 0).
  std::mt19937 rng(2216);
  int cases = 0;
  for (int64_t cols : {1, 15, 16, 17, 31, 33, 64, 100, 512, 576})
    for (int64_t K : {0, 1, 3, 4, 7, 32, 37, 48, 55})
      for (bool picked : {false, true})
        for (int64_t nh : {1, 3, 8, 9, 15, 17}) {
          const int64_t nkeys = 60, ld = cols + 3;
          auto keys = random_floats(rng, nkeys * ld);
          keys[static_cast<size_t>(ld)] = 3.0e30f;
          std::vector<int32_t> idx(static_cast<size_t>(K));
          for (auto& i : idx) i = static_cast<int32_t>(rng() % nkeys);
          const FRows v{keys.data(), picked ? idx.data() : nullptr, ld};
          const KeySetCase kc(rng, v, K, cols, nh, cols + 5);
          for (KernelPath path : supported_paths()) {
            const KernelTable& kt = kernel_table(path);
            kc.check([&](const float* x, float* s, int64_t lds) { kt.gemm_f32_rows(v, K, cols, x, nh, s, lds); },
                     [&](const float* p, float* y, bool acc) {
                       kt.wsum_f32(p, kc.ldp, nh, v, K, kc.c0, kc.c1, y, kc.ldy, acc);
                     },
                     std::string(" picked ") + (picked ? "yes " : "no ") + kernel_path_name(path));
          }
          ++cases;
        }
  EXPECT_EQ(cases, 10 * 9 * 2 * 6);
}

TEST(KernelKeySet, KeysFromAnOffsetEqualTheWholeSetsTail) {
  // FRows::from(j0): a thread's share of the keys. Its scores equal the
  // whole set's columns j0.. both with and without an index list.
  std::mt19937 rng(7);
  const int64_t cols = 40, nkeys = 20;
  const auto keys = random_floats(rng, nkeys * cols);
  std::vector<int32_t> idx = {3, 19, 0, 7, 7, 12, 5, 1, 18, 2};
  const auto x = random_floats(rng, 3 * cols);
  for (bool picked : {false, true}) {
    const FRows v{keys.data(), picked ? idx.data() : nullptr, cols};
    const int64_t K = 10;
    for (KernelPath path : supported_paths()) {
      const KernelTable& kt = kernel_table(path);
      std::vector<float> whole(3 * K), part(3 * K, 0.0f);
      kt.gemm_f32_rows(v, K, cols, x.data(), 3, whole.data(), K);
      kt.gemm_f32_rows(v, 4, cols, x.data(), 3, part.data(), K);
      kt.gemm_f32_rows(v.from(4), K - 4, cols, x.data(), 3, part.data() + 4, K);
      EXPECT_TRUE(all_same(whole, part)) << "picked " << picked << " " << kernel_path_name(path);
    }
  }
}

TEST(KernelKeySet, RowsInLanesScoreAsRowMajorRowsOnEveryPath) {
  // gemm_f32_lanes (rows stored as blocks of 16 with a column's 16 values
  // adjacent: the indexer's key cache) against the reference gemm_f32_rows
  // over the same rows in row-major order, on every path: key counts below,
  // at and past one block and a pair of blocks (16, 32, 48 and a partial
  // last block), odd widths (the 16-column tails), head counts across the
  // 8-, 4- and 1-head tiles, from a block-aligned row past the first, with
  // the lanes past the last row holding huge values (stale keys a
  // truncation left: never in a score). Nothing past column nw is written.
  std::mt19937 rng(20261207);
  int cases = 0;
  for (int64_t cols : {1, 15, 16, 17, 64, 128, 130})
    for (int64_t nw : {1, 5, 16, 17, 31, 32, 33, 48, 50, 64, 71})
      for (int64_t nh : {1, 3, 4, 8, 9, 32, 37}) {
        const int64_t j0 = 16 * static_cast<int64_t>(rng() % 3), rows = j0 + nw;
        const int64_t blocks = (rows + 15) / 16;
        const auto row_major = random_floats(rng, rows * cols);
        AlignedFloats lanes(static_cast<size_t>(blocks * 16 * cols), 3.0e30f);
        for (int64_t j = 0; j < rows; ++j)
          for (int64_t c = 0; c < cols; ++c)
            lanes[static_cast<size_t>(lanes_offset(j, c, cols))] = row_major[static_cast<size_t>(j * cols + c)];
        const auto x = random_floats(rng, nh * cols);
        const int64_t ldy = nw + 3;
        std::vector<float> want(static_cast<size_t>(nh * ldy), -7.0f);
        gemm_f32_rows_ref(FRows{row_major.data() + j0 * cols, nullptr, cols}, nw, cols, x.data(), nh, want.data(),
                          ldy);
        for (KernelPath path : supported_paths()) {
          std::vector<float> got(want.size(), -7.0f);
          kernel_table(path).gemm_f32_lanes(lanes.data() + j0 * cols, nw, cols, x.data(), nh, got.data(), ldy);
          EXPECT_TRUE(all_same(want, got)) << "cols " << cols << " nw " << nw << " heads " << nh << " from " << j0
                                           << " " << kernel_path_name(path);
        }
        ++cases;
      }
  EXPECT_EQ(cases, 7 * 11 * 7);
}

TEST(KernelKeySet, HalvesReadAsTheirF32ValuesOnEveryPath) {
  // gemm_f16_rows / wsum_f16 (an f16 key cache read in place) against the
  // references over the same rows converted to f32 (KeySetCase). Halves
  // from every exponent (subnormals, 65504, zeros of both signs); key counts
  // below, at and past blocks of 16 and the via path's blocks (8192 floats:
  // 14 keys at 576 columns, 32 keys of 256 columns for the sums); widths
  // past the transposed block (576) and past the buffer itself (9000);
  // column ranges crossing the sums' 256-column blocks; picked and in-order
  // keys; heads across the 8- and 4-head tiles.
  std::mt19937 rng(4242);
  int cases = 0;
  for (int64_t cols : {1, 17, 64, 128, 300, 512, 576, 9000})
    for (int64_t K : {0, 1, 15, 16, 17, 33, 47, 70}) {
      if (cols == 9000 && K > 17) continue;
      for (bool picked : {false, true})
        for (int64_t nh : {1, 8, 13}) {
          const int64_t nkeys = 80, ld = cols + 5;
          std::vector<uint16_t> h(static_cast<size_t>(nkeys * ld));
          for (auto& e : h) {
            const uint32_t r = rng();
            // a third random bit patterns (any exponent; NaN and inf excluded), the rest rounded floats
            e = r % 3 == 0 ? static_cast<uint16_t>((r >> 8) % 0x7c00u | (r & 0x8000u))
                           : f32_to_f16_sat(std::ldexp(static_cast<float>(static_cast<int32_t>(r >> 8) % 2001 - 1000) / 1000.0f,
                                                       static_cast<int>((r >> 2) % 11) - 5));
          }
          h[static_cast<size_t>(ld)] = 0x7bff;  // 65504
          std::vector<float> f(h.size());
          for (size_t i = 0; i < h.size(); ++i) f[i] = f16_to_f32(h[i]);
          std::vector<int32_t> idx(static_cast<size_t>(K));
          for (auto& i : idx) i = static_cast<int32_t>(rng() % nkeys);
          const int32_t* ip = picked ? idx.data() : nullptr;
          const HRows vh{h.data(), ip, ld};
          const KeySetCase kc(rng, FRows{f.data(), ip, ld}, K, cols, nh, cols + 3);
          for (KernelPath path : supported_paths()) {
            const KernelTable& kt = kernel_table(path);
            kc.check([&](const float* x, float* s, int64_t lds) { kt.gemm_f16_rows(vh, K, cols, x, nh, s, lds); },
                     [&](const float* p, float* y, bool acc) {
                       kt.wsum_f16(p, kc.ldp, nh, vh, K, kc.c0, kc.c1, y, kc.ldy, acc);
                     },
                     std::string(" halves, picked ") + (picked ? "yes " : "no ") + kernel_path_name(path));
          }
          ++cases;
        }
    }
  EXPECT_EQ(cases, (7 * 8 + 5) * 2 * 3);
}

TEST(KernelKeySet, WeightedSumsOverMoreKeysThanABlockEqualTheReferences) {
  // The key counts of long-context attention (DSA picks 2048): AVX-512
  // walks the keys of wsum_f32 / wsum_f16 in blocks of 256 (each block's
  // tiles continue the stored partials). Against the references (one fma chain per output in key order,
  // KeySetCase) at counts one below, at and past a block, several blocks
  // with a partial last one, in order and picked, f32 and halves, from 0
  // and accumulating.
  std::mt19937 rng(909);
  int cases = 0;
  for (int64_t cols : {33, 512})
    for (int64_t K : {255, 256, 257, 700})
      for (bool picked : {false, true})
        for (int64_t nh : {8, 9}) {
          const int64_t nkeys = K + 10, ld = cols + 3;
          const auto keys = random_floats(rng, nkeys * ld);
          std::vector<uint16_t> h(keys.size());
          for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16_sat(keys[i]);
          std::vector<float> hf(h.size());
          for (size_t i = 0; i < h.size(); ++i) hf[i] = f16_to_f32(h[i]);
          std::vector<int32_t> idx(static_cast<size_t>(K));
          for (auto& i : idx) i = static_cast<int32_t>(rng() % nkeys);
          const int32_t* ip = picked ? idx.data() : nullptr;
          const FRows v{keys.data(), ip, ld};
          const HRows vh{h.data(), ip, ld};
          const KeySetCase kc(rng, v, K, cols, nh, cols + 5), kh(rng, FRows{hf.data(), ip, ld}, K, cols, nh, cols + 5);
          for (KernelPath path : supported_paths()) {
            const KernelTable& kt = kernel_table(path);
            const std::string what = std::string(" picked ") + (picked ? "yes " : "no ") + kernel_path_name(path);
            kc.check([&](const float* x, float* s, int64_t lds) { kt.gemm_f32_rows(v, K, cols, x, nh, s, lds); },
                     [&](const float* p, float* y, bool acc) {
                       kt.wsum_f32(p, kc.ldp, nh, v, K, kc.c0, kc.c1, y, kc.ldy, acc);
                     },
                     what);
            kh.check([&](const float* x, float* s, int64_t lds) { kt.gemm_f16_rows(vh, K, cols, x, nh, s, lds); },
                     [&](const float* p, float* y, bool acc) {
                       kt.wsum_f16(p, kh.ldp, nh, vh, K, kh.c0, kh.c1, y, kh.ldy, acc);
                     },
                     " halves," + what);
          }
          ++cases;
        }
  EXPECT_EQ(cases, 2 * 4 * 2 * 2);
}

// ---- deq_axpy / deq_gemm: int8/int4 rows dequantized in registers ----

namespace {

// The references of qgemm.h written from Weight::row_f32 alone: deq_axpy as
// one explicit fma per weight row in row order, deq_gemm as dot16 (the
// scalar gemm_f32) over the expanded rows.
void deq_reference(const Weight& w, const std::vector<float>& a, int64_t lda, const std::vector<float>& x,
                   int64_t nrows, std::vector<float>& axpy, int64_t ldy, std::vector<float>& gemm) {
  std::vector<float> rowsf(static_cast<size_t>(w.rows * w.cols));
  for (int64_t o = 0; o < w.rows; ++o) w.row_f32(o, rowsf.data() + o * w.cols);
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) {
      float acc = 0.0f;
      for (int64_t o = 0; o < w.rows; ++o) acc = std::fma(a[r * lda + o], rowsf[o * w.cols + c], acc);
      axpy[r * ldy + c] = acc;
    }
  kernel_table(KernelPath::Scalar).gemm_f32(rowsf.data(), w.rows, w.cols, x.data(), nrows, gemm.data(), w.rows);
}

}  // namespace

TEST(KernelDeq, RowsDequantizedInRegistersEqualRowF32OnEveryPath) {
  // Every path's deq_axpy and deq_gemm against references built from
  // row_f32: odd widths (vector tails, int4 rows ending mid-byte), groups 0,
  // multiples of 16 and of 32, odd groups (the scalar fallback; int4 groups
  // starting mid-byte), 1-9 activation rows (every row tile), strided a and
  // y (deq_axpy must leave the gaps alone), zero and large scales. From 8
  // activation rows the AVX-512 kernels dequantize a panel once and run f32
  // tiles over it: 9, 13 and 40 rows, with 129-136 weight rows on every
  // other call (deq_axpy's fma chains then cross its 128-row panels).
  std::mt19937 rng(1616);
  int cases = 0;
  for (int bits : {8, 4})
    for (int64_t group : {0, 16, 32, 48, 64, 5})
      for (int64_t cols : {1, 15, 16, 17, 33, 64, 100, 129, 512, 515})
        for (int64_t nrows : {1, 2, 3, 4, 5, 9, 13, 40}) {
          const int64_t rows = nrows >= 13 && cases % 2 ? 129 + static_cast<int64_t>(rng() % 8)
                                                         : 1 + static_cast<int64_t>(rng() % 7);
          Weight w = make_int_weight(bits, group, rows, cols, rng);
          w.scales[0] = 3.0e30f;  // products near the float range
          const int64_t lda = rows + 3, ldy = cols + 5;
          auto a = random_floats(rng, nrows * lda);
          const auto x = random_floats(rng, nrows * cols);
          std::vector<float> want_axpy(static_cast<size_t>(nrows * ldy), -7.0f),
              want_gemm(static_cast<size_t>(nrows * rows));
          deq_reference(w, a, lda, x, nrows, want_axpy, ldy, want_gemm);
          const QWeight qw = qweight_rows(w, 0, rows);
          for (KernelPath p : supported_paths()) {
            const KernelTable& kt = kernel_table(p);
            std::vector<float> axpy(want_axpy.size(), -7.0f), gemm(want_gemm.size(), -1.0f);
            kt.deq_axpy(qw, a.data(), lda, nrows, axpy.data(), ldy);
            kt.deq_gemm(qw, x.data(), nrows, gemm.data(), rows);
            EXPECT_TRUE(all_same(want_axpy, axpy)) << "deq_axpy int" << bits << " group " << group << " cols "
                                                   << cols << " rows " << rows << " nrows " << nrows << " "
                                                   << kernel_path_name(p);
            EXPECT_TRUE(all_same(want_gemm, gemm)) << "deq_gemm int" << bits << " group " << group << " cols "
                                                   << cols << " rows " << rows << " nrows " << nrows << " "
                                                   << kernel_path_name(p);
          }
          ++cases;
        }
  EXPECT_EQ(cases, 2 * 6 * 10 * 8);
}

// The same int8/int4 weight twice: with bf16 group scales (scales16) and
// with f32 scales holding exactly those values widened.
std::pair<Weight, Weight> bf16_and_f32_scales(int bits, int64_t group, int64_t rows, int64_t cols, std::mt19937& rng) {
  Weight w32 = make_int_weight(bits, group, rows, cols, rng);
  if (!w32.scales.empty()) w32.scales[0] = 3.0e30f;  // products near the float range
  Weight w16 = w32;
  w16.scales.clear();
  w16.scales_bf16 = true;
  for (float& f : w32.scales) {
    w16.scales16.push_back(f32_to_bf16(f));
    f = bf16_to_f32(w16.scales16.back());
  }
  return {std::move(w16), std::move(w32)};
}

TEST(KernelQGemm, Bf16ScalesComputeTheFloatsOfTheirF32Values) {
  // --scales bf16: every kernel that reads int8/int4 scales (the GEMV and
  // multi-row tiles, the packed prefill GEMM, the absorbed attention's
  // deq_axpy / deq_gemm, row_f32 and row views) gives, on every path, the
  // same floats as the same weight whose scales are those bf16 values stored
  // as f32. Groups of every scale-gathering case, odd widths, 1-40 rows
  // (packed from 12), 1 and 2 threads.
  std::mt19937 rng(2026);
  ThreadPool two(2);
  int cases = 0;
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 64, 96, 128, 512})
      for (int64_t cols : {33, 512, 1537, 6001})
        for (int64_t nrows : {1, 3, 12, 40}) {
          const int64_t rows = 1 + static_cast<int64_t>(rng() % 9);
          const auto [w16, w32] = bf16_and_f32_scales(bits, group, rows, cols, rng);
          ASSERT_EQ(w16.bytes() + w16.scales16.size() * 2, w32.bytes());
          auto x = random_floats(rng, nrows * cols);
          for (int64_t i = 0; i < nrows * cols; i += 13) x[static_cast<size_t>(i)] *= 50.0f;
          for (KernelPath p : supported_paths())
            for (bool packed : {true, false}) {
              ComputeOptions o;
              o.path = p;
              o.packed = packed;
              const auto want = run_matmul_with(w32, x, nrows, o);
              ASSERT_TRUE(all_same(want, run_matmul_with(w16, x, nrows, o)))
                  << kernel_path_name(p) << " int" << bits << " group " << group << " cols " << cols << " nrows "
                  << nrows << (packed ? " packed" : "");
              if (nrows == 40) {
                ASSERT_TRUE(all_same(want, run_matmul_with(w16, x, nrows, o, &two))) << "2 threads";
              }
            }
          std::vector<float> r16(static_cast<size_t>(cols)), r32(static_cast<size_t>(cols));
          for (int64_t r = 0; r < rows; ++r) {
            w16.row_f32(r, r16.data());
            w32.row_f32(r, r32.data());
            ASSERT_TRUE(all_same(r32, r16)) << "row_f32 row " << r;
            ASSERT_EQ(w16.scale_at(r, 0), w32.scale_at(r, 0));
          }
          // The absorbed attention's subranges of rows (qweight_rows(W, r0, n)).
          const int64_t r0 = rows > 2 ? 1 : 0, n = rows - r0;
          const auto a = random_floats(rng, 3 * n), xd = random_floats(rng, 3 * cols);
          for (KernelPath p : supported_paths()) {
            const KernelTable& kt = kernel_table(p);
            std::vector<float> y16(static_cast<size_t>(3 * cols)), y32(y16.size()), g16(static_cast<size_t>(3 * n)),
                g32(g16.size());
            kt.deq_axpy(qweight_rows(w16, r0, n), a.data(), n, 3, y16.data(), cols);
            kt.deq_axpy(qweight_rows(w32, r0, n), a.data(), n, 3, y32.data(), cols);
            kt.deq_gemm(qweight_rows(w16, r0, n), xd.data(), 3, g16.data(), n);
            kt.deq_gemm(qweight_rows(w32, r0, n), xd.data(), 3, g32.data(), n);
            ASSERT_TRUE(all_same(y32, y16)) << "deq_axpy " << kernel_path_name(p) << " group " << group;
            ASSERT_TRUE(all_same(g32, g16)) << "deq_gemm " << kernel_path_name(p) << " group " << group;
          }
          // A view of the first rows keeps the scale storage.
          const Weight v16 = w16.row_prefix(n), v32 = w32.row_prefix(n);
          EXPECT_TRUE(v16.scales_bf16);
          EXPECT_EQ(v16.bytes() + static_cast<size_t>(n * quant_groups(cols, group)) * 2, v32.bytes());
          ASSERT_TRUE(all_same(run_matmul(v32, x, nrows, best_kernel_path()), run_matmul(v16, x, nrows, best_kernel_path())));
          ++cases;
        }
  EXPECT_EQ(cases, 2 * 6 * 4 * 4);
}

TEST(Quant, Bf16ScalesAreBf16AndKeepTheBound) {
  // quantize_row(..., bf16_scales): each scale is a bf16 value (round trips
  // through f32_to_bf16), within bf16 rounding of amax / qmax, and every
  // element within half a step of the scale actually stored: |w - q s'| <=
  // s' / 2, with no value clamped. Magnitudes from 1e-30 to 1e30, groups
  // whose largest element sits at the rounding boundary included.
  std::mt19937 rng(99);
  for (QuantBits b : {QuantBits::Int8, QuantBits::Int4})
    for (int64_t group : {0, 32, 64})
      for (float mag : {1e-30f, 1e-5f, 0.02f, 1.0f, 3e4f, 1e30f}) {
        const int64_t cols = 256;
        std::vector<float> w = random_floats(rng, cols, mag);
        w[5] = mag;  // an exact power-ish maximum
        std::vector<uint8_t> q(static_cast<size_t>(quant_row_bytes(b, cols)));
        std::vector<float> sc(static_cast<size_t>(quant_groups(cols, group))), out(static_cast<size_t>(cols));
        quantize_row(b, group, w.data(), cols, q.data(), sc.data(), true);
        dequantize_row(b, group, q.data(), sc.data(), cols, out.data());
        const int64_t g = group > 0 ? group : cols;
        for (int64_t gi = 0; gi < static_cast<int64_t>(sc.size()); ++gi) {
          const float s = sc[static_cast<size_t>(gi)];
          ASSERT_EQ(bf16_to_f32(f32_to_bf16(s)), s) << "scale not a bf16 value";
          float amax = 0;
          for (int64_t c = gi * g; c < std::min(cols, (gi + 1) * g); ++c) amax = std::max(amax, std::fabs(w[c]));
          const double exact = static_cast<double>(amax) / qmax(b);
          EXPECT_LE(std::fabs(s - exact), exact / 256) << "scale off by more than bf16 rounding";
          for (int64_t c = gi * g; c < std::min(cols, (gi + 1) * g); ++c)
            ASSERT_LE(std::fabs(static_cast<double>(w[c]) - out[c]), static_cast<double>(s) / 2 + 1e-6 * amax)
                << "c " << c << " mag " << mag;
        }
      }
}

TEST(KernelDeq, SubrangeOfRowsReadsOnlyThoseRows) {
  // qweight_rows(W, r0, n): the absorbed attention's per-head W_UK / W_UV
  // blocks of kv_b. Rows r0 .. r0 + n of a larger weight equal the same rows
  // cut out as a weight of their own.
  std::mt19937 rng(17);
  for (int bits : {8, 4}) {
    const Weight w = make_int_weight(bits, 32, 12, 96, rng);
    Weight part = w;
    const QuantBits b = bits == 8 ? QuantBits::Int8 : QuantBits::Int4;
    const int64_t rb = quant_row_bytes(b, 96), ng = quant_groups(96, 32);
    part.rows = 5;
    part.data.assign(w.data.begin() + 4 * rb, w.data.begin() + 9 * rb);
    part.scales.assign(w.scales.begin() + 4 * ng, w.scales.begin() + 9 * ng);
    const auto a = random_floats(rng, 2 * 5), x = random_floats(rng, 2 * 96);
    for (KernelPath p : supported_paths()) {
      const KernelTable& kt = kernel_table(p);
      std::vector<float> y1(2 * 96), y2(2 * 96), g1(2 * 5), g2(2 * 5);
      kt.deq_axpy(qweight_rows(w, 4, 5), a.data(), 5, 2, y1.data(), 96);
      kt.deq_axpy(qweight_rows(part, 0, 5), a.data(), 5, 2, y2.data(), 96);
      kt.deq_gemm(qweight_rows(w, 4, 5), x.data(), 2, g1.data(), 5);
      kt.deq_gemm(qweight_rows(part, 0, 5), x.data(), 2, g2.data(), 5);
      EXPECT_TRUE(all_same(y2, y1)) << kernel_path_name(p);
      EXPECT_TRUE(all_same(g2, g1)) << kernel_path_name(p);
    }
  }
}

TEST(KernelDeq, AbsorbedAttentionWithIntKvBEqualsItsF32Copy) {
  // The absorbed (decode) attention on an int8/int4 kv_b. With F32
  // activations (W8A32) its W_UK / W_UV rows go through deq_axpy / deq_gemm
  // and give the logits of the same model with kv_b stored as f32 holding
  // row_f32's values (rows expanded, then the f32 axpy and gemm_f32): ==, on
  // every path. With int8 activations (the default) W_UV is matmul's integer
  // kernel over each head's rows (its activation-rounding bound:
  // KernelQGemm.ActivationQuantizationErrorWithinStatedBound; the same floats as matmul:
  // KernelMatmul.QrowsEqualsMatmulOverTheRowsAsAWeight): the logits differ from the f32 copy's, and are the same
  // on every path and in any batching (a token at a time, a 3-row step, a
  // 12-row step that takes the packed kernels). Over 2 threads.
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-bf16";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "fixture missing";
  const std::vector<int32_t> ids = {1, 5, 9, 2, 7, 3, 8, 4, 6, 10, 12, 11, 14, 13, 15, 16};
  // steps: rows per forward call, in order (summing to ids.size()).
  const auto logits_of = [&](const Model& m, KernelPath p, IntActivations acts, const std::vector<size_t>& steps) {
    ComputeOptions o;
    o.path = p;
    o.acts = acts;
    ThreadPool pool(2);
    ResidentExpertStore store(m.weights.experts);
    ModelRunner runner(m, store, pool, o);
    Session s(m.config, static_cast<int64_t>(ids.size()), false);
    const int64_t V = m.config.vocab_size;
    std::vector<float> all(ids.size() * static_cast<size_t>(V));
    size_t i = 0;
    for (size_t step : steps) {
      std::vector<Row> rows;
      for (size_t k = i; k < i + step; ++k) rows.push_back({&s, static_cast<int32_t>(k), ids[k], true});
      runner.forward(rows, {}, all.data() + i * static_cast<size_t>(V), nullptr);
      i += step;
    }
    EXPECT_EQ(i, ids.size());
    return all;
  };
  const std::vector<size_t> singles(ids.size(), 1), mixed = {1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
                            packed = {1, 1, 12, 1, 1};
  for (int bits : {8, 4})
    for (int64_t group : {0, 32}) {
      auto qm = load_model(dir), fm = load_model(dir);
      for (size_t l = 0; l < qm->weights.layers.size(); ++l) {
        Weight& kq = qm->weights.layers[l].attn.kv_b;
        Weight& kf = fm->weights.layers[l].attn.kv_b;
        ASSERT_EQ(kq.format, WeightFormat::BF16);
        const QuantBits b = bits == 8 ? QuantBits::Int8 : QuantBits::Int4;
        const int64_t R = kq.rows, C = kq.cols, rb = quant_row_bytes(b, C), ng = quant_groups(C, group);
        std::vector<float> row(static_cast<size_t>(C));
        std::vector<uint8_t> q(static_cast<size_t>(R * rb));
        std::vector<float> s(static_cast<size_t>(R * ng));
        for (int64_t r = 0; r < R; ++r) {
          kq.row_f32(r, row.data());
          quantize_row(b, group, row.data(), C, q.data() + r * rb, s.data() + r * ng);
        }
        kq.view_data = kf.view_data = nullptr;
        kq.view_scales = kf.view_scales = nullptr;
        kq.view_bytes = kf.view_bytes = 0;
        kq.format = bits == 8 ? WeightFormat::INT8 : WeightFormat::INT4;
        kq.group = group;
        kq.data = q;
        kq.scales = s;
        kf.format = WeightFormat::F32;
        kf.data.resize(static_cast<size_t>(R * C) * 4);
        for (int64_t r = 0; r < R; ++r) {
          kq.row_f32(r, row.data());
          std::memcpy(kf.data.data() + r * C * 4, row.data(), static_cast<size_t>(C) * 4);
        }
      }
      const std::string what = "int" + std::to_string(bits) + " group " + std::to_string(group);
      const std::vector<float> want = logits_of(*qm, KernelPath::Scalar, IntActivations::Int8, singles);
      EXPECT_FALSE(all_same(logits_of(*fm, KernelPath::Scalar, IntActivations::Int8, singles), want))
          << what << ": the integer W_UV gave the f32 copy's logits exactly (is it running?)";
      for (KernelPath p : supported_paths()) {
        EXPECT_TRUE(all_same(logits_of(*fm, p, IntActivations::F32, mixed), logits_of(*qm, p, IntActivations::F32, mixed)))
            << what << " " << kernel_path_name(p);
        EXPECT_TRUE(all_same(logits_of(*qm, p, IntActivations::Int8, mixed), want)) << what << " " << kernel_path_name(p);
        EXPECT_TRUE(all_same(logits_of(*qm, p, IntActivations::Int8, packed), want)) << what << " " << kernel_path_name(p);
      }
    }
}

TEST(KernelMatmul, QrowsEqualsMatmulOverTheRowsAsAWeight) {
  // matmul_qrows over rows [r0, r0 + n) of an integer weight (a head's W_UV
  // in kv_b) writes what matmul() writes for a Weight holding just those
  // rows, into a strided y: ==, on every path, int8/int4, f32/bf16 scales,
  // groups 0/32/64, row counts that take the single-row, multi-row and packed
  // kernels.
  std::mt19937 rng(77);
  const int64_t R = 40, C = 160, r0 = 9, n = 21, ldy = 50;
  const std::vector<float> wf = random_floats(rng, R * C);
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 64})
      for (bool bf16 : {false, true}) {
        const QuantBits b = bits == 8 ? QuantBits::Int8 : QuantBits::Int4;
        const auto make = [&](int64_t first, int64_t rows) {
          Weight w;
          w.format = bits == 8 ? WeightFormat::INT8 : WeightFormat::INT4;
          w.rows = rows;
          w.cols = C;
          w.group = group;
          const int64_t rb = quant_row_bytes(b, C), ng = quant_groups(C, group);
          w.data.resize(static_cast<size_t>(rows * rb));
          w.scales.resize(static_cast<size_t>(rows * ng));
          for (int64_t r = 0; r < rows; ++r)
            quantize_row(b, group, wf.data() + (first + r) * C, C, w.data.data() + r * rb, w.scales.data() + r * ng);
          if (bf16) {
            w.scales_bf16 = true;
            w.scales16.resize(w.scales.size());
            for (size_t i = 0; i < w.scales.size(); ++i) w.scales16[i] = f32_to_bf16(w.scales[i]);
            w.scales.clear();
          }
          return w;
        };
        const Weight whole = make(0, R), part = make(r0, n);
        for (int64_t nrows : {1, 3, 13}) {
          const std::vector<float> x = random_floats(rng, nrows * C, 2.0f);
          for (KernelPath p : supported_paths()) {
            ComputeOptions o;
            o.path = p;
            const Compute c(nullptr, o);
            std::vector<float> want(static_cast<size_t>(nrows * n)), got(static_cast<size_t>(nrows * ldy), -7.0f);
            matmul(c, part, x.data(), nrows, want.data());
            MatmulScratch scratch;
            matmul_qrows(c, qweight_rows(whole, r0, n), x.data(), nrows, got.data(), ldy, scratch);
            bool ok = true;
            for (int64_t r = 0; r < nrows; ++r)
              for (int64_t j = 0; j < ldy; ++j) {
                const float g = got[static_cast<size_t>(r * ldy + j)];
                if (j < n ? !same(g, want[static_cast<size_t>(r * n + j)]) : g != -7.0f) ok = false;
              }
            EXPECT_TRUE(ok) << "int" << bits << " group " << group << (bf16 ? " bf16" : " f32") << " scales, "
                              << nrows << " rows, " << kernel_path_name(p);
          }
        }
      }
}

}  // namespace strata::kernels_test
