#include "cli/common.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "kernels/cpu_features.h"
#include "util/json.h"

#include "util/error.h"

namespace strata::cli {

void EngineFlags::add(CLI::App* cmd) {
  cmd->add_option("--model", model, "Model directory (Hugging Face checkpoint)")->required();
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
  cmd->add_flag("--stats", stats, "Print speed, expert-cache and time-split statistics at the end (stderr)");
  cmd->add_flag("--stats-json", stats_json, "Print the statistics as one JSON line (stderr)");
  cmd->add_option("--kernels", kernels,
                  "Kernel path: auto (the best this CPU runs), scalar, avx2, avx512, avx512vnni (docs/kernels.md)");
  cmd->add_flag("-q,--quiet", quiet, "No start-up lines on stderr (kernel path, expert cache)");
}

void apply_kernels_flag(const std::string& name) {
  if (name.empty() || name == "auto") return;
  const std::optional<KernelPath> p = parse_kernel_path(name == "avx512vnni" ? "avx512-vnni" : name);
  if (!p) fail("--kernels {}: unknown path; expected auto or a path name such as scalar, avx2, avx512, avx512vnni", name);
  if (!force_kernel_path(*p))
    fail("--kernels {}: this CPU cannot run it (best available: {}; {})", name, kernel_path_name(best_kernel_path()),
         kernel_description());
}

ForwardOptions EngineFlags::forward_options() const {
  ForwardOptions o;
  o.form = attn == "naive" ? AttentionForm::Naive : AttentionForm::Absorbed;
  o.dense_attention = dense_attention;
  return o;
}

Engine open_engine(const EngineFlags& f, bool load_mtp) {
  Engine e;
  apply_kernels_flag(f.kernels);
  if (!f.quiet) std::fprintf(stderr, "strata: %s\n", kernel_description().c_str());
  LoadOptions lo;
  lo.load_mtp = load_mtp;
  e.model = load_model(f.model, lo);
  int threads = f.threads > 0 ? f.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  e.pool = std::make_unique<ThreadPool>(threads);
  if (e.model->experts_on_disk) {
    ExpertCacheOptions o;
    o.ram_bytes = static_cast<uint64_t>(f.ram_gb * 1e9);
    if (f.pin == "all") {
      o.pin_all = true;
    } else if (!f.pin.empty()) {
      char* end = nullptr;
      const double g = std::strtod(f.pin.c_str(), &end);
      if (end == f.pin.c_str() || *end != '\0' || !(g >= 0.0) || g > 1e6)
        fail("--pin {}: expected a size in GB or 'all'", f.pin);
      o.pin_bytes = static_cast<uint64_t>(g * 1e9);
    }
    o.autopin = !f.no_autopin;
    o.direct_io = !f.no_direct_io;
    o.prefetch = !f.no_prefetch;
    auto disk = std::make_unique<DiskExpertStore>(*e.model, o);
    e.disk = disk.get();
    if (!f.quiet) std::fprintf(stderr, "strata: %s\n", disk->describe().c_str());
    e.store = std::move(disk);
  } else {
    e.store = std::make_unique<ResidentExpertStore>(e.model->weights);
  }
  e.runner = std::make_unique<ModelRunner>(*e.model, *e.store, *e.pool);
  return e;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void finish_engine(Engine& e, const EngineFlags& f, bool save_usage) {
  std::fflush(stdout);
  if (e.disk && save_usage) e.disk->save_usage();
  if (!f.stats && !f.stats_json) return;
  const PhaseStats& ps = e.runner->stats();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const uint64_t peak_rss = static_cast<uint64_t>(ru.ru_maxrss) * 1024;
  auto rate = [](uint64_t n, uint64_t ns) { return ns ? static_cast<double>(n) * 1e9 / static_cast<double>(ns) : 0.0; };
  auto sec = [](uint64_t ns) { return static_cast<double>(ns) / 1e9; };
  ExpertStoreStats es;
  if (e.disk) es = e.disk->stats();
  const double hit = es.requests ? static_cast<double>(es.hits) / static_cast<double>(es.requests) : 1.0;
  if (f.stats_json) {
    Json j;
    j["prompt_tokens"] = e.prompt_tokens;
    j["prompt_tok_s"] = rate(e.prompt_tokens, e.prompt_ns);
    j["decode_tokens"] = e.decode_tokens;
    j["decode_tok_s"] = rate(e.decode_tokens, e.decode_ns);
    j["expert_requests"] = es.requests;
    j["expert_hit_rate"] = hit;
    j["bytes_read"] = es.bytes_read;
    j["experts_prefetched"] = es.prefetched;
    j["prefetch_hits"] = es.prefetch_hits;
    j["time_s"] = {{"total", sec(ps.total_ns)},         {"attention", sec(ps.attention_ns)},
                   {"router", sec(ps.router_ns)},       {"expert_wait", sec(ps.expert_wait_ns)},
                   {"expert_matmul", sec(ps.expert_ns)}, {"other", sec(ps.other_ns())}};
    j["resident_bytes"] = e.model->resident_bytes();
    if (e.disk) {
      j["ram_budget_bytes"] = e.disk->budget_bytes();
      j["pinned_bytes"] = e.disk->pinned_bytes();
      j["cache_bytes"] = e.disk->cache_capacity_bytes();
    }
    j["peak_rss_bytes"] = peak_rss;
    std::fprintf(stderr, "%s\n", j.dump().c_str());
  }
  if (f.stats) {
    std::fprintf(stderr,
                 "prompt %llu tok %.1f tok/s | decode %llu tok %.1f tok/s | experts hit %.1f%%, read %.1f MB\n"
                 "time %.3f s = attention %.3f + router %.3f + expert wait %.3f + expert matmul %.3f + other %.3f | "
                 "peak RSS %.1f MB\n",
                 (unsigned long long)e.prompt_tokens, rate(e.prompt_tokens, e.prompt_ns),
                 (unsigned long long)e.decode_tokens, rate(e.decode_tokens, e.decode_ns), 100.0 * hit,
                 static_cast<double>(es.bytes_read) / 1e6, sec(ps.total_ns), sec(ps.attention_ns), sec(ps.router_ns),
                 sec(ps.expert_wait_ns), sec(ps.expert_ns), sec(ps.other_ns()), static_cast<double>(peak_rss) / 1e6);
  }
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
