// A model's generation_config.json: the sampling defaults its authors chose
// and its end-of-sequence ids. Every field is optional; CLI flags override.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace strata {

struct GenerationConfig {
  std::optional<bool> do_sample;  // false: greedy whatever the temperature says (transformers' rule)
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::vector<int64_t> eos_token_ids;  // eos_token_id: an int or a list
};

// Parses and validates; `origin` names the file in error messages.
GenerationConfig parse_generation_config(const Json& j, const std::string& origin);
// Reads MODEL_DIR/generation_config.json; an absent file gives an empty config.
GenerationConfig load_generation_config(const std::string& model_dir);

}  // namespace strata
