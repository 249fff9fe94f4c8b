#include "format/container.h"

#include <filesystem>

#include "core/error.h"
#include "core/io.h"
#include "core/quant.h"

namespace strata {

namespace {

const std::pair<WeightFormat, const char*> kFormats[] = {
    {WeightFormat::F32, "f32"},   {WeightFormat::BF16, "bf16"}, {WeightFormat::FP8_BLOCK, "fp8-block"},
    {WeightFormat::INT8, "int8"}, {WeightFormat::INT4, "int4"},
};

const char* format_tag(WeightFormat f) {
  for (const auto& [k, v] : kFormats)
    if (k == f) return v;
  return "?";
}

constexpr uint64_t kMaxBytes = uint64_t{1} << 50;

// A non-negative integer, whether the JSON holds it as signed or unsigned.
bool is_uint(const Json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); }

uint64_t u64(const Json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !is_uint(*it)) fail("{}: field \"{}\" must be a non-negative integer", where, key);
  const uint64_t v = it->get<uint64_t>();
  if (v > kMaxBytes) fail("{}: field \"{}\" = {} is implausibly large", where, key, v);
  return v;
}

std::string str(const Json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) fail("{}: field \"{}\" must be a string", where, key);
  return it->get<std::string>();
}

bool plain_file_name(const std::string& f) {
  return !f.empty() && f.size() < 256 && f.find('/') == std::string::npos && f != "." && f != "..";
}

Json tensor_to_json(const TensorRecord& t, bool with_file) {
  Json j;
  j["format"] = format_tag(t.format);
  j["shape"] = t.shape;
  if (t.format == WeightFormat::INT8 || t.format == WeightFormat::INT4) j["group"] = t.group;
  if (t.scales_bf16) j["scales"] = "bf16";
  if (t.format == WeightFormat::FP8_BLOCK) j["block"] = {t.block_rows, t.block_cols};
  if (with_file) j["file"] = t.file;
  j["offset"] = t.offset;
  j["bytes"] = t.bytes;
  if (t.scales_bytes) {
    j["scales_offset"] = t.scales_offset;
    j["scales_bytes"] = t.scales_bytes;
  }
  if (with_file) j["xxh3"] = xxh_hex(t.xxh);
  return j;
}

TensorRecord tensor_from_json(const Json& j, bool with_file, const std::string& where) {
  if (!j.is_object()) fail("{}: not an object", where);
  TensorRecord t;
  const std::string f = str(j, "format", where);
  bool known = false;
  for (const auto& [k, v] : kFormats)
    if (f == v) {
      t.format = k;
      known = true;
    }
  if (!known) fail("{}: unknown format \"{}\"", where, f);
  auto sh = j.find("shape");
  if (sh == j.end() || !sh->is_array() || sh->empty() || sh->size() > 2)
    fail("{}: shape must be an array of 1 or 2 dimensions", where);
  for (const Json& d : *sh) {
    if (!is_uint(d) || d.get<uint64_t>() == 0 || d.get<uint64_t>() > (uint64_t{1} << 32))
      fail("{}: shape dimension {} is not in [1, 2^32]", where, d.dump());
    t.shape.push_back(d.get<int64_t>());
  }
  if (t.shape.size() == 1 && t.format != WeightFormat::F32) fail("{}: vectors must be f32", where);
  if (t.format == WeightFormat::INT8 || t.format == WeightFormat::INT4) {
    const uint64_t g = u64(j, "group", where);
    if (g > static_cast<uint64_t>(t.shape.back())) fail("{}: group {} exceeds the row length", where, g);
    t.group = static_cast<int64_t>(g);
    if (j.contains("scales")) {
      const std::string sf = str(j, "scales", where);
      if (sf != "f32" && sf != "bf16") fail("{}: field \"scales\" must be \"f32\" or \"bf16\", got \"{}\"", where, sf);
      t.scales_bf16 = sf == "bf16";
    }
  } else if (j.contains("scales")) {
    fail("{}: field \"scales\" is only for int8/int4 tensors", where);
  }
  if (t.format == WeightFormat::FP8_BLOCK) {
    auto b = j.find("block");
    if (b == j.end() || !b->is_array() || b->size() != 2 || !is_uint((*b)[0]) || !is_uint((*b)[1]) || (*b)[0].get<uint64_t>() == 0 || (*b)[1].get<uint64_t>() == 0 ||
        (*b)[0].get<uint64_t>() > 4096 || (*b)[1].get<uint64_t>() > 4096)
      fail("{}: block must be two integers in [1, 4096]", where);
    t.block_rows = (*b)[0].get<int64_t>();
    t.block_cols = (*b)[1].get<int64_t>();
  }
  if (with_file) {
    t.file = str(j, "file", where);
    if (!plain_file_name(t.file)) fail("{}: file \"{}\" is not a plain file name", where, t.file);
    t.xxh = parse_xxh_hex(str(j, "xxh3", where), where);
  }
  t.offset = u64(j, "offset", where);
  t.bytes = u64(j, "bytes", where);
  if (j.contains("scales_bytes")) {
    t.scales_offset = u64(j, "scales_offset", where);
    t.scales_bytes = u64(j, "scales_bytes", where);
  }
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  const int64_t cols = t.shape.back();
  std::pair<uint64_t, uint64_t> need;
  try {
    need = tensor_bytes(t.format, rows, cols, t.group, t.block_rows, t.block_cols, t.scales_bf16 ? 2 : 4);
  } catch (const Error& e) {
    fail("{}: field \"shape\": {}", where, e.what());
  }
  const auto [db, sb] = need;
  if (t.bytes != db || t.scales_bytes != sb)
    fail("{}: {} {}x{} needs {} data + {} scale bytes, the manifest says {} + {}", where, f, rows, cols, db, sb,
         t.bytes, t.scales_bytes);
  if (t.offset % kTensorAlign != 0 || (sb && t.scales_offset % kTensorAlign != 0))
    fail("{}: offsets must be multiples of {}", where, kTensorAlign);
  if (sb && t.scales_offset < t.offset + t.bytes) fail("{}: scales overlap the data", where);
  return t;
}

}  // namespace

std::pair<uint64_t, uint64_t> tensor_bytes(WeightFormat f, int64_t rows, int64_t cols, int64_t group,
                                           int64_t block_rows, int64_t block_cols, int scale_bytes) {
  if (rows < 0 || cols < 0) fail("tensor of {}x{} elements: negative dimension", rows, cols);
  // Shapes come from files: a product that wraps would pass every later size check.
  auto mul = [&](uint64_t a, uint64_t b) {
    uint64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r) || r > kMaxBytes)
      fail("tensor of {}x{} elements is implausibly large (over 2^50 bytes)", rows, cols);
    return r;
  };
  const uint64_t r = static_cast<uint64_t>(rows), c = static_cast<uint64_t>(cols);
  switch (f) {
    case WeightFormat::F32: return {mul(mul(r, c), 4), 0};
    case WeightFormat::BF16: return {mul(mul(r, c), 2), 0};
    case WeightFormat::FP8_BLOCK: {
      if (block_rows <= 0 || block_cols <= 0) fail("fp8-block tensor of {}x{}: block must be positive", rows, cols);
      const uint64_t blocks = mul(static_cast<uint64_t>((rows + block_rows - 1) / block_rows),
                                  static_cast<uint64_t>((cols + block_cols - 1) / block_cols));
      return {mul(r, c), mul(blocks, 4)};
    }
    case WeightFormat::INT8:
    case WeightFormat::INT4: {
      const QuantBits b = f == WeightFormat::INT8 ? QuantBits::Int8 : QuantBits::Int4;
      return {mul(r, static_cast<uint64_t>(quant_row_bytes(b, cols))),
              mul(mul(r, static_cast<uint64_t>(quant_groups(cols, group))), static_cast<uint64_t>(scale_bytes))};
    }
  }
  return {0, 0};
}

std::string xxh_hex(uint64_t h) { return fmt::format("{:016x}", h); }

uint64_t parse_xxh_hex(const std::string& s, const std::string& what) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    fail("{}: checksum \"{}\" is not 16 lowercase hex digits", what, s);
  return std::stoull(s, nullptr, 16);
}

Json manifest_to_json(const Manifest& m) {
  Json j;
  j["format"] = kContainerFormat;
  j["version"] = m.version;
  j["source"] = m.source;
  j["options"] = m.options;
  j["config"] = m.config;
  j["files"] = Json::array();
  for (const auto& f : m.files) j["files"].push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh3", xxh_hex(f.xxh)}});
  j["tensors"] = Json::object();
  for (const auto& [name, t] : m.tensors) j["tensors"][name] = tensor_to_json(t, true);
  j["experts"] = Json::array();
  for (const auto& e : m.expert_layers) {
    Json x;
    x["layer"] = e.layer;
    x["file"] = e.file;
    x["count"] = e.count;
    x["stride"] = e.stride;
    x["blob_bytes"] = e.blob_bytes;
    x["gate"] = tensor_to_json(e.gate, false);
    x["up"] = tensor_to_json(e.up, false);
    x["down"] = tensor_to_json(e.down, false);
    x["xxh3"] = Json::array();
    for (uint64_t h : e.xxh) x["xxh3"].push_back(xxh_hex(h));
    j["experts"].push_back(std::move(x));
  }
  return j;
}

Manifest manifest_from_json(const Json& j, const std::string& origin) {
  if (!j.is_object()) fail("{}: manifest is not a JSON object", origin);
  if (str(j, "format", origin) != kContainerFormat)
    fail("{}: format is not \"{}\"", origin, kContainerFormat);
  auto v = j.find("version");
  if (v == j.end() || !v->is_number_integer()) fail("{}: missing integer field \"version\"", origin);
  if (v->get<int64_t>() != kContainerVersion)
    fail("{}: container version {} is not supported (this strata reads version {}); re-run strata convert", origin,
         v->get<int64_t>(), kContainerVersion);
  Manifest m;
  m.source = j.value("source", Json::object());
  m.options = j.value("options", Json::object());
  if (!j.contains("config") || !j["config"].is_object()) fail("{}: missing object field \"config\"", origin);
  m.config = j["config"];

  std::map<std::string, uint64_t> file_size;
  if (!j.contains("files") || !j["files"].is_array()) fail("{}: missing array field \"files\"", origin);
  for (const Json& f : j["files"]) {
    const std::string where = origin + ": files[]";
    if (!f.is_object()) fail("{}: entry is not an object", where);
    FileRecord r{str(f, "name", where), u64(f, "bytes", where), parse_xxh_hex(str(f, "xxh3", where), where)};
    if (!plain_file_name(r.name)) fail("{}: \"{}\" is not a plain file name", where, r.name);
    if (file_size.count(r.name)) fail("{}: file \"{}\" listed twice", where, r.name);
    file_size[r.name] = r.bytes;
    m.files.push_back(r);
  }
  auto in_file = [&](const std::string& file, uint64_t off, uint64_t n, const std::string& where) {
    auto it = file_size.find(file);
    if (it == file_size.end()) fail("{}: file \"{}\" is not listed in files", where, file);
    if (off > it->second || n > it->second - off)
      fail("{}: span [{}, +{}) runs past the {} bytes of {}", where, off, n, it->second, file);
  };

  if (!j.contains("tensors") || !j["tensors"].is_object()) fail("{}: missing object field \"tensors\"", origin);
  for (auto it = j["tensors"].begin(); it != j["tensors"].end(); ++it) {
    const std::string where = origin + ": tensor \"" + it.key() + "\"";
    TensorRecord t = tensor_from_json(it.value(), true, where);
    in_file(t.file, t.offset, t.bytes, where);
    if (t.scales_bytes) in_file(t.file, t.scales_offset, t.scales_bytes, where);
    m.tensors.emplace(it.key(), std::move(t));
  }
  if (!j.contains("experts") || !j["experts"].is_array()) fail("{}: missing array field \"experts\"", origin);
  for (const Json& x : j["experts"]) {
    ExpertLayerRecord e;
    const std::string where0 = origin + ": experts[]";
    if (!x.is_object()) fail("{}: entry is not an object", where0);
    e.layer = static_cast<int64_t>(u64(x, "layer", where0));
    const std::string where = origin + ": experts of layer " + std::to_string(e.layer);
    e.file = str(x, "file", where);
    e.count = static_cast<int64_t>(u64(x, "count", where));
    e.stride = u64(x, "stride", where);
    e.blob_bytes = u64(x, "blob_bytes", where);
    if (e.count < 1 || e.count > 65536) fail("{}: count {} is out of range", where, e.count);
    if (e.stride == 0 || e.stride % kExpertAlign != 0 || e.blob_bytes > e.stride)
      fail("{}: stride {} must be a non-zero multiple of {} holding blob_bytes {}", where, e.stride, kExpertAlign,
           e.blob_bytes);
    for (auto [key, rec] : {std::pair{"gate", &e.gate}, std::pair{"up", &e.up}, std::pair{"down", &e.down}}) {
      if (!x.contains(key)) fail("{}: missing field \"{}\"", where, key);
      *rec = tensor_from_json(x[key], false, where + " " + key);
      if (rec->shape.size() != 2) fail("{}: {} must be a matrix", where, key);
      const uint64_t end = std::max(rec->offset + rec->bytes, rec->scales_offset + rec->scales_bytes);
      if (end > e.blob_bytes) fail("{}: {} runs past blob_bytes {}", where, key, e.blob_bytes);
    }
    if (!x.contains("xxh3") || !x["xxh3"].is_array() || static_cast<int64_t>(x["xxh3"].size()) != e.count)
      fail("{}: xxh3 must list one checksum per expert", where);
    for (const Json& h : x["xxh3"]) {
      if (!h.is_string()) fail("{}: xxh3 entries must be strings", where);
      e.xxh.push_back(parse_xxh_hex(h.get<std::string>(), where));
    }
    // stride <= 2^50 and count <= 2^16: the product can wrap (2^48 x 65536 = 0).
    uint64_t span = 0;
    if (__builtin_mul_overflow(e.stride, static_cast<uint64_t>(e.count), &span) || span > kMaxBytes)
      fail("{}: field \"stride\" {} x count {} is implausibly large", where, e.stride, e.count);
    in_file(e.file, 0, span, where);
    for (const ExpertLayerRecord& other : m.expert_layers)
      if (other.layer == e.layer) fail("{}: field \"layer\": layer {} is listed twice", where, e.layer);
    m.expert_layers.push_back(std::move(e));
  }
  return m;
}

Weight weight_view(const TensorRecord& t, const uint8_t* base, const std::string& name) {
  Weight w;
  w.name = name;
  w.format = t.format;
  w.rows = t.shape[0];
  w.cols = t.shape[1];
  w.group = t.group;
  w.block_rows = t.block_rows;
  w.block_cols = t.block_cols;
  w.view_data = base + t.offset;
  w.scales_bf16 = t.scales_bf16;
  if (t.scales_bf16)
    w.view_scales16 = reinterpret_cast<const uint16_t*>(base + t.scales_offset);
  else
    w.view_scales = t.scales_bytes ? reinterpret_cast<const float*>(base + t.scales_offset) : nullptr;
  w.view_bytes = t.bytes + t.scales_bytes;
  return w;
}

bool is_container(const std::string& dir) { return std::filesystem::exists(dir + "/manifest.json"); }

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  Manifest m = manifest_from_json(parse_json(read_small_file(path, 256u << 20), path), path);
  // Every listed file must exist with the listed size (content checksums are
  // verified as data is read, and in full by `strata convert --verify`).
  for (const auto& f : m.files) {
    std::error_code ec;
    const auto sz = std::filesystem::file_size(dir + "/" + f.name, ec);
    if (ec) fail("{}: container file {} is missing: {}", path, f.name, ec.message());
    if (sz != f.bytes)
      fail("{}/{}: file is {} bytes, the manifest says {} (truncated or from another conversion)", dir, f.name, sz,
           f.bytes);
  }
  return m;
}

void write_manifest(const std::string& dir, const Manifest& m) {
  write_file_atomic(dir + "/manifest.json", manifest_to_json(m).dump(1) + "\n");
}

}  // namespace strata
