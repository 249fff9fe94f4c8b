// `strata convert`: Hugging Face checkpoints into strata containers
// (docs/container.md). Every container tensor is decoded and compared with
// its source tensor within the format's error bound; interrupted conversions
// (SIGKILL) resume to byte-identical files; --verify finds damage; the output
// directory's safety rules hold.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "format/container.h"
#include "format/convert.h"
#include "format/verify.h"
#include "format/checkpoint_tensors.h"
#include "format/safetensors.h"
#include "core/numeric.h"
#include "core/config.h"
#include "core/weight.h"
#include "core/quant.h"
#include "test_util.h"

namespace strata::convert_test {
namespace {

namespace fs = std::filesystem;
using test_util::read_file;
using test_util::TempDir;
using test_util::write_file;

std::string fixture(const std::string& name) { return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/" + name; }

// dsv3-tiny-fp8: another family's block-FP8 checkpoint, in two shards, one
// weight_scale_inv in another shard than its weight; dsv32-tiny-fp8 the same
// with DeepSeek-V3.2's FP8 indexer projections (wq_b, wk) and f32 k_norm.
const char* const kFixtures[] = {"glm5-tiny-bf16", "glm5-tiny-fp8", "glm52-tiny-bf16", "dsv3-tiny-fp8",
                                 "dsv32-tiny-fp8"};

struct ProcResult {
  int exit_code = -1;  // -1 if killed by a signal
  int signal = 0;
  std::string out, err;
};

// Runs the strata binary with `args` (fork/exec), stdout and stderr captured.
// fsize_limit > 0 caps the size of files it may write (RLIMIT_FSIZE, with
// SIGXFSZ ignored so writes fail with EFBIG as on a full disk).
ProcResult run_strata(const std::vector<std::string>& args, const TempDir& tmp, rlim_t fsize_limit = 0) {
  const std::string out = tmp.file("stdout.txt"), err = tmp.file("stderr.txt");
  std::vector<std::string> full{STRATA_BINARY};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    FILE* o = std::freopen(out.c_str(), "w", stdout);
    FILE* e = std::freopen(err.c_str(), "w", stderr);
    if (!o || !e) ::_exit(120);
    if (fsize_limit > 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit rl {fsize_limit, fsize_limit};
      ::setrlimit(RLIMIT_FSIZE, &rl);
    }
    ::execv(argv[0], argv.data());
    ::_exit(121);
  }
  ProcResult r;
  int st = 0;
  if (pid < 0 || ::waitpid(pid, &st, 0) != pid) {
    ADD_FAILURE() << "fork/waitpid failed";
    return r;
  }
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

std::vector<std::string> convert_args(const std::string& in, const std::string& out,
                                      const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a{"convert", "--in", in, "--out", out, "--quiet", "--threads", "2"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Every regular file of a directory, by name.
std::map<std::string, std::string> dir_files(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& de : fs::directory_iterator(dir))
    if (de.is_regular_file()) m[de.path().filename().string()] = read_file(de.path().string());
  return m;
}

// ---------------------------------------------------------------------------
// Decoding a container and comparing with the source

struct Precision {  // the options as the test understands them, independent of the converter
  int experts = 4, group = 32, attn = 8, o = 8, kvb = 8, shared = 8, dense_mlp = 8, mtp = 8, embed = 16, head = 8;
  bool bf16_scales = false;
};

// What `strata convert` writes without precision flags: the struct's
// precisions with bf16 group scales (the converter's default since
// 2026-12-04; the other cases keep f32 scales unless they say otherwise).
Precision convert_defaults() {
  Precision p;
  p.bf16_scales = true;
  return p;
}

std::vector<std::string> precision_flags(const Precision& p) {
  return {"--experts",     p.experts == 8 ? "int8" : "int4",
          "--group-size",  std::to_string(p.group),
          "--attn-bits",   std::to_string(p.attn),
          "--o-bits",      std::to_string(p.o),
          "--kvb-bits",    std::to_string(p.kvb),
          "--shared-bits", std::to_string(p.shared),
          "--dense-mlp-bits", std::to_string(p.dense_mlp),
          "--mtp-bits",    std::to_string(p.mtp),
          "--embed-bits",  std::to_string(p.embed),
          "--head-bits",   std::to_string(p.head),
          "--scales",      p.bf16_scales ? "bf16" : "f32"};
}

WeightFormat format_of_bits(int bits) {
  return bits == 4 ? WeightFormat::INT4 : bits == 8 ? WeightFormat::INT8 : WeightFormat::BF16;
}
bool is_int(WeightFormat f) { return f == WeightFormat::INT8 || f == WeightFormat::INT4; }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int64_t layer_of(const std::string& name) {
  const std::string p = "model.layers.";
  if (name.rfind(p, 0) != 0) return -1;
  return std::stoll(name.substr(p.size()));
}

// The format the precision classes give a non-expert tensor.
WeightFormat expected_format(const std::string& name, size_t rank, const Precision& p, const ModelConfig& c) {
  if (rank == 1 || contains(name, "mlp.gate.weight")) return WeightFormat::F32;
  if (contains(name, "indexer.weights_proj")) return WeightFormat::BF16;
  if (name == "model.embed_tokens.weight") return format_of_bits(p.embed);
  if (name == "lm_head.weight") return format_of_bits(p.head);
  if (layer_of(name) >= c.num_hidden_layers) return format_of_bits(p.mtp);
  if (contains(name, "o_proj")) return format_of_bits(p.o);
  if (contains(name, "kv_b_proj")) return format_of_bits(p.kvb);
  if (contains(name, "shared_experts")) return format_of_bits(p.shared);
  if (contains(name, "q_a_proj") || contains(name, "q_b_proj") || contains(name, "kv_a_proj_with_mqa") ||
      contains(name, "indexer.wq_b") || contains(name, "indexer.wk"))
    return format_of_bits(p.attn);
  if (contains(name, ".mlp.")) return format_of_bits(p.dense_mlp);
  ADD_FAILURE() << "unclassified tensor " << name;
  return WeightFormat::F32;
}

int64_t expected_group(WeightFormat f, int64_t cols, const Precision& p) {
  return is_int(f) && p.group > 0 && p.group < cols ? p.group : 0;
}

// Half a unit in the last place of bf16 (8 significant bits) at |x|.
double half_ulp_bf16(float x) {
  if (x == 0.0f) return 0.0;
  int e = 0;
  std::frexp(std::fabs(static_cast<double>(x)), &e);  // |x| in [2^(e-1), 2^e)
  return std::max(std::ldexp(1.0, e - 9), std::ldexp(1.0, -134));
}

// Compares every row of container tensor `t` (bytes at data/scales) with the
// source `src` within the format's bound; returns "" or the first violation.
// int8/int4 scales are f32, or bf16 where t.scales_bf16 (each then the bf16
// rounding of amax / qmax, and the group quantized with it).
std::string compare_matrix(const Weight& src, const TensorRecord& t, const uint8_t* data, const uint8_t* scale_bytes) {
  const int64_t rows = src.rows, cols = src.cols;
  std::vector<float> ref(static_cast<size_t>(cols)), dec(static_cast<size_t>(cols));
  std::vector<float> widened;
  const float* scales = reinterpret_cast<const float*>(scale_bytes);
  if (t.scales_bf16) {
    widened.resize(t.scales_bytes / 2);
    for (size_t i = 0; i < widened.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, scale_bytes + 2 * i, 2);
      widened[i] = bf16_to_f32(h);
    }
    scales = widened.data();
  }
  for (int64_t r = 0; r < rows; ++r) {
    src.row_f32(r, ref.data());
    switch (t.format) {
      case WeightFormat::F32:
        std::memcpy(dec.data(), data + r * cols * 4, static_cast<size_t>(cols) * 4);
        for (int64_t c = 0; c < cols; ++c)
          if (std::memcmp(&dec[c], &ref[c], 4) != 0) return fmt::format("f32 [{},{}]: {} != {}", r, c, dec[c], ref[c]);
        break;
      case WeightFormat::BF16:
        for (int64_t c = 0; c < cols; ++c) {
          uint16_t h;
          std::memcpy(&h, data + (r * cols + c) * 2, 2);
          const float v = bf16_to_f32(h);
          if (std::fabs(static_cast<double>(v) - ref[c]) > half_ulp_bf16(ref[c]))
            return fmt::format("bf16 [{},{}]: {} vs {}", r, c, v, ref[c]);
        }
        break;
      case WeightFormat::INT8:
      case WeightFormat::INT4: {
        const QuantBits b = t.format == WeightFormat::INT8 ? QuantBits::Int8 : QuantBits::Int4;
        const int64_t ng = quant_groups(cols, t.group), g = t.group > 0 ? t.group : cols;
        const float* srow = scales + r * ng;
        dequantize_row(b, t.group, data + r * quant_row_bytes(b, cols), srow, cols, dec.data());
        for (int64_t gi = 0; gi < ng; ++gi) {
          const int64_t c0 = gi * g, c1 = std::min(cols, c0 + g);
          double amax = 0;
          for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(static_cast<double>(ref[c])));
          const double s = srow[gi], want_s = amax / qmax(b);
          // The scale is the group's amax / qmax (not inflated, not too small);
          // bf16 scales: its rounding to 8 significant bits.
          const double tol = t.scales_bf16 ? half_ulp_bf16(static_cast<float>(want_s)) * (1 + 1e-6) : 1e-6 * want_s;
          if (std::fabs(s - want_s) > tol + 1e-30)
            return fmt::format("row {} group {}: scale {} != amax/qmax {}", r, gi, s, want_s);
          for (int64_t c = c0; c < c1; ++c) {
            const double err = std::fabs(static_cast<double>(dec[c]) - ref[c]);
            if (err > s / 2 + 1e-6 * amax + 1e-30)
              return fmt::format("[{},{}]: |{} - {}| = {} > scale/2 = {}", r, c, ref[c], dec[c], err, s / 2);
          }
        }
        break;
      }
      default: return "unexpected format";
    }
  }
  return "";
}

uint64_t xxh_parts(const std::string& file, const TensorRecord& t) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, file.data() + t.offset, t.bytes);
  if (t.scales_bytes) XXH3_64bits_update(st, file.data() + t.scales_offset, t.scales_bytes);
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

std::string scale_name_of(const std::string& name) {
  return name.substr(0, name.size() - std::string(".weight").size()) + ".weight_scale_inv";
}

// Reads the container back and checks it against the checkpoint completely.
void check_container(const std::string& src_dir, const std::string& dir, const Precision& p) {
  const Manifest m = read_manifest(dir);
  const Checkpoint ck(src_dir);
  const ModelConfig c = load_model_config(src_dir);
  const Json src_config = parse_json(read_file(src_dir + "/config.json"), "config.json");
  EXPECT_EQ(m.config, src_config);
  EXPECT_EQ(m.options.value("experts", ""), p.experts == 8 ? "int8" : "int4");
  EXPECT_EQ(m.options.value("group-size", -1), p.group);
  EXPECT_EQ(m.options.value("scales", std::string("f32")), p.bf16_scales ? "bf16" : "f32");
  EXPECT_EQ(m.source.value("config_xxh3", ""), xxh_hex(XXH3_64bits(read_file(src_dir + "/config.json").data(),
                                                                 read_file(src_dir + "/config.json").size())));
  ASSERT_TRUE(m.source.contains("files"));
  EXPECT_FALSE(fs::exists(dir + "/convert-state.json"));

  // Files: sizes and checksums; copied files identical.
  std::map<std::string, std::string> files;
  for (const FileRecord& f : m.files) {
    files[f.name] = read_file(dir + "/" + f.name);
    EXPECT_EQ(files[f.name].size(), f.bytes) << f.name;
    EXPECT_EQ(XXH3_64bits(files[f.name].data(), files[f.name].size()), f.xxh) << f.name;
  }
  for (const char* n : {"config.json", "generation_config.json"}) {
    ASSERT_TRUE(files.count(n)) << n;
    EXPECT_EQ(files[n], read_file(src_dir + "/" + n)) << n;
  }
  for (const auto& [name, body] : dir_files(dir))
    EXPECT_TRUE(name == "manifest.json" || files.count(name)) << "stray file " << name;

  std::set<std::string> covered;
  for (const auto& [name, t] : m.tensors) {
    SCOPED_TRACE(name);
    ASSERT_EQ(t.file, "dense.bin");
    const std::string& fb = files.at(t.file);
    EXPECT_EQ(t.offset % kTensorAlign, 0u);
    EXPECT_EQ(xxh_parts(fb, t), t.xxh);
    const TensorEntry& e = ck.entry(name);
    covered.insert(name);
    if (e.dtype == DType::F8_E4M3) covered.insert(scale_name_of(name));
    EXPECT_EQ(t.shape, e.shape);
    EXPECT_EQ(t.format, expected_format(name, e.shape.size(), p, c)) << weight_format_name(t.format);
    if (t.shape.size() == 1) {
      const std::vector<float> v = load_f32(ck, name, t.shape);
      ASSERT_EQ(t.bytes, v.size() * 4);
      EXPECT_EQ(std::memcmp(fb.data() + t.offset, v.data(), t.bytes), 0);
      continue;
    }
    EXPECT_EQ(t.group, expected_group(t.format, t.shape[1], p));
    const Weight src = load_weight(ck, name, t.shape[0], t.shape[1], c.fp8_block_rows, c.fp8_block_cols);
    const auto* data = reinterpret_cast<const uint8_t*>(fb.data() + t.offset);
    const auto* scales = reinterpret_cast<const uint8_t*>(fb.data() + t.scales_offset);
    EXPECT_EQ(t.scales_bf16, p.bf16_scales && is_int(t.format)) << name;
    EXPECT_EQ(compare_matrix(src, t, data, scales), "");
  }

  // Experts: one record per MoE layer, every expert decoded.
  int64_t moe_layers = 0;
  for (int64_t L = 0; L < c.num_weight_layers(); ++L) moe_layers += c.is_moe(L);
  ASSERT_EQ(static_cast<int64_t>(m.expert_layers.size()), moe_layers);
  for (const ExpertLayerRecord& x : m.expert_layers) {
    SCOPED_TRACE("experts of layer " + std::to_string(x.layer));
    EXPECT_TRUE(c.is_moe(x.layer));
    EXPECT_EQ(x.file, fmt::format("experts-{:03}.bin", x.layer));
    EXPECT_EQ(x.count, c.n_routed_experts);
    EXPECT_EQ(x.stride % kExpertAlign, 0u);
    EXPECT_GE(x.stride, x.blob_bytes);
    EXPECT_LT(x.stride - x.blob_bytes, kExpertAlign);
    const std::string& fb = files.at(x.file);
    ASSERT_EQ(fb.size(), x.stride * static_cast<uint64_t>(x.count));
    const WeightFormat want = format_of_bits(x.layer >= c.num_hidden_layers ? p.mtp : p.experts);
    for (const TensorRecord* t : {&x.gate, &x.up, &x.down}) {
      EXPECT_EQ(t->format, want);
      EXPECT_EQ(t->group, expected_group(want, t->shape[1], p));
      EXPECT_EQ(t->scales_bf16, p.bf16_scales && is_int(want));
    }
    // gate, up, down adjacent in that order.
    EXPECT_EQ(x.gate.offset, 0u);
    EXPECT_LT(x.gate.offset, x.up.offset);
    EXPECT_LT(x.up.offset, x.down.offset);
    for (int64_t e = 0; e < x.count; ++e) {
      const uint8_t* blob = reinterpret_cast<const uint8_t*>(fb.data()) + static_cast<uint64_t>(e) * x.stride;
      EXPECT_EQ(XXH3_64bits(blob, x.blob_bytes), x.xxh[static_cast<size_t>(e)]) << "expert " << e;
      for (uint64_t i = x.blob_bytes; i < x.stride; ++i) ASSERT_EQ(blob[i], 0) << "padding of expert " << e;
      const std::string pre = fmt::format("model.layers.{}.mlp.experts.{}.", x.layer, e);
      for (auto [part, t] : {std::pair{"gate_proj.weight", &x.gate}, std::pair{"up_proj.weight", &x.up},
                             std::pair{"down_proj.weight", &x.down}}) {
        const std::string name = pre + part;
        SCOPED_TRACE(name);
        covered.insert(name);
        if (ck.entry(name).dtype == DType::F8_E4M3) covered.insert(scale_name_of(name));
        const Weight src = load_weight(ck, name, t->shape[0], t->shape[1], c.fp8_block_rows, c.fp8_block_cols);
        EXPECT_EQ(compare_matrix(src, *t, blob + t->offset, blob + t->scales_offset),
                  "");
      }
    }
  }
  // Nothing in these checkpoints is left behind.
  for (const std::string& n : ck.names()) EXPECT_TRUE(covered.count(n)) << n << " was not converted";
}

// ---------------------------------------------------------------------------

struct Case {
  const char* fixture;
  const char* label;
  Precision p;
};

Precision int8_everywhere() {
  Precision p;
  p.experts = 8;
  p.embed = 8;
  p.head = 8;
  return p;
}

Precision mixed() {  // every other value of every flag
  Precision p;
  p.group = 128;  // wider than some rows: those fall back to one scale per row
  p.attn = 16;
  p.o = 4;
  p.kvb = 16;
  p.shared = 4;
  p.dense_mlp = 4;
  p.mtp = 16;
  p.embed = 8;
  p.head = 16;
  return p;
}

Precision per_row() {
  Precision p;
  p.group = 0;
  p.attn = 4;
  p.mtp = 4;
  p.head = 4;
  return p;
}

Precision int4_everywhere() {  // the benchmark's slice-int4 recipe plus the int4 lm_head
  Precision p;
  p.attn = p.o = p.kvb = p.shared = p.dense_mlp = p.head = 4;
  return p;
}

Precision int4_bf16_scales() {  // the same with bf16 group scales (--scales bf16)
  Precision p = int4_everywhere();
  p.bf16_scales = true;
  return p;
}

Precision mixed_bf16_scales() {  // int8 and int4, per-row and grouped, bf16 scales
  Precision p = mixed();
  p.bf16_scales = true;
  return p;
}

class ConvertRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(ConvertRoundTrip, EveryTensorWithinTheFormatBound) {
  const Case& k = GetParam();
  TempDir tmp;
  const std::string out = tmp.file("out");
  const ProcResult r = run_strata(convert_args(fixture(k.fixture), out, precision_flags(k.p)), tmp);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // --quiet
  check_container(fixture(k.fixture), out, k.p);
  // --verify agrees.
  const ProcResult v = run_strata({"convert", "--verify", out, "--quiet"}, tmp);
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_NE(v.out.find("OK"), std::string::npos) << v.out;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const char* f : kFixtures) {
    v.push_back({f, "default", convert_defaults()});
    v.push_back({f, "int8", int8_everywhere()});
  }
  v.push_back({"glm5-tiny-fp8", "mixed", mixed()});
  v.push_back({"dsv3-tiny-fp8", "mixed", mixed()});
  v.push_back({"dsv32-tiny-fp8", "mixed", mixed()});
  v.push_back({"glm52-tiny-bf16", "perrow", per_row()});
  v.push_back({"glm5-tiny-bf16", "int4", int4_everywhere()});
  v.push_back({"glm5-tiny-bf16", "int4bf16scales", int4_bf16_scales()});
  v.push_back({"dsv3-tiny-fp8", "mixedbf16scales", mixed_bf16_scales()});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Convert, ConvertRoundTrip, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = std::string(i.param.fixture) + "_" + i.param.label;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// The library entry point: result fields, thread-count independence.
TEST(ConvertLibrary, ResultAndThreadIndependence) {
  TempDir tmp;
  ConvertOptions o;
  o.in_dir = fixture("glm5-tiny-bf16");
  o.out_dir = tmp.file("a");
  o.threads = 1;
  const ConvertResult r = convert_checkpoint(o);
  EXPECT_FALSE(r.already_complete);
  EXPECT_GT(r.files_written, 3);
  EXPECT_EQ(r.files_skipped, 0);
  EXPECT_GT(r.peak_rss_bytes, 0u);
  EXPECT_GT(r.source_bytes, 4000000u);
  EXPECT_EQ(r.bytes_written, r.container_bytes);
  EXPECT_TRUE(r.unused_tensors.empty());
  o.out_dir = tmp.file("b");
  o.threads = 3;
  convert_checkpoint(o);
  EXPECT_EQ(dir_files(tmp.file("a")), dir_files(tmp.file("b")));
  // Options are validated.
  o.group_size = 48;
  EXPECT_NE(test_util::error_of([&] { convert_checkpoint(o); }).find("--group-size"), std::string::npos);
}

// ---------------------------------------------------------------------------
// Interruption and resume

struct KillCase {
  const char* fixture;
  int after_files;
};

class ConvertResume : public ::testing::TestWithParam<KillCase> {};

TEST_P(ConvertResume, SigkillThenResumeIsByteIdentical) {
  const KillCase& k = GetParam();
  TempDir tmp;
  const std::string ref = tmp.file("ref"), out = tmp.file("out");
  ProcResult r = run_strata(convert_args(fixture(k.fixture), ref), tmp);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  r = run_strata(convert_args(fixture(k.fixture), out, {"--test-kill-after-files", std::to_string(k.after_files)}),
                 tmp);
  ASSERT_EQ(r.signal, SIGKILL) << "exit " << r.exit_code << ": " << r.err;
  // Unfinished: no manifest, a state file, a half-written .tmp.
  EXPECT_FALSE(fs::exists(out + "/manifest.json"));
  EXPECT_TRUE(fs::exists(out + "/convert-state.json"));
  int tmps = 0, finals = 0;
  for (const auto& [name, body] : dir_files(out)) {
    if (name.size() > 4 && name.substr(name.size() - 4) == ".tmp") ++tmps;
    else if (name != "convert-state.json") ++finals;
  }
  EXPECT_EQ(tmps, 1);
  EXPECT_EQ(finals, k.after_files);
  // Without --resume the directory is refused.
  r = run_strata(convert_args(fixture(k.fixture), out), tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--resume"), std::string::npos) << r.err;

  // The files finished before the kill, by identity: a file the resume keeps
  // is the same inode, untouched; a rewritten one is a new inode (written as
  // .tmp beside the old one, then renamed over it). Damage between the kill
  // and the resume: one finished file gets a flipped byte (same size: only
  // its checksum tells), another (with 4+ finished) is cut short; both must
  // be rewritten, the rest kept.
  std::map<std::string, struct stat> finished;
  for (const auto& [name, body] : dir_files(out)) {
    if (name == "convert-state.json" || (name.size() > 4 && name.substr(name.size() - 4) == ".tmp")) continue;
    struct stat st {};
    ASSERT_EQ(::stat((out + "/" + name).c_str(), &st), 0) << name;
    finished[name] = st;
  }
  ASSERT_EQ(static_cast<int>(finished.size()), k.after_files);
  std::set<std::string> damaged;
  if (k.after_files >= 2) {
    std::string victim = finished.begin()->first;  // a .bin file (dense or experts) if one is finished
    for (const auto& [name, st] : finished)
      if (name.size() > 4 && name.substr(name.size() - 4) == ".bin") {
        victim = name;
        break;
      }
    std::string body = read_file(out + "/" + victim);
    ASSERT_GT(body.size(), 100u);
    body[body.size() / 2] = static_cast<char>(body[body.size() / 2] ^ 0x5a);
    std::fstream f(out + "/" + victim, std::ios::in | std::ios::out | std::ios::binary);  // in place: same inode
    f.seekp(static_cast<std::streamoff>(body.size() / 2));
    f.put(body[body.size() / 2]);
    f.close();
    damaged.insert(victim);
    // The flip kept the file's identity; its content is what must change.
    struct stat st {};
    ASSERT_EQ(::stat((out + "/" + victim).c_str(), &st), 0);
    ASSERT_EQ(st.st_ino, finished[victim].st_ino);
    finished[victim] = st;
  }
  if (k.after_files >= 4) {
    std::string victim;
    for (const auto& [name, st] : finished)
      if (!damaged.count(name)) victim = name;
    fs::resize_file(out + "/" + victim, fs::file_size(out + "/" + victim) - 1);
    damaged.insert(victim);
  }

  // Without --quiet: the resume reports what it rewrites and what it kept.
  std::vector<std::string> resume_args = convert_args(fixture(k.fixture), out, {"--resume"});
  resume_args.erase(std::find(resume_args.begin(), resume_args.end(), "--quiet"));
  r = run_strata(resume_args, tmp);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int kept = k.after_files - static_cast<int>(damaged.size());
  if (kept > 0)
    EXPECT_NE(r.err.find(fmt::format("({} kept from the interrupted run)", kept)), std::string::npos) << r.err;
  else
    EXPECT_EQ(r.err.find("kept from the interrupted run"), std::string::npos) << r.err;
  for (const auto& [name, st0] : finished) {
    struct stat st {};
    ASSERT_EQ(::stat((out + "/" + name).c_str(), &st), 0) << name;
    const bool rewrite_msg = r.err.find(out + "/" + name + " differs from the recorded checksum; rewriting it") !=
                             std::string::npos;
    if (damaged.count(name)) {
      EXPECT_NE(st.st_ino, st0.st_ino) << name << " was damaged but not rewritten";
      EXPECT_TRUE(rewrite_msg) << name << ": " << r.err;
    } else {
      EXPECT_EQ(st.st_ino, st0.st_ino) << name << " was finished before the kill but rewritten by the resume";
      EXPECT_EQ(st.st_mtim.tv_sec, st0.st_mtim.tv_sec) << name;
      EXPECT_EQ(st.st_mtim.tv_nsec, st0.st_mtim.tv_nsec) << name;
      EXPECT_FALSE(rewrite_msg) << name << ": " << r.err;
    }
  }
  const auto a = dir_files(ref), b = dir_files(out);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, body] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(b.at(name) == body) << name << " differs after resume";
  }
  // Resuming a finished container is a no-op.
  r = run_strata(convert_args(fixture(k.fixture), out, {"--resume"}), tmp);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(dir_files(out), b);
}

INSTANTIATE_TEST_SUITE_P(Convert, ConvertResume,
                         ::testing::Values(KillCase{"glm5-tiny-bf16", 0}, KillCase{"glm5-tiny-bf16", 2},
                                           KillCase{"glm52-tiny-bf16", 4}, KillCase{"glm5-tiny-fp8", 6},
                                           KillCase{"dsv3-tiny-fp8", 3}, KillCase{"dsv32-tiny-fp8", 5}),
                         [](const ::testing::TestParamInfo<KillCase>& i) {
                           std::string n = std::string(i.param.fixture) + "_after_" + std::to_string(i.param.after_files);
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(ConvertResumeRules, OptionMismatchIsRefused) {
  TempDir tmp;
  const std::string out = tmp.file("out");
  ProcResult r = run_strata(convert_args(fixture("glm5-tiny-bf16"), out, {"--test-kill-after-files", "1"}), tmp);
  ASSERT_EQ(r.signal, SIGKILL) << r.err;
  r = run_strata(convert_args(fixture("glm5-tiny-bf16"), out, {"--resume", "--experts", "int8"}), tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--experts was \"int4\", now \"int8\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  // Another source is refused too.
  r = run_strata(convert_args(fixture("glm5-tiny-fp8"), out, {"--resume"}), tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("source"), std::string::npos) << r.err;
  // The same options resume; --force starts over with new ones.
  r = run_strata(convert_args(fixture("glm5-tiny-bf16"), out, {"--force", "--experts", "int8"}), tmp);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_manifest(out).options.value("experts", ""), "int8");
}

TEST(ConvertSafety, RefusesToOverwriteWithoutForce) {
  TempDir tmp;
  const std::string out = tmp.file("out");
  ProcResult r = run_strata(convert_args(fixture("glm52-tiny-bf16"), out), tmp);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto before = dir_files(out);
  r = run_strata(convert_args(fixture("glm52-tiny-bf16"), out, {"--experts", "int8"}), tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("complete strata container"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(dir_files(out), before);
  // A finished container converted with other options is not "resumed" either.
  r = run_strata(convert_args(fixture("glm52-tiny-bf16"), out, {"--resume", "--experts", "int8"}), tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(dir_files(out), before);
  r = run_strata(convert_args(fixture("glm52-tiny-bf16"), out, {"--force", "--experts", "int8"}), tmp);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_manifest(out).options.value("experts", ""), "int8");
  // A non-empty directory that is not a conversion is refused.
  fs::create_directories(tmp.file("other"));
  write_file(tmp.file("other") + "/notes.txt", "mine");
  r = run_strata(convert_args(fixture("glm52-tiny-bf16"), tmp.file("other")), tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(tmp.file("other") + "/notes.txt"), "mine");
  // The source directory itself is refused.
  r = run_strata(convert_args(fixture("glm52-tiny-bf16"), fixture("glm52-tiny-bf16"), {"--force"}), tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("source directory"), std::string::npos) << r.err;
}

TEST(ConvertSafety, WriteErrorNamesTheFileAndLeavesNoFinalFile) {
  TempDir tmp;
  const std::string out = tmp.file("out");
  // Files may not grow past 200 kB: dense.bin (about 1 MB) cannot be written.
  ProcResult r = run_strata(convert_args(fixture("glm5-tiny-bf16"), out), tmp, 200000);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("strata: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dense.bin.tmp: write failed"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out + "/dense.bin"));
  EXPECT_FALSE(fs::exists(out + "/dense.bin.tmp"));
  EXPECT_FALSE(fs::exists(out + "/manifest.json"));
  // With room again, --resume completes it.
  r = run_strata(convert_args(fixture("glm5-tiny-bf16"), out, {"--resume"}), tmp);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  check_container(fixture("glm5-tiny-bf16"), out, convert_defaults());
}

// ---------------------------------------------------------------------------
// --verify

TEST(ConvertVerify, DetectsAFlippedByteInAnExpertsFile) {
  TempDir tmp;
  const std::string out = tmp.file("out");
  ProcResult r = run_strata(convert_args(fixture("glm5-tiny-bf16"), out), tmp);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_strata({"convert", "--verify", out}, tmp);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("OK"), std::string::npos);

  const Manifest m = read_manifest(out);
  const ExpertLayerRecord& x = m.expert_layers.at(1);
  const std::string path = out + "/" + x.file;
  std::string body = read_file(path);
  const uint64_t at = 3 * x.stride + x.down.offset + 5;  // expert 3's down_proj
  body[at] = static_cast<char>(body[at] ^ 0x10);
  write_file(path, body);
  r = run_strata({"convert", "--verify", out}, tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(x.file), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(fmt::format("expert 3 of layer {}", x.layer)), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("dense.bin"), std::string::npos) << r.err;  // only the damaged file is named

  // A truncated file is named too.
  fs::resize_file(path, body.size() - 1);
  r = run_strata({"convert", "--verify", out}, tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(x.file), std::string::npos) << r.err;
}

TEST(ConvertVerify, RefusesADirectoryWithoutManifest) {
  TempDir tmp;
  const ProcResult r = run_strata({"convert", "--verify", tmp.str()}, tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("manifest.json"), std::string::npos) << r.err;
}

TEST(ConvertCli, RejectsBadFlags) {
  TempDir tmp;
  ProcResult r = run_strata(convert_args(fixture("glm5-tiny-bf16"), tmp.file("o"), {"--group-size", "48"}), tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--group-size"), std::string::npos) << r.err;
  r = run_strata(convert_args(fixture("glm5-tiny-bf16"), tmp.file("o"), {"--embed-bits", "4"}), tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--embed-bits"), std::string::npos) << r.err;
  r = run_strata(convert_args(fixture("glm5-tiny-bf16"), tmp.file("o"), {"--head-bits", "2"}), tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--head-bits"), std::string::npos) << r.err;
  r = run_strata({"convert", "--in", fixture("glm5-tiny-bf16")}, tmp);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp.file("o")));
}

}  // namespace
}  // namespace strata::convert_test
