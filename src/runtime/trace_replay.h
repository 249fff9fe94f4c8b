// strata trace replay: a routing trace (runtime/routing_trace.h) driven
// through a real expert store -- real reads of the container's expert sizes
// -- to measure hit rate, bytes read and read-ahead worth of a cache policy
// on real routing (docs/streaming.md "Routing traces").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experts/cache_model.h"
#include "experts/expert_store.h"
#include "runtime/routing_trace.h"

namespace strata {

// How a trace's (MoE layer, expert) land on a container's. When the counts
// match it is the identity. When the container has m = E_c / E_t (>= 2)
// times the trace's experts per layer, container layer j holds m trace
// layers side by side: expert e of trace layer (j * m + g) mod L_t is
// container expert g * E_t + e (so a token asks each container layer for
// m * top_k experts and the pool keeps the trace's reuse). With fewer
// container experts, e -> e mod E_c. Trace layers repeat (mod L_t) when the
// container has more layer slots than the trace.
struct TraceMapping {
  std::vector<int64_t> layers;  // the container's MoE layers
  int64_t experts = 0;          // the container's experts per layer
  int64_t groups = 1;           // m
  std::string describe;         // one line, for the report
};
TraceMapping map_trace(const RecordedTrace& t, const std::vector<int64_t>& container_layers, int64_t container_experts);

// A recorded trace's chosen experts as the cache model's RoutingTrace
// (strata plan --trace, docs/plan.md): its layers in order, its experts and
// top-k. A row naming an expert twice is refused (`path`, the token and the
// field in the message): the reader checks everything else.
RoutingTrace cache_model_trace(const RecordedTrace& t, const std::string& path);

struct ReplayResult {
  int64_t tokens = 0;
  ExpertStoreStats stats;
  double wall_s = 0;
  double wait_s = 0;  // time in the store's begin()/next(): waiting for experts
};

// Per token, per container MoE layer in order: the read-ahead's prediction
// for the next layer (store.prefetch, when `prefetch`), then the union of the
// token's experts through begin()/next() in chunks of max_batch(), as the
// MoE asks for them. `max_tokens` > 0 stops early.
ReplayResult replay_trace(const RecordedTrace& t, const TraceMapping& m, ExpertStore& store, bool prefetch,
                          int64_t max_tokens = 0);

}  // namespace strata
