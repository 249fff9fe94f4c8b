// One statistics report for every front end (ARCHITECTURE.md §8): the CLI's
// --stats line and --stats-json, the server's /v1/stats, /metrics and the
// dashboard all render this struct. Counters live where they arise (the
// runner's phases, the expert store); the engine gathers them here.
#pragma once
#include <cstdint>
#include <string>

#include "core/json.h"
#include "experts/expert_store.h"
#include "model/forward.h"
#include "runtime/speculation.h"

namespace strata {

// Tokens the front ends fed, and the forward time they took. decode_ns is
// every forward after the prompt's: the decode forwards (with speculation,
// the verify forwards over drafted rows) and the MTP layer's forwards that
// drafted and kept its state in sync, so tokens per second with a draft
// source pays for the drafts (before 2026-12-07 the MTP forwards were left
// out and `--spec mtp` looked faster than it was).
struct TokenCounts {
  uint64_t prompt_tokens = 0, prompt_ns = 0;  // prefill
  uint64_t decode_tokens = 0, decode_ns = 0;  // one row per generated token, plus drafts' MTP forwards
};

struct EngineStats {
  TokenCounts tokens;
  PhaseStats phases;         // where forward time went
  ExpertStoreStats experts;  // requests, hits, bytes read, read-ahead
  ExpertMemory memory;       // expert budget, pinned, cache, on disk
  uint64_t resident_bytes = 0;  // the model's resident weights
  uint64_t peak_rss_bytes = 0;  // the process's peak resident set
  SpecStats spec;               // speculative decoding (mode off: all zero)

  double prompt_tok_s() const;
  double decode_tok_s() const;
};

// The process's peak resident set so far (getrusage).
uint64_t peak_rss_bytes();

// --stats: two lines, for people.
std::string stats_text(const EngineStats& s);
// --stats-json: one flat object, a stable schema (docs/cli.md).
Json stats_json(const EngineStats& s);
// The same numbers grouped as /v1/stats serves them: "experts" and
// "memory" objects (docs/server.md); the server adds its own counters.
Json stats_experts_json(const EngineStats& s);
Json stats_memory_json(const EngineStats& s);
// Speculative decoding: mode, k, steps, drafted / accepted per source,
// tokens per step, MTP time, the estimated time saved (docs/speculative.md).
Json stats_spec_json(const EngineStats& s);

}  // namespace strata
