// Standalone exactness test of the AArch64 NEON kernel paths (no GoogleTest:
// it is cross-compiled with only src/kernels and run under qemu-aarch64 by
// tests/kernels/aarch64_qemu.sh). Every entry of every supported path's
// KernelTable must equal the scalar reference bit for bit (any NaN equals any
// NaN, as in tests/unit/kernels_test.cpp), and the dispatcher must pick the
// path the (emulated) CPU allows.
//
//   neon_kernels_test [--expect-best PATH] [--expect-supported P1,P2,...]
//   neon_kernels_test --digest
//
// --expect-supported lists the NEON paths that must be supported; the other
// NEON paths must not be. --digest prints a fingerprint of each supported
// path's outputs on a fixed suite; it builds on x86 too, where the script
// runs it to show that x86 and AArch64 give the same bits.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/qgemm.h"

using namespace strata;

namespace {

int g_checks = 0, g_failures = 0;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b); }

void check(bool ok, const std::string& what) {
  ++g_checks;
  if (ok) return;
  if (++g_failures <= 20) std::printf("FAIL: %s\n", what.c_str());
}

std::string diff(const std::vector<float>& want, const std::vector<float>& got) {
  for (size_t i = 0; i < want.size(); ++i)
    if (!same(want[i], got[i])) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " element %zu: want %.9g (0x%08x), got %.9g (0x%08x)", i, want[i], bits_of(want[i]),
                    got[i], bits_of(got[i]));
      return buf;
    }
  return "";
}

std::vector<float> normals(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = d(rng);
  return v;
}

uint16_t to_bf16(float f) { return static_cast<uint16_t>(bits_of(f) >> 16); }  // truncation is fine for a test

// ---- float kernels ----

void test_dot(const KernelTable& ref, const KernelTable& k, std::mt19937& rng) {
  const std::string name = kernel_path_name(k.path);
  for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 11, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 1000, 4099}) {
    auto a = normals(rng, n), b = normals(rng, n, 3.0f);
    for (int64_t i = 0; i < n; i += 5) a[i] = -0.0f;
    const float want = ref.dot_f32(a.data(), b.data(), n), got = k.dot_f32(a.data(), b.data(), n);
    check(same(want, got), name + " dot_f32 n=" + std::to_string(n) + diff({want}, {got}));
  }
  // All products -0: the lanes' signs must come out as the scalar's.
  for (int64_t n : {1, 5, 16, 21}) {
    std::vector<float> a(static_cast<size_t>(n), -0.0f), b(static_cast<size_t>(n), 1.0f);
    const float want = ref.dot_f32(a.data(), b.data(), n), got = k.dot_f32(a.data(), b.data(), n);
    check(same(want, got), name + " dot_f32 -0 n=" + std::to_string(n) + diff({want}, {got}));
  }
  std::vector<float> a(19, 1.0f), b(19, 1.0f);
  a[17] = INFINITY;
  check(k.dot_f32(a.data(), b.data(), 19) == INFINITY, name + " dot_f32 +inf");
  a[3] = -INFINITY;
  check(std::isnan(k.dot_f32(a.data(), b.data(), 19)), name + " dot_f32 inf-inf is NaN");
  a[3] = NAN;
  check(std::isnan(k.dot_f32(a.data(), b.data(), 19)), name + " dot_f32 NaN");
}

void test_fgemm(const KernelTable& ref, const KernelTable& k, std::mt19937& rng) {
  const std::string name = kernel_path_name(k.path);
  int cases = 0;
  for (int64_t nw : {1, 2, 3, 5})
    for (int64_t cols : {1, 3, 15, 16, 17, 33, 100, 515})
      for (int64_t nrows = 1; nrows <= 9; ++nrows)
        for (bool bf16 : {false, true}) {
          const int64_t ldy = nw + 3;
          const auto wf = normals(rng, nw * cols);
          auto x = normals(rng, nrows * cols);
          if (cases % 17 == 5) x[static_cast<size_t>(rng() % x.size())] = INFINITY;  // that row's outputs: inf or NaN
          if (cases % 23 == 7) x[static_cast<size_t>(rng() % x.size())] = NAN;
          std::vector<uint16_t> wb(wf.size());
          for (size_t i = 0; i < wf.size(); ++i) wb[i] = to_bf16(wf[i]);
          std::vector<float> want(static_cast<size_t>(nrows * ldy), 7.0f), got(want);
          if (bf16) {
            ref.gemm_bf16(wb.data(), nw, cols, x.data(), nrows, want.data(), ldy);
            k.gemm_bf16(wb.data(), nw, cols, x.data(), nrows, got.data(), ldy);
          } else {
            ref.gemm_f32(wf.data(), nw, cols, x.data(), nrows, want.data(), ldy);
            k.gemm_f32(wf.data(), nw, cols, x.data(), nrows, got.data(), ldy);
          }
          // The scalar result is dot16 of the rows (and the padding is untouched).
          bool order_ok = true;
          for (int64_t r = 0; r < nrows; ++r)
            for (int64_t o = 0; o < ldy; ++o) {
              if (o >= nw) {
                order_ok = order_ok && want[r * ldy + o] == 7.0f;
                continue;
              }
              std::vector<float> row(wf.begin() + o * cols, wf.begin() + (o + 1) * cols);
              if (bf16)
                for (int64_t c = 0; c < cols; ++c) {
                  const uint32_t u = static_cast<uint32_t>(wb[o * cols + c]) << 16;
                  std::memcpy(&row[c], &u, 4);
                }
              order_ok = order_ok && same(want[r * ldy + o], ref.dot_f32(row.data(), x.data() + r * cols, cols));
            }
          const std::string what = name + (bf16 ? " gemm_bf16" : " gemm_f32") + " nw=" + std::to_string(nw) +
                                   " cols=" + std::to_string(cols) + " nrows=" + std::to_string(nrows);
          check(order_ok, what + " (scalar is not dot16 of the rows)");
          check(diff(want, got).empty(), what + diff(want, got));
          ++cases;
        }
}

// ---- attention over a key set: picked rows of floats or of halves ----

// Finite halves of every exponent (subnormals and 65504 included), any sign.
std::vector<uint16_t> halves(std::mt19937& rng, int64_t n) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& h : v) h = static_cast<uint16_t>((rng() & 0x8000u) | ((rng() % 31u) << 10) | (rng() & 0x3ffu));
  return v;
}

// gemm_f32_rows / gemm_f16_rows, wsum_f32 / wsum_f16 and f16_to_f32 against
// the scalar table: key sets picked by index (repeats allowed) or in order,
// 0-37 keys, widths across the 16-column chunks, 1-9 query rows / heads
// (every 4-head tile and leftover), column ranges of a thread's share, sums
// started from 0 or continued from y (acc), outputs written nowhere else.
void test_keyset(const KernelTable& ref, const KernelTable& k, std::mt19937& rng) {
  const std::string name = kernel_path_name(k.path);
  for (int64_t cols : {1, 4, 15, 16, 17, 64, 100, 576})
    for (int64_t nkeys : {0, 1, 5, 16, 37})
      for (int64_t nrows : {1, 3, 4, 5, 9}) {
        const int64_t npool = nkeys + 7;
        const auto pool32 = normals(rng, npool * cols);
        const auto pool16 = halves(rng, npool * cols);
        std::vector<int32_t> idx(static_cast<size_t>(nkeys));
        for (auto& i : idx) i = static_cast<int32_t>(rng() % npool);
        const bool picked = (nkeys + nrows + cols) % 2 == 0;
        const int32_t* ix = picked ? idx.data() : nullptr;
        const FRows f{pool32.data(), ix, cols};
        const HRows h{pool16.data(), ix, cols};
        const std::string what = name + " cols=" + std::to_string(cols) + " keys=" + std::to_string(nkeys) +
                                 " rows=" + std::to_string(nrows) + (picked ? " picked" : " in order");
        // Scores: nrows query rows against every key.
        const auto x = normals(rng, nrows * cols);
        const int64_t ldy = nkeys + 2;
        for (bool half : {false, true}) {
          std::vector<float> want(static_cast<size_t>(nrows * ldy), 7.0f), got(want);
          if (half) {
            ref.gemm_f16_rows(h, nkeys, cols, x.data(), nrows, want.data(), ldy);
            k.gemm_f16_rows(h, nkeys, cols, x.data(), nrows, got.data(), ldy);
          } else {
            ref.gemm_f32_rows(f, nkeys, cols, x.data(), nrows, want.data(), ldy);
            k.gemm_f32_rows(f, nkeys, cols, x.data(), nrows, got.data(), ldy);
          }
          check(diff(want, got).empty(), what + (half ? " gemm_f16_rows" : " gemm_f32_rows") + diff(want, got));
        }
        // Weighted sums: nrows heads, over the whole width and a share of it.
        const int64_t ldp = nkeys + 3, ldo = cols + 5;
        const auto pr = normals(rng, nrows * ldp);
        const auto y0 = normals(rng, nrows * ldo);
        for (bool half : {false, true})
          for (bool acc : {false, true})
            for (int64_t c0 : {int64_t{0}, cols / 3}) {
              const int64_t c1 = c0 == 0 ? cols : cols - cols / 5;
              std::vector<float> want(y0), got(y0);
              if (half) {
                ref.wsum_f16(pr.data(), ldp, nrows, h, nkeys, c0, c1, want.data(), ldo, acc);
                k.wsum_f16(pr.data(), ldp, nrows, h, nkeys, c0, c1, got.data(), ldo, acc);
              } else {
                ref.wsum_f32(pr.data(), ldp, nrows, f, nkeys, c0, c1, want.data(), ldo, acc);
                k.wsum_f32(pr.data(), ldp, nrows, f, nkeys, c0, c1, got.data(), ldo, acc);
              }
              check(diff(want, got).empty(), what + (half ? " wsum_f16" : " wsum_f32") + (acc ? " acc" : "") +
                                                 " c=[" + std::to_string(c0) + "," + std::to_string(c1) + ")" +
                                                 diff(want, got));
            }
        if (nrows == 1) {  // the conversion itself, every length's tail
          std::vector<float> want(pool16.size() + 1, 7.0f), got(want);
          ref.f16_to_f32(pool16.data(), want.data(), static_cast<int64_t>(pool16.size()));
          k.f16_to_f32(pool16.data(), got.data(), static_cast<int64_t>(pool16.size()));
          check(diff(want, got).empty(), what + " f16_to_f32" + diff(want, got));
        }
      }
  // Every half's value: the 63488 finite bit patterns (and infinities) widened.
  std::vector<uint16_t> all;
  for (uint32_t u = 0; u < 65536; ++u)
    if (((u >> 10) & 31u) != 31u || (u & 0x3ffu) == 0) all.push_back(static_cast<uint16_t>(u));
  std::vector<float> want(all.size()), got(all.size());
  ref.f16_to_f32(all.data(), want.data(), static_cast<int64_t>(all.size()));
  k.f16_to_f32(all.data(), got.data(), static_cast<int64_t>(all.size()));
  check(diff(want, got).empty(), name + " f16_to_f32 of every finite half and the infinities" + diff(want, got));
}

// ---- integer kernels ----

struct IntCase {
  int bits = 8;
  int64_t group = 0, rows = 1, cols = 1;
  std::vector<uint8_t> q;
  std::vector<float> s;
  std::vector<uint16_t> sb;  // bf16 scales instead of s, when not empty
  int64_t row_bytes() const { return bits == 8 ? cols : (cols + 1) / 2; }
  int64_t ngroups() const { return group > 0 ? (cols + group - 1) / group : 1; }
  QWeight view() const {
    QWeight w;
    w.q = q.data();
    w.s = s.data();
    if (!sb.empty()) w.s = nullptr, w.sb = sb.data();
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = row_bytes();
    w.group = group;
    w.ngroups = ngroups();
    w.bits = bits;
    return w;
  }
};

IntCase random_int(std::mt19937& rng, int bits, int64_t group, int64_t rows, int64_t cols) {
  IntCase c;
  c.bits = bits;
  c.group = group;
  c.rows = rows;
  c.cols = cols;
  c.q.resize(static_cast<size_t>(rows * c.row_bytes()));
  for (auto& b : c.q) b = static_cast<uint8_t>(rng());  // the full range, -128 and -8 included
  c.s = normals(rng, rows * c.ngroups(), 0.01f);
  for (size_t i = 0; i < c.s.size(); ++i) c.s[i] = i % 7 == 3 ? 0.0f : std::fabs(c.s[i]);
  return c;
}

// y[nrows, ldy] of one table on x (quantized in that table's layout).
std::vector<float> run_int(const KernelTable& t, const IntCase& w, const std::vector<float>& x, int64_t nrows) {
  const ActLayout layout = w.bits == 4 ? t.q4_layout : t.q8_layout;
  std::vector<uint8_t> q(static_cast<size_t>(nrows * qacts_qstride(w.cols)));
  std::vector<float> scale(static_cast<size_t>(nrows * qacts_bstride(w.cols)));
  std::vector<int32_t> sum8(scale.size());
  const QActs a = quantize_acts(x.data(), nrows, w.cols, layout, q.data(), scale.data(), sum8.data());
  const int64_t ldy = w.rows + 2;
  std::vector<float> y(static_cast<size_t>(nrows * ldy), 7.0f);
  (w.bits == 4 ? t.gemm_q4 : t.gemm_q8)(w.view(), a, y.data(), ldy);
  return y;
}

std::string int_name(const KernelTable& k, const IntCase& w, int64_t nrows) {
  return std::string(kernel_path_name(k.path)) + " int" + std::to_string(w.bits) + " group=" +
         std::to_string(w.group) + " rows=" + std::to_string(w.rows) + " cols=" + std::to_string(w.cols) +
         " nrows=" + std::to_string(nrows);
}

void compare_int(const KernelTable& ref, const KernelTable& k, const IntCase& w, const std::vector<float>& x,
                 int64_t nrows) {
  const auto want = run_int(ref, w, x, nrows), got = run_int(k, w, x, nrows);
  bool pad_ok = true;
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t o = w.rows; o < w.rows + 2; ++o) pad_ok = pad_ok && got[r * (w.rows + 2) + o] == 7.0f;
  check(pad_ok, int_name(k, w, nrows) + " wrote outside its outputs");
  check(diff(want, got).empty(), int_name(k, w, nrows) + diff(want, got));
}

void test_qgemm(const KernelTable& ref, const KernelTable& k, std::mt19937& rng) {
  // Groups x widths (odd, tails, several superblocks), weight and activation row counts varying.
  int i = 0;
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 64, 96, 128, 256, 512})
      for (int64_t cols : {1, 31, 32, 33, 63, 100, 127, 129, 511, 512, 513, 1000, 1537}) {
        const int64_t rows = 1 + i % 5, nrows = 1 + (i * 7) % 9;
        ++i;
        const IntCase w = random_int(rng, bits, group, rows, cols);
        auto x = normals(rng, nrows * cols);
        for (int64_t c = 0; c < nrows * cols; c += 13) x[c] *= 50.0f;  // outliers
        compare_int(ref, k, w, x, nrows);
      }
  // Every activation row count 1..9 against 1..4 weight rows (SMMLA pairs and leftovers).
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 64, 128})
      for (int64_t rows = 1; rows <= 4; ++rows)
        for (int64_t nrows = 1; nrows <= 9; ++nrows) {
          const int64_t cols = bits == 8 ? 1000 : 777;
          const IntCase w = random_int(rng, bits, group, rows, cols);
          compare_int(ref, k, w, normals(rng, nrows * cols), nrows);
        }
}

// bf16 scales (--scales bf16): every path, on the bf16 copy, gives the
// scalar path's floats on the same weight with those scales stored as f32.
void test_bf16_scales(const KernelTable& ref, const KernelTable& k, std::mt19937& rng) {
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 64, 96, 128})
      for (int64_t cols : {33, 513, 1537})
        for (int64_t nrows : {1, 2, 5}) {
          const int64_t rows = 1 + static_cast<int64_t>(rng() % 4);
          IntCase w32 = random_int(rng, bits, group, rows, cols), w16 = w32;
          for (float& f : w32.s) {
            w16.sb.push_back(f32_to_bf16(f));
            f = bf16_to_f32(w16.sb.back());
          }
          w16.s.clear();
          const auto x = normals(rng, nrows * cols);
          const auto want = run_int(ref, w32, x, nrows), got = run_int(k, w16, x, nrows);
          check(diff(want, got).empty(), int_name(k, w16, nrows) + " bf16 scales" + diff(want, got));
        }
}

// Closed forms: every weight at the format's most negative (or positive)
// code, every activation at +-127 after quantization (s_x = 1).
void test_extremes(const KernelTable& k) {
  const std::string name = kernel_path_name(k.path);
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 128})
      for (float xv : {1.0f, -1.0f})
        for (int64_t nrows : {1, 2, 3})
          for (bool neg : {true, false}) {
            IntCase w;
            w.bits = bits;
            w.group = group;
            w.rows = 3;
            w.cols = 4096;
            const uint8_t code = bits == 8 ? (neg ? 0x80 : 0x7f) : (neg ? 0x88 : 0x77);
            w.q.assign(static_cast<size_t>(w.rows * w.row_bytes()), code);
            w.s.assign(static_cast<size_t>(w.rows * w.ngroups()), 1.0f);
            const std::vector<float> x(static_cast<size_t>(nrows * w.cols), xv * 127.0f);
            const float wq = bits == 8 ? (neg ? -128.0f : 127.0f) : (neg ? -8.0f : 7.0f);
            const float want = wq * 127.0f * xv * static_cast<float>(w.cols);
            const auto y = run_int(k, w, x, nrows);
            bool ok = true;
            for (int64_t r = 0; r < nrows; ++r)
              for (int64_t o = 0; o < w.rows; ++o) ok = ok && y[r * (w.rows + 2) + o] == want;
            check(ok, name + " extreme " + int_name(k, w, nrows) + " code " + std::to_string(code) + " x " +
                          std::to_string(xv));
          }
}

// Zero activation rows and zero scales give 0; a non-finite activation makes
// only its own row NaN, exactly where the scalar reference does.
void test_zero_and_nonfinite(const KernelTable& ref, const KernelTable& k, std::mt19937& rng) {
  const std::string name = kernel_path_name(k.path);
  for (int bits : {8, 4}) {
    IntCase w = random_int(rng, bits, 32, 4, 200);
    for (int64_t nrows : {1, 2, 3}) {
      const std::vector<float> zero(static_cast<size_t>(nrows * 200), 0.0f);
      const auto y = run_int(k, w, zero, nrows);
      bool ok = true;
      for (int64_t r = 0; r < nrows; ++r)
        for (int64_t o = 0; o < 4; ++o) ok = ok && bits_of(y[r * 6 + o]) == 0;
      check(ok, name + " zero rows give +0, int" + std::to_string(bits));
    }
    // One zero row among random ones.
    auto x = normals(rng, 3 * 200);
    std::fill(x.begin() + 200, x.begin() + 400, 0.0f);
    compare_int(ref, k, w, x, 3);
    std::fill(w.s.begin(), w.s.end(), 0.0f);
    compare_int(ref, k, w, normals(rng, 3 * 200), 3);
    // Non-finite activations.
    w = random_int(rng, bits, 0, 5, 700);
    for (auto& s : w.s) s = 1.0f;
    for (float bad : {INFINITY, -INFINITY, NAN})
      for (int64_t nrows : {2, 3, 5}) {
        auto xb = normals(rng, nrows * 700);
        xb[700 + 650] = bad;  // row 1, the last superblock's tail
        const auto want = run_int(ref, w, xb, nrows), got = run_int(k, w, xb, nrows);
        bool rows_ok = true;
        for (int64_t o = 0; o < 5; ++o)
          rows_ok = rows_ok && std::isfinite(got[o]) && std::isnan(got[7 + o]) && (nrows < 3 || std::isfinite(got[14 + o]));
        check(rows_ok, name + " non-finite activation poisons only its row, int" + std::to_string(bits));
        check(diff(want, got).empty(), name + " non-finite activation, int" + std::to_string(bits) + diff(want, got));
      }
    // Non-finite weight scales (a corrupt container): same as the scalar.
    w = random_int(rng, bits, 64, 3, 300);
    w.s[1] = INFINITY;
    w.s[4] = NAN;
    compare_int(ref, k, w, normals(rng, 4 * 300), 4);
  }
}

// Wide rows: the kernels split the activation rows into L2-sized blocks (45
// rows of 6001 columns: 8-row blocks for floats, 40-row blocks for integers,
// so SMMLA pairs and leftovers meet block edges); results must not move.
void test_large(const KernelTable& ref, const KernelTable& k, std::mt19937& rng) {
  const std::string name = kernel_path_name(k.path);
  const int64_t rows = 6, cols = 6001, nrows = 45;
  const auto x = normals(rng, nrows * cols);
  const auto wf = normals(rng, rows * cols);
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) wb[i] = to_bf16(wf[i]);
  std::vector<float> want(static_cast<size_t>(nrows * rows)), got(want.size());
  ref.gemm_f32(wf.data(), rows, cols, x.data(), nrows, want.data(), rows);
  k.gemm_f32(wf.data(), rows, cols, x.data(), nrows, got.data(), rows);
  check(diff(want, got).empty(), name + " gemm_f32 6001 x 45" + diff(want, got));
  ref.gemm_bf16(wb.data(), rows, cols, x.data(), nrows, want.data(), rows);
  k.gemm_bf16(wb.data(), rows, cols, x.data(), nrows, got.data(), rows);
  check(diff(want, got).empty(), name + " gemm_bf16 6001 x 45" + diff(want, got));
  compare_int(ref, k, random_int(rng, 8, 0, rows, cols), x, nrows);
  compare_int(ref, k, random_int(rng, 4, 64, rows, cols), x, nrows);
}

// ---- the same bits on every architecture ----

// A fingerprint of one table's outputs on a fixed suite whose inputs are
// built from integers only (no libm), so they are the same on every machine:
// the script compares the NEON paths' fingerprints under qemu with the x86
// paths' (and both scalar references') on the host.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(float f) {
    const uint32_t u = std::isnan(f) ? 0x7fc00000u : bits_of(f);  // NaN payloads are not part of the contract
    for (int i = 0; i < 4; ++i) h = (h ^ ((u >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
};

std::vector<float> int_floats(std::mt19937& rng, int64_t n) {  // exact: a 24-bit integer times 2^-20
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = static_cast<float>(static_cast<int32_t>(rng() >> 8) - (1 << 23)) * (1.0f / (1 << 20));
  return v;
}

uint64_t digest(const KernelTable& k) {
  std::mt19937 rng(11);
  Fnv h;
  for (int64_t n : {1, 7, 16, 33, 100, 1000, 4099}) {
    const auto a = int_floats(rng, n), b = int_floats(rng, n);
    h.add(k.dot_f32(a.data(), b.data(), n));
  }
  for (int64_t cols : {1, 17, 100, 515})
    for (bool bf16 : {false, true}) {
      const int64_t nw = 3, nrows = 5;
      const auto wf = int_floats(rng, nw * cols), x = int_floats(rng, nrows * cols);
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = to_bf16(wf[i]);
      std::vector<float> y(static_cast<size_t>(nrows * nw));
      if (bf16)
        k.gemm_bf16(wb.data(), nw, cols, x.data(), nrows, y.data(), nw);
      else
        k.gemm_f32(wf.data(), nw, cols, x.data(), nrows, y.data(), nw);
      for (float v : y) h.add(v);
    }
  for (int bits : {8, 4})
    for (int64_t group : {0, 32, 128})
      for (int64_t cols : {33, 513, 1537}) {
        IntCase w;
        w.bits = bits;
        w.group = group;
        w.rows = 3;
        w.cols = cols;
        w.q.resize(static_cast<size_t>(w.rows * w.row_bytes()));
        for (auto& b : w.q) b = static_cast<uint8_t>(rng());
        w.s = int_floats(rng, w.rows * w.ngroups());
        for (auto& v : w.s) v = std::fabs(v) * (1.0f / 64);
        auto x = int_floats(rng, 3 * cols);
        for (int64_t c = 0; c < 3 * cols; c += 13) x[c] *= 64.0f;  // outliers
        for (float v : run_int(k, w, x, 3)) h.add(v);
      }
  return h.h;
}

// ---- dispatch ----

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    const std::string t = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
    if (!t.empty()) v.push_back(t);
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return v;
}

void test_dispatch(const std::string& expect_best, const std::string& expect_supported, bool have_supported) {
  // Which path runs is a value (kernels/matmul.h, Compute, which refuses
  // an unsupported one); this test links the kernels only, so it checks
  // detection, names and the description here.
  const std::string d = kernel_description(best_kernel_path());
  std::printf("%s\n", d.c_str());
  check(d.find(kernel_path_name(best_kernel_path())) != std::string::npos, "the description names the best path");
  for (KernelPath p : kAllKernelPaths)
    check(parse_kernel_path(kernel_path_name(p)) == p, std::string("parse_kernel_path(") + kernel_path_name(p) + ")");
  check(!parse_kernel_path("sve").has_value(), "parse_kernel_path(sve) must fail");
  if (!expect_best.empty())
    check(expect_best == kernel_path_name(best_kernel_path()),
          "best path: want " + expect_best + ", got " + kernel_path_name(best_kernel_path()));
  if (have_supported) {
    const auto want = split(expect_supported);
    for (KernelPath p : {KernelPath::Neon, KernelPath::NeonDotprod, KernelPath::NeonI8mm}) {
      bool listed = false;
      for (const auto& s : want) listed = listed || s == kernel_path_name(p);
      check(kernel_path_supported(p) == listed,
            std::string(kernel_path_name(p)) + (listed ? " must be supported" : " must not be supported"));
    }
  }
  for (KernelPath p : {KernelPath::Avx2, KernelPath::Avx512, KernelPath::Avx512Vnni})
    check(!kernel_path_supported(p), std::string(kernel_path_name(p)) + " on AArch64");
}

}  // namespace

int main(int argc, char** argv) {
  std::string expect_best, expect_supported;
  bool have_supported = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--digest") {  // one line per supported path, nothing else
      for (KernelPath p : kAllKernelPaths)
        if (kernel_path_supported(p))
          std::printf("digest %s %016llx\n", kernel_path_name(p),
                      static_cast<unsigned long long>(digest(kernel_table(p))));
      return 0;
    }
    if (a == "--expect-best" && i + 1 < argc) {
      expect_best = argv[++i];
    } else if (a == "--expect-supported" && i + 1 < argc) {
      expect_supported = argv[++i];
      have_supported = true;
    } else {
      std::fprintf(stderr, "usage: %s [--expect-best PATH] [--expect-supported P1,P2,...] | --digest\n", argv[0]);
      return 2;
    }
  }
  test_dispatch(expect_best, expect_supported, have_supported);
  const KernelTable& ref = kernel_table(KernelPath::Scalar);
  {
    std::mt19937 rng(43);
    test_bf16_scales(ref, ref, rng);  // the scalar path reads bf16 scales too
  }
  int paths = 0;
  for (KernelPath p : kAllKernelPaths) {
    if (p == KernelPath::Scalar || !kernel_path_supported(p)) continue;
    const KernelTable& k = kernel_table(p);
    check(k.path == p, std::string("kernel_table(") + kernel_path_name(p) + ").path");
    const int before = g_failures, checks = g_checks;
    std::mt19937 rng(42);
    test_dot(ref, k, rng);
    test_fgemm(ref, k, rng);
    test_keyset(ref, k, rng);
    test_qgemm(ref, k, rng);
    test_bf16_scales(ref, k, rng);
    test_extremes(k);
    test_zero_and_nonfinite(ref, k, rng);
    test_large(ref, k, rng);
    std::printf("%-13s %5d checks, %d failed\n", kernel_path_name(p), g_checks - checks, g_failures - before);
    ++paths;
  }
  std::printf("%d SIMD paths checked against scalar: %d checks, %d failed\n", paths, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
