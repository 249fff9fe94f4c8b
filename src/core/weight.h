// Immutable weight matrices with a format tag. A matrix keeps the format it
// was stored in (f32, bf16, block-FP8); kernels are chosen by format, and a
// row can always be expanded to f32 by the scalar reference `row_f32`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>


namespace strata {

enum class WeightFormat : uint8_t { F32, BF16, FP8_BLOCK, INT8, INT4 };
const char* weight_format_name(WeightFormat f);

struct Weight {
  std::string name;
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0;  // output features (nn.Linear weight is [out, in])
  int64_t cols = 0;  // input features
  // Row-major elements of the format (INT4: two per byte, rows padded to
  // whole bytes) and scales, owned here or viewed in memory owned elsewhere
  // (an expert cache slot, a mapped container): use q() and s().
  std::vector<uint8_t> data;
  std::vector<float> scales;
  const uint8_t* view_data = nullptr;
  const float* view_scales = nullptr;
  size_t view_bytes = 0;
  // INT8/INT4 only: the group scales are bf16 (scales16 / view_scales16, read
  // with s16()) instead of f32. Each is the f32 value bf16_to_f32 gives, so a
  // matrix computes the same floats whichever way its scales are stored.
  bool scales_bf16 = false;
  std::vector<uint16_t> scales16;
  const uint16_t* view_scales16 = nullptr;
  // FP8_BLOCK: scale per (block_rows x block_cols) block, [ceil(rows/br), ceil(cols/bc)].
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  // INT8/INT4: scales [rows, groups]; group 0 = one scale per row.
  int64_t group = 0;

  const uint8_t* q() const { return view_data ? view_data : data.data(); }
  const float* s() const { return view_scales ? view_scales : scales.data(); }
  const uint16_t* s16() const { return view_scales16 ? view_scales16 : scales16.data(); }
  // Group scale g of row r of an INT8/INT4 matrix, as f32 (either storage).
  float scale_at(int64_t r, int64_t g) const;
  bool empty() const { return rows == 0; }
  // Expands row r to f32: exact for f32/bf16/fp8, the scalar dequantization
  // reference for the integer formats.
  void row_f32(int64_t r, float* out) const;
  size_t bytes() const {
    return view_data ? view_bytes : data.size() + scales.size() * sizeof(float) + scales16.size() * sizeof(uint16_t);
  }
  // A view of the first n rows (1..rows; FP8_BLOCK: a multiple of
  // block_rows, or all of them): the same bytes, valid while this lives.
  Weight row_prefix(int64_t n) const;
};

// A SwiGLU MLP, down(silu(gate x) * up x): a dense layer's MLP, a shared
// expert, or one routed expert (what an ExpertStore hands out).
struct MlpWeights {
  Weight gate, up, down;
  size_t bytes() const { return gate.bytes() + up.bytes() + down.bytes(); }
};

}  // namespace strata
