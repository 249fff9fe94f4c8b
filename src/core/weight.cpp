#include "core/weight.h"

#include <cmath>

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
      dequantize_row(b, group, base + r * quant_row_bytes(b, cols), s() + r * quant_groups(cols, group), cols, out);
      break;
    }
  }
}

}  // namespace strata
