#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/numeric.h"
#include "kernels/qgemm.h"
#include "core/quant.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/matmul_pool.h"

namespace strata {

namespace {

// Every fp8 code's value, so expanding a row is a table lookup (the same
// floats as fp8e4m3_to_f32).
struct Fp8Table {
  float v[256];
  Fp8Table() {
    for (int b = 0; b < 256; ++b) v[b] = fp8e4m3_to_f32(static_cast<uint8_t>(b));
  }
};

// Row r of W as f32: what Weight::row_f32 returns, faster for fp8.
void expand_row(const Weight& W, int64_t r, float* out) {
  if (W.format != WeightFormat::FP8_BLOCK) {
    W.row_f32(r, out);
    return;
  }
  static const Fp8Table lut;
  const uint8_t* p = W.q() + r * W.cols;
  const float* srow = W.s() + (r / W.block_rows) * ((W.cols + W.block_cols - 1) / W.block_cols);
  for (int64_t c0 = 0, bi = 0; c0 < W.cols; c0 += W.block_cols, ++bi) {
    const int64_t c1 = std::min(W.cols, c0 + W.block_cols);
    const float s = srow[bi];
    for (int64_t c = c0; c < c1; ++c) out[c] = lut.v[p[c]] * s;
  }
}

// Output rows in pieces of whole kRowGrain rows (a multiple of every
// kernel's row tile), balanced between the threads at run time
// (ThreadPool::parallel_for_balanced): every row is computed the same in
// any piece, so the floats do not depend on who ran what.
constexpr int64_t kRowGrain = 16;

template <typename Body>
void run(ThreadPool* pool, bool parallel, int64_t n, const Body& body) {
  if (parallel)
    pool->parallel_for_balanced(n, kRowGrain, body);
  else
    body(0, n);
}

// The same, passing the part number (the index of per-part scratch).
template <typename Body>
void run_parts(ThreadPool* pool, bool parallel, int64_t n, const Body& body) {
  if (parallel)
    pool->parallel_parts(n, body);
  else
    body(0, 0, n);
}

// The activation layout and kernel for an integer weight w over nrows rows
// (group 0 or a multiple of 32).
IntMatmul pick_int(const Compute& c, const QWeight& w, int64_t nrows, ActLayout& layout) {
  const KernelTable& kt = c.kernels();
  const bool b4 = w.bits == 4;
  const bool multi = !b4 && kt.gemm_q8_multi && nrows >= 2 && c.multi_row();
  // The packed kernel (ComputeOptions::packed, the default) from 12 rows
  // on: below that its per-call weight packing costs more than the
  // register blocking gains (docs/kernels.md). Either gives the same floats.
  const bool packed = c.packed() && c.multi_row() && nrows >= 12 &&
                      (b4 ? kt.gemm_q4_packed != nullptr : multi && kt.gemm_q8_packed != nullptr);
  layout = packed || multi ? kt.q8_multi_layout : b4 ? kt.q4_layout : kt.q8_layout;
  IntMatmul p;
  p.w = w;
  p.gemm = packed ? (b4 ? kt.gemm_q4_packed : kt.gemm_q8_packed)
           : b4   ? kt.gemm_q4
           : multi ? kt.gemm_q8_multi
                   : kt.gemm_q8;
  return p;
}

// What quantize_acts returns for nrows rows of cols columns in q/scale/sum8.
QActs qacts_in(int64_t nrows, int64_t cols, uint8_t* q, float* scale, int32_t* sum8) {
  QActs a;
  a.nrows = nrows;
  a.cols = cols;
  a.nblocks = (cols + kQBlock - 1) / kQBlock;
  a.qstride = qacts_qstride(cols);
  a.bstride = qacts_bstride(cols);
  a.q = q;
  a.scale = scale;
  a.sum8 = sum8;
  return a;
}

// Rows [r0, r1) of one quantization job.
void quantize_part(const KernelTable& kt, const QuantJob& j, int64_t r0, int64_t r1) {
  const int64_t qs = qacts_qstride(j.cols), bs = qacts_bstride(j.cols);
  (kt.quantize ? kt.quantize : quantize_acts)(j.x + r0 * j.cols, r1 - r0, j.cols, j.layout, j.q + r0 * qs,
                                              j.scale + r0 * bs, j.sum8 + r0 * bs);
}

// Below this many activation values in all, quantizing on the caller alone
// costs less than a pool job (a 2048-column row is ~1 us).
constexpr int64_t kQuantParallelValues = 16384;

// Quantizes every job's rows, over the pool's threads when there are enough
// (and the pool is not running a job already: matmul() and matmul_batch()
// are called from outside pool jobs). Each row is quantized alone, so the
// bytes and scales do not depend on who quantized which rows. rows: scratch
// for the jobs' first rows in the joint range.
void quantize_jobs(const Compute& c, std::span<const QuantJob> jobs, std::vector<int64_t>& rows) {
  const KernelTable& kt = c.kernels();
  rows.clear();
  rows.push_back(0);
  int64_t values = 0;
  for (const QuantJob& j : jobs) {
    rows.push_back(rows.back() + j.nrows);
    values += j.nrows * j.cols;
  }
  ThreadPool* pool = c.pool();
  if (!pool || pool->size() < 2 || rows.back() < 2 || values < kQuantParallelValues) {
    for (const QuantJob& j : jobs) quantize_part(kt, j, 0, j.nrows);
    return;
  }
  pool->parallel_for_balanced(rows.back(), 1, [&](int64_t b, int64_t e) {
    size_t i = static_cast<size_t>(std::upper_bound(rows.begin(), rows.end(), b) - rows.begin()) - 1;
    for (; b < e; ++i) {
      const int64_t r1 = std::min(e, rows[i + 1]);
      quantize_part(kt, jobs[i], b - rows[i], r1 - rows[i]);
      b = r1;
    }
  });
}

// Quantizes x into q/scale/sum8 (room for nrows rows of w.cols columns) on
// the calling thread and picks the kernel for the integer weight rows w;
// y row r at y + r * ldy.
void plan_int(const Compute& c, const QWeight& w, const float* x, int64_t nrows, float* y, int64_t ldy, uint8_t* q,
              float* scale, int32_t* sum8, IntMatmul& p) {
  ActLayout layout;
  p = pick_int(c, w, nrows, layout);
  quantize_part(c.kernels(), QuantJob{x, nrows, w.cols, layout, q, scale, sum8}, 0, nrows);
  p.a = qacts_in(nrows, w.cols, q, scale, sum8);
  p.y = y;
  p.ldy = ldy;
}

// Output rows [o0, o1) of a planned integer matmul.
void run_int_rows(const IntMatmul& p, int64_t o0, int64_t o1) {
  QWeight part = p.w;
  part.q += o0 * p.w.row_bytes;
  if (part.sb)
    part.sb += o0 * p.w.ngroups;
  else
    part.s += o0 * p.w.ngroups;
  part.rows = o1 - o0;
  p.gemm(part, p.a, p.y + o0, p.ldy);
}

}  // namespace

void MatmulScratch::reserve(int64_t nrows, int64_t cols) {
  const size_t qn = static_cast<size_t>(nrows * qacts_qstride(cols)), bn = static_cast<size_t>(nrows * qacts_bstride(cols));
  if (q.size() < qn) q.resize(qn);
  if (scale.size() < bn) scale.resize(bn), sum8.resize(bn);
  job_rows.reserve(2);  // quantize_jobs' split of one job
}

std::optional<ActLayout> int_act_layout(const Compute& c, const Weight& W, int64_t nrows) {
  if (!has_int_kernel(c, W) || W.rows <= 0) return std::nullopt;
  ActLayout layout;
  pick_int(c, qweight_rows(W, 0, W.rows), nrows, layout);
  return layout;
}

namespace {
void size_qrows(int64_t nrows, int64_t cols, QRows& out) {
  const size_t qn = static_cast<size_t>(nrows * qacts_qstride(cols)), bn = static_cast<size_t>(nrows * qacts_bstride(cols));
  if (out.q.size() < qn) out.q.resize(qn);
  if (out.scale.size() < bn) out.scale.resize(bn), out.sum8.resize(bn);
  out.a = qacts_in(nrows, cols, out.q.data(), out.scale.data(), out.sum8.data());
}
}  // namespace

void quantize_rows(const Compute& c, const float* x, int64_t nrows, int64_t cols, ActLayout layout, QRows& out) {
  size_qrows(nrows, cols, out);
  const QuantJob j{x, nrows, cols, layout, out.q.data(), out.scale.data(), out.sum8.data()};
  if (nrows > 0) quantize_jobs(c, std::span<const QuantJob>(&j, 1), out.job_rows);
}

void copy_qrows(const QActs& src, const int32_t* rows, int64_t n, QRows& out) {
  size_qrows(n, src.cols, out);
  const int64_t qs = src.qstride, bs = src.bstride;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows[i];
    if (r < 0 || r >= src.nrows) fail("copy_qrows: row {} of {}", r, src.nrows);
    std::memcpy(out.q.data() + i * qs, src.q + r * qs, static_cast<size_t>(qs));
    std::memcpy(out.scale.data() + i * bs, src.scale + r * bs, static_cast<size_t>(bs) * sizeof(float));
    std::memcpy(out.sum8.data() + i * bs, src.sum8 + r * bs, static_cast<size_t>(bs) * sizeof(int32_t));
  }
}

bool has_int_kernel(const Compute& c, const Weight& W) {
  if (W.format != WeightFormat::INT8 && W.format != WeightFormat::INT4) return false;
  if (W.group != 0 && W.group % kQBlock != 0) return false;
  return c.acts() != IntActivations::F32;
}

void matmul_qrows(const Compute& c, const QWeight& w, const float* x, int64_t nrows, float* y, int64_t ldy,
                  MatmulScratch& scratch) {
  if (nrows <= 0 || w.rows <= 0) return;
  if (w.group != 0 && w.group % kQBlock != 0) fail("matmul_qrows: group {} is not 0 or a multiple of {}", w.group, kQBlock);
  scratch.reserve(nrows, w.cols);
  IntMatmul p;
  plan_int(c, w, x, nrows, y, ldy, scratch.q.data(), scratch.scale.data(), scratch.sum8.data(), p);
  run_int_rows(p, 0, w.rows);
}

Compute::Compute(ThreadPool* pool, const ComputeOptions& o)
    : pool_(pool), path_(o.path.value_or(best_kernel_path())), acts_(o.acts), multi_row_(o.multi_row), packed_(o.packed) {
  if (!kernel_path_supported(path_))
    fail("kernel path {}: this CPU cannot run it (best available: {}; {})", kernel_path_name(path_),
         kernel_path_name(best_kernel_path()), kernel_description(best_kernel_path()));
  kt_ = &kernel_table(path_);
}

float Compute::dot(const float* a, const float* b, int64_t n) const { return kt_->dot_f32(a, b, n); }

float dot_f32(const float* a, const float* b, int64_t n) { return kernel_table_scalar().dot_f32(a, b, n); }

void matmul(const Compute& c, const Weight& W, const float* x, int64_t nrows, float* y) {
  MatmulScratch s;
  matmul(c, W, x, nrows, y, s);
}

void matmul(const Compute& c, const Weight& W, const float* x, int64_t nrows, float* y, MatmulScratch& scratch) {
  const int64_t out = W.rows, in = W.cols;
  if (nrows <= 0 || out <= 0) return;
  const KernelTable& kt = c.kernels();
  ThreadPool* pool = c.pool();
  const bool par = pool && pool->size() > 1 && matmul_on_pool(out, in, nrows);
  switch (W.format) {
    case WeightFormat::F32: {
      const float* w = reinterpret_cast<const float*>(W.q());
      run(pool, par, out,
          [&](int64_t o0, int64_t o1) { kt.gemm_f32(w + o0 * in, o1 - o0, in, x, nrows, y + o0, out); });
      return;
    }
    case WeightFormat::BF16: {
      const uint16_t* w = reinterpret_cast<const uint16_t*>(W.q());
      run(pool, par, out,
          [&](int64_t o0, int64_t o1) { kt.gemm_bf16(w + o0 * in, o1 - o0, in, x, nrows, y + o0, out); });
      return;
    }
    case WeightFormat::INT8:
    case WeightFormat::INT4: {
      if (!has_int_kernel(c, W)) break;  // no integer kernel: expand below
      scratch.reserve(nrows, in);
      ActLayout layout;
      IntMatmul p = pick_int(c, qweight_rows(W, 0, out), nrows, layout);
      p.a = qacts_in(nrows, in, scratch.q.data(), scratch.scale.data(), scratch.sum8.data());
      p.y = y;
      p.ldy = out;
      const QuantJob j{x, nrows, in, layout, scratch.q.data(), scratch.scale.data(), scratch.sum8.data()};
      quantize_jobs(c, std::span<const QuantJob>(&j, 1), scratch.job_rows);
      run(pool, par, out, [&](int64_t o0, int64_t o1) { run_int_rows(p, o0, o1); });
      return;
    }
    case WeightFormat::FP8_BLOCK: break;
  }
  // Formats without a direct kernel: expand a few rows to f32, then the f32 kernel.
  constexpr int64_t kRows = 4;
  const size_t parts = static_cast<size_t>(par ? pool->size() : 1);
  if (scratch.rows.size() < parts) scratch.rows.resize(parts);
  run_parts(pool, par, out, [&](int part, int64_t o0, int64_t o1) {
    std::vector<float>& buf = scratch.rows[static_cast<size_t>(part)];
    if (static_cast<int64_t>(buf.size()) < kRows * in) buf.resize(static_cast<size_t>(kRows * in));
    for (int64_t o = o0; o < o1; o += kRows) {
      const int64_t n = std::min(kRows, o1 - o);
      for (int64_t i = 0; i < n; ++i) expand_row(W, o + i, buf.data() + i * in);
      kt.gemm_f32(buf.data(), n, in, x, nrows, y + o, out);
    }
  });
}

QWeight qweight_rows(const Weight& W, int64_t r0, int64_t n) {
  const bool b4 = W.format == WeightFormat::INT4;
  QWeight qw;
  qw.cols = W.cols;
  qw.bits = b4 ? 4 : 8;
  qw.row_bytes = quant_row_bytes(b4 ? QuantBits::Int4 : QuantBits::Int8, W.cols);
  qw.group = W.group;
  qw.ngroups = quant_groups(W.cols, W.group);
  qw.q = W.q() + r0 * qw.row_bytes;
  if (W.scales_bf16)
    qw.sb = W.s16() + r0 * qw.ngroups;
  else
    qw.s = W.s() + r0 * qw.ngroups;
  qw.rows = n;
  return qw;
}

}  // namespace strata

namespace strata {

void MatmulBatchScratch::reserve(size_t tasks, int64_t rows, int64_t cols) {
  const size_t qn = static_cast<size_t>(rows * qacts_qstride(cols)), bn = static_cast<size_t>(rows * qacts_bstride(cols));
  if (q.size() < qn) q.resize(qn);
  if (scale.size() < bn) scale.resize(bn), sum8.resize(bn);
  plans.reserve(tasks);
  first.reserve(tasks + 1);
  quant.reserve(tasks);
  quant_rows.reserve(tasks + 1);
}

void matmul_batch(const Compute& c, std::span<const MatmulTask> tasks, MatmulBatchScratch& scratch) {
  // Every integer task's activations, one after another in one buffer.
  size_t qn = 0, bn = 0;
  for (const MatmulTask& t : tasks)
    if (t.nrows > 0 && t.w->rows > 0 && !t.qx && has_int_kernel(c, *t.w)) {
      qn += static_cast<size_t>(t.nrows * qacts_qstride(t.w->cols));
      bn += static_cast<size_t>(t.nrows * qacts_bstride(t.w->cols));
    }
  if (scratch.q.size() < qn) scratch.q.resize(qn);
  if (scratch.scale.size() < bn) scratch.scale.resize(bn), scratch.sum8.resize(bn);
  std::vector<IntMatmul>& plans = scratch.plans;
  std::vector<int64_t>& first = scratch.first;
  std::vector<QuantJob>& quant = scratch.quant;
  plans.clear();
  first.clear();
  quant.clear();
  first.push_back(0);
  qn = bn = 0;
  for (const MatmulTask& t : tasks) {
    if (t.nrows <= 0 || t.w->rows <= 0) continue;
    if (!has_int_kernel(c, *t.w)) {
      if (t.qx) fail("matmul_batch: quantized activations given for a weight without an integer kernel");
      matmul(c, *t.w, t.x, t.nrows, t.y, scratch.fallback);
      continue;
    }
    ActLayout layout;
    IntMatmul p = pick_int(c, qweight_rows(*t.w, 0, t.w->rows), t.nrows, layout);
    if (t.qx) {
      if (t.qx->nrows != t.nrows || t.qx->cols != t.w->cols)
        fail("matmul_batch: quantized activations of {} x {} for {} rows of {} columns", t.qx->nrows, t.qx->cols,
             t.nrows, t.w->cols);
      p.a = *t.qx;
      p.y = t.y;
      p.ldy = t.w->rows;
      plans.push_back(p);
      first.push_back(first.back() + t.w->rows);
      continue;
    }
    // Tasks next to each other on the same rows in the same layout (an
    // MLP's gate and up) share one quantization: the same bytes either way.
    const QuantJob* prev = quant.empty() ? nullptr : &quant.back();
    if (!prev || prev->x != t.x || prev->nrows != t.nrows || prev->cols != t.w->cols || prev->layout != layout) {
      quant.push_back({t.x, t.nrows, t.w->cols, layout, scratch.q.data() + qn, scratch.scale.data() + bn,
                       scratch.sum8.data() + bn});
      qn += static_cast<size_t>(t.nrows * qacts_qstride(t.w->cols));
      bn += static_cast<size_t>(t.nrows * qacts_bstride(t.w->cols));
      prev = &quant.back();
    }
    p.a = qacts_in(t.nrows, t.w->cols, prev->q, prev->scale, prev->sum8);
    p.y = t.y;
    p.ldy = t.w->rows;
    plans.push_back(p);
    first.push_back(first.back() + t.w->rows);
  }
  quantize_jobs(c, quant, scratch.quant_rows);
  const int64_t total = first.back();
  if (total == 0) return;
  // Output rows [b, e) of the joint range, task by task.
  const auto body = [&](int64_t b, int64_t e) {
    size_t i = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), b) - first.begin()) - 1;
    for (; b < e; ++i) {
      const int64_t o1 = std::min(e, first[i + 1]);
      run_int_rows(plans[i], b - first[i], o1 - first[i]);
      b = o1;
    }
  };
  ThreadPool* pool = c.pool();
  int64_t madds = 0;
  for (size_t i = 0; i < plans.size(); ++i) madds += plans[i].w.rows * plans[i].w.cols * plans[i].a.nrows;
  run(pool, pool && pool->size() > 1 && madds > kMatmulParallelMadds, total, body);
}

}  // namespace strata
