#include "cli/common.h"

#include "core/io.h"

#include <cstdio>
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
                  "The model: a Hugging Face checkpoint directory, a strata container (strata convert), or the "
                  "config.json (or manifest.json) in either")
      ->required()
      ->transform(model_dir_of, "", "")
      ->group(kGroupModel);
  cmd->add_option("--threads", threads, "Compute threads (0 = all cores)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str()
      ->group(kGroupModel);
  cmd->add_option("--kernels", kernels,
                  "Kernel path: auto (the best this CPU runs), scalar, avx2, avx512, avx512vnni (docs/kernels.md)")
      ->capture_default_str()
      ->group(kGroupModel);
  cmd->add_flag("--packed-gemm,!--no-packed-gemm", packed_gemm,
                "int8 and int4 calls of >= 12 rows (prefill, batch-union expert matmuls) on the packed, blocked "
                "kernel (avx512vnni; default) or, with --no-packed-gemm, the unpacked ones: the same results bit for "
                "bit (docs/kernels.md)")
      ->group(kGroupModel);
  cmd->add_option("--attn", attn, "Attention form: absorbed (decode form) or naive (prefill form)")
      ->check(CLI::IsMember({"absorbed", "naive"}))
      ->capture_default_str()
      ->group(kGroupModel);
  cmd->add_flag("--dense-attention", dense_attention, "Keep every causal key (disable DSA top-k selection)")
      ->group(kGroupModel);
  cmd->add_option("--kv-type", kv_type,
                  "Key cache: f32 (exact), or f16 (the MLA latent and roped key, or the GQA keys and values, as "
                  "halves: half their bytes per context token; logits within a stated bound, docs/kernels.md)")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str()
      ->group(kGroupModel);
  cmd->add_option("--ram", ram_gb, "Containers: RAM budget in GB for routed experts (default: available memory)")
      ->check(CLI::Range(0.0, 1e6))
      ->group(kGroupCache);
  cmd->add_option("--pin", pin, "Containers: pin experts in RAM: a size in GB, or 'all' (clamped to --ram; default: "
                                "the experts earlier runs used most)")
      ->group(kGroupCache);
  cmd->add_flag("--no-autopin", no_autopin, "Containers: do not pin the experts that earlier runs used most")
      ->group(kGroupCache);
  cmd->add_flag("--no-direct-io", no_direct_io, "Containers: read experts through the page cache")->group(kGroupCache);
  cmd->add_option("--prefetch", prefetch,
                  "Containers: read the predicted next-layer experts ahead: auto (time decode steps with it on "
                  "and off now and then, keep it while it pays; trace replay: on), on, off (docs/streaming.md)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str()
      ->group(kGroupCache);
  cmd->add_flag("--no-prefetch", no_prefetch, "Containers: the same as --prefetch off")->group(kGroupCache);
  cmd->add_option("--io", io,
                  "Containers: how experts are read: uring (io_uring, several reads in flight; the pread pool where "
                  "the kernel refuses it), pread (a pool of pread threads), mmap (map the files; the page cache is "
                  "the cache) (docs/streaming.md)")
      ->check(CLI::IsMember({"uring", "pread", "mmap"}))
      ->capture_default_str()
      ->group(kGroupCache);
  cmd->add_flag("--no-registered-buffers", no_registered_buffers,
                "Containers, --io uring: do not register the cache's buffers with the kernel (each read then pins "
                "its pages itself)")
      ->group(kGroupCache);
  cmd->add_option("--io-depth", io_depth,
                  fmt::format("Containers: expert reads in flight (uring, pread; default {})", kDefaultIoDepth))
      ->check(CLI::Range(1, 4096))
      ->group(kGroupCache);
  cmd->add_option("--verify-experts", verify_experts,
                  "Containers: check an expert's XXH3 at its first read in this process (first; the file does not "
                  "change under a run) or at every read (every: costs ~1 s of CPU per 15 GB read; docs/streaming.md)")
      ->check(CLI::IsMember({"first", "every"}))
      ->capture_default_str()
      ->group(kGroupCache);
  cmd->add_option("--cache", cache,
                  "Containers: the expert cache policy: lru (least recently used per layer), lfu (least frequently "
                  "used with decay; docs/streaming.md)")
      ->check(CLI::IsMember({"lru", "lfu"}))
      ->capture_default_str()
      ->group(kGroupCache);
  cmd->add_option("--spec", spec,
                  "Speculative decoding: off, auto (every draft source, only while it pays; the default of run, "
                  "chat, generate and serve), mtp (the MTP layer's chain), ngram (prompt lookup); forced tokens of "
                  "a constraint in every mode but off. No mode changes the output, greedy or seeded "
                  "(docs/speculative.md)")
      ->capture_default_str()
      ->group(kGroupSpec);
  cmd->add_option("--spec-k", spec_k, "Speculative decoding: most draft tokens per step")
      ->check(CLI::Range(1, kSpecMaxDraft))
      ->capture_default_str()
      ->group(kGroupSpec);
  cmd->add_option("--draft-vocab", draft_vocab,
                  "Speculative decoding: MTP drafts choose among the first N token ids only (a BPE vocabulary's "
                  "most frequent merges come first), so a draft costs N rows of the lm_head; 0: every id. The "
                  "output is unchanged (docs/speculative.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(kGroupSpec);
  cmd->add_flag("--stats", stats, "Print speed, expert-cache and time-split statistics at the end (stderr)")
      ->group(kGroupOutput);
  cmd->add_flag("--stats-json", stats_json, "Print the statistics as one JSON line (stderr)")->group(kGroupOutput);
  cmd->add_flag("-q,--quiet", quiet, "No start-up lines on stderr (kernel path, expert cache)")->group(kGroupOutput);
  cmd->add_option("--experts-over", experts_over,
                  "Where routed experts are computed: local (this process) or mpi (spread over the ranks of an "
                  "mpirun job; rank 0 runs the rest; docs/distributed.md)")
      ->check(CLI::IsMember({"local", "mpi"}))
      ->capture_default_str()
      ->group(kGroupModel);
  cmd->add_option("--mpi-timeout", mpi_timeout,
                  "With --experts-over mpi: seconds rank 0 waits for a rank's outputs of one layer before it "
                  "ends the job naming the rank and layer")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str()
      ->group(kGroupModel);
  cmd->add_option("--mpi-replicate", mpi_replicate,
                  "With --experts-over mpi: the N hottest experts (usage.json) are rank 0's besides its share and "
                  "computed there without an exchange (its --ram holds them too)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str()
      ->group(kGroupModel);
}

OpenedEngine open_engine(const EngineFlags& f, bool load_mtp, bool deferred) {
  OpenedEngine r;
  EngineOptions o = deferred ? f.options_deferred(load_mtp) : f.options(load_mtp);
  if (f.experts_over != "mpi") {
    r.engine = std::make_unique<Engine>(o);
    return r;
  }
  MpiOptions mo;
  mo.timeout_s = f.mpi_timeout;
  mo.replicate = f.mpi_replicate;
  mo.verbose = !f.quiet;
  r.mpi = join_mpi(mo);
  MpiJob& job = *r.mpi;
  if (job.rank() > 0) o.verbose = false;  // rank 0 speaks for the job
  // Every step that can fail on one rank is followed by a collective check,
  // so no rank is left waiting for one that gave up.
  std::shared_ptr<const Model> model;
  std::string err;
  try {
    model = load_engine_model(o);
  } catch (const std::exception& e) {
    err = e.what();
  }
  job.all_ok(model != nullptr, "open the model", err);
  o.experts.owned = job.agree(*model, o.experts.ram_bytes);
  if (job.rank() == 0) o.peers = job.peers();
  std::unique_ptr<Engine> engine;
  try {
    engine = std::make_unique<Engine>(model, o);
  } catch (const std::exception& e) {
    err = e.what();
  }
  job.all_ok(engine != nullptr, "open the engine", err);
  if (job.rank() == 0) {
    r.engine = std::move(engine);
    return r;
  }
  const PeerServeStats st = job.serve(engine->runner());
  if (f.stats || f.stats_json) {
    const PhaseStats& ps = engine->runner().stats();
    std::fprintf(stderr,
                 "strata: rank %d: %llu layer messages, %llu experts over %llu rows; compute %.3f s (expert store "
                 "%.3f, matmul %.3f), waiting for rank 0 %.3f s; exchanged %.2f MB; read %.1f MB from disk\n",
                 job.rank(), static_cast<unsigned long long>(st.layers), static_cast<unsigned long long>(st.experts),
                 static_cast<unsigned long long>(st.rows), static_cast<double>(st.compute_ns) / 1e9,
                 static_cast<double>(ps.expert_wait_ns) / 1e9, static_cast<double>(ps.expert_ns) / 1e9,
                 static_cast<double>(st.idle_ns) / 1e9, static_cast<double>(st.bytes) / 1e6,
                 static_cast<double>(engine->experts().stats().bytes_read) / 1e6);
  }
  return r;
}

EngineOptions EngineFlags::options(bool load_mtp) const {
  EngineOptions o;
  o.model = model;
  o.load_mtp = load_mtp;
  o.threads = threads;
  o.forward.form = attn == "naive" ? AttentionForm::Naive : AttentionForm::Absorbed;
  o.forward.dense_attention = dense_attention;
  o.forward.kv = kv_type == "f16" ? KvType::F16 : KvType::F32;
  if (!kernels.empty() && kernels != "auto") {
    const std::optional<KernelPath> p = parse_kernel_path(kernels == "avx512vnni" ? "avx512-vnni" : kernels);
    if (!p)
      fail("--kernels {}: unknown path; expected auto or a path name such as scalar, avx2, avx512, avx512vnni", kernels);
    if (!kernel_path_supported(*p))
      fail("--kernels {}: this CPU cannot run it (best available: {}; {})", kernels, kernel_path_name(best_kernel_path()),
           kernel_description(best_kernel_path()));
    o.compute.path = *p;
  }
  o.compute.packed = packed_gemm;
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
  if (prefetch != "auto" && prefetch != "on" && prefetch != "off")
    fail("--prefetch {}: expected auto, on or off", prefetch);
  o.experts.prefetch = !no_prefetch && prefetch != "off";
  o.experts.prefetch_auto = prefetch == "auto";
  o.experts.registered_buffers = !no_registered_buffers;
  if (io == "uring") o.experts.io = IoMode::Uring;
  else if (io == "pread") o.experts.io = IoMode::Pread;
  else if (io == "mmap") o.experts.io = IoMode::Mmap;
  else fail("--io {}: expected uring, pread or mmap", io);
  if (io_depth > 0) o.experts.io_depth = io_depth;
  if (verify_experts != "first" && verify_experts != "every")
    fail("--verify-experts {}: expected first or every", verify_experts);
  o.experts.verify_every_read = verify_experts == "every";
  if (cache == "lru") o.experts.policy = CachePolicy::Lru;
  else if (cache == "lfu") o.experts.policy = CachePolicy::Lfu;
  else fail("--cache {}: expected lru or lfu", cache);
  o.verbose = !quiet;
  const std::optional<SpecMode> sm = parse_spec_mode(spec);
  if (!sm) fail("--spec {}: expected off, auto, mtp or ngram", spec);
  o.spec.mode = *sm;
  o.spec.k = spec_k;
  o.spec.draft_vocab = draft_vocab;
  return o;
}

void EngineFlags::announce(const Engine& e) const {
  if (!quiet) std::fputs(e.startup_lines().c_str(), stderr);
}

void finish_engine(const Engine& e, const EngineFlags& f, bool save_usage) {
  std::fflush(stdout);
  // Over MPI each rank's store saw only its own experts: no rank's usage.json
  // would be the whole picture, so none is written (docs/distributed.md).
  if (save_usage && f.experts_over != "mpi") e.save_usage();
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

std::vector<int32_t> read_ids_file(const std::string& path, int64_t vocab) {
  const std::string text = read_small_file(path, 1ull << 30);
  std::vector<int32_t> ids;
  std::string tok;
  auto flush = [&] {
    if (tok.empty()) return;
    if (tok.size() > 10) fail("{}: \"{}\" is not a token id", path, tok);
    const long long v = std::stoll(tok);
    if (v >= vocab) fail("{}: token id {} is outside the vocabulary of {}", path, v, vocab);
    ids.push_back(static_cast<int32_t>(v));
    tok.clear();
  };
  for (char ch : text) {
    if (ch >= '0' && ch <= '9')
      tok.push_back(ch);
    else if (ch == ',' || ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r' || ch == '[' || ch == ']')
      flush();
    else
      fail("{}: unexpected character '{}' (expected token ids separated by commas or whitespace)", path, ch);
  }
  flush();
  if (ids.size() < 2) fail("{}: need at least 2 token ids", path);
  return ids;
}

}  // namespace strata::cli
