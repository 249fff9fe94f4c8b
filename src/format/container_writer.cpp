#include "format/container_writer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include "format/checkpoint_tensors.h"
#include "format/safetensors.h"
#include "core/numeric.h"
#include "core/config.h"
#include "core/weight.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "core/error.h"

namespace strata {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Hashing and atomic files

Xxh3::Xxh3() : st_(XXH3_createState()) {
  if (!st_) throw std::bad_alloc();
  reset();
}
Xxh3::~Xxh3() { XXH3_freeState(st_); }
void Xxh3::reset() { XXH3_64bits_reset(st_); }
void Xxh3::update(const void* p, size_t n) {
  if (n) XXH3_64bits_update(st_, p, n);
}
uint64_t Xxh3::digest() const { return XXH3_64bits_digest(st_); }

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open directory: {}", dir, std::strerror(errno));
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); the data is synced.
  if (rc != 0 && err != EINVAL) fail("{}: cannot sync directory: {}", dir, std::strerror(err));
}

namespace {

std::string parent_dir(const std::string& path) {
  const fs::path p = fs::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

constexpr size_t kWriteBuffer = size_t{4} << 20;

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot create: {}", tmp_, std::strerror(errno));
  buf_.resize(kWriteBuffer);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFileWriter::flush() {
  size_t done = 0;
  while (done < used_) {
    const ssize_t n = ::write(fd_, buf_.data() + done, used_ - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      fail("{}: write failed at byte {}: {}{}", tmp_, pos_ - (used_ - done), std::strerror(err),
           err == ENOSPC || err == EDQUOT ? " (the disk is full; free space and re-run with --resume)" : "");
    }
    done += static_cast<size_t>(n);
  }
  used_ = 0;
}

void AtomicFileWriter::write(const void* p, size_t n) {
  hash_.update(p, n);
  const auto* src = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const size_t k = std::min(n, buf_.size() - used_);
    std::memcpy(buf_.data() + used_, src, k);
    used_ += k;
    src += k;
    n -= k;
    pos_ += k;
    if (used_ == buf_.size()) flush();
  }
  if (pos_ >= kill_at_) {  // test hook: die with the file half written
    flush();
    ::raise(SIGKILL);
  }
}

void AtomicFileWriter::zeros(uint64_t n) {
  static const uint8_t kZero[4096] = {};
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof kZero));
    write(kZero, k);
    n -= k;
  }
}

uint64_t AtomicFileWriter::commit() {
  flush();
  if (::fsync(fd_) != 0) fail("{}: cannot flush to disk: {}", tmp_, std::strerror(errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("{}: cannot close: {}", tmp_, std::strerror(errno));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail("{}: cannot rename into place: {}", path_, std::strerror(errno));
  committed_ = true;
  fsync_dir(parent_dir(path_));
  return hash_.digest();
}

namespace {

// Hashes a whole file; throws naming it if it cannot be read.
std::pair<uint64_t, uint64_t> hash_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::vector<uint8_t> buf(kWriteBuffer);
  Xxh3 h;
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail("{}: read failed at byte {}: {}", path, total, std::strerror(err));
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return {total, h.digest()};
}

void pread_exact(int fd, const std::string& path, uint64_t off, uint64_t n, void* dst) {
  auto* p = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, p + done, static_cast<size_t>(std::min<uint64_t>(n - done, 1u << 30)),
                              static_cast<off_t>(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) fail("{}: read of {} bytes at {} failed: {}", path, n, off, r < 0 ? std::strerror(errno) : "end of file");
    done += static_cast<uint64_t>(r);
  }
}

// Writes a small file atomically (temp + fsync + rename).
void write_small_atomic(const std::string& path, const std::string& text) {
  AtomicFileWriter w(path);
  w.write(text.data(), text.size());
  w.commit();
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string human_bytes(double b) {
  if (b >= 1e12) return fmt::format("{:.2f} TB", b / 1e12);
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.1f} kB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

std::string human_time(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const uint64_t t = static_cast<uint64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux: kilobytes
}

// ---------------------------------------------------------------------------
// Progress: one updating line on a terminal (4 updates a second at most),
// a line every 5 seconds otherwise.

class Progress {
 public:
  Progress(uint64_t total, bool on) : total_(total), on_(on), tty_(::isatty(STDERR_FILENO) == 1) {
    start_ = last_ = Clock::now();
  }
  void skip(uint64_t n) { done_ += n, skipped_ += n; }
  void add(uint64_t n) {
    done_ += n;
    if (!on_) return;
    const auto now = Clock::now();
    if (now - last_ < (tty_ ? std::chrono::milliseconds(250) : std::chrono::milliseconds(5000))) return;
    last_ = now;
    print(now);
  }
  void finish() {
    if (on_ && tty_ && printed_) {
      print(Clock::now());
      std::fputc('\n', stderr);
    }
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  void print(Clock::time_point now) {
    const double el = std::chrono::duration<double>(now - start_).count();
    const double rate = el > 0 ? static_cast<double>(done_ - skipped_) / el : 0.0;
    const double left = static_cast<double>(total_ - std::min(done_, total_));
    const double pct = total_ ? 100.0 * static_cast<double>(done_) / static_cast<double>(total_) : 100.0;
    const std::string line = fmt::format("convert: {} / {} ({:.0f}%)  {}/s  ETA {}", human_bytes(static_cast<double>(done_)),
                                         human_bytes(static_cast<double>(total_)), pct, human_bytes(rate),
                                         rate > 0 ? human_time(left / rate) : std::string("?"));
    if (tty_)
      std::fprintf(stderr, "\r%s\033[K", line.c_str());
    else
      std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    printed_ = true;
  }
  uint64_t total_, done_ = 0, skipped_ = 0;
  bool on_, tty_, printed_ = false;
  Clock::time_point start_, last_;
};

// ---------------------------------------------------------------------------
// The plan: every output byte's place, computed from the checkpoint headers,
// the config and the options before anything is written.

constexpr const char* kStateFile = "convert-state.json";
constexpr const char* kStateFormat = "strata-convert-state";
constexpr int kConverterVersion = 1;  // bump when the bytes written for the same input change
constexpr const char* kDenseFile = "dense.bin";
const char* const kCopiedFiles[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                    "chat_template.jinja"};

struct DenseItem {
  std::string name;  // manifest key == checkpoint tensor name
  bool vector = false;
  int64_t rows = 0, cols = 0;
  TensorRecord rec;
  uint64_t src_bytes = 0;
};

struct ExpertItem {
  std::string prefix;  // "model.layers.L.mlp.experts."
  ExpertLayerRecord rec;
  uint64_t src_bytes = 0;  // all experts together
};

enum class FileKind { Dense, Experts, Copy };

struct FileItem {
  std::string name;
  FileKind kind = FileKind::Dense;
  size_t index = 0;  // into Plan::experts for Experts
  uint64_t bytes = 0;
  uint64_t src_bytes = 0;
};

struct Plan {
  ModelConfig cfg;
  Json config_json, options, source;
  std::vector<DenseItem> dense;
  std::vector<ExpertItem> experts;
  std::vector<FileItem> files;
  std::vector<std::string> unused;
  uint64_t total_src = 0;
};

WeightFormat format_of_bits(int bits) {
  switch (bits) {
    case 4: return WeightFormat::INT4;
    case 8: return WeightFormat::INT8;
    default: return WeightFormat::BF16;
  }
}

bool is_int(WeightFormat f) { return f == WeightFormat::INT8 || f == WeightFormat::INT4; }

// A matrix record without its place: format, effective group, shape, sizes.
TensorRecord matrix_record(WeightFormat f, int64_t rows, int64_t cols, int64_t group_size) {
  TensorRecord r;
  r.format = f;
  // A group as wide as the row (or wider) is one scale per row: written as
  // group 0, the per-row form every kernel supports.
  r.group = is_int(f) && group_size > 0 && group_size < cols ? group_size : 0;
  r.shape = {rows, cols};
  std::tie(r.bytes, r.scales_bytes) = tensor_bytes(f, rows, cols, r.group, 0, 0);
  return r;
}

// Places data then scales from `cursor`, each kTensorAlign-aligned.
void place(TensorRecord& r, uint64_t& cursor) {
  r.offset = align_up(cursor, kTensorAlign);
  cursor = r.offset + r.bytes;
  if (r.scales_bytes) {
    r.scales_offset = align_up(cursor, kTensorAlign);
    cursor = r.scales_offset + r.scales_bytes;
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string scale_name_of(const std::string& name) {
  std::string s = name;
  const std::string suffix = ".weight";
  if (s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
    s.resize(s.size() - suffix.size());
  return s + ".weight_scale_inv";
}

class Planner {
 public:
  Planner(const Checkpoint& ck, const ModelConfig& c) : ck_(ck), c_(c) {}

  // Checks a source tensor's presence, shape and dtype; returns its bytes
  // (with the FP8 scale tensor) and marks both as used.
  uint64_t source(const std::string& name, const std::vector<int64_t>& shape, bool matrix) {
    const TensorEntry& e = ck_.entry(name);
    if (e.shape != shape)
      fail("{}: tensor \"{}\" has shape {}, expected {} (from config.json)", ck_.file_of(name).path(), name,
           shape_str(e.shape), shape_str(shape));
    used_.insert(name);
    uint64_t bytes = e.bytes();
    switch (e.dtype) {
      case DType::F32:
      case DType::BF16:
      case DType::F16: break;
      case DType::F8_E4M3:
        if (matrix) {
          const std::string s = scale_name_of(name);
          if (!ck_.has(s)) fail("{}: FP8 tensor \"{}\" has no scale tensor \"{}\"", ck_.file_of(name).path(), name, s);
          used_.insert(s);
          bytes += ck_.entry(s).bytes();
          break;
        }
        [[fallthrough]];
      default:
        fail("{}: tensor \"{}\" has dtype {}, expected BF16, F16, F32{}", ck_.file_of(name).path(), name,
             dtype_name(e.dtype), matrix ? " or F8_E4M3" : "");
    }
    return bytes;
  }

  void matrix(const std::string& name, int64_t rows, int64_t cols, WeightFormat f, int64_t group) {
    DenseItem it;
    it.name = name;
    it.rows = rows;
    it.cols = cols;
    it.src_bytes = source(name, {rows, cols}, true);
    it.rec = matrix_record(f, rows, cols, group);
    it.rec.file = kDenseFile;
    place(it.rec, cursor_);
    dense.push_back(std::move(it));
  }
  void vector(const std::string& name, int64_t n) {
    DenseItem it;
    it.name = name;
    it.vector = true;
    it.rows = 1;
    it.cols = n;
    it.src_bytes = source(name, {n}, false);
    it.rec.format = WeightFormat::F32;
    it.rec.shape = {n};
    it.rec.bytes = static_cast<uint64_t>(n) * 4;
    it.rec.file = kDenseFile;
    place(it.rec, cursor_);
    dense.push_back(std::move(it));
  }
  void experts(int64_t layer, const std::string& prefix, WeightFormat f, int64_t group) {
    ExpertItem it;
    it.prefix = prefix;
    ExpertLayerRecord& r = it.rec;
    r.layer = layer;
    r.file = fmt::format("experts-{:03}.bin", layer);
    r.count = c_.n_routed_experts;
    const int64_t I = c_.moe_intermediate_size, D = c_.hidden_size;
    r.gate = matrix_record(f, I, D, group);
    r.up = matrix_record(f, I, D, group);
    r.down = matrix_record(f, D, I, group);
    uint64_t cur = 0;
    place(r.gate, cur);
    place(r.up, cur);
    place(r.down, cur);
    r.blob_bytes = cur;
    r.stride = align_up(cur, kExpertAlign);
    for (int64_t e = 0; e < r.count; ++e) {
      const std::string p = prefix + std::to_string(e);
      it.src_bytes += source(p + ".gate_proj.weight", {I, D}, true);
      it.src_bytes += source(p + ".up_proj.weight", {I, D}, true);
      it.src_bytes += source(p + ".down_proj.weight", {D, I}, true);
    }
    expert_items.push_back(std::move(it));
  }

  uint64_t dense_bytes() const { return cursor_; }
  const std::set<std::string>& used() const { return used_; }

  std::vector<DenseItem> dense;
  std::vector<ExpertItem> expert_items;

 private:
  const Checkpoint& ck_;
  const ModelConfig& c_;
  uint64_t cursor_ = 0;
  std::set<std::string> used_;
};

std::string file_name_of(const std::string& path) { return fs::path(path).filename().string(); }

Json source_identity(const Checkpoint& ck, const std::string& in_dir, const std::string& config_text) {
  std::map<std::string, uint64_t> files;
  for (const std::string& n : ck.names()) {
    const SafetensorsFile& f = ck.file_of(n);
    files[file_name_of(f.path())] = f.file_size();
  }
  const fs::path index = fs::path(in_dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::is_regular_file(index, ec)) files[index.filename().string()] = fs::file_size(index, ec);
  files["config.json"] = config_text.size();
  Json j;
  fs::path dir = fs::absolute(fs::path(in_dir)).lexically_normal();
  if (dir.filename().empty() && dir.has_parent_path()) dir = dir.parent_path();  // trailing slash
  j["dir"] = dir.string();
  j["config_xxh3"] = xxh_hex(XXH3_64bits(config_text.data(), config_text.size()));
  j["files"] = Json::array();
  for (const auto& [name, bytes] : files) j["files"].push_back({{"name", name}, {"bytes", bytes}});
  return j;
}

Plan make_plan(const Checkpoint& ck, const ConvertOptions& o) {
  Plan plan;
  const std::string cfg_path = (fs::path(o.in_dir) / "config.json").string();
  const std::string cfg_text = read_small_file(cfg_path, 16u << 20);
  plan.config_json = parse_json(cfg_text, cfg_path);
  plan.cfg = parse_model_config(plan.config_json, cfg_path);
  plan.options = o.to_json();
  plan.source = source_identity(ck, o.in_dir, cfg_text);
  const ModelConfig& c = plan.cfg;

  const int64_t nh = c.num_hidden_layers;
  if (c.num_nextn_predict_layers > 0 && !ck.has("model.layers." + std::to_string(nh) + ".eh_proj.weight"))
    fail("{}: config has num_nextn_predict_layers={} but the checkpoint has no MTP layer tensors "
         "(model.layers.{}.eh_proj.weight)",
         o.in_dir, c.num_nextn_predict_layers, nh);

  Planner P(ck, c);
  const int64_t g = o.group_size, D = c.hidden_size, H = c.num_attention_heads;
  P.matrix("model.embed_tokens.weight", c.vocab_size, D, format_of_bits(o.embed_bits), g);
  for (int64_t L = 0; L < c.num_weight_layers(); ++L) {
    const bool mtp = L >= nh;
    auto fmt_for = [&](int bits) { return format_of_bits(mtp ? o.mtp_bits : bits); };
    const std::string p = "model.layers." + std::to_string(L);
    P.vector(p + ".input_layernorm.weight", D);
    P.vector(p + ".post_attention_layernorm.weight", D);
    const std::string ap = p + ".self_attn";
    P.matrix(ap + ".q_a_proj.weight", c.q_lora_rank, D, fmt_for(o.attn_bits), g);
    P.vector(ap + ".q_a_layernorm.weight", c.q_lora_rank);
    P.matrix(ap + ".q_b_proj.weight", H * c.qk_head_dim(), c.q_lora_rank, fmt_for(o.attn_bits), g);
    P.matrix(ap + ".kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, D, fmt_for(o.attn_bits), g);
    P.vector(ap + ".kv_a_layernorm.weight", c.kv_lora_rank);
    P.matrix(ap + ".kv_b_proj.weight", H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank, fmt_for(o.kvb_bits),
             g);
    P.matrix(ap + ".o_proj.weight", D, H * c.v_head_dim, fmt_for(o.o_bits), g);
    if (c.indexer_full(L)) {
      const std::string ip = ap + ".indexer";
      P.matrix(ip + ".wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank, fmt_for(o.attn_bits), g);
      P.matrix(ip + ".wk.weight", c.index_head_dim, D, fmt_for(o.attn_bits), g);
      P.matrix(ip + ".weights_proj.weight", c.index_n_heads, D, WeightFormat::BF16, 0);
      P.vector(ip + ".k_norm.weight", c.index_head_dim);
      P.vector(ip + ".k_norm.bias", c.index_head_dim);
    }
    const std::string mp = p + ".mlp";
    if (c.is_moe(L)) {
      P.matrix(mp + ".gate.weight", c.n_routed_experts, D, WeightFormat::F32, 0);
      if (ck.has(mp + ".gate.e_score_correction_bias")) P.vector(mp + ".gate.e_score_correction_bias", c.n_routed_experts);
      if (c.n_shared_experts > 0) {
        const int64_t w = c.moe_intermediate_size * c.n_shared_experts;
        const WeightFormat f = fmt_for(o.shared_bits);
        P.matrix(mp + ".shared_experts.gate_proj.weight", w, D, f, g);
        P.matrix(mp + ".shared_experts.up_proj.weight", w, D, f, g);
        P.matrix(mp + ".shared_experts.down_proj.weight", D, w, f, g);
      }
      P.experts(L, mp + ".experts.", format_of_bits(mtp ? o.mtp_bits : o.expert_bits), g);
    } else {
      const WeightFormat f = fmt_for(o.dense_mlp_bits);
      P.matrix(mp + ".gate_proj.weight", c.intermediate_size, D, f, g);
      P.matrix(mp + ".up_proj.weight", c.intermediate_size, D, f, g);
      P.matrix(mp + ".down_proj.weight", D, c.intermediate_size, f, g);
    }
    if (mtp) {
      P.vector(p + ".enorm.weight", D);
      P.vector(p + ".hnorm.weight", D);
      P.vector(p + ".shared_head.norm.weight", D);
      P.matrix(p + ".eh_proj.weight", D, 2 * D, format_of_bits(o.mtp_bits), g);
    }
  }
  P.vector("model.norm.weight", D);
  P.matrix("lm_head.weight", c.vocab_size, D, format_of_bits(o.head_bits), g);

  plan.dense = std::move(P.dense);
  plan.experts = std::move(P.expert_items);
  for (const std::string& n : ck.names())
    if (!P.used().count(n)) plan.unused.push_back(n);

  FileItem dense{kDenseFile, FileKind::Dense, 0, P.dense_bytes(), 0};
  for (const DenseItem& d : plan.dense) dense.src_bytes += d.src_bytes;
  plan.files.push_back(dense);
  for (size_t i = 0; i < plan.experts.size(); ++i) {
    const ExpertItem& e = plan.experts[i];
    plan.files.push_back(
        {e.rec.file, FileKind::Experts, i, e.rec.stride * static_cast<uint64_t>(e.rec.count), e.src_bytes});
  }
  for (const char* name : kCopiedFiles) {
    const fs::path src = fs::path(o.in_dir) / name;
    std::error_code ec;
    if (!fs::exists(src, ec)) continue;
    if (!fs::is_regular_file(src, ec)) fail("{}: not a regular file", src.string());
    const uint64_t bytes = fs::file_size(src, ec);
    if (ec) fail("{}: cannot examine: {}", src.string(), ec.message());
    plan.files.push_back({name, FileKind::Copy, 0, bytes, 0});
  }
  for (const FileItem& f : plan.files) plan.total_src += f.src_bytes;
  return plan;
}

// ---------------------------------------------------------------------------
// Encoding

int64_t row_bytes(const TensorRecord& r) {
  const int64_t cols = r.shape.back();
  switch (r.format) {
    case WeightFormat::F32: return cols * 4;
    case WeightFormat::BF16: return cols * 2;
    case WeightFormat::INT8: return quant_row_bytes(QuantBits::Int8, cols);
    case WeightFormat::INT4: return quant_row_bytes(QuantBits::Int4, cols);
    case WeightFormat::FP8_BLOCK: break;
  }
  fail("internal: cannot encode format {}", weight_format_name(r.format));
}

int64_t row_groups(const TensorRecord& r) { return is_int(r.format) ? quant_groups(r.shape.back(), r.group) : 0; }

// Encodes rows [r0, r1) of `src` in the format of `rec`: data for row r0 at
// `data`, its scales at `scales`. Rows are independent, so the bytes do not
// depend on the thread count. Returns the first row holding a non-finite
// value, or -1.
int64_t encode_rows(const Weight& src, const TensorRecord& rec, int64_t r0, int64_t r1, uint8_t* data, float* scales,
                    ThreadPool& pool) {
  const int64_t cols = src.cols, rb = row_bytes(rec), ng = row_groups(rec);
  std::atomic<int64_t> bad{INT64_MAX};
  pool.parallel_for(r1 - r0, [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t i = b; i < e; ++i) {
      const int64_t r = r0 + i;
      src.row_f32(r, row.data());
      bool finite = true;
      for (float v : row) finite &= std::isfinite(v);
      if (!finite) {
        int64_t cur = bad.load();
        while (r < cur && !bad.compare_exchange_weak(cur, r)) {
        }
        continue;
      }
      uint8_t* d = data + i * rb;
      switch (rec.format) {
        case WeightFormat::F32: std::memcpy(d, row.data(), static_cast<size_t>(cols) * 4); break;
        case WeightFormat::BF16:
          for (int64_t c = 0; c < cols; ++c) {
            const uint16_t h = f32_to_bf16(row[static_cast<size_t>(c)]);
            std::memcpy(d + 2 * c, &h, 2);
          }
          break;
        case WeightFormat::INT8:
        case WeightFormat::INT4:
          quantize_row(rec.format == WeightFormat::INT8 ? QuantBits::Int8 : QuantBits::Int4, rec.group, row.data(),
                       cols, d, scales + i * ng);
          break;
        case WeightFormat::FP8_BLOCK: break;
      }
    }
  });
  const int64_t b = bad.load();
  return b == INT64_MAX ? -1 : b;
}

[[noreturn]] void fail_non_finite(const Checkpoint& ck, const std::string& name, int64_t row) {
  fail("{}: tensor \"{}\" row {} holds a NaN or infinite value; refusing to convert a damaged checkpoint",
       ck.file_of(name).path(), name, row);
}

struct Converter {
  const Checkpoint& ck;
  const Plan& plan;
  ThreadPool& pool;
  Progress& prog;
  const std::string& in_dir;

  Weight load(const std::string& name, int64_t rows, int64_t cols) const {
    return load_weight(ck, name, rows, cols, plan.cfg.fp8_block_rows, plan.cfg.fp8_block_cols);
  }

  // dense.bin; returns the per-tensor checksums.
  std::map<std::string, uint64_t> write_dense(AtomicFileWriter& w) {
    std::map<std::string, uint64_t> sums;
    std::vector<uint8_t> buf;
    std::vector<float> scales;
    for (const DenseItem& it : plan.dense) {
      const TensorRecord& rec = it.rec;
      w.zeros(rec.offset - w.pos());
      Xxh3 th;
      if (it.vector) {
        const std::vector<float> v = load_f32(ck, it.name, {it.cols});
        for (size_t i = 0; i < v.size(); ++i)
          if (!std::isfinite(v[i])) fail_non_finite(ck, it.name, static_cast<int64_t>(i));
        w.write(v.data(), v.size() * 4);
        th.update(v.data(), v.size() * 4);
      } else {
        const Weight src = load(it.name, it.rows, it.cols);
        const int64_t rb = row_bytes(rec), ng = row_groups(rec);
        scales.assign(static_cast<size_t>(it.rows * ng), 0.0f);
        const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(kWriteBuffer) / rb, 1, it.rows);
        buf.resize(static_cast<size_t>(chunk * rb));
        for (int64_t r0 = 0; r0 < it.rows; r0 += chunk) {
          const int64_t r1 = std::min(it.rows, r0 + chunk);
          const int64_t bad = encode_rows(src, rec, r0, r1, buf.data(), ng ? scales.data() + r0 * ng : nullptr, pool);
          if (bad >= 0) fail_non_finite(ck, it.name, bad);
          const size_t n = static_cast<size_t>((r1 - r0) * rb);
          w.write(buf.data(), n);
          th.update(buf.data(), n);
        }
        if (ng) {
          w.zeros(rec.scales_offset - w.pos());
          w.write(scales.data(), scales.size() * 4);
          th.update(scales.data(), scales.size() * 4);
        }
      }
      sums[it.name] = th.digest();
      prog.add(it.src_bytes);
    }
    return sums;
  }

  // experts-LLL.bin; returns the per-expert checksums.
  std::vector<uint64_t> write_experts(AtomicFileWriter& w, const ExpertItem& it) {
    const ExpertLayerRecord& r = it.rec;
    std::vector<uint64_t> sums;
    std::vector<uint8_t> blob(static_cast<size_t>(r.blob_bytes));
    const uint64_t per_expert = it.src_bytes / static_cast<uint64_t>(r.count);
    for (int64_t e = 0; e < r.count; ++e) {
      std::fill(blob.begin(), blob.end(), uint8_t{0});
      const std::string p = it.prefix + std::to_string(e);
      for (auto [part, rec] : {std::pair{".gate_proj.weight", &r.gate}, std::pair{".up_proj.weight", &r.up},
                               std::pair{".down_proj.weight", &r.down}}) {
        const std::string name = p + part;
        const Weight src = load(name, rec->shape[0], rec->shape[1]);
        float* scales = reinterpret_cast<float*>(blob.data() + rec->scales_offset);
        const int64_t bad = encode_rows(src, *rec, 0, src.rows, blob.data() + rec->offset, scales, pool);
        if (bad >= 0) fail_non_finite(ck, name, bad);
      }
      sums.push_back(XXH3_64bits(blob.data(), blob.size()));
      w.write(blob.data(), blob.size());
      w.zeros(r.stride - r.blob_bytes);
      prog.add(e + 1 == r.count ? it.src_bytes - per_expert * static_cast<uint64_t>(e) : per_expert);
    }
    return sums;
  }

  void copy(AtomicFileWriter& w, const std::string& name) {
    const std::string src = (fs::path(in_dir) / name).string();
    int fd = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", src, std::strerror(errno));
    std::vector<uint8_t> buf(1 << 20);
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        fail("{}: read failed: {}", src, std::strerror(err));
      }
      if (n == 0) break;
      try {
        w.write(buf.data(), static_cast<size_t>(n));
      } catch (...) {
        ::close(fd);
        throw;
      }
    }
    ::close(fd);
  }
};

// ---------------------------------------------------------------------------
// State, identity, the output directory

std::string identity_mismatch(const Json& have_opts, const Json& have_src, const Json& want_opts,
                              const Json& want_src) {
  std::vector<std::string> diffs;
  std::set<std::string> keys;
  if (have_opts.is_object())
    for (auto it = have_opts.begin(); it != have_opts.end(); ++it) keys.insert(it.key());
  for (auto it = want_opts.begin(); it != want_opts.end(); ++it) keys.insert(it.key());
  for (const std::string& k : keys) {
    const Json a = have_opts.is_object() ? have_opts.value(k, Json()) : Json();
    const Json b = want_opts.value(k, Json());
    if (a != b) diffs.push_back(fmt::format("--{} was {}, now {}", k, a.dump(), b.dump()));
  }
  auto field = [](const Json& j, const char* k) { return j.is_object() ? j.value(k, Json()) : Json(); };
  if (field(have_src, "config_xxh3") != field(want_src, "config_xxh3"))
    diffs.push_back("the source config.json differs");
  if (field(have_src, "files") != field(want_src, "files"))
    diffs.push_back("the source checkpoint files differ (names or sizes)");
  std::string out;
  for (const auto& d : diffs) out += (out.empty() ? "" : "; ") + d;
  return out;
}

struct DoneFile {
  uint64_t bytes = 0, xxh = 0;
  std::map<std::string, uint64_t> tensors;  // dense.bin
  std::vector<uint64_t> experts;            // experts-LLL.bin
};

struct State {
  std::map<std::string, DoneFile> done;
};

Json state_to_json(const Plan& plan, const State& st) {
  Json j;
  j["format"] = kStateFormat;
  j["version"] = 1;
  j["converter"] = kConverterVersion;
  j["options"] = plan.options;
  j["source"] = plan.source;
  j["done"] = Json::object();
  for (const auto& [name, d] : st.done) {
    Json f{{"bytes", d.bytes}, {"xxh3", xxh_hex(d.xxh)}};
    if (!d.tensors.empty()) {
      f["tensors"] = Json::object();
      for (const auto& [t, h] : d.tensors) f["tensors"][t] = xxh_hex(h);
    }
    if (!d.experts.empty()) {
      f["experts"] = Json::array();
      for (uint64_t h : d.experts) f["experts"].push_back(xxh_hex(h));
    }
    j["done"][name] = std::move(f);
  }
  return j;
}

// Reads convert-state.json; a file that does not parse as a state is an error
// (the user decides with --force).
State state_from_json(const Json& j, const std::string& path, const Plan& plan) {
  auto bad = [&](const std::string& what) -> Error {
    return Error(fmt::format("{}: {}; pass --force to start the conversion over", path, what));
  };
  if (!j.is_object() || j.value("format", Json()) != kStateFormat) throw bad("not a strata conversion state");
  if (j.value("converter", Json()) != kConverterVersion)
    throw bad("written by another version of strata convert, whose output may differ");
  const std::string mm = identity_mismatch(j.value("options", Json()), j.value("source", Json()), plan.options,
                                           plan.source);
  if (!mm.empty())
    throw Error(fmt::format("{}: this unfinished conversion was started with other options or another source: {}. "
                            "Resume with the same options and source, or pass --force to start over",
                            path, mm));
  State st;
  const Json done = j.value("done", Json::object());
  if (!done.is_object()) throw bad("field \"done\" is not an object");
  try {
    for (auto it = done.begin(); it != done.end(); ++it) {
      const Json& f = it.value();
      DoneFile d;
      d.bytes = f.at("bytes").get<uint64_t>();
      d.xxh = parse_xxh_hex(f.at("xxh3").get<std::string>(), path);
      if (f.contains("tensors"))
        for (auto t = f["tensors"].begin(); t != f["tensors"].end(); ++t)
          d.tensors[t.key()] = parse_xxh_hex(t.value().get<std::string>(), path);
      if (f.contains("experts"))
        for (const Json& h : f["experts"]) d.experts.push_back(parse_xxh_hex(h.get<std::string>(), path));
      st.done[it.key()] = std::move(d);
    }
  } catch (const Json::exception& e) {
    throw bad(std::string("malformed entry: ") + e.what());
  }
  return st;
}

bool exists_nofollow(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec;
}

bool is_ours(const std::string& n) {
  static const std::regex re(
      R"((dense\.bin|experts-\d{3,}\.bin|manifest\.json|convert-state\.json|config\.json|generation_config\.json|tokenizer\.json|tokenizer_config\.json|chat_template\.jinja)(\.tmp)?)");
  return std::regex_match(n, re);
}

// --force: the manifest goes first, so the directory never looks complete
// with mixed contents; then every file a conversion writes.
void remove_previous(const std::string& out) {
  std::error_code ec;
  fs::remove(fs::path(out) / "manifest.json", ec);
  if (ec) fail("{}/manifest.json: cannot remove: {}", out, ec.message());
  fsync_dir(out);
  for (const auto& de : fs::directory_iterator(out, ec)) {
    const std::string n = de.path().filename().string();
    if (!is_ours(n)) continue;
    std::error_code ec2;
    fs::remove(de.path(), ec2);
    if (ec2) fail("{}: cannot remove: {}", de.path().string(), ec2.message());
  }
  if (ec) fail("{}: cannot list: {}", out, ec.message());
}

bool dir_empty(const std::string& d) {
  std::error_code ec;
  return fs::directory_iterator(d, ec) == fs::directory_iterator();
}

}  // namespace

// ---------------------------------------------------------------------------

Json ConvertOptions::to_json() const {
  return Json{{"experts", expert_bits == 8 ? "int8" : "int4"},
              {"group-size", group_size},
              {"attn-bits", attn_bits},
              {"o-bits", o_bits},
              {"kvb-bits", kvb_bits},
              {"shared-bits", shared_bits},
              {"dense-mlp-bits", dense_mlp_bits},
              {"mtp-bits", mtp_bits},
              {"embed-bits", embed_bits},
              {"head-bits", head_bits}};
}

void ConvertOptions::validate() const {
  if (in_dir.empty()) fail("convert: --in (the Hugging Face checkpoint directory) is required");
  if (out_dir.empty()) fail("convert: --out (the container directory) is required");
  if (expert_bits != 4 && expert_bits != 8) fail("--experts must be int4 or int8");
  if (group_size != 0 && group_size != 32 && group_size != 64 && group_size != 128)
    fail("--group-size must be 0 (one scale per row), 32, 64 or 128, got {}", group_size);
  for (auto [flag, v] : {std::pair{"--attn-bits", attn_bits}, std::pair{"--o-bits", o_bits},
                         std::pair{"--kvb-bits", kvb_bits}, std::pair{"--shared-bits", shared_bits},
                         std::pair{"--dense-mlp-bits", dense_mlp_bits}, std::pair{"--mtp-bits", mtp_bits}})
    if (v != 4 && v != 8 && v != 16) fail("{} must be 4 (int4), 8 (int8) or 16 (bf16), got {}", flag, v);
  for (auto [flag, v] : {std::pair{"--embed-bits", embed_bits}, std::pair{"--head-bits", head_bits}})
    if (v != 8 && v != 16) fail("{} must be 8 (int8) or 16 (bf16), got {}", flag, v);
  if (threads < 0 || threads > 1024) fail("--threads must be in [0, 1024], got {}", threads);
  if (force && resume) fail("--force and --resume exclude each other");
}

ConvertResult convert_checkpoint(const ConvertOptions& o) {
  o.validate();
  const auto t0 = std::chrono::steady_clock::now();
  ConvertResult res;
  const std::string out = o.out_dir;
  {
    std::error_code ec;
    if (fs::exists(out, ec) && fs::exists(o.in_dir, ec) && fs::equivalent(out, o.in_dir, ec))
      fail("{}: the output directory is the source directory; choose another --out", out);
  }
  Checkpoint ck(o.in_dir);
  const Plan plan = make_plan(ck, o);

  // The output directory.
  const std::string state_path = (fs::path(out) / kStateFile).string();
  const std::string manifest_path = (fs::path(out) / "manifest.json").string();
  State st;
  if (exists_nofollow(out) && !fs::is_directory(out)) fail("{}: exists and is not a directory", out);
  if (exists_nofollow(manifest_path)) {
    if (o.force) {
      remove_previous(out);
    } else if (o.resume) {
      const Json mj = parse_json(read_small_file(manifest_path, 256u << 20), manifest_path);
      const std::string mm = identity_mismatch(mj.value("options", Json()), mj.value("source", Json()), plan.options,
                                               plan.source);
      if (!mm.empty())
        fail("{}: holds a complete container converted with other options or from another source: {}. "
             "Pass --force to overwrite it",
             out, mm);
      res.already_complete = true;
      ::unlink(state_path.c_str());  // left if a run was killed right after its manifest
      if (o.progress) std::fprintf(stderr, "convert: %s is already complete; nothing to do\n", out.c_str());
      return res;
    } else {
      fail("{}: already holds a complete strata container (manifest.json); pass --force to overwrite it", out);
    }
  } else if (exists_nofollow(state_path)) {
    if (o.force) {
      remove_previous(out);
    } else if (o.resume) {
      st = state_from_json(parse_json(read_small_file(state_path, 1u << 30), state_path), state_path, plan);
    } else {
      fail("{}: holds an unfinished conversion ({}); pass --resume to continue it or --force to start over", out,
           kStateFile);
    }
  } else if (exists_nofollow(out) && !dir_empty(out) && !o.force) {
    fail("{}: exists, is not empty and holds no strata conversion; choose a new or empty directory, or pass --force "
         "to write into it",
         out);
  } else if (o.resume && o.progress) {
    std::fprintf(stderr, "convert: nothing to resume in %s; starting a new conversion\n", out.c_str());
  }
  {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) fail("{}: cannot create the output directory: {}", out, ec.message());
  }
  auto save_state = [&] { write_small_atomic(state_path, state_to_json(plan, st).dump(1) + "\n"); };
  save_state();

  if (o.progress && !plan.unused.empty()) {
    std::string names;
    for (size_t i = 0; i < plan.unused.size() && i < 4; ++i) names += (i ? ", " : "") + plan.unused[i];
    if (plan.unused.size() > 4) names += fmt::format(" and {} more", plan.unused.size() - 4);
    std::fprintf(stderr, "convert: note: %zu checkpoint tensors are not used by strata and are not converted: %s\n",
                 plan.unused.size(), names.c_str());
  }

  const int threads =
      o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::min(64u, std::thread::hardware_concurrency())));
  ThreadPool pool(threads);
  Progress prog(plan.total_src, o.progress);
  Converter cv{ck, plan, pool, prog, o.in_dir};

  for (const FileItem& f : plan.files) {
    const std::string path = (fs::path(out) / f.name).string();
    // A file finished by an earlier run is kept if it is still what was written.
    if (auto it = st.done.find(f.name); it != st.done.end()) {
      bool ok = false;
      if (exists_nofollow(path) && it->second.bytes == f.bytes) {
        try {
          const auto [bytes, h] = hash_file(path);
          ok = bytes == f.bytes && h == it->second.xxh;
        } catch (const Error&) {
          ok = false;
        }
      }
      const bool shape_ok = f.kind != FileKind::Experts ||
                            it->second.experts.size() == static_cast<size_t>(plan.experts[f.index].rec.count);
      if (ok && shape_ok) {
        ++res.files_skipped;
        prog.skip(f.src_bytes);
        continue;
      }
      if (o.progress) std::fprintf(stderr, "convert: %s differs from the recorded checksum; rewriting it\n", path.c_str());
      st.done.erase(it);
      save_state();
    }
    AtomicFileWriter w(path);
    if (o.test_kill_after_files >= 0 && res.files_written == o.test_kill_after_files)
      w.arm_kill_at(std::max<uint64_t>(1, f.bytes / 2));
    DoneFile d;
    switch (f.kind) {
      case FileKind::Dense: d.tensors = cv.write_dense(w); break;
      case FileKind::Experts: d.experts = cv.write_experts(w, plan.experts[f.index]); break;
      case FileKind::Copy: cv.copy(w, f.name); break;
    }
    if (w.pos() != f.bytes)
      fail("{}: wrote {} bytes, the plan says {}{}", path, w.pos(), f.bytes,
           f.kind == FileKind::Copy ? " (the source file changed during the conversion?)" : " (internal error)");
    d.bytes = f.bytes;
    d.xxh = w.commit();
    res.bytes_written += f.bytes;
    st.done[f.name] = std::move(d);
    save_state();
    ++res.files_written;
  }
  prog.finish();

  // The manifest, last.
  Manifest m;
  m.source = plan.source;
  m.options = plan.options;
  m.config = plan.config_json;
  for (const FileItem& f : plan.files) {
    const DoneFile& d = st.done.at(f.name);
    m.files.push_back({f.name, d.bytes, d.xxh});
    res.container_bytes += d.bytes;
  }
  const DoneFile& dd = st.done.at(kDenseFile);
  for (const DenseItem& it : plan.dense) {
    TensorRecord r = it.rec;
    auto h = dd.tensors.find(it.name);
    if (h == dd.tensors.end()) fail("{}: has no checksum for tensor \"{}\"; pass --force to start over", state_path, it.name);
    r.xxh = h->second;
    m.tensors.emplace(it.name, std::move(r));
  }
  for (const ExpertItem& it : plan.experts) {
    ExpertLayerRecord r = it.rec;
    r.xxh = st.done.at(r.file).experts;
    m.expert_layers.push_back(std::move(r));
  }
  // Through the reader's validation (as text, as it will be read) before
  // committing to it.
  manifest_from_json(parse_json(manifest_to_json(m).dump(), manifest_path), manifest_path);
  write_manifest(out, m);
  fsync_dir(out);
  ::unlink(state_path.c_str());

  for (const FileItem& f : plan.files) res.source_bytes += f.src_bytes;
  res.unused_tensors = plan.unused;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.peak_rss_bytes = peak_rss_bytes();
  if (o.progress) {
    const double converted = static_cast<double>(plan.total_src);
    std::fprintf(stderr,
                 "convert: done: %s -> %s: %d files written%s, container %s, %s of source tensors in %.1f s "
                 "(%s/s), peak RSS %s\n",
                 o.in_dir.c_str(), out.c_str(), res.files_written,
                 res.files_skipped ? fmt::format(" ({} kept from the interrupted run)", res.files_skipped).c_str() : "",
                 human_bytes(static_cast<double>(res.container_bytes)).c_str(), human_bytes(converted).c_str(),
                 res.seconds, human_bytes(res.seconds > 0 ? converted / res.seconds : 0).c_str(),
                 human_bytes(static_cast<double>(res.peak_rss_bytes)).c_str());
  }
  return res;
}

VerifyResult verify_container(const std::string& dir) {
  const Manifest m = read_manifest(dir);
  VerifyResult res;
  for (const FileRecord& f : m.files) {
    const std::string path = (fs::path(dir) / f.name).string();
    ++res.files;
    uint64_t bytes = 0, h = 0;
    try {
      std::tie(bytes, h) = hash_file(path);
    } catch (const Error& e) {
      res.ok = false;
      res.problems.push_back(e.what());
      continue;
    }
    res.bytes += bytes;
    if (bytes != f.bytes) {
      res.ok = false;
      res.problems.push_back(fmt::format("{}: {} bytes, the manifest says {}", path, bytes, f.bytes));
      continue;
    }
    if (h == f.xxh) {
      res.ok_files.push_back(f.name);
      continue;
    }
    res.ok = false;
    // Say which parts differ.
    std::vector<std::string> parts;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      try {
        std::vector<uint8_t> buf;
        for (const auto& [name, t] : m.tensors) {
          if (t.file != f.name) continue;
          Xxh3 th;
          buf.resize(static_cast<size_t>(t.bytes));
          pread_exact(fd, path, t.offset, t.bytes, buf.data());
          th.update(buf.data(), buf.size());
          if (t.scales_bytes) {
            buf.resize(static_cast<size_t>(t.scales_bytes));
            pread_exact(fd, path, t.scales_offset, t.scales_bytes, buf.data());
            th.update(buf.data(), buf.size());
          }
          if (th.digest() != t.xxh) parts.push_back("tensor " + name);
        }
        for (const ExpertLayerRecord& e : m.expert_layers) {
          if (e.file != f.name) continue;
          buf.resize(static_cast<size_t>(e.blob_bytes));
          for (int64_t x = 0; x < e.count; ++x) {
            pread_exact(fd, path, static_cast<uint64_t>(x) * e.stride, e.blob_bytes, buf.data());
            if (XXH3_64bits(buf.data(), buf.size()) != e.xxh[static_cast<size_t>(x)])
              parts.push_back(fmt::format("expert {} of layer {}", x, e.layer));
          }
        }
      } catch (const Error&) {
      }
      ::close(fd);
    }
    std::string where;
    for (size_t i = 0; i < parts.size() && i < 8; ++i) where += (i ? ", " : "") + parts[i];
    if (parts.size() > 8) where += fmt::format(" and {} more", parts.size() - 8);
    res.problems.push_back(fmt::format("{}: checksum {} does not match the manifest's {}{}", path, xxh_hex(h),
                                       xxh_hex(f.xxh), where.empty() ? "" : " (damaged: " + where + ")"));
  }
  return res;
}

}  // namespace strata
