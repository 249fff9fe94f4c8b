#include "format/convert.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>
#include <type_traits>

#include "core/error.h"
#include "core/io.h"
#include "core/numeric.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "core/weight.h"
#include "format/checkpoint_tensors.h"
#include "format/container.h"
#include "format/convert_plan.h"
#include "format/convert_state.h"
#include "format/safetensors.h"

namespace strata {

namespace fs = std::filesystem;
using namespace conversion;

namespace {

// Bytes of a dense tensor encoded (and written) per step: bounds the buffer.
constexpr size_t kEncodeChunk = size_t{4} << 20;

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux: kilobytes
}

void note(const ConvertOptions& o, std::string text) {
  if (!o.on_progress) return;
  ConvertProgress p;
  p.kind = ConvertProgress::Kind::Note;
  p.text = std::move(text);
  o.on_progress(p);
}

// Counts the source bytes converted and reports them through on_progress
// (a cheap call per tensor or expert; the front end decides what to show).
class ProgressReporter {
 public:
  ProgressReporter(const std::function<void(const ConvertProgress&)>& sink, uint64_t total)
      : sink_(sink), start_(Clock::now()) {
    p_.total_bytes = total;
  }
  void skip(uint64_t n) { p_.done_bytes += n, p_.skipped_bytes += n; }
  void add(uint64_t n) {
    p_.done_bytes += n;
    emit(ConvertProgress::Kind::Bytes);
  }
  void finish() { emit(ConvertProgress::Kind::Finished); }

 private:
  using Clock = std::chrono::steady_clock;
  void emit(ConvertProgress::Kind k) {
    if (!sink_) return;
    p_.kind = k;
    p_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    sink_(p_);
  }
  const std::function<void(const ConvertProgress&)>& sink_;
  Clock::time_point start_;
  ConvertProgress p_;
};

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
int64_t encode_rows(const Weight& src, const TensorRecord& rec, int64_t r0, int64_t r1, uint8_t* data,
                    uint8_t* scales, ThreadPool& pool) {
  const int64_t cols = src.cols, rb = row_bytes(rec), ng = row_groups(rec);
  std::atomic<int64_t> bad{INT64_MAX};
  pool.parallel_for(r1 - r0, [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(cols)), rs(static_cast<size_t>(ng));
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
                       cols, d, rs.data(), rec.scales_bf16);
          if (rec.scales_bf16) {
            for (int64_t g = 0; g < ng; ++g) {
              const uint16_t h = f32_to_bf16(rs[static_cast<size_t>(g)]);  // exact: rs holds bf16 values
              std::memcpy(scales + (i * ng + g) * 2, &h, 2);
            }
          } else {
            std::memcpy(scales + i * ng * 4, rs.data(), static_cast<size_t>(ng) * 4);
          }
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
  ProgressReporter& prog;
  const std::string& in_dir;

  Weight load(const std::string& name, int64_t rows, int64_t cols) const {
    return load_weight(ck, name, rows, cols, plan.cfg.fp8_block_rows, plan.cfg.fp8_block_cols);
  }

  // dense.bin; returns the per-tensor checksums.
  std::map<std::string, uint64_t> write_dense(AtomicFileWriter& w) {
    std::map<std::string, uint64_t> sums;
    std::vector<uint8_t> buf;
    std::vector<uint8_t> scales;
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
        scales.assign(static_cast<size_t>(rec.scales_bytes), uint8_t{0});
        const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(kEncodeChunk) / rb, 1, it.rows);
        buf.resize(static_cast<size_t>(chunk * rb));
        for (int64_t r0 = 0; r0 < it.rows; r0 += chunk) {
          const int64_t r1 = std::min(it.rows, r0 + chunk);
          const int64_t bad = encode_rows(src, rec, r0, r1, buf.data(),
                                          ng ? scales.data() + r0 * ng * (rec.scales_bf16 ? 2 : 4) : nullptr, pool);
          if (bad >= 0) fail_non_finite(ck, it.name, bad);
          const size_t n = static_cast<size_t>((r1 - r0) * rb);
          w.write(buf.data(), n);
          th.update(buf.data(), n);
        }
        if (ng) {
          w.zeros(rec.scales_offset - w.pos());
          w.write(scales.data(), scales.size());
          th.update(scales.data(), scales.size());
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
        uint8_t* scales = blob.data() + rec->scales_offset;
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
    const Fd fd = open_file((fs::path(in_dir) / name).string(), O_RDONLY);
    std::vector<uint8_t> buf(1 << 20);
    for (uint64_t at = 0;;) {
      const size_t n = pread_full(fd, buf.data(), buf.size(), at);
      w.write(buf.data(), n);
      at += n;
      if (n < buf.size()) break;
    }
  }
};

// ---------------------------------------------------------------------------
// The output directory

bool exists_nofollow(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec;
}

bool dir_empty(const std::string& d) {
  std::error_code ec;
  return fs::directory_iterator(d, ec) == fs::directory_iterator();
}

}  // namespace

// ---------------------------------------------------------------------------

Json ConvertOptions::to_json() const {
  Json j{{"experts", expert_bits == 8 ? "int8" : "int4"},
              {"group-size", group_size},
              {"attn-bits", attn_bits},
              {"o-bits", o_bits},
              {"kvb-bits", kvb_bits},
              {"shared-bits", shared_bits},
              {"dense-mlp-bits", dense_mlp_bits},
              {"mtp-bits", mtp_bits},
              {"embed-bits", embed_bits},
              {"head-bits", head_bits}};
  // Written only when not the default, so f32-scale manifests stay as before.
  if (scales != "f32") j["scales"] = scales;
  return j;
}

ConvertOptions ConvertOptions::from_json(const Json& j) {
  ConvertOptions o;
  if (!j.is_object()) fail("container options: expected an object, got {}", j.type_name());
  const auto str = [&](const char* key, std::string& v) {
    if (!j.contains(key)) return;
    if (!j[key].is_string()) fail("container options: \"{}\" must be a string", key);
    v = j[key].get<std::string>();
  };
  const auto num = [&](const char* key, auto& v) {
    if (!j.contains(key)) return;
    if (!j[key].is_number_integer()) fail("container options: \"{}\" must be an integer", key);
    v = j[key].get<std::remove_reference_t<decltype(v)>>();
  };
  std::string experts = "int4";
  str("experts", experts);
  if (experts != "int4" && experts != "int8") fail("container options: \"experts\" must be int4 or int8, got {}", experts);
  o.expert_bits = experts == "int8" ? 8 : 4;
  num("group-size", o.group_size);
  num("attn-bits", o.attn_bits);
  num("o-bits", o.o_bits);
  num("kvb-bits", o.kvb_bits);
  num("shared-bits", o.shared_bits);
  num("dense-mlp-bits", o.dense_mlp_bits);
  num("mtp-bits", o.mtp_bits);
  num("embed-bits", o.embed_bits);
  num("head-bits", o.head_bits);
  o.scales = "f32";  // to_json omits f32 scales (and manifests before "scales" existed had them)
  str("scales", o.scales);
  return o;
}

void ConvertOptions::validate() const {
  if (in_dir.empty()) fail("convert: --in (the Hugging Face checkpoint directory) is required");
  if (out_dir.empty()) fail("convert: --out (the container directory) is required");
  if (expert_bits != 4 && expert_bits != 8) fail("--experts must be int4 or int8");
  if (group_size != 0 && group_size != 32 && group_size != 64 && group_size != 128)
    fail("--group-size must be 0 (one scale per row), 32, 64 or 128, got {}", group_size);
  for (auto [flag, v] : {std::pair{"--attn-bits", attn_bits}, std::pair{"--o-bits", o_bits},
                         std::pair{"--kvb-bits", kvb_bits}, std::pair{"--shared-bits", shared_bits},
                         std::pair{"--dense-mlp-bits", dense_mlp_bits}, std::pair{"--mtp-bits", mtp_bits},
                         std::pair{"--head-bits", head_bits}})
    if (v != 4 && v != 8 && v != 16) fail("{} must be 4 (int4), 8 (int8) or 16 (bf16), got {}", flag, v);
  if (scales != "f32" && scales != "bf16") fail("--scales must be f32 or bf16, got {}", scales);
  if (embed_bits != 8 && embed_bits != 16) fail("--embed-bits must be 8 (int8) or 16 (bf16), got {}", embed_bits);
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
  if (is_container(o.in_dir))
    fail("{}: already a strata container (it has manifest.json), nothing to convert: run it as is with --model {}, "
         "or check it with strata convert --verify {}",
         o.in_dir, o.in_dir, o.in_dir);
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
      note(o, fmt::format("{} is already complete; nothing to do", out));
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
  } else if (o.resume) {
    note(o, fmt::format("nothing to resume in {}; starting a new conversion", out));
  }
  {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) fail("{}: cannot create the output directory: {}", out, ec.message());
  }
  auto save_state = [&] { write_file_atomic(state_path, state_to_json(plan, st).dump(1) + "\n"); };
  save_state();

  if (o.on_progress && !plan.unused.empty()) {
    std::string names;
    for (size_t i = 0; i < plan.unused.size() && i < 4; ++i) names += (i ? ", " : "") + plan.unused[i];
    if (plan.unused.size() > 4) names += fmt::format(" and {} more", plan.unused.size() - 4);
    note(o, fmt::format("note: {} checkpoint tensors are not used by strata and are not converted: {}",
                        plan.unused.size(), names));
  }

  const int threads =
      o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::min(64u, std::thread::hardware_concurrency())));
  ThreadPool pool(threads);
  ProgressReporter prog(o.on_progress, plan.total_src);
  Converter cv{ck, plan, pool, prog, o.in_dir};

  for (const FileItem& f : plan.files) {
    const std::string path = (fs::path(out) / f.name).string();
    // A file finished by an earlier run is kept if it is still what was written.
    if (auto it = st.done.find(f.name); it != st.done.end()) {
      bool ok = false;
      if (exists_nofollow(path) && it->second.bytes == f.bytes) {
        try {
          const FileDigest d = hash_file(path);
          ok = d.bytes == f.bytes && d.xxh3 == it->second.xxh;
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
      note(o, fmt::format("{} differs from the recorded checksum; rewriting it", path));
      st.done.erase(it);
      save_state();
    }
    AtomicFileWriter w(path, "free space and re-run with --resume");
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
  write_manifest(out, m);  // atomically, the directory synced
  ::unlink(state_path.c_str());

  for (const FileItem& f : plan.files) res.source_bytes += f.src_bytes;
  res.unused_tensors = plan.unused;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.peak_rss_bytes = peak_rss_bytes();
  return res;
}

}  // namespace strata
