// Routing traces (strata trace record / replay, docs/streaming.md "Routing
// traces"): per token and MoE layer, the experts a model chose and the
// experts its read-ahead predicted, recorded through the forward's
// RoutingObserver, written as JSON lines, and replayed through a real expert
// store to measure a cache policy on real routing.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "experts/expert_store.h"
#include "model/forward.h"

namespace strata {

class Engine;

struct RecordedTrace {
  std::string model;         // where it was recorded from
  std::string fingerprint;   // the model's fingerprint (hex)
  std::vector<int64_t> layers;  // the MoE layers, in order
  int64_t experts = 0;       // routed experts per layer
  int64_t top_k = 0;
  int64_t tokens = 0;
  // [tokens][layers][top_k]: chosen experts, each row in the router's order.
  std::vector<int32_t> chosen;
  // Same shape: the read-ahead's prediction for that token and layer (made
  // at the MoE layer before it); -1 where there is none (the first MoE layer).
  std::vector<int32_t> predicted;
  const int32_t* chosen_at(int64_t t, size_t li) const {
    return chosen.data() + (static_cast<size_t>(t) * layers.size() + li) * static_cast<size_t>(top_k);
  }
  const int32_t* predicted_at(int64_t t, size_t li) const {
    return predicted.data() + (static_cast<size_t>(t) * layers.size() + li) * static_cast<size_t>(top_k);
  }
};

// Collects a trace from a forward's routing (ModelRunner::set_routing_observer).
// Rows must come in token order, every MoE layer of a forward seeing the same
// rows (teacher forcing: record_routing below). Allocates as it records.
class RoutingRecorder final : public RoutingObserver {
 public:
  RoutingRecorder(std::vector<int64_t> moe_layers, int64_t experts, int64_t top_k);
  void routed(int64_t layer, int64_t n, int64_t k, const int32_t* chosen, const int32_t* predicted_next) override;
  RecordedTrace& trace() { return t_; }

 private:
  RecordedTrace t_;
  std::vector<int32_t> index_;  // layer -> position in t_.layers, -1 if not MoE
  int64_t base_ = 0;            // the first token of the current forward
};

// Teacher-forces `ids` through the engine, `chunk` rows per forward, and
// records the routing of every token (the observer is removed afterwards).
// `window` > 0: the ids are independent sequences of that many tokens (each
// from position 0, in a fresh session), as a model trained at that context
// is evaluated; 0: one sequence.
RecordedTrace record_routing(Engine& e, std::span<const int32_t> ids, int64_t chunk, int64_t window,
                            const std::string& model, const std::string& fingerprint);

// JSON lines: a header line, then one line per token (docs/streaming.md).
// Written to a temp file and renamed.
void write_routing_trace(const std::string& path, const RecordedTrace& t);
// Reads and checks one (errors name the file, the line and the field).
RecordedTrace read_routing_trace(const std::string& path);

}  // namespace strata
