// The strata container: a converted model directory.
//
//   manifest.json      format, version, source identity (config_xxh3), conversion options, the
//                      model config, every file (size + XXH3-64) and every tensor
//                      (format tag, shape, file, offsets) -- the engine never
//                      guesses a format from byte arithmetic.
//   dense.bin          every tensor except the routed experts, each 64-aligned.
//   experts-LLL.bin    the routed experts of layer LLL: expert e at e * stride,
//                      stride a multiple of 4096; gate, up, down adjacent in one
//                      blob, so one read (O_DIRECT-capable) fetches an expert.
//   config.json, tokenizer files, generation_config.json: copied from the source.
//
// The manifest is written last (temp file + rename): a directory without one
// is an unfinished conversion and is refused. See docs/container.md.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/weight.h"
#include "core/json.h"

namespace strata {

constexpr const char* kContainerFormat = "strata-container";
constexpr int kContainerVersion = 1;
constexpr uint64_t kTensorAlign = 64;
constexpr uint64_t kExpertAlign = 4096;

// A weight's bytes: data then scales (for int8/int4/fp8), offsets absolute in
// `file` for dense tensors, relative to the expert blob for expert parts.
struct TensorRecord {
  WeightFormat format = WeightFormat::F32;
  int64_t group = 0;        // int8/int4: 0 = per row, else columns per scale
  bool scales_bf16 = false; // int8/int4: scales stored as bf16 ("scales": "bf16"), else f32
  int64_t block_rows = 0;   // fp8-block
  int64_t block_cols = 0;
  std::vector<int64_t> shape;  // [rows, cols] for matrices, [n] for vectors (f32 only)
  std::string file;            // dense tensors only
  uint64_t offset = 0, bytes = 0;
  uint64_t scales_offset = 0, scales_bytes = 0;
  uint64_t xxh = 0;  // XXH3-64 of data then scales (dense tensors)
};

struct ExpertLayerRecord {
  int64_t layer = 0;
  std::string file;
  int64_t count = 0;
  uint64_t stride = 0;      // multiple of kExpertAlign
  uint64_t blob_bytes = 0;  // bytes of one expert actually used (<= stride)
  TensorRecord gate, up, down;
  std::vector<uint64_t> xxh;  // XXH3-64 of each expert's blob_bytes
};

struct FileRecord {
  std::string name;
  uint64_t bytes = 0;
  uint64_t xxh = 0;  // XXH3-64 of the whole file
};

struct Manifest {
  int version = kContainerVersion;
  Json source;   // {"dir":..., "config_xxh":..., "files":[{"name","bytes"}]}
  Json options;  // conversion options, recorded for --resume and for users
  Json config;   // the model's config.json
  std::vector<FileRecord> files;
  std::map<std::string, TensorRecord> tensors;
  std::vector<ExpertLayerRecord> expert_layers;
};

// Bytes a tensor of this format and shape needs: {data, scales}; scale_bytes
// is the size of one int8/int4 group scale (4: f32, 2: bf16).
std::pair<uint64_t, uint64_t> tensor_bytes(WeightFormat f, int64_t rows, int64_t cols, int64_t group,
                                           int64_t block_rows, int64_t block_cols, int scale_bytes = 4);

Json manifest_to_json(const Manifest& m);
// Validates every field (formats known, sizes consistent with shapes, spans
// inside their files as listed); `origin` names the file in messages.
Manifest manifest_from_json(const Json& j, const std::string& origin);
Manifest read_manifest(const std::string& dir);
// Writes dir/manifest.json atomically (temp file, fsync, rename, fsync of dir).
void write_manifest(const std::string& dir, const Manifest& m);

bool is_container(const std::string& dir);

// A Weight viewing a matrix record's bytes at `base` (the dense blob, or an
// expert blob for expert parts); the bytes must outlive the Weight.
Weight weight_view(const TensorRecord& t, const uint8_t* base, const std::string& name);

std::string xxh_hex(uint64_t h);
uint64_t parse_xxh_hex(const std::string& s, const std::string& what);

}  // namespace strata
