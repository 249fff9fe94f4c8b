// The conversion plan (`strata convert`, format/convert.h): every output
// byte's place, computed from the checkpoint headers, config.json and the
// options before anything is written -- which tensor goes into which file, at
// which offset, in which precision. Planning also checks every source
// tensor's presence, shape and dtype, so a conversion that cannot finish
// fails before it writes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/json.h"
#include "core/weight.h"
#include "format/container.h"
#include "format/convert.h"
#include "format/safetensors.h"

// The conversion's internals, shared by convert.cpp and convert_state.cpp.
namespace strata::conversion {

constexpr const char* kDenseFile = "dense.bin";
// Copied verbatim from the checkpoint when present.
inline constexpr const char* kCopiedFiles[] = {"config.json", "generation_config.json", "tokenizer.json",
                                               "tokenizer_config.json", "chat_template.jinja"};

struct DenseItem {
  std::string name;  // manifest key == checkpoint tensor name
  bool vector = false;
  int64_t rows = 0, cols = 0;
  TensorRecord rec;
  uint64_t src_bytes = 0;
};

struct ExpertItem {
  std::string prefix;  // "model.layers.L.mlp.experts."
  ExpertLayerRecord rec;
  uint64_t src_bytes = 0;  // all experts together
};

enum class FileKind { Dense, Experts, Copy };

struct FileItem {
  std::string name;
  FileKind kind = FileKind::Dense;
  size_t index = 0;  // into Plan::experts for Experts
  uint64_t bytes = 0;
  uint64_t src_bytes = 0;
};

struct Plan {
  ModelConfig cfg;
  Json config_json, options, source;
  std::vector<DenseItem> dense;
  std::vector<ExpertItem> experts;
  std::vector<FileItem> files;
  std::vector<std::string> unused;
  uint64_t total_src = 0;
};

inline bool is_int(WeightFormat f) { return f == WeightFormat::INT8 || f == WeightFormat::INT4; }

// Reads DIR/config.json and the checkpoint's headers; throws strata::Error
// naming the file and tensor when the checkpoint does not fit the config.
Plan make_plan(const Checkpoint& ck, const ConvertOptions& o);
// The same layout from DIR/config.json alone (no weights needed: `strata
// plan`): every file's size and every record's place are those make_plan
// gives for a checkpoint of that config; nothing is checked against source
// tensors, source byte counts are 0, and each MoE layer is assumed to have
// its e_score_correction_bias (as every glm_moe_dsa checkpoint does).
Plan make_plan_from_config(const ConvertOptions& o);

}  // namespace strata::conversion
