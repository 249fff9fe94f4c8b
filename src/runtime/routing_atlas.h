// The expert atlas (strata atlas, docs/cli.md "strata atlas"): what a
// model's router does, computed from recorded routing (RecordedTrace, one
// per prompt kind): per MoE layer the experts' usage and its entropy against
// uniform, which experts fire together (against independence), how well the
// read-ahead's prediction made at the layer before recalls the layer's
// experts, and how usage shifts between prompt kinds. Arithmetic only: the
// page and its figures are the front end's (src/cli/atlas_page.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "runtime/routing_trace.h"

namespace strata {

// One prompt kind: a name ("prose", "code") and its routing.
struct AtlasInput {
  std::string name;
  const RecordedTrace* trace = nullptr;
};

// Usage of one layer's experts over some tokens.
struct ExpertUsage {
  int64_t tokens = 0;
  std::vector<uint64_t> counts;  // [experts]: tokens that chose the expert
  // counts / (tokens * top_k): the share of the layer's routed slots, sums to 1.
  std::vector<double> share;
  double entropy_bits = 0;  // H(share)
  double entropy_norm = 0;  // H / log2(experts): 1 = uniform, 0 = one expert
};

struct ExpertPair {
  int32_t a = 0, b = 0;  // a < b
  uint64_t together = 0;  // tokens that chose both
  double lift = 0;        // together / (counts_a * counts_b / tokens): 1 = independent
};

// Between two kinds' usage of one layer.
struct UsageShift {
  size_t a = 0, b = 0;   // kind indices
  double tv = 0;         // total variation: 1/2 sum |share_a - share_b|, in [0, 1]
  double js_bits = 0;    // Jensen-Shannon divergence (log2), in [0, 1]
  std::vector<int32_t> top_experts;  // the experts whose share differs most, largest first
};

struct AtlasLayer {
  int64_t layer = 0;            // the model's layer number
  ExpertUsage all;              // every kind's tokens together
  std::vector<ExpertUsage> by_kind;
  // [experts * experts]: tokens that chose both i and j (the diagonal: counts).
  std::vector<uint64_t> together;
  std::vector<ExpertPair> most_together;  // highest lift first (pairs with enough tokens)
  std::vector<ExpertPair> least_together; // lowest lift first
  // Recall at k (k = 1..top_k, index k-1): the share of the layer's chosen
  // experts found among the first k the read-ahead predicted for it (the
  // layer's router applied to the previous MoE layer's input, in the
  // router's order); empty where the trace holds no prediction (the first
  // MoE layer). precision_at: that count over k.
  std::vector<double> recall_at, precision_at;
  int64_t predicted_tokens = 0;  // tokens with a prediction
  // A static baseline: the k most used experts of the layer (over these
  // tokens) as the prediction for every token.
  std::vector<double> popular_recall_at;
  std::vector<UsageShift> shifts;  // one per pair of kinds (a < b)
};

struct Atlas {
  std::string model, fingerprint;
  int64_t experts = 0, top_k = 0;
  std::vector<std::string> kinds;
  std::vector<int64_t> kind_tokens;
  std::vector<AtlasLayer> layers;
};

struct AtlasOptions {
  size_t top_pairs = 10;          // most/least together pairs kept per layer
  uint64_t min_expected = 5;      // a pair is ranked only if independence expects at least this many tokens
  size_t top_shift_experts = 5;   // experts listed per shift
};

// Computes the atlas. Every trace must have the same layers, experts and
// top_k (errors name the kind); at least one kind and one token.
Atlas build_atlas(const std::vector<AtlasInput>& kinds, const AtlasOptions& o = {});

// Usage of trace layer `li` over all tokens of `t` (exposed for the tests).
ExpertUsage expert_usage(const RecordedTrace& t, size_t li);
// Jensen-Shannon divergence of two distributions, in bits.
double js_divergence_bits(const std::vector<double>& p, const std::vector<double>& q);

// atlas.json: the numbers behind the page (docs/cli.md "strata atlas" lists
// the keys). `coact_layer`: the model layer whose full co-activation matrix
// is written (the others keep their top pairs).
Json atlas_json(const Atlas& a, int64_t coact_layer);

}  // namespace strata
