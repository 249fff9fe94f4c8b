// Generation: one sequence being generated, and the step every front end
// runs it with (ARCHITECTURE.md §1, §7). `run`, `chat` and `generate` drive
// one Sequence with run_turn(); the server's scheduler puts the rows of many
// Sequences into each batched forward and calls the same parts of the step
// on each.
//
// A step, around one forward:
//   add_mtp_rows() / take_mtp()  (only with the MTP layer, speculation.h)
//               rounds of the MTP layer before the forward: its state is
//               brought up to the positions the last forward fed (their
//               hidden states and next tokens), and its chain drafts tokens;
//   add_rows()  the rows this sequence feeds next: a chunk of its prompt
//               while prefilling (the last prompt row asks for logits), else
//               the token it sampled last, then up to k draft tokens
//               (speculation.h: forced by the constraint, n-gram lookup, the
//               MTP chain), every one of these rows asking for logits;
//   advance()   after the forward: what was fed is held; each logits row in
//               turn chooses a token -- constraint mask (response_format,
//               tool_choice), sampling, end-of-turn ids, stop strings,
//               detokenized text, logprobs, length and context limits --
//               the draft fed after that row is accepted when the chosen
//               token is the draft (Sampler::sample_draft is one plain
//               draw: greedy and seeded sampled output are exactly the
//               one-row output) and verification stops at the first token
//               that is not; the session forgets the rejected positions.
//               A stop string, end of turn or limit inside the accepted run
//               ends the answer there, as without drafts.
#pragma once
#include <array>
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
#include "runtime/speculation.h"
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

// What one step gave the front end: one token, or several when drafts were
// accepted.
struct StepOutput {
  int32_t token = -1;           // the last token sampled (an end-of-turn id too); -1: nothing sampled
  std::vector<int32_t> tokens;  // every token sampled this step, in order
  std::string text;             // text safe to show now (stop strings held back; the tail when the answer ended)
  std::vector<TokenLogprob> logprobs;  // one per generated token, when asked for
};

class Sequence {
 public:
  // A fresh sequence with a session of `ctx` positions. `tok` decodes
  // generated tokens to text (null: token ids only, no text or stop
  // strings); `stop_ids` end an answer. `spec` (the engine's, may be null):
  // speculative decoding; the session then holds MTP state if it drafts
  // with the MTP layer.
  // kv: how its session stores keys (ForwardOptions::kv).
  Sequence(const ModelConfig& c, int64_t ctx, const Tokenizer* tok, std::span<const int32_t> stop_ids,
           Speculator* spec = nullptr, KvType kv = KvType::F32);
  // Adopts a session that holds `held` (a kept or reloaded conversation);
  // its MTP state, if any, is trusted up to the position before the last
  // (and only as far as the session holds hidden states).
  Sequence(std::unique_ptr<Session> session, std::vector<int32_t> held, const ModelConfig& c, const Tokenizer* tok,
           std::span<const int32_t> stop_ids, Speculator* spec = nullptr);

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

  // Before add_rows, with the MTP layer: the rows of this sequence's next
  // MTP round (appended to `rows`, their input hidden states to `hidden`,
  // hidden_size floats per row); 0 when it has none left this step. After
  // the round's forward_mtp, take_mtp() gets this sequence's logits row
  // (null if none of its rows wanted logits) and the first of its output
  // hidden rows. Rounds repeat until no sequence adds rows.
  int64_t add_mtp_rows(std::vector<Row>& rows, std::vector<float>& hidden);
  bool mtp_wants_logits() const { return mtp_logits_; }
  void take_mtp(const float* logits, const float* hidden_out, int64_t n_logits);

  // The rows this sequence feeds next (see above); appends at most `budget`
  // prompt rows (drafts are not bounded by it). Returns how many rows were
  // added (0: none needed).
  int64_t add_rows(std::vector<Row>& rows, int64_t budget);
  // How many of the rows just added want logits (in row order: the
  // pending token's, then one per draft), and whether there is one.
  int64_t logits_rows() const { return logits_rows_; }
  bool wants_logits() const { return logits_rows_ > 0; }
  // Whether the forward should return the rows' final hidden states (the
  // MTP layer's input, kept by the session): pass them to advance().
  bool wants_hidden() const { return session_->has_mtp(); }
  // After the forward: `logits` is this sequence's first logits row (its
  // logits_rows() rows follow; null when it asked for none); `hidden` its
  // first row's final hidden state (when wants_hidden()). Returns false once
  // the answer has ended (reason()).
  bool advance(const float* logits, StepOutput& out, const float* hidden = nullptr);
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
  // Drafts fed and accepted in this answer (speculation).
  int64_t drafted() const { return drafted_; }
  int64_t accepted() const { return accepted_; }
  // Whether this answer keeps the MTP layer's state (and may draft with it).
  bool mtp_on() const { return mtp_on_; }
  // Positions whose MTP state matches the held tokens.
  int64_t mtp_synced() const { return mtp_synced_; }

 private:
  void start(const GenerationParams& params);
  // Samples the next token from logits_; `draft` >= 0: the draft fed after
  // this row, accepted iff the result equals it.
  bool sample(StepOutput& out, int32_t draft = -1);
  void finish(StopReason r, std::string* tail);
  bool is_stop(int32_t t) const;
  // Speculation: what to draft after the pending token (forced, n-gram;
  // the MTP chain's depth), with the constraint probing ahead.
  void plan();
  bool push_draft(int32_t t, DraftSource src);  // false: refused (a stop id, or the constraint)
  void end_drafting();                          // constraint and MTP state back to the held tokens
  int64_t next_token(int64_t p) const;          // the token after position p, -1 if not known yet
  int64_t sync_end() const;                     // positions whose next token is known
  bool hidden_covers(int64_t from, int64_t to) const;
  void keep_hidden(const float* hidden, int64_t pos0, int64_t n);

  int64_t vocab_;
  const Tokenizer* tok_;
  std::vector<int32_t> stop_ids_;
  std::unique_ptr<Session> session_;
  std::vector<int32_t> tokens_;     // held (fed) tokens
  std::optional<int32_t> pending_;  // sampled and shown, not yet fed
  std::vector<float> logits_;       // [vocab]: the logits row being sampled (held when an answer ends at an end-of-turn id)
  std::vector<float> work_;         // [vocab]: the sampler's copy of it
  std::vector<int32_t> order_;      // [vocab]: top_logprobs ranking
  bool logits_valid_ = false;
  int64_t hidden_size_;

  // Speculation (null spec_: none). Drafts for the coming step: the tokens
  // at positions tokens_.size() + 1, + 2, ... after the pending token.
  Speculator* spec_ = nullptr;
  std::array<int32_t, kSpecMaxDraft> draft_{};
  std::array<uint8_t, kSpecMaxDraft> draft_src_{};  // DraftSource of each
  int n_draft_ = 0, n_forced_ = 0;
  int fed_drafts_ = 0;      // drafts in the forward being verified
  bool planned_ = false;    // drafts planned for the coming step
  bool probing_ = false;    // the constraint runs ahead over the drafts (restored by end_drafting)
  std::array<int32_t, kSpecMaxDraft> ngram_{};  // the n-gram proposal
  int n_ngram_ = 0;
  bool ngram_used_ = false;
  std::array<int32_t, kSpecMaxDraft + 1> tail_{};  // pending + forced drafts: the n-gram context's end
  int64_t drafted_ = 0, accepted_ = 0;
  // The MTP layer: its state matches the held tokens up to mtp_synced_; the
  // main model's final hidden states of the held positions are the session's
  // (Session::hidden).
  bool mtp_on_ = false;
  // auto: the MTP state is kept but not yet synced until the engine has
  // measured a decode forward (Speculator::decode_measured), so the first
  // plan prices the chain before the prompt's sync is paid; the hidden
  // states are kept meanwhile and the first round syncs every position.
  bool mtp_wait_ = false;
  int64_t mtp_synced_ = 0;
  std::vector<float> mtp_hidden_;  // [hidden_size]: the chain's last output
  int mtp_round_ = 0, mtp_rounds_ = 0;  // this step's rounds: 0 = sync (+ first draft), then one row each
  int mtp_depth_ = 0;                   // MTP drafts wanted this step
  int64_t mtp_rows_ = 0, mtp_sync_to_ = 0;
  bool mtp_logits_ = false, mtp_done_ = false, mtp_shadow_ = false;
  int32_t mtp_first_ = -1;              // the MTP head's first proposal when it was not drafted (auto scores it)
  uint64_t plans_ = 0;

  GenerationParams p_;
  Sampler sampler_;
  std::optional<StreamDecoder> decoder_;
  StopStrings stops_;
  std::vector<int32_t> prompt_;  // what begin() must bring the session to
  bool prefilling_ = false;
  int64_t rows_added_ = 0;
  int64_t rows_pos0_ = 0;     // position of the first row added
  int64_t logits_rows_ = 0;
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

// The MTP rounds of one step over any number of sequences (run_turn: one;
// the scheduler: every active one): one batched forward_mtp per round until
// no sequence adds rows. Scratch kept in `ws` (reused: no allocation once
// warm).
struct MtpScratch {
  std::vector<Row> rows;
  std::vector<float> hidden, logits, hidden_out;
  std::vector<std::pair<size_t, int64_t>> owners;  // (sequence index, first row)
};
void run_mtp_rounds(Engine& e, std::span<Sequence* const> seqs, MtpScratch& ws);

// Runs one sequence on the engine until its answer ends: the prompt in
// forwards of at most `chunk` rows, then one row per token (plus drafts,
// with speculation). `emit` gets the text as it is decoded and every step's
// output (tokens, logprobs); `interrupted` is polled before each forward.
TurnStats run_turn(Engine& e, Sequence& s, const std::function<void(const StepOutput&)>& emit,
                   const std::function<bool()>& interrupted, int64_t chunk = 512);

}  // namespace strata
