// Safetensors files and sharded checkpoints (format/safetensors.h). The
// first input byte picks the file the rest becomes:
//   even: DIR/model.safetensors (header + data), opened and every tensor's
//         first and last bytes read;
//   odd:  DIR/model.safetensors.index.json beside two small valid shards
//         (a.safetensors, b.safetensors), opened as a Checkpoint.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "format/safetensors.h"
#include "fuzz_util.h"

namespace {

// A valid safetensors file: the header, then `data_bytes` zero bytes.
std::string shard(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(s.data(), &n, 8);
  return s + header + std::string(data_bytes, '\0');
}

const std::string& single_dir() {
  static const std::string d = [] {
    std::string p = strata::fuzz::scratch_dir() + "/single";
    std::filesystem::create_directories(p);
    return p;
  }();
  return d;
}

const std::string& sharded_dir() {
  static const std::string d = [] {
    std::string p = strata::fuzz::scratch_dir() + "/sharded";
    std::filesystem::create_directories(p);
    strata::fuzz::write_file(p + "/a.safetensors",
                             shard(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                   R"("y":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}})",
                                   12));
    strata::fuzz::write_file(p + "/b.safetensors",
                             shard(R"({"__metadata__":{"format":"pt"},"z":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", 3));
    return p;
  }();
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  if (size < 1) return 0;
  const std::string_view body = fuzz::as_text(data + 1, size - 1);
  try {
    if ((data[0] & 1) == 0) {
      const std::string path = single_dir() + "/model.safetensors";
      fuzz::write_file(path, body);
      const SafetensorsFile f(path);
      uint8_t buf[16];
      for (const TensorEntry& t : f.tensors()) {
        STRATA_FUZZ_CHECK(f.find(t.name) == &t);
        STRATA_FUZZ_CHECK(t.begin <= t.end && f.data_offset() + t.end <= f.file_size());
        STRATA_FUZZ_CHECK(t.bytes() == t.numel * dtype_size(t.dtype));
        const uint64_t n = std::min<uint64_t>(sizeof buf, t.bytes());
        f.read_range(t, 0, n, buf);
        f.read_range(t, t.bytes() - n, n, buf);
      }
    } else {
      fuzz::write_file(sharded_dir() + "/model.safetensors.index.json", body);
      const Checkpoint c(sharded_dir());
      for (const std::string& name : c.names()) {
        const TensorEntry& t = c.entry(name);
        std::vector<uint8_t> b(t.bytes());
        c.file_of(name).read(t, b.data());
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
