#include "format/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/io.h"
#include "core/json.h"

namespace strata {

namespace {

struct DTypeInfo {
  const char* name;
  DType dtype;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {"F64", DType::F64, 8},         {"F32", DType::F32, 4},         {"F16", DType::F16, 2},
    {"BF16", DType::BF16, 2},       {"F8_E4M3", DType::F8_E4M3, 1}, {"F8_E5M2", DType::F8_E5M2, 1},
    {"I64", DType::I64, 8},         {"I32", DType::I32, 4},         {"I16", DType::I16, 2},
    {"I8", DType::I8, 1},           {"U8", DType::U8, 1},           {"BOOL", DType::BOOL, 1},
};

const DTypeInfo& info(DType d) {
  for (const auto& i : kDTypes)
    if (i.dtype == d) return i;
  return kDTypes[0];  // unreachable: every enumerator is listed
}

}  // namespace

size_t dtype_size(DType d) { return info(d).size; }
const char* dtype_name(DType d) { return info(d).name; }

SafetensorsFile::SafetensorsFile(const std::string& path, const SafetensorsLimits& limits)
    : path_(path) {
  fd_ = open_file(path, O_RDONLY);
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
  file_size_ = static_cast<uint64_t>(st.st_size);
  if (file_size_ < 8) fail("{}: file is {} bytes, too small for a safetensors header", path, file_size_);

  uint8_t lenbuf[8];
  pread_exact(fd_, lenbuf, 8, 0);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | lenbuf[i];
  if (header_len > file_size_ - 8)
    fail("{}: header length {} exceeds the file size {}", path, header_len, file_size_);
  if (header_len > limits.max_header_bytes)
    fail("{}: header length {} exceeds the limit of {} bytes", path, header_len, limits.max_header_bytes);
  if (header_len < 2) fail("{}: header length {} is too small", path, header_len);
  data_offset_ = 8 + header_len;
  const uint64_t data_size = file_size_ - data_offset_;

  std::string text(static_cast<size_t>(header_len), '\0');
  pread_exact(fd_, text.data(), header_len, 8);
  Json header = parse_json(text, path + " (safetensors header)");
  if (!header.is_object()) fail("{}: header is not a JSON object", path);

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ is not an object", path);
      for (auto m = v.begin(); m != v.end(); ++m)
        if (!m.value().is_string()) fail("{}: __metadata__ field \"{}\" is not a string", path, m.key());
      continue;
    }
    auto bad = [&](const std::string& what) { fail("{}: tensor \"{}\": {}", path, name, what); };
    if (!v.is_object()) bad("entry is not an object");
    if (v.size() != 3 || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad("entry must have exactly the fields dtype, shape, data_offsets");
    const Json& jd = v["dtype"];
    const Json& js = v["shape"];
    const Json& jo = v["data_offsets"];
    if (!jd.is_string()) bad("dtype is not a string");
    TensorEntry t;
    t.name = name;
    const std::string ds = jd.get<std::string>();
    const DTypeInfo* di = nullptr;
    for (const auto& i : kDTypes)
      if (ds == i.name) di = &i;
    if (!di) bad(fmt::format("unknown dtype \"{}\"", ds));
    t.dtype = di->dtype;
    if (!js.is_array()) bad("shape is not an array");
    if (static_cast<int>(js.size()) > limits.max_rank)
      bad(fmt::format("rank {} exceeds the limit {}", js.size(), limits.max_rank));
    uint64_t numel = 1;
    for (const Json& d : js) {
      if (!d.is_number_integer()) bad("shape has a non-integer dimension");
      if (d.is_number_unsigned() ? d.get<uint64_t>() > static_cast<uint64_t>(limits.max_dim)
                                 : (d.get<int64_t>() < 0 || d.get<int64_t>() > limits.max_dim))
        bad(fmt::format("dimension {} is negative or exceeds {}", d.dump(), limits.max_dim));
      int64_t dim = d.get<int64_t>();
      t.shape.push_back(dim);
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel)) bad("shape product overflows");
    }
    t.numel = numel;
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(di->size), &nbytes)) bad("byte size overflows");
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_integer() || !jo[1].is_number_integer())
      bad("data_offsets must be an array of two integers");
    if (!jo[0].is_number_unsigned() || !jo[1].is_number_unsigned()) bad("data_offsets are negative");
    t.begin = jo[0].get<uint64_t>();
    t.end = jo[1].get<uint64_t>();
    if (t.begin > t.end) bad(fmt::format("data_offsets [{}, {}] are reversed", t.begin, t.end));
    if (t.end > data_size)
      bad(fmt::format("data_offsets [{}, {}] run past the data area of {} bytes", t.begin, t.end, data_size));
    if (t.end - t.begin != nbytes)
      bad(fmt::format("shape and dtype need {} bytes but data_offsets span {}", nbytes, t.end - t.begin));
    tensors_.push_back(std::move(t));
  }

  // Overlap: in order of begin, each non-empty span must start at or after
  // the end of the previous non-empty one. Empty spans are skipped without
  // resetting `prev`, or an empty tensor sorted between two overlapping
  // ones would hide the overlap.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].begin < tensors_[b].begin; });
  const TensorEntry* prev = nullptr;
  for (size_t i : order) {
    const TensorEntry& b = tensors_[i];
    if (b.bytes() == 0) continue;
    if (prev && b.begin < prev->end) fail("{}: tensors \"{}\" and \"{}\" overlap", path, prev->name, b.name);
    prev = &b;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() = default;

const TensorEntry* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::read(const TensorEntry& t, void* dst) const { read_range(t, 0, t.bytes(), dst); }

void SafetensorsFile::read_range(const TensorEntry& t, uint64_t offset, uint64_t n, void* dst) const {
  if (offset > t.bytes() || n > t.bytes() - offset)
    fail("{}: tensor \"{}\": range [{}, +{}) outside its {} bytes", path_, t.name, offset, n, t.bytes());
  pread_exact(fd_, dst, n, data_offset_ + t.begin + offset, fmt::format(" (tensor \"{}\")", t.name));
}

namespace {

// std::filesystem queries without exceptions: a path that cannot be examined
// (permissions, I/O) is a strata::Error naming it, not a filesystem_error
// that nothing catches.
std::filesystem::file_status status_of(const std::filesystem::path& p) {
  std::error_code ec;
  std::filesystem::file_status s = std::filesystem::status(p, ec);
  if (s.type() == std::filesystem::file_type::none) fail("{}: cannot examine: {}", p.string(), ec.message());
  return s;
}

}  // namespace

Checkpoint::Checkpoint(const std::string& dir, const SafetensorsLimits& limits) : dir_(dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  if (!fs::is_directory(status_of(d))) fail("{}: not a directory", dir);
  const fs::path single = d / "model.safetensors";
  const fs::path index = d / "model.safetensors.index.json";
  if (fs::exists(status_of(index))) {
    Json j = parse_json(read_small_file(index.string(), 64ull << 20), index.string());
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: missing object field \"weight_map\"", index.string());
    std::unordered_map<std::string, size_t> file_ids;
    std::vector<std::pair<std::string, std::string>> wanted;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail("{}: weight_map[\"{}\"] is not a string", index.string(), it.key());
      const std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." ||
          f == "..")
        fail("{}: weight_map[\"{}\"] names \"{}\", which is not a plain file name", index.string(),
             it.key(), f);
      if (!file_ids.count(f)) {
        // A shard that cannot be opened or parsed: say which index entry led
        // to it as well (the shard's own message names the shard).
        try {
          files_.push_back(std::make_unique<SafetensorsFile>((d / f).string(), limits));
        } catch (const Error& e) {
          fail("{}: weight_map[\"{}\"] names shard \"{}\": {}", index.string(), it.key(), f, e.what());
        }
        file_ids[f] = files_.size() - 1;
      }
      wanted.emplace_back(it.key(), f);
    }
    for (const auto& [name, f] : wanted) {
      size_t id = file_ids[f];
      const TensorEntry* e = files_[id]->find(name);
      if (!e) fail("{}: tensor \"{}\" is listed in the index but missing from the shard", files_[id]->path(), name);
      where_[name] = {id, e};
    }
  } else if (fs::exists(status_of(single))) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string(), limits));
    for (const auto& t : files_[0]->tensors()) where_[t.name] = {0, &t};
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir);
  }
}

const TensorEntry& Checkpoint::entry(std::string_view name) const {
  auto it = where_.find(std::string(name));
  if (it == where_.end()) fail("{}: tensor \"{}\" is missing from the checkpoint", dir_, name);
  return *it->second.second;
}

const SafetensorsFile& Checkpoint::file_of(std::string_view name) const {
  auto it = where_.find(std::string(name));
  if (it == where_.end()) fail("{}: tensor \"{}\" is missing from the checkpoint", dir_, name);
  return *files_[it->second.first];
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [k, v] : where_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace strata
