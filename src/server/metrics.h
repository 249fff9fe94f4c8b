// What the server reports about itself (docs/server.md "Monitoring"):
// /v1/stats as JSON (the dashboard reads it) and /metrics in Prometheus'
// text format, both from one SchedulerStats snapshot. The engine's part
// (expert cache, memory) is rendered by runtime/stats.h, so `strata serve`
// and the CLI report it alike.
#pragma once
#include <string>

#include "core/config.h"
#include "core/json.h"
#include "server/scheduler.h"

namespace strata::server {

// What /v1/stats states besides the scheduler's counters.
struct StatsContext {
  std::string model_id;  // as /v1/models lists it
  double uptime_s = 0;
  const SchedulerOptions* sched = nullptr;
  const ModelConfig* model = nullptr;
  bool kv_store = false;  // conversations are saved to disk (--kv-dir)
  bool mtp_state = false;  // sessions keep the MTP layer's state (--spec mtp / auto)
  KvType kv = KvType::F32;  // the sessions' key storage (--kv-type)
};

// KV state bytes the scheduler may hold at most: every session it may keep
// (active and idle), each sized to the context (with the MTP layer's state
// and hidden states when `mtp`).
uint64_t session_budget_bytes(const ModelConfig& c, const SchedulerOptions& o, bool mtp, KvType kv = KvType::F32);

Json stats_json(const SchedulerStats& s, const StatsContext& ctx);

// The Prometheus exposition of a stats_json() document.
std::string prometheus_metrics(const Json& stats);

}  // namespace strata::server
