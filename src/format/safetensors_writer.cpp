#include "format/safetensors_writer.h"

#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/json.h"

namespace strata {

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  Json header = Json::object();
  uint64_t off = 0;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    if (numel * dtype_size(t.dtype) != t.bytes.size())
      fail("{}: tensor \"{}\" has {} bytes, its shape needs {}", path, t.name, t.bytes.size(),
           numel * dtype_size(t.dtype));
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (const auto& t : tensors) ok = ok && std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("{}: write failed (disk full?)", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("{}: cannot rename into place: {}", path, std::strerror(errno));
}

}  // namespace strata
