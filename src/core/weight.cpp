#include "core/weight.h"

#include <cmath>
#include <vector>

#include "core/numeric.h"
#include "core/quant.h"
#include "core/error.h"

namespace strata {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::FP8_BLOCK: return "fp8-block";
    case WeightFormat::INT8: return "int8";
    case WeightFormat::INT4: return "int4";
  }
  return "?";
}

void Weight::row_f32(int64_t r, float* out) const {
  const size_t off = static_cast<size_t>(r) * static_cast<size_t>(cols);
  const uint8_t* base = q();
  switch (format) {
    case WeightFormat::F32: {
      const float* p = reinterpret_cast<const float*>(base) + off;
      for (int64_t c = 0; c < cols; ++c) out[c] = p[c];
      break;
    }
    case WeightFormat::BF16: {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(base) + off;
      for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(p[c]);
      break;
    }
    case WeightFormat::FP8_BLOCK: {
      const uint8_t* p = base + off;
      const int64_t nbc = (cols + block_cols - 1) / block_cols;
      const float* srow = s() + (r / block_rows) * nbc;
      for (int64_t c = 0; c < cols; ++c) out[c] = fp8e4m3_to_f32(p[c]) * srow[c / block_cols];
      break;
    }
    case WeightFormat::INT8:
    case WeightFormat::INT4: {
      const QuantBits b = format == WeightFormat::INT8 ? QuantBits::Int8 : QuantBits::Int4;
      const int64_t ng = quant_groups(cols, group);
      if (!scales_bf16) {
        dequantize_row(b, group, base + r * quant_row_bytes(b, cols), s() + r * ng, cols, out);
        break;
      }
      std::vector<float> sf(static_cast<size_t>(ng));
      for (int64_t g = 0; g < ng; ++g) sf[static_cast<size_t>(g)] = bf16_to_f32(s16()[r * ng + g]);
      dequantize_row(b, group, base + r * quant_row_bytes(b, cols), sf.data(), cols, out);
      break;
    }
  }
}

float Weight::scale_at(int64_t r, int64_t g) const {
  const int64_t i = r * quant_groups(cols, group) + g;
  return scales_bf16 ? bf16_to_f32(s16()[i]) : s()[i];
}

Weight Weight::row_prefix(int64_t n) const {
  if (n < 1 || n > rows) fail("{}: a view of the first {} rows of {}", name, n, rows);
  Weight v;
  v.name = name;
  v.format = format;
  v.rows = n;
  v.cols = cols;
  v.block_rows = block_rows;
  v.block_cols = block_cols;
  v.group = group;
  v.view_data = q();
  v.scales_bf16 = scales_bf16;
  if (scales_bf16)
    v.view_scales16 = s16();
  else
    v.view_scales = s();
  const size_t un = static_cast<size_t>(n), uc = static_cast<size_t>(cols);
  switch (format) {
    case WeightFormat::F32: v.view_bytes = un * uc * sizeof(float); break;
    case WeightFormat::BF16: v.view_bytes = un * uc * sizeof(uint16_t); break;
    case WeightFormat::FP8_BLOCK: {
      if (n != rows && n % block_rows != 0)
        fail("{}: a view of the first {} rows splits a {}-row scale block", name, n, block_rows);
      const size_t nbc = static_cast<size_t>((cols + block_cols - 1) / block_cols);
      v.view_bytes = un * uc + static_cast<size_t>((n + block_rows - 1) / block_rows) * nbc * sizeof(float);
      break;
    }
    case WeightFormat::INT8:
    case WeightFormat::INT4: {
      const QuantBits b = format == WeightFormat::INT8 ? QuantBits::Int8 : QuantBits::Int4;
      v.view_bytes = un * quant_row_bytes(b, cols) +
                     un * static_cast<size_t>(quant_groups(cols, group)) * (scales_bf16 ? sizeof(uint16_t) : sizeof(float));
      break;
    }
  }
  return v;
}

}  // namespace strata
