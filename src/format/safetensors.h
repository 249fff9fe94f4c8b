// Reader for Hugging Face safetensors files and sharded checkpoints.
//
// Model files come from untrusted mirrors, so everything in the header is
// validated before it is used: header length against the file size and a cap,
// the type and arity of every field, the dtype, overflow-checked shape
// products that must equal the data_offsets span, spans inside the data area
// and not overlapping, and the JSON nesting depth. Every rejection names the
// file and the tensor.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/io.h"

namespace strata {

enum class DType : uint8_t { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, BOOL };

size_t dtype_size(DType d);
const char* dtype_name(DType d);

struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
  uint64_t begin = 0;  // byte span relative to the start of the data area
  uint64_t end = 0;
  uint64_t bytes() const { return end - begin; }
};

struct SafetensorsLimits {
  uint64_t max_header_bytes = 100ull << 20;
  int max_rank = 8;
  int64_t max_dim = int64_t{1} << 40;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path, const SafetensorsLimits& limits = {});
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* find(std::string_view name) const;
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }

  // Reads the tensor's bytes into dst (exactly t.bytes() bytes). Short reads
  // and EINTR are retried; failures name the file, offset and expected size.
  void read(const TensorEntry& t, void* dst) const;
  // Reads `n` bytes at `offset` within the tensor's span.
  void read_range(const TensorEntry& t, uint64_t offset, uint64_t n, void* dst) const;

 private:
  std::string path_;
  Fd fd_;
  uint64_t file_size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<TensorEntry> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// A checkpoint directory: `model.safetensors`, or shards listed by
// `model.safetensors.index.json`.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir, const SafetensorsLimits& limits = {});

  const std::string& dir() const { return dir_; }
  bool has(std::string_view name) const { return where_.count(std::string(name)) != 0; }
  // Throws naming the checkpoint and tensor if it is missing.
  const TensorEntry& entry(std::string_view name) const;
  const SafetensorsFile& file_of(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  size_t num_files() const { return files_.size(); }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, std::pair<size_t, const TensorEntry*>> where_;
};

}  // namespace strata
