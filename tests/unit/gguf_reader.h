// An independent GGUF v3 reader, written from the layout (not from
// format/gguf_writer.cpp), for the writer's tests (gguf_writer_test.cpp) and
// its fuzz target (tests/fuzz/fuzz_gguf.cpp). It throws std::runtime_error on
// anything it cannot read: counts, lengths and the alignment come from the
// file and are checked against its size before use.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "format/gguf_writer.h"

namespace strata::gguf_test {

struct ParsedTensor {
  std::string name;
  std::vector<uint64_t> dims;  // GGUF order (innermost first)
  uint32_t type = 0;
  uint64_t offset = 0;
};

using Scalar = std::variant<uint64_t, int64_t, double, bool, std::string>;
struct ParsedKv {
  uint32_t type = 0;
  uint32_t elem_type = 0;  // arrays
  std::vector<Scalar> values;  // one for scalars
};

struct ParsedFile {
  uint32_t version = 0;
  std::vector<std::string> key_order;
  std::map<std::string, ParsedKv> kv;
  std::vector<ParsedTensor> tensors;
  uint64_t header_end = 0;
  uint64_t data_start = 0;
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  template <typename T>
  T get() {
    if (pos_ + sizeof(T) > b_.size()) throw std::runtime_error("truncated");
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str() {
    uint64_t n = get<uint64_t>();
    // n comes from the file: compared with what is left, never added to pos_
    // (a length near 2^64 would wrap the sum; found by tests/fuzz/fuzz_gguf).
    if (n > b_.size() - pos_) throw std::runtime_error("truncated string");
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  Scalar scalar(uint32_t type) {
    switch (static_cast<GgufType>(type)) {
      case GgufType::U8: return uint64_t{get<uint8_t>()};
      case GgufType::I8: return int64_t{get<int8_t>()};
      case GgufType::U16: return uint64_t{get<uint16_t>()};
      case GgufType::I16: return int64_t{get<int16_t>()};
      case GgufType::U32: return uint64_t{get<uint32_t>()};
      case GgufType::I32: return int64_t{get<int32_t>()};
      case GgufType::F32: return double{get<float>()};
      case GgufType::BOOL: {
        uint8_t v = get<uint8_t>();
        if (v > 1) throw std::runtime_error("bad bool");
        return v == 1;
      }
      case GgufType::STRING: return str();
      case GgufType::U64: return get<uint64_t>();
      case GgufType::I64: return get<int64_t>();
      case GgufType::F64: return get<double>();
      default: throw std::runtime_error("bad type " + std::to_string(type));
    }
  }
  size_t pos() const { return pos_; }

 private:
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

inline ParsedFile parse_bytes(std::vector<uint8_t> bytes) {
  ParsedFile f;
  f.bytes = std::move(bytes);
  Reader r(f.bytes);
  if (r.get<uint32_t>() != 0x46554747u) throw std::runtime_error("bad magic");  // "GGUF"
  f.version = r.get<uint32_t>();
  uint64_t n_tensors = r.get<uint64_t>();
  uint64_t n_kv = r.get<uint64_t>();
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.str();
    ParsedKv kv;
    kv.type = r.get<uint32_t>();
    if (kv.type == static_cast<uint32_t>(GgufType::ARRAY)) {
      kv.elem_type = r.get<uint32_t>();
      uint64_t n = r.get<uint64_t>();
      for (uint64_t j = 0; j < n; ++j) kv.values.push_back(r.scalar(kv.elem_type));
    } else {
      kv.values.push_back(r.scalar(kv.type));
    }
    if (f.kv.count(key)) throw std::runtime_error("duplicate key " + key);
    f.key_order.push_back(key);
    f.kv[key] = kv;
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    ParsedTensor t;
    t.name = r.str();
    uint32_t nd = r.get<uint32_t>();
    for (uint32_t d = 0; d < nd; ++d) t.dims.push_back(r.get<uint64_t>());
    t.type = r.get<uint32_t>();
    t.offset = r.get<uint64_t>();
    f.tensors.push_back(t);
  }
  uint64_t align = 32;
  if (auto it = f.kv.find("general.alignment"); it != f.kv.end()) {
    // An unsigned scalar, a power of two: the data offset is rounded up to
    // it (0 divided by zero; found by tests/fuzz/fuzz_gguf).
    const ParsedKv& a = it->second;
    if (a.values.size() != 1 || !std::holds_alternative<uint64_t>(a.values[0]))
      throw std::runtime_error("general.alignment is not an unsigned integer");
    align = std::get<uint64_t>(a.values[0]);
    if (align == 0 || (align & (align - 1)) != 0 || align > (1u << 30))
      throw std::runtime_error("general.alignment " + std::to_string(align) + " is not a power of two");
  }
  f.header_end = r.pos();
  f.data_start = (r.pos() + align - 1) / align * align;
  return f;
}

inline ParsedFile parse(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return parse_bytes(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}));
}

}  // namespace strata::gguf_test
