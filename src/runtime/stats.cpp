#include "runtime/stats.h"

#include <sys/resource.h>

#include <fmt/format.h>

namespace strata {

namespace {
double rate(uint64_t n, uint64_t ns) { return ns ? static_cast<double>(n) * 1e9 / static_cast<double>(ns) : 0.0; }
double sec(uint64_t ns) { return static_cast<double>(ns) / 1e9; }
}  // namespace

double EngineStats::prompt_tok_s() const { return rate(tokens.prompt_tokens, tokens.prompt_ns); }
double EngineStats::decode_tok_s() const { return rate(tokens.decode_tokens, tokens.decode_ns); }

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

namespace {
std::string spec_text(const SpecStats& sp) {
  if (sp.mode == SpecMode::Off) return {};
  std::string per;
  for (int i = 0; i < kDraftSources; ++i) {
    const SpecSourceStats& x = sp.source[static_cast<size_t>(i)];
    if (!x.drafted && !x.shadow) continue;
    per += fmt::format(", {} {}/{}", draft_source_name(static_cast<DraftSource>(i)), x.accepted, x.drafted);
  }
  std::string chosen;  // "0:12 1:3 4:80": steps by the drafts chosen
  for (size_t i = 0; i < sp.chosen.size(); ++i)
    if (sp.chosen[i]) chosen += fmt::format("{}{}:{}", chosen.empty() ? "" : " ", i, sp.chosen[i]);
  return fmt::format(
      "spec {} k {} | {:.2f} tok/step over {} steps ({} with drafts) | drafted {} accepted {} ({:.1f}%){} | "
      "k chosen {} | mtp {:.3f} s | saved {}\n",
      spec_mode_name(sp.mode), sp.k, sp.tokens_per_step(), sp.steps, sp.spec_steps, sp.drafted(), sp.accepted(),
      100.0 * sp.acceptance(), per, chosen.empty() ? "-" : chosen, sec(sp.mtp_ns),
      // Saved needs the time of a one-row forward: none when every step drafted.
      sp.one_row_ns > 0 ? fmt::format("{:+.3f} s", sp.saved_s()) : std::string("n/a (no one-row forward measured)"));
}
}  // namespace

namespace {

// Experts over MPI (rank 0): the exchange with the other ranks, when there was one.
std::string peer_text(const EngineStats& s) {
  const PhaseStats& ps = s.phases;
  if (ps.peer_bytes == 0) return "";
  const uint64_t tok = s.tokens.prompt_tokens + s.tokens.decode_tokens;
  return fmt::format("experts over MPI: exchanged {:.2f} MB ({:.1f} KB per token), waited {:.3f} s for other ranks\n",
                     static_cast<double>(ps.peer_bytes) / 1e6,
                     tok ? static_cast<double>(ps.peer_bytes) / 1e3 / static_cast<double>(tok) : 0.0,
                     sec(ps.peer_wait_ns));
}

}  // namespace

std::string stats_text(const EngineStats& s) {
  const PhaseStats& ps = s.phases;
  return fmt::format(
      "prompt {} tok {:.1f} tok/s | decode {} tok {:.1f} tok/s | experts hit {:.1f}%, read {:.1f} MB\n"
      "time {:.3f} s = attention {:.3f} + router {:.3f} + expert wait {:.3f} + expert matmul {:.3f} + other {:.3f} | "
      "peak RSS {:.1f} MB\n",
      s.tokens.prompt_tokens, s.prompt_tok_s(), s.tokens.decode_tokens, s.decode_tok_s(), 100.0 * s.experts.hit_rate(),
      static_cast<double>(s.experts.bytes_read) / 1e6, sec(ps.total_ns), sec(ps.attention_ns), sec(ps.router_ns),
      sec(ps.expert_wait_ns), sec(ps.expert_ns), sec(ps.other_ns()), static_cast<double>(s.peak_rss_bytes) / 1e6) +
         peer_text(s) + spec_text(s.spec);
}

Json stats_json(const EngineStats& s) {
  const PhaseStats& ps = s.phases;
  Json j;
  j["prompt_tokens"] = s.tokens.prompt_tokens;
  j["prompt_tok_s"] = s.prompt_tok_s();
  j["decode_tokens"] = s.tokens.decode_tokens;
  j["decode_tok_s"] = s.decode_tok_s();
  j["expert_requests"] = s.experts.requests;
  j["expert_hit_rate"] = s.experts.hit_rate();
  j["bytes_read"] = s.experts.bytes_read;
  j["experts_prefetched"] = s.experts.prefetched;
  j["prefetch_hits"] = s.experts.prefetch_hits;
  if (!s.experts.layers.empty()) {
    // Read-ahead per MoE layer: precision = read-aheads then asked for /
    // read-aheads; recall = requests a read-ahead served / requests that
    // needed a read (docs/streaming.md).
    ExpertLayerStats all;
    Json layers = Json::array();
    for (const ExpertLayerStats& l : s.experts.layers) {
      layers.push_back({{"layer", l.layer},
                        {"requests", l.requests},
                        {"misses", l.misses},
                        {"prefetched", l.prefetched},
                        {"prefetch_hits", l.prefetch_hits},
                        {"precision", l.precision()},
                        {"recall", l.recall()},
                        {"wasted_bytes", l.prefetch_wasted_bytes}});
      all.requests += l.requests;
      all.misses += l.misses;
      all.prefetched += l.prefetched;
      all.prefetch_hits += l.prefetch_hits;
    }
    j["prefetch_precision"] = all.precision();
    j["prefetch_recall"] = all.recall();
    j["prefetch_wasted_bytes"] = s.experts.prefetch_wasted_bytes;
    j["prefetch_yields"] = s.experts.prefetch_yields;
    j["prefetch_auto"] = {{"off_steps", s.experts.prefetch_off_steps},
                          {"kept_on", s.experts.prefetch_auto_on},
                          {"turned_off", s.experts.prefetch_auto_off}};
    j["registered_reads"] = s.experts.registered_reads;
    j["prefetch_layers"] = std::move(layers);
  }
  j["time_s"] = {{"total", sec(ps.total_ns)},         {"attention", sec(ps.attention_ns)},
                 {"router", sec(ps.router_ns)},       {"expert_wait", sec(ps.expert_wait_ns)},
                 {"expert_matmul", sec(ps.expert_ns)}, {"other", sec(ps.other_ns())}};
  if (ps.peer_bytes > 0) {  // experts over MPI (docs/distributed.md)
    j["time_s"]["peer_wait"] = sec(ps.peer_wait_ns);
    j["peer_bytes"] = ps.peer_bytes;
  }
  j["resident_bytes"] = s.resident_bytes;
  if (s.memory.on_disk) {
    j["ram_budget_bytes"] = s.memory.budget_bytes;
    j["pinned_bytes"] = s.memory.pinned_bytes;
    j["cache_bytes"] = s.memory.cache_bytes;
    j["cache_policy"] = s.memory.policy;
  }
  j["peak_rss_bytes"] = s.peak_rss_bytes;
  j["spec"] = stats_spec_json(s);
  return j;
}

Json stats_spec_json(const EngineStats& s) {
  const SpecStats& sp = s.spec;
  Json src = Json::object();
  for (int i = 0; i < kDraftSources; ++i) {
    const SpecSourceStats& x = sp.source[static_cast<size_t>(i)];
    src[draft_source_name(static_cast<DraftSource>(i))] = {{"drafted", x.drafted},
                                                           {"accepted", x.accepted},
                                                           {"shadow", x.shadow},
                                                           {"shadow_hits", x.shadow_hits}};
  }
  // Plans by drafts chosen (index 0..k).
  Json chosen = Json::array();
  for (int i = 0; i <= sp.k && i < static_cast<int>(sp.chosen.size()); ++i) chosen.push_back(sp.chosen[static_cast<size_t>(i)]);
  return Json{{"mode", spec_mode_name(sp.mode)},
              {"k", sp.k},
              {"steps", sp.steps},
              {"spec_steps", sp.spec_steps},
              {"tokens", sp.tokens},
              {"tokens_per_step", sp.tokens_per_step()},
              {"drafted", sp.drafted()},
              {"accepted", sp.accepted()},
              {"acceptance", sp.acceptance()},
              {"sources", src},
              {"mtp_forwards", sp.mtp_forwards},
              {"mtp_rows", sp.mtp_rows},
              {"mtp_s", sec(sp.mtp_ns)},
              {"mtp_drops", sp.mtp_drops},
              {"decode_s", sec(sp.decode_ns)},
              {"one_row_forward_s", sp.one_row_ns / 1e9},
              {"k_chosen", chosen},
              {"decode_expert_bytes", sp.decode_bytes},
              {"read_ns_per_byte", sp.read_ns_per_byte},
              {"saved_s", sp.saved_s()}};
}

Json stats_experts_json(const EngineStats& s) {
  return Json{{"requests", s.experts.requests},       {"hits", s.experts.hits},
              {"misses", s.experts.misses},           {"hit_rate", s.experts.hit_rate()},
              {"bytes_read", s.experts.bytes_read},   {"prefetched", s.experts.prefetched},
              {"prefetch_hits", s.experts.prefetch_hits}};
}

Json stats_memory_json(const EngineStats& s) {
  Json mem;
  mem["resident_bytes"] = s.resident_bytes;
  if (s.memory.on_disk) {
    mem["pinned_bytes"] = s.memory.pinned_bytes;
    mem["cache_bytes"] = s.memory.cache_bytes;
    mem["cache_used_bytes"] = s.memory.cache_used_bytes;
    mem["on_disk_bytes"] = s.memory.on_disk_bytes;
    mem["ram_budget_bytes"] = s.memory.budget_bytes;
    mem["cache_policy"] = s.memory.policy;
  }
  return mem;
}

}  // namespace strata
