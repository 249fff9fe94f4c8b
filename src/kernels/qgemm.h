// The kernels behind matmul: f32/bf16 dot products and int8/int4 weights
// times int8-quantized activations, one table per CPU path (scalar reference,
// AVX2, AVX-512, AVX-512 VNNI; NEON, NEON + dotprod, NEON + i8mm on
// AArch64). Every path computes exactly the scalar
// reference's floats; docs/kernels.md states the arithmetic.
//
// The fixed order ("dot16") used everywhere: 16 f32 lanes, element i of a
// vector of length n goes to lane i % 16 as acc = fma(a, b, acc) in index
// order, then lanes fold as a tree (8, 4, 2, 1). It depends on n only, never
// on the batch, the thread count or the SIMD width.
//
// Integer formats (W.group 0 or a multiple of 32):
//   activations: each row of x is quantized in blocks of 32 columns,
//     s = amax / 127, q = clamp(round_half_even(x * (1 / s)), -127, 127);
//   per block b: isum_b = sum q_w * q_x, exact in int32;
//   y = dot16 over blocks of (float(isum_b), s_w[group of b] * s_x[b]).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/numeric.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"

namespace strata {

// Activation blocks and the superblock every SIMD path works in (16 blocks:
// one vector of 16 f32 lanes in the float epilogue).
constexpr int64_t kQBlock = 32;
constexpr int64_t kQSuper = 16 * kQBlock;

// How a path wants the quantized activations stored (values identical).
enum class ActLayout : uint8_t {
  Plain,       // q[c]
  Offset128,   // q[c] + 128 as uint8 (VNNI int8: vpdpbusd wants one unsigned operand)
  SplitNibble,  // per 128 columns: the 64 even columns, then the 64 odd ones (int4)
  // q[c] + 128 as uint8, each superblock of 16 blocks stored dword-major:
  // byte 64 k + 4 j + t holds column 4 k + t of block j (k < 8, j < 16,
  // t < 4), so one 64-byte vector holds dword k of all 16 blocks (int8
  // multi-row kernels: block j's sum accumulates in lane j, no reduction).
  Offset128Dword
};

// Quantized activations of one matmul call. Rows are padded with zeros to
// whole superblocks, so kernels read x without tails.
struct QActs {
  int64_t nrows = 0, cols = 0;
  int64_t nblocks = 0;  // ceil(cols / 32)
  int64_t qstride = 0;  // bytes per row of q (whole superblocks)
  int64_t bstride = 0;  // entries per row of scale / sum8 (whole superblocks)
  const uint8_t* q = nullptr;
  const float* scale = nullptr;   // s_x per block; NaN where the block held a non-finite value
  const int32_t* sum8 = nullptr;  // 8 * sum of q per block (the int4 offset correction)
};

// Sizes of the buffers quantize_acts writes for (nrows, cols).
int64_t qacts_qstride(int64_t cols);
int64_t qacts_bstride(int64_t cols);
// Scalar, shared by every path: the quantization is part of the format.
// q: nrows * qstride bytes, scale/sum8: nrows * bstride entries.
QActs quantize_acts(const float* x, int64_t nrows, int64_t cols, ActLayout layout, uint8_t* q, float* scale,
                    int32_t* sum8);

// An int8/int4 weight matrix as the kernels see it (rows [0, rows)).
struct QWeight {
  const uint8_t* q = nullptr;  // row-major, row_bytes per row (int4: even column in the low nibble)
  const float* s = nullptr;    // [rows, ngroups]
  const uint16_t* sb = nullptr;  // or, when set, the same scales as bf16 (s unused)
  int64_t rows = 0, cols = 0;
  int64_t row_bytes = 0;
  int64_t group = 0;  // 0: one scale per row; else a multiple of 32
  int64_t ngroups = 1;
  int bits = 8;  // 8 or 4
};

// One weight row's group scales as f32 whichever way they are stored: the
// bf16 ones widened exactly (bf16_to_f32), so both storages give the same
// floats on every path.
struct ScaleRow {
  const float* f = nullptr;
  const uint16_t* h = nullptr;
  float operator[](int64_t g) const { return h ? bf16_to_f32(h[g]) : f[g]; }
  const void* addr(int64_t g) const { return h ? static_cast<const void*>(h + g) : static_cast<const void*>(f + g); }
};
inline ScaleRow scale_row(const QWeight& w, int64_t o) {
  return w.sb ? ScaleRow{nullptr, w.sb + o * w.ngroups} : ScaleRow{w.s + o * w.ngroups, nullptr};
}

// ---- Integer weight rows against f32 activations, dequantized in registers ----
// For the absorbed MLA attention's kv_b (W_UK, W_UV): the products of the
// model's dequantized weights, without writing the rows out as f32. Element
// c of weight row o is deq(o, c) = float(q[o][c]) * s[o][group of c]: one
// f32 multiply, exactly the value Weight::row_f32 returns. Any group (0 or
// not a multiple of 32 too; a SIMD path may hand odd groups to the scalar
// reference). Scalar references below; every path equals them bit for bit.
//
// deq_axpy: y[r * ldy + c] = the sum over o < w.rows, in order, of
// a[r * lda + o] * deq(o, c), each step one fma starting from 0:
//   acc = 0; for o: acc = fma(a[r * lda + o], deq(o, c), acc)
// for r < nrows, c < w.cols (y overwritten).
void deq_axpy_ref(const QWeight& w, const float* a, int64_t lda, int64_t nrows, float* y, int64_t ldy);
// deq_gemm: y[r * ldy + o] = dot16(deq(o, :), x row r), x rows w.cols
// apart, for o < w.rows, r < nrows: gemm_f32 over the dequantized rows.
void deq_gemm_ref(const QWeight& w, const float* x, int64_t nrows, float* y, int64_t ldy);

// ---- Attention over a key set (the absorbed MLA: one query row, all heads) ----
// Rows of a matrix picked by index: row j is base + idx[j] * ld, or
// base + j * ld where idx is null (every key in order). FRows: of floats;
// HRows: of IEEE halves (an f16 key cache's keys and values).
template <class T>
struct PickedRows {
  const T* base = nullptr;
  const int32_t* idx = nullptr;
  int64_t ld = 0;
  const T* row(int64_t j) const { return base + (idx ? static_cast<int64_t>(idx[j]) : j) * ld; }
  // The rows from j0 on.
  PickedRows from(int64_t j0) const {
    return idx ? PickedRows{base, idx + j0, ld} : PickedRows{base + j0 * ld, nullptr, ld};
  }
};
using FRows = PickedRows<float>;
using HRows = PickedRows<uint16_t>;
// gemm_f32_rows: gemm_f32 over picked rows, y[r * ldy + j] = dot16(w.row(j),
// x row r) for j < nw, r < nrows (x rows `cols` apart): the scores of every
// head (x rows) against every key of a set.
void gemm_f32_rows_ref(FRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy);
// Rows stored in lanes (the DSA indexer's key cache, model/session.h's
// LaneRows): blocks of 16 consecutive rows, each block column-major, row j's
// column c at lanes_offset(j, c, cols). It is the layout the AVX-512
// gemm_f32_rows transposes each block of 16 keys into before scoring it, kept
// in storage so that the indexer, which scores every key of the context each
// token, reads its keys as they are (docs/kernels.md, "Indexer keys stored in
// lanes"). A block-aligned row j0 starts at j0 * cols, as in row-major order.
inline int64_t lanes_offset(int64_t j, int64_t c, int64_t cols) { return (j / 16) * 16 * cols + c * 16 + j % 16; }
// gemm_f32_lanes: gemm_f32_rows over nw rows stored in lanes from t (row 0
// of t's first block): y[r * ldy + j] = dot16(row j, x row r) for j < nw,
// r < nrows; writes nothing past column nw. The same floats as
// gemm_f32_rows over the rows in row-major order.
void gemm_f32_lanes_ref(const float* t, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y,
                        int64_t ldy);
// wsum_f32: y[h * ldy + c] = the sum over j < K, in order, of
// p[h * ldp + j] * v.row(j)[c], each step one fma starting from 0 (acc:
// from y's value, so a sum over keys taken in chunks, each call continuing
// the chain, is the sum over all of them in one call):
//   a = acc ? y : 0; for j: a = fma(p[h * ldp + j], v.row(j)[c], a)
// for h < nh, c0 <= c < c1: the softmax-weighted sum of the keys' values for
// every head, any column range (a thread's share) giving the same floats.
void wsum_f32_ref(const float* p, int64_t ldp, int64_t nh, FRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                  int64_t ldy, bool acc);

// gemm_f16_rows / wsum_f16: gemm_f32_rows / wsum_f32 over rows of halves,
// read as their f32 values (exact): the same floats as those kernels over the
// rows converted to f32 first, on every path, with no buffer that grows with
// the keys.
void gemm_f16_rows_ref(HRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy);
void wsum_f16_ref(const float* p, int64_t ldp, int64_t nh, HRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                  int64_t ldy, bool acc);

// The paths without a kernel of their own for halves: the rows converted by
// Conv (an f16_to_f32) a block at a time into a 32 KiB stack buffer and
// handed to the path's f32 kernel (Rows: a gemm_f32_rows; Wsum: a wsum_f32).
// Each score is one dot16 and each sum a chain continued across the blocks
// (wsum's acc), so the floats are the f32 kernel's over the whole set.
constexpr int64_t kHalfBlockFloats = 8192;
template <auto Rows, auto Conv>
void gemm_f16_rows_via(HRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy) {
  alignas(64) float buf[kHalfBlockFloats];
  std::vector<float> wide;  // a row wider than the buffer (no model has one)
  float* b = buf;
  int64_t per = cols > 0 ? kHalfBlockFloats / cols : 16;
  if (per == 0) {
    wide.resize(static_cast<size_t>(cols));
    b = wide.data();
    per = 1;
  } else if (per >= 16) {
    per = per / 16 * 16;  // whole blocks of 16 keys for a keys-in-lanes kernel
  }
  for (int64_t j0 = 0; j0 < nw; j0 += per) {
    const int64_t jn = std::min(per, nw - j0);
    for (int64_t j = 0; j < jn; ++j) Conv(w.row(j0 + j), b + j * cols, cols);
    Rows(FRows{b, nullptr, cols}, jn, cols, x, nrows, y + j0, ldy);
  }
}
template <auto Wsum, auto Conv>
void wsum_f16_via(const float* p, int64_t ldp, int64_t nh, HRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                  int64_t ldy, bool acc) {
  alignas(64) float buf[kHalfBlockFloats];
  if (K == 0 || c1 <= c0) {  // no key: the outputs' starting values only
    Wsum(p, ldp, nh, FRows{buf, nullptr, 0}, 0, c0, c1, y, ldy, acc);
    return;
  }
  constexpr int64_t kCols = 256;  // columns per block; kHalfBlockFloats / kCols keys
  for (int64_t cb = c0; cb < c1; cb += kCols) {
    const int64_t cw = std::min(kCols, c1 - cb);
    const int64_t per = kHalfBlockFloats / kCols;
    for (int64_t j0 = 0; j0 < K; j0 += per) {
      const int64_t jn = std::min(per, K - j0);
      for (int64_t j = 0; j < jn; ++j) Conv(v.row(j0 + j) + cb, buf + j * cw, cw);
      Wsum(p + j0, ldp, nh, FRows{buf, nullptr, cw}, jn, 0, cw, y + cb, ldy, acc || j0 > 0);
    }
  }
}

// The paths without a kernel of their own for rows in lanes: up to 16 rows
// at a time put back in row-major order into a stack buffer and handed to the
// path's gemm_f32_rows (Rows): each score one dot16, the same floats.
template <auto Rows>
void gemm_f32_lanes_via(const float* t, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y,
                        int64_t ldy) {
  alignas(64) float buf[kHalfBlockFloats];
  std::vector<float> wide;  // 16 rows wider than the buffer (no model has them)
  float* b = buf;
  if (16 * cols > kHalfBlockFloats) {
    wide.resize(static_cast<size_t>(16 * cols));
    b = wide.data();
  }
  for (int64_t j0 = 0; j0 < nw; j0 += 16) {
    const int64_t jn = std::min<int64_t>(16, nw - j0);
    const float* blk = t + j0 * cols;
    for (int64_t j = 0; j < jn; ++j)
      for (int64_t c = 0; c < cols; ++c) b[j * cols + c] = blk[c * 16 + j];
    Rows(FRows{b, nullptr, cols}, jn, cols, x, nrows, y + j0, ldy);
  }
}

struct KernelTable {
  KernelPath path;
  // dot16(a, b) over n elements.
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  // y[r * ldy + o] = dot16(w row o, x row r) for o < nw, r < nrows; w rows
  // are `cols` apart, x rows too.
  void (*gemm_f32)(const float* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy);
  void (*gemm_bf16)(const uint16_t* w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y, int64_t ldy);
  // y[r * ldy + o] for o < W.rows, r < a.nrows (integer formats above).
  void (*gemm_q8)(const QWeight& w, const QActs& a, float* y, int64_t ldy);
  void (*gemm_q4)(const QWeight& w, const QActs& a, float* y, int64_t ldy);
  ActLayout q8_layout, q4_layout;
  // Optional: an int8 kernel for calls with at least 2 activation rows, with
  // its own activation layout (same values, same results bit for bit).
  void (*gemm_q8_multi)(const QWeight& w, const QActs& a, float* y, int64_t ldy) = nullptr;
  ActLayout q8_multi_layout = ActLayout::Plain;
  // Optional: quantize_acts in SIMD, the same bytes and floats.
  QActs (*quantize)(const float* x, int64_t nrows, int64_t cols, ActLayout layout, uint8_t* q, float* scale,
                    int32_t* sum8) = nullptr;
  // Optional: a blocked int8 kernel for prefill-sized calls (packed weight
  // tiles, register-blocked rows x columns), on q8_multi_layout's
  // activations; the same results bit for bit.
  void (*gemm_q8_packed)(const QWeight& w, const QActs& a, float* y, int64_t ldy) = nullptr;
  // Optional: the same for int4 weights (unpacked to int8 values while
  // packing), also on q8_multi_layout's activations; the same results bit
  // for bit as gemm_q4.
  void (*gemm_q4_packed)(const QWeight& w, const QActs& a, float* y, int64_t ldy) = nullptr;
  // The dequantizing kernels above (the scalar references unless a path
  // sets its own).
  void (*deq_axpy)(const QWeight& w, const float* a, int64_t lda, int64_t nrows, float* y,
                   int64_t ldy) = deq_axpy_ref;
  void (*deq_gemm)(const QWeight& w, const float* x, int64_t nrows, float* y, int64_t ldy) = deq_gemm_ref;
  // The key-set kernels above (the scalar references unless a path sets its
  // own).
  void (*gemm_f32_rows)(FRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y,
                        int64_t ldy) = gemm_f32_rows_ref;
  void (*wsum_f32)(const float* p, int64_t ldp, int64_t nh, FRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                   int64_t ldy, bool acc) = wsum_f32_ref;
  void (*gemm_f16_rows)(HRows w, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y,
                        int64_t ldy) = gemm_f16_rows_ref;
  void (*gemm_f32_lanes)(const float* t, int64_t nw, int64_t cols, const float* x, int64_t nrows, float* y,
                         int64_t ldy) = gemm_f32_lanes_ref;
  void (*wsum_f16)(const float* p, int64_t ldp, int64_t nh, HRows v, int64_t K, int64_t c0, int64_t c1, float* y,
                   int64_t ldy, bool acc) = wsum_f16_ref;
  // gemm_f16_rows and wsum_f16 widen the halves in registers (AVX-512's
  // vcvtph2ps); false where they convert blocks into a buffer first (the
  // *_via templates), and a caller that reads the same keys for many rows
  // does better converting them once.
  bool halves_in_registers = false;
  // Elementwise exps (ops.h): y[i] = std::exp(x[i]) (the tests' view of
  // the exp itself); softmax(); g[i] = silu(g[i]) * u[i]. The AVX-512 paths
  // compute glibc's expf bit for bit (docs/kernels.md, "exp in SIMD"); the
  // others call std::exp.
  void (*exp_f32)(const float* x, float* y, int64_t n) = exp_f32_ref;
  void (*softmax)(float* x, int64_t n) = strata::softmax;  // ops.h's, not this member
  void (*silu_mul)(float* g, const float* u, int64_t n) = silu_mul_ref;
  // y[i] = the f32 value of half x[i]: exact, so every path's floats agree.
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n) = f16_to_f32_ref;
};

// The table of a path; the path must be supported (kernel_path_supported).
const KernelTable& kernel_table(KernelPath p);

// Per-path tables (qgemm_<path>.cpp).
const KernelTable& kernel_table_scalar();
const KernelTable& kernel_table_avx2();
const KernelTable& kernel_table_avx512();
const KernelTable& kernel_table_avx512vnni();
// AArch64 builds only (qgemm_neon*.cpp): baseline Advanced SIMD, + SDOT, + SMMLA.
const KernelTable& kernel_table_neon();
const KernelTable& kernel_table_neon_dotprod();
const KernelTable& kernel_table_neon_i8mm();

}  // namespace strata
