// The engine: one object that opens a model (a Hugging Face checkpoint or a
// strata container) with its options and owns everything a forward needs:
// the immutable model, the compute pool, the expert store chain and the
// runner. Every front end (run, chat, generate, score, eval, bench, serve)
// opens one and drives it through the generation step (generation.h).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/thread_pool.h"
#include "experts/counting_expert_store.h"
#include "experts/store_options.h"
#include "kernels/matmul.h"
#include "model/forward.h"
#include "model/model.h"
#include "runtime/speculation.h"
#include "runtime/stats.h"

namespace strata {

struct EngineOptions {
  std::string model;          // checkpoint or container directory
  bool load_mtp = false;      // load the MTP layer (scoring it, drafting)
  int threads = 0;            // compute threads; 0: every core
  ForwardOptions forward;     // attention form, DSA on/off
  ComputeOptions compute;     // kernel path, activation mode
  ExpertCacheOptions experts; // containers: RAM budget, pins, read-ahead, O_DIRECT
  SpecOptions spec;           // speculative decoding (mtp and auto load the MTP layer)
  bool verbose = true;        // start-up lines on stderr once everything loaded (kernel path, expert cache)
  // Experts over MPI (docs/distributed.md): the routed experts other ranks
  // compute (rank 0 only; experts.owned names this rank's). Not owned.
  ExpertPeers* peers = nullptr;
};

// The model an Engine with these options would load (o.model, the MTP layer
// when asked for or when speculation may use it).
std::shared_ptr<const Model> load_engine_model(const EngineOptions& o);

class Engine {
 public:
  // Loads and validates everything; throws strata::Error naming the file,
  // field or option that is wrong.
  explicit Engine(const EngineOptions& o);
  // Over a model already loaded (o.model and o.load_mtp are then unused):
  // several engines may share one immutable model (tests, several servers).
  Engine(std::shared_ptr<const Model> model, const EngineOptions& o);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const { return o_; }
  const Model& model() const { return *model_; }
  const ModelConfig& config() const { return model_->config; }
  ThreadPool& pool() { return *pool_; }
  ModelRunner& runner() { return *runner_; }
  const Compute& compute() const { return runner_->compute(); }
  // The store the forward reaches experts through (it counts expert heat).
  ExpertStore& experts() { return *heat_; }
  const CountingExpertStore& heat() const { return *heat_; }

  // One forward over `rows` with the engine's ForwardOptions (model/forward.h).
  // `prompt_rows` of them are prompt positions, the rest decode rows: the
  // time is counted as prefill when any prompt row is present (decode
  // forwards also feed the speculation controller's cost table).
  void forward(std::span<const Row> rows, float* logits, float* hidden = nullptr, int64_t prompt_rows = 0);
  // draft: logits for the first mtp_draft_vocab() ids only (rows of that
  // length), and the time counted as decode time (TokenCounts::decode_ns: a
  // generation's draft chains and MTP sync rows; `score --mtp` passes false).
  void forward_mtp(std::span<const Row> rows, const float* hidden, float* logits, float* hidden_out = nullptr,
                   bool draft = false);
  // The ids an MTP draft chooses among: SpecOptions::draft_vocab clamped (0: the vocabulary).
  int64_t mtp_draft_vocab() const;
  // Whether the MTP layer is loaded (forward_mtp works).
  bool has_mtp() const;
  // The start-up lines (kernel path, expert cache, speculative decoding),
  // each "strata: ...\n": printed at the end of a successful load when
  // EngineOptions::verbose, else for a front end to print once whatever it
  // loads after the engine has loaded too.
  const std::string& startup_lines() const { return startup_; }
  // Speculative decoding's options, counters and controller (Sequences that
  // draft are given it).
  Speculator& speculator() { return *spec_; }
  const Speculator& speculator() const { return *spec_; }

  // Everything counted so far (runner phases, expert store, memory tiers,
  // front-end token counts). Call from the thread that runs the forward.
  EngineStats stats() const;
  // Persists what the run learned (a container's routing usage, for the
  // next run's pinned experts). Returns false (with a warning) on failure.
  bool save_usage() const;

 private:
  void open();

  EngineOptions o_;
  std::shared_ptr<const Model> model_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ExpertStore> store_;
  std::unique_ptr<CountingExpertStore> heat_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Speculator> spec_;
  TokenCounts counts_;
  std::string startup_;
};

}  // namespace strata
