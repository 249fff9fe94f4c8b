// config.json and generation_config.json: JSON text -> ModelConfig /
// GenerationConfig, validated (core/config.h, text/generation_config.h).
#include "core/config.h"
#include "core/error.h"
#include "core/json.h"
#include "fuzz_util.h"
#include "text/generation_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  Json j;
  try {
    j = parse_json(fuzz::as_text(data, size), "config.json");
  } catch (const Error&) {
    return 0;
  }
  try {
    const ModelConfig c = parse_model_config(j, "config.json");
    // What the engine derives from a config it accepted.
    for (int64_t l = 0; l < c.num_weight_layers(); ++l) (void)c.is_moe(l), (void)c.indexer_full(l);
    (void)c.qk_head_dim();
  } catch (const Error&) {
  }
  try {
    (void)parse_generation_config(j, "generation_config.json");
  } catch (const Error&) {
  }
  return 0;
}
