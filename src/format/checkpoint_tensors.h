// Reading checkpoint tensors as strata weights: a 2-D tensor keeps its
// stored format (bf16, f32, block-FP8 with its scales; f16 becomes f32),
// vectors become f32. Every shape and dtype is checked against what the
// caller expects, and errors name the file and tensor.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/weight.h"
#include "format/safetensors.h"

namespace strata {

// Loads a 2-D weight `name` (bf16, f16, f32, or F8_E4M3 with a
// `<module>.weight_scale_inv` beside it), checking its shape against
// [rows, cols]. block_* are the FP8 block size from the config.
Weight load_weight(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols,
                   int64_t block_rows = 128, int64_t block_cols = 128);

// Loads a vector or matrix of any float dtype as f32 (norms, biases,
// embeddings when small), checking the shape.
std::vector<float> load_f32(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape);

}  // namespace strata
