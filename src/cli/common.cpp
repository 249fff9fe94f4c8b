#include "cli/common.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "kernels/cpu_features.h"

namespace strata::cli {

std::string model_dir_of(std::string path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return path;
  const std::filesystem::path p(path);
  if (p.filename() == "config.json" || p.filename() == "manifest.json")
    return p.has_parent_path() ? p.parent_path().string() : ".";
  throw CLI::ValidationError("--model", path + " is a file; give the model's directory (a Hugging Face checkpoint "
                                               "or a strata container), or its config.json");
}

void EngineFlags::add(CLI::App* cmd) {
  cmd->add_option("--model", model,
                  "Model directory: a Hugging Face checkpoint or a strata container (its config.json or "
                  "manifest.json stands for the directory)")
      ->required()
      ->transform(model_dir_of, "", "");
  cmd->add_option("--threads", threads, "Compute threads (0 = all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--attn", attn, "Attention form: absorbed (decode form) or naive (prefill form)")
      ->check(CLI::IsMember({"absorbed", "naive"}));
  cmd->add_flag("--dense-attention", dense_attention, "Keep every causal key (disable DSA top-k selection)");
  cmd->add_option("--ram", ram_gb, "Containers: RAM budget in GB for routed experts (default: available memory)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--pin", pin, "Containers: pin experts in RAM: a size in GB, or 'all' (clamped to --ram)");
  cmd->add_flag("--no-autopin", no_autopin, "Containers: do not pin the experts that earlier runs used most");
  cmd->add_flag("--no-direct-io", no_direct_io, "Containers: read experts through the page cache");
  cmd->add_flag("--no-prefetch", no_prefetch, "Containers: do not read the predicted next-layer experts ahead");
  cmd->add_option("--io", io,
                  "Containers: how experts are read: uring (io_uring, several reads in flight; the pread pool where "
                  "the kernel refuses it), pread (a pool of pread threads), mmap (map the files; the page cache is "
                  "the cache) (docs/streaming.md)")
      ->check(CLI::IsMember({"uring", "pread", "mmap"}));
  cmd->add_option("--io-depth", io_depth,
                  fmt::format("Containers: expert reads in flight (uring, pread; default {})", kDefaultIoDepth))
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--stats", stats, "Print speed, expert-cache and time-split statistics at the end (stderr)");
  cmd->add_flag("--stats-json", stats_json, "Print the statistics as one JSON line (stderr)");
  cmd->add_option("--kernels", kernels,
                  "Kernel path: auto (the best this CPU runs), scalar, avx2, avx512, avx512vnni (docs/kernels.md)");
  cmd->add_flag("-q,--quiet", quiet, "No start-up lines on stderr (kernel path, expert cache)");
  cmd->add_option("--spec", spec,
                  "Speculative decoding: off, auto (every draft source, only while it pays), mtp (the MTP layer's "
                  "chain), ngram (prompt lookup); forced tokens of a constraint in every mode but off "
                  "(docs/speculative.md)");
  cmd->add_option("--spec-k", spec_k, "Speculative decoding: most draft tokens per step")
      ->check(CLI::Range(1, kSpecMaxDraft));
}

EngineOptions EngineFlags::options(bool load_mtp) const {
  EngineOptions o;
  o.model = model;
  o.load_mtp = load_mtp;
  o.threads = threads;
  o.forward.form = attn == "naive" ? AttentionForm::Naive : AttentionForm::Absorbed;
  o.forward.dense_attention = dense_attention;
  if (!kernels.empty() && kernels != "auto") {
    const std::optional<KernelPath> p = parse_kernel_path(kernels == "avx512vnni" ? "avx512-vnni" : kernels);
    if (!p)
      fail("--kernels {}: unknown path; expected auto or a path name such as scalar, avx2, avx512, avx512vnni", kernels);
    if (!kernel_path_supported(*p))
      fail("--kernels {}: this CPU cannot run it (best available: {}; {})", kernels, kernel_path_name(best_kernel_path()),
           kernel_description(best_kernel_path()));
    o.compute.path = *p;
  }
  o.experts.ram_bytes = static_cast<uint64_t>(ram_gb * 1e9);
  if (pin == "all") {
    o.experts.pin_all = true;
  } else if (!pin.empty()) {
    char* end = nullptr;
    const double g = std::strtod(pin.c_str(), &end);
    if (end == pin.c_str() || *end != '\0' || !(g >= 0.0) || g > 1e6) fail("--pin {}: expected a size in GB or 'all'", pin);
    o.experts.pin_bytes = static_cast<uint64_t>(g * 1e9);
  }
  o.experts.autopin = !no_autopin;
  o.experts.direct_io = !no_direct_io;
  o.experts.prefetch = !no_prefetch;
  if (io == "uring") o.experts.io = IoMode::Uring;
  else if (io == "pread") o.experts.io = IoMode::Pread;
  else if (io == "mmap") o.experts.io = IoMode::Mmap;
  else fail("--io {}: expected uring, pread or mmap", io);
  if (io_depth > 0) o.experts.io_depth = io_depth;
  o.verbose = !quiet;
  const std::optional<SpecMode> sm = parse_spec_mode(spec);
  if (!sm) fail("--spec {}: expected off, auto, mtp or ngram", spec);
  o.spec.mode = *sm;
  o.spec.k = spec_k;
  return o;
}

void finish_engine(const Engine& e, const EngineFlags& f, bool save_usage) {
  std::fflush(stdout);
  if (save_usage) e.save_usage();
  if (!f.stats && !f.stats_json) return;
  const EngineStats s = e.stats();
  if (f.stats_json) std::fprintf(stderr, "%s\n", stats_json(s).dump().c_str());
  if (f.stats) std::fputs(stats_text(s).c_str(), stderr);
}

std::vector<int32_t> parse_ids(const std::string& s, int64_t vocab, const char* flag) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string tok = s.substr(i, j - i);
    if (tok.empty() || tok.size() > 10 || tok.find_first_not_of("0123456789") != std::string::npos)
      fail("{}: \"{}\" is not a token id", flag, tok);
    const long long v = std::stoll(tok);
    if (v >= vocab) fail("{}: token id {} is outside the vocabulary of {}", flag, v, vocab);
    out.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  if (out.empty()) fail("{}: no token ids given", flag);
  return out;
}

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

}  // namespace strata::cli
