#include "format/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "core/error.h"
#include "core/io.h"
#include "core/numeric.h"

namespace strata {

size_t ggml_type_size(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 4;
    case GgmlType::F16: return 2;
    case GgmlType::BF16: return 2;
    case GgmlType::Q8_0: return 34;
    case GgmlType::Q4_0: return 18;
  }
  return 0;
}

int64_t ggml_block_elems(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 ? 32 : 1; }

void quantize_row_q8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = f32_to_f16(d);
    std::memcpy(out, &h, 2);
    for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[j] * inv)));
  }
}

void quantize_row_q4_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 18) {
    float amax = 0.0f, extreme = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        extreme = x[j];
      }
    const float d = extreme / -8.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = f32_to_f16(d);
    std::memcpy(out, &h, 2);
    auto q = [&](float v) { return static_cast<uint8_t>(std::clamp(static_cast<int>(v * inv + 8.5f), 0, 15)); };
    for (int j = 0; j < 16; ++j) out[2 + j] = static_cast<uint8_t>(q(x[j]) | (q(x[j + 16]) << 4));
  }
}

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "f32";
    case GgmlType::F16: return "f16";
    case GgmlType::BF16: return "bf16";
    case GgmlType::Q8_0: return "q8_0";
    case GgmlType::Q4_0: return "q4_0";
  }
  return "?";
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u;  // NaN (quiet)
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {
    // Below the smallest normal half (2^-14): the unit of a half subnormal is
    // 2^-24, which is exactly the float ulp at 0.5, so adding 0.5 performs
    // the round-to-nearest-even for us.
    float a;
    std::memcpy(&a, &ax, 4);
    a += 0.5f;
    uint32_t u;
    std::memcpy(&u, &a, 4);
    return sign | static_cast<uint16_t>(u - 0x3f000000u);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to
  // nearest even; a mantissa carry correctly bumps the exponent.
  const uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000000u + 0xfffu + odd;
  return sign | static_cast<uint16_t>(ax >> 13);
}

namespace {

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  // resize + memcpy rather than insert: GCC 12 misreads the inlined range
  // insert into an empty vector as an overflow (-Wstringop-overflow).
  const size_t at = out.size();
  out.resize(at + n);
  if (n) std::memcpy(out.data() + at, p, n);
}
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  put_bytes(out, &v, sizeof v);  // the host is little-endian (x86-64/aarch64), as GGUF is
}
void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}
void put_type(std::vector<uint8_t>& out, GgufType t) { put<uint32_t>(out, static_cast<uint32_t>(t)); }

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Buffered writer on a file descriptor; errors name the file.
class OutFile {
 public:
  explicit OutFile(const std::string& path) : fd_(open_file(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) {
    buf_.reserve(kBuf);
  }
  void write(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    written_ += n;
    if (buf_.size() + n > kBuf) flush();
    if (n >= kBuf) {
      raw_write(b, n);
      return;
    }
    buf_.insert(buf_.end(), b, b + n);
  }
  void zeros(size_t n) {
    static const uint8_t z[64] = {};
    while (n > 0) {
      size_t k = n < sizeof z ? n : sizeof z;
      write(z, k);
      n -= k;
    }
  }
  uint64_t written() const { return written_; }
  void finish() {
    flush();
    fsync_file(fd_);
    fd_.close();
  }

 private:
  static constexpr size_t kBuf = 8u << 20;
  void flush() {
    raw_write(buf_.data(), buf_.size());
    buf_.clear();
  }
  void raw_write(const uint8_t* p, size_t n) {
    write_full(fd_, p, n, in_file_);
    in_file_ += n;
  }
  Fd fd_;
  std::vector<uint8_t> buf_;
  uint64_t written_ = 0;  // handed to write(), buffered or not
  uint64_t in_file_ = 0;  // written to the file
};

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    fail("GGUF alignment {} is not a power of two", alignment);
  if (alignment != kDefaultAlignment) add_u32("general.alignment", alignment);
}

bool GgufWriter::has_key(std::string_view key) const {
  for (const Kv& kv : kv_)
    if (kv.key == key) return true;
  return false;
}

bool GgufWriter::has_tensor(std::string_view name) const {
  for (const Tensor& t : tensors_)
    if (t.name == name) return true;
  return false;
}

GgufWriter::Kv& GgufWriter::new_kv(std::string_view key) {
  if (key.empty()) fail("GGUF metadata key is empty");
  if (has_key(key)) fail("GGUF metadata key \"{}\" added twice", key);
  kv_.push_back(Kv{std::string(key), {}});
  return kv_.back();
}

void GgufWriter::add_u32(std::string_view key, uint32_t v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::U32);
  put(kv.encoded, v);
}
void GgufWriter::add_i32(std::string_view key, int32_t v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::I32);
  put(kv.encoded, v);
}
void GgufWriter::add_u64(std::string_view key, uint64_t v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::U64);
  put(kv.encoded, v);
}
void GgufWriter::add_f32(std::string_view key, float v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::F32);
  put(kv.encoded, v);
}
void GgufWriter::add_bool(std::string_view key, bool v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::BOOL);
  put<uint8_t>(kv.encoded, v ? 1 : 0);
}
void GgufWriter::add_string(std::string_view key, std::string_view v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::STRING);
  put_string(kv.encoded, v);
}
void GgufWriter::add_array_u32(std::string_view key, const std::vector<uint32_t>& v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::ARRAY);
  put_type(kv.encoded, GgufType::U32);
  put<uint64_t>(kv.encoded, v.size());
  for (uint32_t x : v) put(kv.encoded, x);
}
void GgufWriter::add_array_i32(std::string_view key, const std::vector<int32_t>& v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::ARRAY);
  put_type(kv.encoded, GgufType::I32);
  put<uint64_t>(kv.encoded, v.size());
  for (int32_t x : v) put(kv.encoded, x);
}
void GgufWriter::add_array_f32(std::string_view key, const std::vector<float>& v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::ARRAY);
  put_type(kv.encoded, GgufType::F32);
  put<uint64_t>(kv.encoded, v.size());
  for (float x : v) put(kv.encoded, x);
}
void GgufWriter::add_array_bool(std::string_view key, const std::vector<bool>& v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::ARRAY);
  put_type(kv.encoded, GgufType::BOOL);
  put<uint64_t>(kv.encoded, v.size());
  for (bool x : v) put<uint8_t>(kv.encoded, x ? 1 : 0);
}
void GgufWriter::add_array_string(std::string_view key, const std::vector<std::string>& v) {
  Kv& kv = new_kv(key);
  put_type(kv.encoded, GgufType::ARRAY);
  put_type(kv.encoded, GgufType::STRING);
  put<uint64_t>(kv.encoded, v.size());
  for (const std::string& s : v) put_string(kv.encoded, s);
}

uint64_t GgufWriter::tensor_bytes(const std::vector<int64_t>& shape, GgmlType type) {
  uint64_t n = ggml_type_size(type);
  const int64_t block = ggml_block_elems(type);
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (i + 1 == shape.size() && block > 1) {
      if (d % block != 0)
        fail("GGUF tensor: innermost dimension {} is not a multiple of {}'s block of {}", d, ggml_type_name(type), block);
      d /= block;
    }
    if (d < 1 || static_cast<uint64_t>(d) > std::numeric_limits<uint64_t>::max() / n)
      fail("GGUF tensor dimension {} is invalid or too large", d);
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

void GgufWriter::add_tensor(std::string name, std::vector<int64_t> shape, GgmlType type, Producer produce) {
  if (name.empty() || name.size() > 63) fail("GGUF tensor name \"{}\" must be 1 to 63 bytes", name);
  if (has_tensor(name)) fail("GGUF tensor \"{}\" added twice", name);
  if (shape.empty() || shape.size() > 4) fail("GGUF tensor \"{}\" has {} dims (1 to 4 allowed)", name, shape.size());
  if (!produce) fail("GGUF tensor \"{}\" has no data producer", name);
  Tensor t;
  t.bytes = tensor_bytes(shape, type);
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.type = type;
  t.offset = data_size_;
  t.produce = std::move(produce);
  data_size_ = align_up(data_size_ + t.bytes, alignment_);
  tensors_.push_back(std::move(t));
}

void GgufWriter::add_tensor(std::string name, std::vector<int64_t> shape, GgmlType type, std::vector<uint8_t> bytes) {
  auto data = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  if (data->size() != tensor_bytes(shape, type))
    fail("GGUF tensor \"{}\": {} bytes given, {} expected for its shape and type {}", name, data->size(),
         tensor_bytes(shape, type), ggml_type_name(type));
  add_tensor(std::move(name), std::move(shape), type, [data](const Sink& sink) { sink(data->data(), data->size()); });
}

void GgufWriter::add_tensor_f32(std::string name, std::vector<int64_t> shape, GgmlType type, std::vector<float> values) {
  if (ggml_block_elems(type) != 1) fail("GGUF tensor \"{}\": add_tensor_f32 takes float types only", name);
  auto data = std::make_shared<std::vector<float>>(std::move(values));
  if (data->size() * ggml_type_size(type) != tensor_bytes(shape, type))
    fail("GGUF tensor \"{}\": {} values given, shape needs {}", name, data->size(),
         tensor_bytes(shape, type) / ggml_type_size(type));
  add_tensor(std::move(name), std::move(shape), type, [data, type](const Sink& sink) {
    if (type == GgmlType::F32) {
      sink(data->data(), data->size() * sizeof(float));
      return;
    }
    std::vector<uint16_t> tmp;
    constexpr size_t kChunk = 1u << 16;
    for (size_t i = 0; i < data->size(); i += kChunk) {
      size_t n = std::min(kChunk, data->size() - i);
      tmp.resize(n);
      for (size_t j = 0; j < n; ++j)
        tmp[j] = type == GgmlType::F16 ? f32_to_f16((*data)[i + j]) : f32_to_bf16((*data)[i + j]);
      sink(tmp.data(), n * sizeof(uint16_t));
    }
  });
}

void GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> head;
  put_bytes(head, "GGUF", 4);
  put<uint32_t>(head, kVersion);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_.size());
  for (const Kv& kv : kv_) {
    put_string(head, kv.key);
    put_bytes(head, kv.encoded.data(), kv.encoded.size());
  }
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(head, static_cast<uint64_t>(*it));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, t.offset);
  }

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    OutFile out(tmp);
    out.write(head.data(), head.size());
    out.zeros(align_up(head.size(), alignment_) - head.size());
    const uint64_t data_start = out.written();
    for (const Tensor& t : tensors_) {
      const uint64_t begin = out.written();
      if (begin - data_start != t.offset)
        fail("{}: internal error: tensor \"{}\" lands at offset {}, expected {}", path, t.name, begin - data_start,
             t.offset);
      try {
        t.produce([&](const void* p, size_t n) {
          if (out.written() - begin + n > t.bytes)
            fail("{}: tensor \"{}\" producer wrote more than its {} bytes", path, t.name, t.bytes);
          out.write(p, n);
        });
      } catch (const Error& e) {
        if (std::string_view(e.what()).find(t.name) != std::string_view::npos) throw;
        fail("{}: tensor \"{}\": {}", path, t.name, e.what());
      }
      const uint64_t got = out.written() - begin;
      if (got != t.bytes) fail("{}: tensor \"{}\" producer wrote {} bytes, expected {}", path, t.name, got, t.bytes);
      out.zeros(align_up(got, alignment_) - got);
    }
    out.finish();
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      fail("{}: cannot rename {} into place: {}", path, tmp, std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace strata
