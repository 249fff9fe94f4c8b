// Continuous batching (ARCHITECTURE.md §1): one thread owns the engine's
// forward; every step is ONE forward over the rows of all active requests
// (one decode row each -- plus its drafts with speculative decoding -- plus
// a bounded chunk of prefill rows of newly admitted ones, so a long prompt
// interleaves with decodes instead of stalling them). With the MTP layer,
// its rounds (state sync, draft chains) run first, batched the same way. The scheduler only decides which sequences' rows go into
// each forward; each request is a runtime Sequence, which samples, stops and
// detokenizes (runtime/generation.h). Finished sessions stay in a small LRU
// so a conversation's next turn prefills only what is new.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model/session.h"
#include "runtime/engine.h"
#include "runtime/generation.h"
#include "server/kv_store.h"
#include "text/json_constraint.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

namespace strata::server {

// What the scheduler runs on; the front end opens it (cmd_serve, tests).
struct ServerModel {
  Engine* engine = nullptr;       // its forward runs on the scheduler thread only
  const Tokenizer* tok = nullptr;
  std::vector<int32_t> stop_ids;  // end-of-turn ids: end the answer, never shown
  KvStore* kv = nullptr;          // conversations saved to disk (--kv-dir); may be null
};

struct SchedulerOptions {
  int parallel = 4;             // requests decoded together
  int queue = 16;               // requests waiting beyond those (then 429)
  int keep_sessions = 4;        // idle sessions kept for prefix reuse
  // Whether a prompt may resume from a kept session or a saved conversation
  // (--prefix-reuse). Off: every prompt is prefilled whole, cached_tokens is
  // always 0. On: only within one scope (Job::scope).
  bool prefix_reuse = true;
  int64_t ctx = 4096;           // tokens per session
  int64_t prefill_chunk = 256;  // prefill rows per step, over all admitted prompts
};

enum class Finish { None, Stop, Length, Timeout, Cancelled, Error };
const char* finish_name(Finish f);  // OpenAI finish_reason ("stop", "length", ...)

// One request as the scheduler sees it. The HTTP thread fills the inputs,
// submits, then reads pieces as they come; everything below `mu` is shared.
struct Job {
  // Inputs (set before submit, then read-only).
  std::vector<int32_t> prompt;
  SamplerOptions sampling;
  int64_t max_tokens = 16;
  std::vector<std::string> stop;
  int top_logprobs = -1;  // -1: no logprobs
  bool ignore_eos = false;
  // response_format or a forced tool_choice: masks each step's logits,
  // advanced by each token (the scheduler thread only touches it after submit).
  std::shared_ptr<TokenConstraint> constraint;
  uint64_t deadline_ns = 0;  // 0: none
  // Prefix-reuse scope (docs/security.md): a kept session or saved
  // conversation is resumed only by a job of the same scope. The server sets
  // the hash of the request's API key (key_scope), 0 without keys.
  uint64_t scope = 0;

  std::atomic<bool> cancel{false};  // set by the HTTP side (client gone)

  std::mutex mu;
  std::condition_variable cv;
  std::string text;  // shown text not yet taken
  std::vector<TokenLogprob> logprobs;  // not yet taken
  Finish finish = Finish::None;
  std::string error;
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  int64_t draft_tokens = 0, accepted_draft_tokens = 0;  // speculation: drafts verified, and accepted
  uint64_t submit_ns = 0, first_token_ns = 0, end_ns = 0;

  // HTTP side: waits until there is text, logprobs or the end (or `ms` pass).
  // Moves what is there into the out-params; returns true once finished.
  bool take(std::string& text_out, std::vector<TokenLogprob>& lp_out, int ms);
};

struct SchedulerStats {
  uint64_t requests = 0, requests_done = 0, rejected = 0, timeouts = 0, cancelled = 0, errors = 0;
  uint64_t prompt_tokens = 0, prefilled_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  uint64_t steps = 0, rows = 0;
  uint64_t ttft_ns_sum = 0, ttft_count = 0;
  double gen_tok_s = 0;  // generated tokens per second over the last few seconds
  double last_ttft_s = 0;
  int64_t queued = 0, active = 0, idle_sessions = 0;
  uint64_t session_bytes = 0;
  uint64_t kv_conversations = 0, kv_bytes_written = 0, kv_positions_loaded = 0;  // --kv-dir
  EngineStats engine{};                     // a snapshot, taken on the scheduler thread
  std::vector<std::vector<uint64_t>> heat;  // per layer, per expert (empty for dense layers)
};

class Scheduler {
 public:
  Scheduler(const ServerModel& m, const SchedulerOptions& o);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job; false when the queue is full (the caller answers 429).
  bool submit(const std::shared_ptr<Job>& job);
  // Whether submit() would refuse now (a hint: the HTTP layer answers 429
  // before parsing and tokenizing a request it could not queue anyway).
  bool full() const;
  SchedulerStats stats() const;
  // Ends every request (cancelled) and refuses new ones; idempotent.
  void shutdown();
  const SchedulerOptions& options() const { return opts_; }

 private:
  struct Seq {
    std::shared_ptr<Job> job;
    std::unique_ptr<Sequence> seq;
    int64_t conv = -1;     // the saved conversation it continues (KvStore), -1: none
    int64_t counted = 0;   // generated tokens already in generated_total_
  };
  struct Idle {
    std::unique_ptr<Session> session;
    std::vector<int32_t> tokens;
    uint64_t last_used = 0;
    int64_t conv = -1;
    uint64_t scope = 0;  // the Job::scope of the request that left it
  };

  void loop();
  void admit(const std::shared_ptr<Job>& job);
  void step();
  // Hands what a step produced to the job.
  void publish(Seq& s, const StepOutput& out);
  void end(Seq& s, Finish f, const std::string& error = {});
  void publish_stats();

  ServerModel m_;
  SchedulerOptions opts_;
  int64_t vocab_;

  mutable std::mutex mu_;  // waiting_, stop_, stats_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> waiting_;
  bool stop_ = false;
  SchedulerStats stats_;

  // Scheduler thread only.
  std::vector<Seq> active_;
  std::vector<Idle> idle_;
  std::vector<Row> rows_;
  std::vector<float> logits_;             // [rows wanting logits, vocab] of one step
  std::vector<float> hidden_;             // [rows, hidden]: final hidden states (MTP state), when wanted
  std::vector<int64_t> row_start_;        // per active_ index: its first row, -1: none
  std::vector<int64_t> logits_row_;       // per active_ index: its first logits row, -1: none
  std::vector<Sequence*> mtp_seqs_;       // the sequences with MTP state, for the MTP rounds
  MtpScratch mtp_;
  StepOutput out_;
  uint64_t tick_ = 0;
  std::deque<std::pair<uint64_t, uint64_t>> rate_window_;  // (time, generated tokens so far)
  uint64_t generated_total_ = 0;
  uint64_t last_heat_ns_ = 0;

  std::thread thread_;
};

}  // namespace strata::server
