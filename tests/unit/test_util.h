// Shared helpers for tests that build fixture files: a per-test temporary
// directory, byte-level file writers, a safetensors builder, and a helper
// that captures the message of an expected strata::Error.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/json.h"

namespace strata::test_util {

namespace fs = std::filesystem;

// A fresh directory under the system temp directory, removed (recursively)
// when the object goes out of scope.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "strata-test-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // Full path of `name` inside the directory.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot create " + path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Little-endian u64, as the safetensors header length is stored.
inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a raw header text and data area; the length
// prefix is the header's size unless `header_len` overrides it.
inline std::string safetensors_bytes(std::string_view header, std::string_view data,
                                     std::optional<uint64_t> header_len = std::nullopt) {
  std::string out = le64(header_len ? *header_len : header.size());
  out.append(header);
  out.append(data);
  return out;
}

// Bytes of a trivially copyable array.
template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// Builds a well-formed safetensors file tensor by tensor, laid out back to
// back in insertion order.
class SafetensorsBuilder {
 public:
  SafetensorsBuilder& add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                          std::string data) {
    tensors_.push_back({name, dtype, shape, std::move(data)});
    return *this;
  }
  template <typename T>
  SafetensorsBuilder& add_values(const std::string& name, const std::string& dtype,
                                 const std::vector<int64_t>& shape, const std::vector<T>& values) {
    return add(name, dtype, shape, bytes_of(values));
  }
  SafetensorsBuilder& metadata(const std::string& key, const std::string& value) {
    metadata_[key] = value;
    return *this;
  }

  Json header() const {
    Json h = Json::object();
    if (!metadata_.empty()) h["__metadata__"] = metadata_;
    uint64_t off = 0;
    for (const auto& t : tensors_) {
      h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.data.size()}}};
      off += t.data.size();
    }
    return h;
  }
  std::string data() const {
    std::string d;
    for (const auto& t : tensors_) d += t.data;
    return d;
  }
  // Header padded with spaces to a multiple of 8 bytes, as the reference
  // writer does.
  std::string bytes() const {
    std::string h = header().dump();
    while (h.size() % 8 != 0) h.push_back(' ');
    return safetensors_bytes(h, data());
  }
  void write(const std::string& path) const { write_file(path, bytes()); }

 private:
  struct T {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::string data;
  };
  std::vector<T> tensors_;
  Json metadata_ = Json::object();
};

// Runs `f`, which must throw strata::Error, and returns the message. Any
// other outcome is reported as a test failure (and returns a marker string
// that no message assertion will match).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected strata::Error, got another exception: " << e.what();
    return "<wrong exception type>";
  } catch (...) {
    ADD_FAILURE() << "expected strata::Error, got a non-std exception";
    return "<wrong exception type>";
  }
  ADD_FAILURE() << "expected strata::Error, nothing was thrown";
  return "<no exception>";
}

}  // namespace strata::test_util
