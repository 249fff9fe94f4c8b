#include "server/metrics.h"

#include <fmt/format.h>

#include "model/session.h"
#include "runtime/stats.h"

namespace strata::server {

uint64_t session_budget_bytes(const ModelConfig& c, const SchedulerOptions& o, bool mtp, KvType kv) {
  const uint64_t per_session = Session::bytes_for(c, o.ctx, mtp, kv);
  return per_session * static_cast<uint64_t>(o.parallel + o.keep_sessions);
}

Json stats_json(const SchedulerStats& s, const StatsContext& ctx) {
  Json j;
  j["uptime_s"] = ctx.uptime_s;
  j["model"] = ctx.model_id;
  j["requests"] = s.requests;
  j["requests_done"] = s.requests_done;
  j["rejected"] = s.rejected;
  j["timeouts"] = s.timeouts;
  j["cancelled"] = s.cancelled;
  j["errors"] = s.errors;
  j["prompt_tokens"] = s.prompt_tokens;
  j["prefilled_tokens"] = s.prefilled_tokens;
  j["cached_tokens"] = s.cached_tokens;
  j["generated_tokens"] = s.generated_tokens;
  j["tokens_per_second"] = s.gen_tok_s;
  j["ttft_avg_s"] = s.ttft_count ? static_cast<double>(s.ttft_ns_sum) / 1e9 / static_cast<double>(s.ttft_count) : 0.0;
  j["ttft_last_s"] = s.last_ttft_s;
  j["queue_depth"] = s.queued;
  j["active_requests"] = s.active;
  j["idle_sessions"] = s.idle_sessions;
  j["steps"] = s.steps;
  j["rows"] = s.rows;
  j["parallel"] = ctx.sched->parallel;
  j["ctx"] = ctx.sched->ctx;
  j["experts"] = stats_experts_json(s.engine);
  j["spec"] = stats_spec_json(s.engine);
  Json mem = stats_memory_json(s.engine);
  mem["session_bytes"] = s.session_bytes;
  mem["peak_rss_bytes"] = s.engine.peak_rss_bytes;
  // What the process may hold: model, expert cache, and the sessions.
  mem["session_budget_bytes"] = session_budget_bytes(*ctx.model, *ctx.sched, ctx.mtp_state, ctx.kv);
  mem["kv_type"] = kv_type_name(ctx.kv);
  j["memory"] = mem;
  j["kv_store"] = {{"enabled", ctx.kv_store},
                   {"conversations", s.kv_conversations},
                   {"bytes_written", s.kv_bytes_written},
                   {"positions_loaded", s.kv_positions_loaded}};
  j["expert_heat"] = s.heat;
  return j;
}

std::string prometheus_metrics(const Json& s) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    out += fmt::format("# HELP strata_{} {}\n# TYPE strata_{} {}\nstrata_{} {}\n", name, help, name, type, name, v);
  };
  metric("requests_total", "counter", "Requests accepted", s["requests"].get<double>());
  metric("requests_rejected_total", "counter", "Requests refused with 429 (queue full)", s["rejected"].get<double>());
  metric("requests_timeout_total", "counter", "Requests that timed out", s["timeouts"].get<double>());
  metric("prompt_tokens_total", "counter", "Prompt tokens of accepted requests", s["prompt_tokens"].get<double>());
  metric("prompt_tokens_cached_total", "counter", "Prompt tokens reused from idle sessions", s["cached_tokens"].get<double>());
  metric("tokens_generated_total", "counter", "Tokens generated", s["generated_tokens"].get<double>());
  metric("tokens_per_second", "gauge", "Generated tokens per second (last 5 s)", s["tokens_per_second"].get<double>());
  metric("time_to_first_token_seconds_avg", "gauge", "Mean time to first token", s["ttft_avg_s"].get<double>());
  metric("queue_depth", "gauge", "Requests waiting", s["queue_depth"].get<double>());
  metric("active_requests", "gauge", "Requests being generated", s["active_requests"].get<double>());
  metric("expert_hit_rate", "gauge", "Expert cache hit rate", s["experts"]["hit_rate"].get<double>());
  metric("expert_bytes_read_total", "counter", "Bytes of experts read from disk", s["experts"]["bytes_read"].get<double>());
  metric("resident_bytes", "gauge", "Resident model bytes", s["memory"]["resident_bytes"].get<double>());
  metric("session_bytes", "gauge", "KV state bytes of active and idle sessions", s["memory"]["session_bytes"].get<double>());
  return out;
}

}  // namespace strata::server
