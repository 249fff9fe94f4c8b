// Writes safetensors files (temp file + rename), for tools that produce
// Hugging Face checkpoints (strata dequantize) and for tests.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/safetensors.h"

namespace strata {

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // numel * dtype_size bytes, little-endian
};

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace strata
