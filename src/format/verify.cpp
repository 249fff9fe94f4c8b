#include "format/verify.h"

#include <fcntl.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/io.h"
#include "format/container.h"

namespace strata {

namespace {

// XXH3-64 of n bytes at `off`, read in bounded pieces: the sizes come from the
// manifest, so no buffer is ever sized by them.
void hash_span(const Fd& fd, uint64_t off, uint64_t n, std::vector<uint8_t>& buf, Xxh3& h) {
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
    pread_exact(fd, buf.data(), k, off);
    h.update(buf.data(), k);
    off += k;
    n -= k;
  }
}

// Which tensors and experts of a file whose checksum is wrong differ from
// their own checksums. Best effort: a file that cannot be read says nothing.
std::vector<std::string> damaged_parts(const Manifest& m, const FileRecord& f, const std::string& path) {
  std::vector<std::string> parts;
  const Fd fd = try_open_file(path, O_RDONLY);
  if (!fd) return parts;
  try {
    std::vector<uint8_t> buf(size_t{1} << 20);
    Xxh3 h;
    for (const auto& [name, t] : m.tensors) {
      if (t.file != f.name) continue;
      h.reset();
      hash_span(fd, t.offset, t.bytes, buf, h);
      if (t.scales_bytes) hash_span(fd, t.scales_offset, t.scales_bytes, buf, h);
      if (h.digest() != t.xxh) parts.push_back("tensor " + name);
    }
    for (const ExpertLayerRecord& e : m.expert_layers) {
      if (e.file != f.name) continue;
      for (int64_t x = 0; x < e.count; ++x) {
        h.reset();
        hash_span(fd, static_cast<uint64_t>(x) * e.stride, e.blob_bytes, buf, h);
        if (h.digest() != e.xxh[static_cast<size_t>(x)])
          parts.push_back(fmt::format("expert {} of layer {}", x, e.layer));
      }
    }
  } catch (const Error&) {
  }
  return parts;
}

}  // namespace

VerifyResult verify_container(const std::string& dir) {
  const Manifest m = read_manifest(dir);
  VerifyResult res;
  for (const FileRecord& f : m.files) {
    const std::string path = (std::filesystem::path(dir) / f.name).string();
    ++res.files;
    FileDigest d;
    try {
      d = hash_file(path);
    } catch (const Error& e) {
      res.ok = false;
      res.problems.push_back(e.what());
      continue;
    }
    res.bytes += d.bytes;
    if (d.bytes != f.bytes) {
      res.ok = false;
      res.problems.push_back(fmt::format("{}: {} bytes, the manifest says {}", path, d.bytes, f.bytes));
      continue;
    }
    if (d.xxh3 == f.xxh) {
      res.ok_files.push_back(f.name);
      continue;
    }
    res.ok = false;
    // Say which parts differ.
    const std::vector<std::string> parts = damaged_parts(m, f, path);
    std::string where;
    for (size_t i = 0; i < parts.size() && i < 8; ++i) where += (i ? ", " : "") + parts[i];
    if (parts.size() > 8) where += fmt::format(" and {} more", parts.size() - 8);
    res.problems.push_back(fmt::format("{}: checksum {} does not match the manifest's {}{}", path, xxh_hex(d.xxh3),
                                       xxh_hex(f.xxh), where.empty() ? "" : " (damaged: " + where + ")"));
  }
  return res;
}

}  // namespace strata
