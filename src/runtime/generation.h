// Generation: one sequence being generated, and the step every front end
// runs it with (ARCHITECTURE.md §1, §7). `run`, `chat` and `generate` drive
// one Sequence with run_turn(); the server's scheduler puts the rows of many
// Sequences into each batched forward and calls the same two halves of the
// step on each. Speculative decoding belongs here too: a sequence may add
// more than one row per step.
//
// A step, around one forward:
//   add_rows()  the rows this sequence feeds next: a chunk of its prompt
//               while prefilling (the last prompt row asks for logits), else
//               one row for the token it sampled last;
//   advance()   after the forward: what was fed is held; with a logits row,
//               the next token is chosen: constraint mask (response_format,
//               tool_choice), sampling, end-of-turn ids, stop strings,
//               detokenized text, logprobs, length and context limits.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "model/forward.h"
#include "model/session.h"
#include "text/json_constraint.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

namespace strata {

class Engine;

struct GenerationParams {
  SamplerOptions sampling;
  int64_t max_tokens = -1;       // tokens to generate; -1: until a stop or the context is full
  std::vector<std::string> stop;  // stop strings: the text ends before them
  bool ignore_eos = false;       // end-of-turn ids are banned instead of ending the answer
  bool ban_stops_first = false;  // the first token may not be an end-of-turn id (continuing an ended answer)
  int top_logprobs = -1;         // -1: no logprobs; k >= 0: the chosen token's and the k most likely
  std::shared_ptr<TokenConstraint> constraint;  // masks every step's logits (may be null)
};

enum class StopReason : uint8_t {
  None,         // still generating
  Eos,          // an end-of-turn id was sampled (not shown, not fed)
  StopString,   // the text reached a stop string
  Done,         // the constraint is complete and nothing may follow
  Length,       // max_tokens generated
  Context,      // the context is full
  Interrupted,  // ended from outside (Ctrl-C, a client gone, a timeout)
  Error,        // the constraint refused every token (error())
};
const char* stop_reason_name(StopReason r);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// What one step gave the front end.
struct StepOutput {
  int32_t token = -1;  // the sampled token (an end-of-turn id too); -1: nothing sampled
  std::string text;    // text safe to show now (stop strings held back; the tail when the answer ended)
  std::optional<TokenLogprob> logprob;
};

class Sequence {
 public:
  // A fresh sequence with a session of `ctx` positions. `tok` decodes
  // generated tokens to text (null: token ids only, no text or stop
  // strings); `stop_ids` end an answer.
  Sequence(const ModelConfig& c, int64_t ctx, const Tokenizer* tok, std::span<const int32_t> stop_ids);
  // Adopts a session that holds `held` (a kept or reloaded conversation).
  Sequence(std::unique_ptr<Session> session, std::vector<int32_t> held, const ModelConfig& c, const Tokenizer* tok,
           std::span<const int32_t> stop_ids);

  Session& session() { return *session_; }
  // Hands the session back (e.g. to an idle pool); the sequence is then empty.
  std::unique_ptr<Session> release_session();
  int64_t capacity() const { return session_->capacity(); }
  // The tokens the session holds, in order.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Forgets everything (:reset).
  void clear();

  // Starts an answer to `prompt` (1..capacity tokens): the session keeps the
  // longest prefix it shares with what it holds and prefills the rest.
  // Returns the positions reused. The sampler keeps its random stream across
  // answers unless params.sampling changes (then it restarts from the seed).
  int64_t begin(std::span<const int32_t> prompt, const GenerationParams& params);
  // Whether the last answer can go on (:more): logits or a sampled token are held.
  bool can_continue() const { return logits_valid_ || pending_.has_value(); }
  // Goes on from where the last answer stopped, with new params.
  void resume(const GenerationParams& params);
  // New sampling options now; the random stream restarts from their seed.
  void set_sampling(const SamplerOptions& o) { sampler_.set_options(o); }

  // The rows this sequence feeds next (see above); appends at most `budget`
  // prompt rows. Returns how many rows were added (0: none needed).
  int64_t add_rows(std::vector<Row>& rows, int64_t budget);
  // Whether the rows just added include one that wants logits.
  bool wants_logits() const { return wants_logits_; }
  // After the forward: `logits` is this sequence's logits row (null when it
  // asked for none). Returns false once the answer has ended (reason()).
  bool advance(const float* logits, StepOutput& out);
  // Ends the answer from outside; returns the held-back text to show (none
  // after an Error). Does nothing once ended.
  std::string end(StopReason r);

  bool prefilling() const { return prefilling_; }
  bool finished() const { return reason_ != StopReason::None; }
  StopReason reason() const { return reason_; }
  const std::string& error() const { return error_; }
  int64_t generated() const { return generated_; }
  int64_t prefilled() const { return prefilled_; }
  int64_t reused() const { return reused_; }
  uint64_t first_token_ns() const { return first_token_ns_; }

 private:
  void start(const GenerationParams& params);
  bool sample(StepOutput& out);
  void finish(StopReason r, std::string* tail);
  bool is_stop(int32_t t) const;

  int64_t vocab_;
  const Tokenizer* tok_;
  std::vector<int32_t> stop_ids_;
  std::unique_ptr<Session> session_;
  std::vector<int32_t> tokens_;     // held (fed) tokens
  std::optional<int32_t> pending_;  // sampled and shown, not yet fed
  std::vector<float> logits_;       // [vocab]: the last logits row
  std::vector<float> work_;         // [vocab]: the sampler's copy of it
  std::vector<int32_t> order_;      // [vocab]: top_logprobs ranking
  bool logits_valid_ = false;

  GenerationParams p_;
  Sampler sampler_;
  std::optional<StreamDecoder> decoder_;
  StopStrings stops_;
  std::vector<int32_t> prompt_;  // what begin() must bring the session to
  bool prefilling_ = false;
  int64_t rows_added_ = 0;
  bool wants_logits_ = false;
  bool first_ = true;
  StopReason reason_ = StopReason::None;
  std::string error_;
  int64_t generated_ = 0, prefilled_ = 0, reused_ = 0;
  uint64_t first_token_ns_ = 0;
};

struct TurnStats {
  int64_t prefilled = 0, reused = 0, generated = 0;
  uint64_t start_ns = 0, first_token_ns = 0, end_ns = 0;
  StopReason reason = StopReason::None;
};

// Runs one sequence on the engine until its answer ends: the prompt in
// forwards of at most `chunk` rows, then one row per token. `emit` gets the
// text as it is decoded and every step's output (tokens, logprobs);
// `interrupted` is polled before each forward.
TurnStats run_turn(Engine& e, Sequence& s, const std::function<void(const StepOutput&)>& emit,
                   const std::function<bool()>& interrupted, int64_t chunk = 512);

}  // namespace strata
