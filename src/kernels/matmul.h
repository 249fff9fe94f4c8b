// The one matrix-multiply interface every projection goes through, with
// kernels chosen by weight format and CPU path (kernels/qgemm.h,
// docs/kernels.md).
//
// Batch invariance: y[r][o] is computed by the same sequence of float
// operations whatever nrows is, whichever thread computes it and whichever
// CPU path runs: every SIMD path reproduces the scalar reference bit for bit.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/qgemm.h"
#include "core/weight.h"

namespace strata {

class ThreadPool;

// How integer weights meet the activations. Int8 (the default): x is
// quantized per 32-column block and multiplied in integers (W8A8, like
// llama.cpp's Q8_0 activations). F32: each weight row is dequantized to f32
// (Weight::row_f32) and dot16'ed with x, exactly the numbers of the model its
// dequantized weights define (W8A32), and several times slower (tests and
// quality comparisons).
enum class IntActivations : uint8_t { Int8, F32 };

struct ComputeOptions {
  std::optional<KernelPath> path;  // nullopt: the best path this CPU runs
  IntActivations acts = IntActivations::Int8;
  // false: int8 calls of 2+ rows use the single-row kernel (the same results
  // bit for bit; benchmarks compare the two).
  bool multi_row = true;
  // true: int8 calls of 2+ rows and >= 2048 columns take the packed,
  // blocked kernel (prefill GEMM) where the path has one, instead of the
  // multi-row kernel: the same results bit for bit, 1.7-2.7x faster on
  // prefill shapes (docs/kernels.md). false: the multi-row kernel (benchmarks).
  bool packed = true;
};

// What every matmul runs with, fixed when an engine (or a test) sets it up:
// the kernel table of one path, the activation mode and the pool. A value,
// not process state: two Computes with different paths can run side by side.
class Compute {
 public:
  // Throws strata::Error naming the path if this CPU cannot run it.
  explicit Compute(ThreadPool* pool, const ComputeOptions& o = {});
  ThreadPool* pool() const { return pool_; }
  const KernelTable& kernels() const { return *kt_; }
  KernelPath path() const { return path_; }
  IntActivations acts() const { return acts_; }
  bool multi_row() const { return multi_row_; }
  bool packed() const { return packed_; }
  // dot16 (below) on this path.
  float dot(const float* a, const float* b, int64_t n) const;

 private:
  ThreadPool* pool_;
  KernelPath path_;
  const KernelTable* kt_;
  IntActivations acts_;
  bool multi_row_;
  bool packed_;
};

// One activation quantization: nrows rows of x (cols columns each) into
// q / scale / sum8 (quantize_acts' buffers, rows qacts_qstride(cols) and
// qacts_bstride(cols) apart).
struct QuantJob {
  const float* x;
  int64_t nrows, cols;
  ActLayout layout;
  uint8_t* q;
  float* scale;
  int32_t* sum8;
};

// What one matmul call needs besides its operands: the quantized
// activations, and per pool part a few weight rows expanded to f32 (formats
// without a direct kernel). Grown on first use, then reused.
struct MatmulScratch {
  std::vector<uint8_t> q;          // [nrows, qacts_qstride(cols)]
  std::vector<float> scale;        // [nrows, qacts_bstride(cols)]
  std::vector<int32_t> sum8;       // [nrows, qacts_bstride(cols)]
  std::vector<std::vector<float>> rows;  // per part: [4, cols]
  std::vector<int64_t> job_rows;         // the quantization's split over the pool
  // Room for the quantized activations of nrows rows of cols columns.
  void reserve(int64_t nrows, int64_t cols);
};

// y[r*W.rows + o] = sum_i W[o][i] * x[r*W.cols + i] for r < nrows.
// f32/bf16/fp8: dot16 (below) of the f32 weight row and x's row. int8/int4:
// x's row is quantized to int8 in blocks of 32 columns and multiplied in
// integers (qgemm.h states the arithmetic, docs/kernels.md its error bound).
void matmul(const Compute& c, const Weight& W, const float* x, int64_t nrows, float* y, MatmulScratch& scratch);
// The same with scratch of its own (tests and tools; allocates per call).
void matmul(const Compute& c, const Weight& W, const float* x, int64_t nrows, float* y);

// Rows [r0, r0 + n) of an INT8/INT4 weight as the integer kernels see them.
QWeight qweight_rows(const Weight& W, int64_t r0, int64_t n);

// Whether matmul() multiplies W in integers (int8/int4 in groups of 0 or a
// multiple of 32, and c.acts() Int8).
bool has_int_kernel(const Compute& c, const Weight& W);
// y[r * ldy + o] = weight row o times x row r (x rows w.cols apart) for
// o < w.rows, r < nrows, on the calling thread: the activation quantization
// and kernel matmul() picks for an integer weight of w's rows, so the same
// floats as matmul() over a Weight holding just those rows (and in any row
// count). w.group 0 or a multiple of 32. For a weight's slices (the absorbed
// MLA's per-head W_UV): a pool part's own scratch.
void matmul_qrows(const Compute& c, const QWeight& w, const float* x, int64_t nrows, float* y, int64_t ldy,
                  MatmulScratch& scratch);

// One matmul of a batch (matmul_batch): y = W x over nrows rows.
// qx (optional): x already quantized, in the layout int_act_layout(c, *w,
// nrows) names (quantize_rows, or rows of it gathered by copy_qrows; x is
// then unused): a row going to several routed experts is quantized once.
// The same bytes as matmul_batch would quantize, so the same floats.
struct MatmulTask {
  const Weight* w;
  const float* x;
  int64_t nrows;
  float* y;
  const QActs* qx = nullptr;
};

// The activation layout matmul() quantizes nrows rows of x into for W, or
// nothing when W has no integer kernel (has_int_kernel).
std::optional<ActLayout> int_act_layout(const Compute& c, const Weight& W, int64_t nrows);
// Quantized rows, held: quantize_rows() fills them (over c's pool when
// there are enough values), copy_qrows() gathers rows of another.
struct QRows {
  std::vector<uint8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sum8;
  std::vector<int64_t> job_rows;
  QActs a;
};
void quantize_rows(const Compute& c, const float* x, int64_t nrows, int64_t cols, ActLayout layout, QRows& out);
// out = rows[0..n) of src, in that order (the same layout).
void copy_qrows(const QActs& src, const int32_t* rows, int64_t n, QRows& out);

// An integer matmul made ready to run: its weight, its quantized activations
// and the kernel, any contiguous range of output rows at a time.
struct IntMatmul {
  QWeight w;
  QActs a;
  void (*gemm)(const QWeight& w, const QActs& a, float* y, int64_t ldy) = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;  // y's row stride (matmul: w.rows)
};

// matmul_batch's scratch: every task's quantized activations in one buffer
// (grown only when a batch needs more than any before it), the plans, and
// matmul()'s scratch for tasks without an integer kernel.
struct MatmulBatchScratch {
  std::vector<uint8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sum8;
  std::vector<IntMatmul> plans;
  std::vector<int64_t> first;  // [tasks + 1]: each task's first output row in the joint range
  std::vector<QuantJob> quant;  // the distinct activation quantizations
  std::vector<int64_t> quant_rows;
  MatmulScratch fallback;
  // Room for `tasks` tasks whose activations total `rows` rows of `cols`
  // columns, so that batches within it allocate nothing.
  void reserve(size_t tasks, int64_t rows, int64_t cols);
};

// Several independent matmuls as one pool job over the output rows of all of
// them (a layer's experts at decode: one wake-up of the pool instead of one
// per matrix). Every y is the same, bit for bit, as matmul() computes it:
// the same activation quantization and kernel per task, and a kernel's row
// computes the same floats in any row range. Adjacent tasks on the same x
// rows and layout share one quantization, and the quantizations run as one
// pool job before the matmuls. Tasks without an integer kernel run one by
// one through matmul(). No task may write what another reads.
void matmul_batch(const Compute& c, std::span<const MatmulTask> tasks, MatmulBatchScratch& scratch);

// Fixed-order dot product (16 lanes, lane i % 16 accumulating with fused
// multiply-adds, then a fixed tree): the order every caller relies on.
// Every path computes the same float; this is the scalar reference's.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace strata
