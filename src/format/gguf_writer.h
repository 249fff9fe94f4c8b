// Writer for GGUF v3 files (the container llama.cpp loads).
//
// Layout, all little-endian: magic "GGUF", version 3, tensor count (u64),
// kv count (u64), the typed key/value pairs, the tensor infos (name, rank,
// dims innermost-first, ggml type, offset into the data area), padding to
// the alignment, then each tensor's bytes, each padded to the alignment.
//
// Shapes are given here in PyTorch order (outermost first, `[rows, cols]`);
// the writer reverses them into GGUF's innermost-first order. Tensor bytes
// are produced by a callback when the file is written, so a converter can
// stream a model larger than memory one tensor (or one row) at a time. The
// file is written under a temporary name and renamed into place only when it
// is complete.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// GGUF metadata value types (gguf.h `enum gguf_type`).
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

// The ggml tensor types this writer produces (ggml.h `enum ggml_type`).
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, BF16 = 30 };

// Bytes of one block, and elements per block (1 for the float types; 32 for
// Q8_0 and Q4_0, whose blocks run along the innermost dimension).
size_t ggml_type_size(GgmlType t);
int64_t ggml_block_elems(GgmlType t);
// One row of n floats (n a multiple of 32) as ggml blocks:
// Q8_0: f16 d = amax/127, 32 x int8 round(x/d);
// Q4_0: f16 d = (the value of largest magnitude)/-8, 16 bytes of nibbles
// clamp(floor(x/d + 8.5), 0, 15), element j in the low nibble of byte j, element j+16 in its high nibble.
void quantize_row_q8_0(const float* x, int64_t n, uint8_t* out);
void quantize_row_q4_0(const float* x, int64_t n, uint8_t* out);
const char* ggml_type_name(GgmlType t);

// f32 -> IEEE half, round to nearest even; overflow to inf, NaN kept NaN.
uint16_t f32_to_f16(float f);

class GgufWriter {
 public:
  static constexpr uint32_t kVersion = 3;
  static constexpr uint32_t kDefaultAlignment = 32;

  // Receives a tensor's bytes in order, in as many pieces as the producer likes.
  using Sink = std::function<void(const void* data, size_t n)>;
  // Produces exactly the tensor's byte size into the sink.
  using Producer = std::function<void(const Sink& sink)>;

  // `alignment` must be a power of two; anything but 32 is also recorded as
  // general.alignment so readers use it.
  explicit GgufWriter(uint32_t alignment = kDefaultAlignment);

  // Metadata. Keys are unique; adding one twice throws strata::Error.
  void add_u32(std::string_view key, uint32_t v);
  void add_i32(std::string_view key, int32_t v);
  void add_u64(std::string_view key, uint64_t v);
  void add_f32(std::string_view key, float v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_array_u32(std::string_view key, const std::vector<uint32_t>& v);
  void add_array_i32(std::string_view key, const std::vector<int32_t>& v);
  void add_array_f32(std::string_view key, const std::vector<float>& v);
  void add_array_bool(std::string_view key, const std::vector<bool>& v);
  void add_array_string(std::string_view key, const std::vector<std::string>& v);

  // Tensors, in file order. `shape` is PyTorch order (outermost first), 1 to
  // 4 dims, each >= 1. Names are unique and at most 63 bytes (ggml's limit).
  void add_tensor(std::string name, std::vector<int64_t> shape, GgmlType type, Producer produce);
  // Convenience: the bytes are already in memory (copied).
  void add_tensor(std::string name, std::vector<int64_t> shape, GgmlType type, std::vector<uint8_t> bytes);
  // Convenience: f32 values, stored as `type` (F32, F16 or BF16), converted on write.
  void add_tensor_f32(std::string name, std::vector<int64_t> shape, GgmlType type, std::vector<float> values);

  size_t num_tensors() const { return tensors_.size(); }
  size_t num_kv() const { return kv_.size(); }
  bool has_key(std::string_view key) const;
  bool has_tensor(std::string_view name) const;
  uint32_t alignment() const { return alignment_; }

  // Writes the whole file to `path` via `path.tmp.<pid>` and rename. A
  // producer that delivers the wrong number of bytes, or any I/O failure,
  // throws strata::Error naming the file and tensor; the temp file is removed.
  void write(const std::string& path) const;

  // Bytes of one tensor's data (before alignment padding).
  static uint64_t tensor_bytes(const std::vector<int64_t>& shape, GgmlType type);

 private:
  struct Kv {
    std::string key;
    std::vector<uint8_t> encoded;  // type tag + value, serialized
  };
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;  // PyTorch order
    GgmlType type;
    uint64_t bytes = 0;
    uint64_t offset = 0;  // within the data area
    Producer produce;
  };

  Kv& new_kv(std::string_view key);

  uint32_t alignment_;
  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
  uint64_t data_size_ = 0;
};

}  // namespace strata
