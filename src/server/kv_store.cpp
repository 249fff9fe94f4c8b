#include "server/kv_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "format/container.h"
#include "kernels/matmul.h"
#include "core/error.h"

namespace strata::server {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'K', 'V'};
constexpr uint32_t kVersion = 2;  // 2: the record checksum covers the token
constexpr size_t kHeader = 64;
constexpr size_t kCountAt = 24;
constexpr size_t kScopeAt = 32;
constexpr size_t kRecHead = 16;  // token, zero, checksum

// --kv-dir may be shared with other users: a link planted there is never
// followed, and a FIFO never blocks an open. Records are read and written
// only through these.
Fd open_existing(const std::string& path, int flags) {
  return try_open_file(path, flags | O_NOFOLLOW | O_NONBLOCK);
}

// False at end of file or on an error: the store is a cache, and a file it
// cannot read is skipped, never fatal.
bool pread_all(const Fd& fd, void* p, size_t n, uint64_t off) {
  const IoResult r = try_pread_full(fd.get(), p, n, off);
  return r.error == 0 && r.bytes == n;
}

}  // namespace

uint64_t kv_fingerprint(const Model& m, const ForwardOptions& f, IntActivations acts) {
  std::string id;
  if (m.manifest) {
    id = manifest_to_json(*m.manifest).dump();
  } else {
    // A checkpoint: its config and the names and sizes of its files.
    if (FILE* f = std::fopen((fs::path(m.dir) / "config.json").c_str(), "rb")) {
      char b[4096];
      for (size_t n; (n = std::fread(b, 1, sizeof b, f)) > 0;) id.append(b, n);
      std::fclose(f);
    }
    std::vector<std::pair<std::string, uintmax_t>> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(m.dir, ec))
      if (e.is_regular_file(ec)) files.emplace_back(e.path().filename().string(), e.file_size(ec));
    std::sort(files.begin(), files.end());
    for (const auto& [n, s] : files) {
      id += "\n" + n + ":" + std::to_string(s);
      // A checkpoint's identity is its bytes; hashing them all would take
      // minutes, so: each safetensors header (names, dtypes, shapes, offsets)
      // and the XXH3 of its first and last MiB of data.
      if (!n.ends_with(".safetensors")) continue;
      const Fd fd = try_open_file((fs::path(m.dir) / n).string(), O_RDONLY);
      uint64_t hlen = 0;
      if (!fd || !pread_all(fd, &hlen, 8, 0) || hlen > (100u << 20) || 8 + hlen > s) continue;
      std::string head(hlen, '\0');
      if (!pread_all(fd, head.data(), hlen, 8)) continue;
      id += head;
      std::vector<uint8_t> b(std::min<uint64_t>(1u << 20, s - 8 - hlen));
      for (const uint64_t at : {8 + hlen, s - b.size()})
        if (pread_all(fd, b.data(), b.size(), at)) id += xxh_hex(XXH3_64bits(b.data(), b.size()));
    }
  }
  id += "\nform=" + std::to_string(static_cast<int>(f.form));
  id += " dense_attention=" + std::to_string(f.dense_attention ? 1 : 0);
  id += " int_activations=" + std::to_string(static_cast<int>(acts));
  if (f.kv != KvType::F32) id += std::string(" kv=") + kv_type_name(f.kv);  // f32 files keep their identity
  return XXH3_64bits(id.data(), id.size());
}

uint64_t key_scope(std::string_view api_key) {
  constexpr std::string_view kDomain = "strata prefix-reuse scope\n";
  std::string s(kDomain);
  s += api_key;
  const uint64_t h = XXH3_64bits(s.data(), s.size());
  return h == 0 ? 1 : h;
}

KvStore::KvStore(std::string dir, const ModelConfig& c, uint64_t fingerprint, int max_files, bool verbose, KvType kv)
    : dir_(std::move(dir)),
      fingerprint_(fingerprint),
      max_files_(std::max(1, max_files)),
      verbose_(verbose),
      kv_(kv) {
  size_t bytes = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    layer_widths_.push_back(c.cache_widths(l));
    bytes += Session::layer_bytes_per_position(c, l, kv);
  }
  record_bytes_ = kRecHead + bytes;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (!fs::is_directory(dir_)) fail("--kv-dir {}: not a directory and cannot be created", dir_);
  if (::access(dir_.c_str(), W_OK) != 0) fail("--kv-dir {}: not writable: {}", dir_, std::strerror(errno));
  const std::string lock = (fs::path(dir_) / ".lock").string();
  lock_fd_ = try_open_file(lock, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
  if (!lock_fd_) fail("--kv-dir {}: cannot create {}: {}", dir_, lock, std::strerror(errno));
  if (::flock(lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    lock_fd_.reset();
    fail("--kv-dir {}: in use by another strata serve (one server per directory)", dir_);
  }

  std::vector<std::pair<fs::file_time_type, std::string>> found;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("conv-") && name.ends_with(".kv.tmp")) {
      fs::remove(e.path(), ec);  // an unfinished first save: never part of the state
      continue;
    }
    if (!name.starts_with("conv-") || !name.ends_with(".kv") || e.is_symlink(ec) || !e.is_regular_file(ec)) continue;
    found.emplace_back(e.last_write_time(ec), e.path().string());
    const std::string num = name.substr(5, name.size() - 8);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(num.c_str(), &end, 10);
    if (errno == 0 && end && *end == 0 && v >= next_id_ && v < (1LL << 40)) next_id_ = v + 1;
  }
  std::sort(found.begin(), found.end());
  std::vector<uint8_t> head(kRecHead);
  for (const auto& [when, path] : found) {
    const Fd fd = open_existing(path, O_RDONLY);
    uint8_t h[kHeader];
    struct stat st{};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || !pread_all(fd, h, kHeader, 0)) {
      if (verbose_) std::fprintf(stderr, "strata: kv: skipping %s: unreadable header\n", path.c_str());
      continue;
    }
    uint32_t version = 0, rb = 0;
    uint64_t fp = 0, count = 0, scope = 0;
    std::memcpy(&version, h + 8, 4);
    std::memcpy(&rb, h + 12, 4);
    std::memcpy(&fp, h + 16, 8);
    std::memcpy(&count, h + kCountAt, 8);
    std::memcpy(&scope, h + kScopeAt, 8);
    const char* why = nullptr;
    if (std::memcmp(h, kMagic, 8) != 0) why = "not a strata KV file";
    else if (version != kVersion) why = "another format version";
    else if (rb != record_bytes_ || fp != fingerprint_) why = "saved by another model or with other engine options";
    if (why) {
      if (verbose_) std::fprintf(stderr, "strata: kv: skipping %s: %s\n", path.c_str(), why);
      continue;
    }
    const uint64_t fits = (static_cast<uint64_t>(st.st_size) - kHeader) / record_bytes_;
    if (count > fits) {
      if (verbose_)
        std::fprintf(stderr, "strata: kv: %s: count %llu but only %llu records present; using those\n", path.c_str(),
                     static_cast<unsigned long long>(count), static_cast<unsigned long long>(fits));
      count = fits;
    }
    Conv cv;
    cv.path = path;
    cv.disk_count = count;
    cv.scope = scope;
    cv.tokens.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      int32_t t = -1;
      if (!pread_all(fd, &t, 4, kHeader + i * record_bytes_) || t < 0 || t >= c.vocab_size) break;
      cv.tokens.push_back(t);
    }
    if (cv.tokens.empty()) continue;
    cv.id = static_cast<int64_t>(convs_.size());
    cv.last_used = ++tick_;
    convs_.push_back(std::move(cv));
  }
  // Ids must be unique: file numbers are only for naming.
  evict();
}

void KvStore::forget(int64_t id) {
  std::erase_if(convs_, [id](const Conv& c) { return c.id == id; });
}

KvStore::~KvStore() = default;  // closing lock_fd_ releases the flock

KvStore::Conv* KvStore::by_id(int64_t id) {
  for (Conv& c : convs_)
    if (c.id == id) return &c;
  return nullptr;
}

KvStore::Match KvStore::find(std::span<const int32_t> prompt, size_t limit, uint64_t scope) const {
  Match best;
  limit = std::min(limit, prompt.size());
  for (const Conv& c : convs_) {
    if (c.scope != scope) continue;
    const size_t lim = std::min(limit, c.tokens.size());
    size_t n = 0;
    while (n < lim && c.tokens[n] == prompt[n]) ++n;
    if (n > best.common) best = {c.id, n};
  }
  return best;
}

namespace {
// Part i of a layer's cache (latent, roped key, indexer key, k, v): its first
// byte and its element size (2: the halves of an f16 session's latent and
// roped key, or keys and values).
template <class LC>
auto part_of(LC& lc, size_t i, bool f16) {
  using B = std::conditional_t<std::is_const_v<LC>, const uint8_t*, uint8_t*>;
  if (f16 && i != 2) {
    auto* h = i == 0 ? &lc.latent16 : i == 1 ? &lc.rope_key16 : i == 3 ? &lc.k16 : &lc.v16;
    return std::pair<B, size_t>{reinterpret_cast<B>(h->data()), 2};
  }
  auto* v = i == 0 ? &lc.latent : i == 1 ? &lc.rope_key : i == 3 ? &lc.k : &lc.v;  // 2: the indexer key (lanes)
  return std::pair<B, size_t>{reinterpret_cast<B>(v->data()), 4};
}
}  // namespace

void KvStore::check_type(const Session& s) const {
  if (s.kv_type() != kv_)
    fail("kv: a {} session cannot be saved to or loaded from a store of {} keys", kv_type_name(s.kv_type()),
         kv_type_name(kv_));
}

void KvStore::pack(const Session& s, int64_t pos, int32_t token, uint8_t* rec) const {
  std::memset(rec, 0, kRecHead);
  std::memcpy(rec, &token, 4);
  uint8_t* out = rec + kRecHead;
  const bool f16 = kv_ == KvType::F16;
  std::vector<float> lane_row;  // an indexer key row in order
  for (size_t l = 0; l < layer_widths_.size(); ++l) {
    const LayerCache& lc = s.layer(static_cast<int64_t>(l));
    for (size_t i = 0; i < 5; ++i) {
      const int64_t w = layer_widths_[l][i];
      if (w <= 0) continue;
      if (i == 2) {  // stored in lanes (LaneRows): the record holds the row in order
        lane_row.resize(static_cast<size_t>(w));
        float* row = lane_row.data();
        lc.index_key.get_row(pos, row);
        out = std::copy_n(reinterpret_cast<const uint8_t*>(row), static_cast<size_t>(w) * 4, out);
        continue;
      }
      const auto [p, es] = part_of(lc, i, f16);
      out = std::copy_n(p + static_cast<size_t>(pos * w) * es, static_cast<size_t>(w) * es, out);
    }
  }
  const uint64_t h = XXH3_64bits_withSeed(rec + kRecHead, record_bytes_ - kRecHead, static_cast<uint32_t>(token));
  std::memcpy(rec + 8, &h, 8);
}

size_t KvStore::load(int64_t id, size_t n, Session& s, std::vector<int32_t>& tokens) {
  check_type(s);
  Conv* c = by_id(id);
  tokens.clear();
  // Only the main layers' keys are saved: the MTP layer's state and the
  // hidden states it is computed from start empty, so a resumed session
  // reuses every loaded position and drafts without the MTP layer
  // (Sequence::begin).
  s.truncate(0);
  if (!c) return 0;
  n = std::min({n, c->tokens.size(), static_cast<size_t>(s.capacity())});
  const Fd fd = open_existing(c->path, O_RDONLY);
  if (!fd) {
    if (verbose_) std::fprintf(stderr, "strata: kv: %s: %s (forgotten)\n", c->path.c_str(), std::strerror(errno));
    forget(id);
    return 0;
  }
  const size_t per_chunk = std::max<size_t>(1, (4u << 20) / record_bytes_);
  std::vector<float> lane_row;  // an indexer key row in order
  size_t done = 0;
  while (done < n) {
    const size_t k = std::min(per_chunk, n - done);
    buf_.resize(k * record_bytes_);
    if (!pread_all(fd, buf_.data(), buf_.size(), kHeader + done * record_bytes_)) break;
    size_t ok = 0;
    for (; ok < k; ++ok) {
      const uint8_t* rec = buf_.data() + ok * record_bytes_;
      uint64_t h = 0;
      int32_t t = 0;
      std::memcpy(&t, rec, 4);
      std::memcpy(&h, rec + 8, 8);
      if (h != XXH3_64bits_withSeed(rec + kRecHead, record_bytes_ - kRecHead, static_cast<uint32_t>(t)) ||
          t != c->tokens[done + ok])
        break;
      const uint8_t* in = rec + kRecHead;
      const int64_t pos = static_cast<int64_t>(done + ok);
      for (size_t l = 0; l < layer_widths_.size(); ++l) {
        LayerCache& lc = s.layer(static_cast<int64_t>(l));
        for (size_t i = 0; i < 5; ++i) {
          const int64_t w = layer_widths_[l][i];
          if (w <= 0) continue;
          if (i == 2) {
            lane_row.resize(static_cast<size_t>(w));
            float* row = lane_row.data();
            std::memcpy(row, in, static_cast<size_t>(w) * 4);
            lc.index_key.set_row(pos, row);
            in += static_cast<size_t>(w) * 4;
            continue;
          }
          const auto [p, es] = part_of(lc, i, kv_ == KvType::F16);
          std::copy_n(in, static_cast<size_t>(w) * es, p + static_cast<size_t>(pos * w) * es);
          in += static_cast<size_t>(w) * es;
        }
      }
      tokens.push_back(t);
    }
    done += ok;
    if (ok < k) {
      if (verbose_)
        std::fprintf(stderr, "strata: kv: %s: record %zu is damaged; resuming from the %zu before it\n",
                     c->path.c_str(), done, done);
      c->tokens.resize(done);  // never offered beyond the damage again
      break;
    }
  }
  s.n_past = static_cast<int64_t>(done);
  c->last_used = ++tick_;
  records_loaded_ += done;
  return done;
}

void KvStore::write_new(Conv& c, const Session& s, std::span<const int32_t> tokens) {
  const std::string tmp = c.path + ".tmp";
  try {
    const Fd fd = create_new_file(tmp, 0600);  // conversations are private
    uint8_t h[kHeader] = {};
    std::memcpy(h, kMagic, 8);
    const uint32_t rb = static_cast<uint32_t>(record_bytes_);
    std::memcpy(h + 8, &kVersion, 4);
    std::memcpy(h + 12, &rb, 4);
    std::memcpy(h + 16, &fingerprint_, 8);
    const uint64_t count = tokens.size();
    std::memcpy(h + kCountAt, &count, 8);
    std::memcpy(h + kScopeAt, &c.scope, 8);
    pwrite_full(fd, h, kHeader, 0);
    saved_step("write", tmp);
    write_records(fd, s, tokens, 0);
    fsync_file(fd, /*data_only=*/true);
    saved_step("sync", tmp);
    if (::rename(tmp.c_str(), c.path.c_str()) != 0) fail("{}: rename failed: {}", c.path, std::strerror(errno));
    saved_step("rename", c.path);
    try {
      fsync_dir(dir_);
    } catch (const Error&) {
      // Best effort, as ever: the file is complete; only the rename's durability is in doubt.
    }
    saved_step("sync dir", dir_);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  bytes_written_ += kHeader + tokens.size() * record_bytes_;
  c.tokens.assign(tokens.begin(), tokens.end());
  c.disk_count = tokens.size();
}

void KvStore::write_records(const Fd& fd, const Session& s, std::span<const int32_t> tokens, size_t from) {
  const size_t per_chunk = std::max<size_t>(1, (4u << 20) / record_bytes_);
  for (size_t done = from; done < tokens.size();) {
    const size_t k = std::min(per_chunk, tokens.size() - done);
    buf_.resize(k * record_bytes_);
    for (size_t i = 0; i < k; ++i)
      pack(s, static_cast<int64_t>(done + i), tokens[done + i], buf_.data() + i * record_bytes_);
    pwrite_full(fd, buf_.data(), buf_.size(), kHeader + done * record_bytes_);
    saved_step("write", fd.path());
    done += k;
  }
}

void KvStore::append(Conv& c, const Session& s, std::span<const int32_t> tokens) {
  const size_t from = c.tokens.size();
  const Fd fd = open_existing(c.path, O_WRONLY);
  if (!fd) fail("{}: cannot open: {}", c.path, std::strerror(errno));
  if (c.disk_count > from) {
    // Records past what is offered (a damaged one, a bad token) are hidden
    // first, so a crash while they are overwritten cannot mix two histories.
    const uint64_t count = from;
    pwrite_full(fd, &count, 8, kCountAt);
    saved_step("write", c.path);
    fsync_file(fd, /*data_only=*/true);
    saved_step("sync", c.path);
    c.disk_count = from;
  }
  write_records(fd, s, tokens, from);
  // The records are durable before the count that makes them visible.
  fsync_file(fd, /*data_only=*/true);
  saved_step("sync", c.path);
  const uint64_t count = tokens.size();
  pwrite_full(fd, &count, 8, kCountAt);
  saved_step("write", c.path);
  fsync_file(fd, /*data_only=*/true);
  saved_step("sync", c.path);
  bytes_written_ += (tokens.size() - from) * record_bytes_ + 8;
  c.tokens.assign(tokens.begin(), tokens.end());
  c.disk_count = tokens.size();
}

int64_t KvStore::save(int64_t origin, const Session& s, std::span<const int32_t> tokens, uint64_t scope) {
  check_type(s);
  tokens = tokens.first(std::min(tokens.size(), static_cast<size_t>(std::max<int64_t>(0, s.n_past))));
  if (tokens.empty()) return origin;
  Conv* c = by_id(origin);
  if (c && c->scope == scope && c->tokens.size() <= tokens.size() && std::equal(c->tokens.begin(), c->tokens.end(), tokens.begin())) {
    std::error_code ec;
    if (fs::exists(c->path, ec)) {
      if (c->tokens.size() < tokens.size()) append(*c, s, tokens);
      c->last_used = ++tick_;
      return c->id;
    }
    // Its file is gone (removed by hand): forget it and save afresh.
    if (verbose_) std::fprintf(stderr, "strata: kv: %s disappeared; saving the conversation anew\n", c->path.c_str());
    forget(c->id);
  }
  // A new conversation, or a branch of a saved one: a file of its own.
  Conv nc;
  nc.id = convs_.empty() ? 0 : std::max_element(convs_.begin(), convs_.end(), [](const Conv& a, const Conv& b) {
                                 return a.id < b.id;
                               })->id + 1;
  char name[40];
  std::snprintf(name, sizeof name, "conv-%08lld.kv", static_cast<long long>(next_id_++));
  nc.path = (fs::path(dir_) / name).string();
  nc.scope = scope;
  write_new(nc, s, tokens);
  nc.last_used = ++tick_;
  convs_.push_back(std::move(nc));
  const int64_t id = convs_.back().id;
  evict();
  return id;
}

void KvStore::evict() {
  while (static_cast<int>(convs_.size()) > max_files_) {
    auto old = std::min_element(convs_.begin(), convs_.end(),
                                [](const Conv& a, const Conv& b) { return a.last_used < b.last_used; });
    std::error_code ec;
    fs::remove(old->path, ec);
    convs_.erase(old);
  }
}

}  // namespace strata::server
