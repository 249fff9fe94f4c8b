// Speculative decoding (ARCHITECTURE.md §1: verification is a few rows of one
// sequence in the same forward): the options, the draft source that needs no
// model (n-gram / prompt lookup), the break-even controller of --spec auto and
// the counters. Drafting and verification themselves are the generation
// step's (generation.h): a step feeds the pending token and up to k drafts,
// all wanting logits, and advance() accepts the longest prefix the target
// agrees with (greedy: argmax == draft; sampling: Sampler::sample_draft),
// then rolls the session back past the rejected positions.
//
// Draft sources, combined per step: forced tokens first (the constraint
// allows exactly one token: always accepted), then either an n-gram
// continuation (the tokens that followed the most recent earlier occurrence
// of the context's last n tokens) or the MTP head's chain (the nextn layer
// over the main model's last hidden state and the pending token, fed its own
// output for the next position). Every draft is a point mass (a
// deterministic proposal), so one acceptance rule covers all of them.
//
// --spec auto: a step's value is the tokens it is expected to give over the
// time it is expected to take. The controller keeps, per source and draft
// position, the probability that the i-th draft is accepted given the ones
// before it were (decayed counts, drawn towards the source's overall
// acceptance while a position has few), and per row count the cost of a
// decode forward as measured by the engine: its compute time and the
// expert bytes it read (streamed experts: a forward over more rows reads the
// union of their experts), the bytes priced at the store's measured read
// time per byte; and the time of an MTP forward. Each step it verifies the
// number of drafts k (0..--spec-k) with the best expected tokens per unit of
// time -- none (one row, as --spec off) while drafting loses. Drafts it does
// not verify are still scored against the token that came (a free measure
// for n-gram), so it turns drafting back on when they start to match.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace strata {

enum class SpecMode : uint8_t {
  Off,    // one row per step
  Auto,   // every source, verified only while it pays (measured)
  Mtp,    // forced tokens, then the MTP head's chain, always k
  Ngram,  // forced tokens, then n-gram / prompt lookup, always what it finds
};
const char* spec_mode_name(SpecMode m);
std::optional<SpecMode> parse_spec_mode(std::string_view s);

constexpr int kSpecMaxDraft = 16;  // most drafts per step (rows = 1 + drafts)

struct SpecOptions {
  SpecMode mode = SpecMode::Off;
  int k = 4;          // most draft tokens per step, 1..kSpecMaxDraft
  int ngram_min = 2;  // shortest suffix looked up
  int ngram_max = 4;  // longest (the longest match wins)
  // MTP drafts choose among the first draft_vocab token ids only (0: every
  // id; clamped to the vocabulary): the MTP head's logits cost that many
  // rows of the lm_head. A draft is a point mass whatever chose it, so the
  // output is unchanged; only acceptance and the chain's cost move.
  int64_t draft_vocab = 0;
  bool operator==(const SpecOptions&) const = default;
};

enum class DraftSource : uint8_t { Forced, Ngram, Mtp };
constexpr int kDraftSources = 3;
const char* draft_source_name(DraftSource s);

struct SpecSourceStats {
  uint64_t drafted = 0;   // draft tokens fed for verification
  uint64_t accepted = 0;  // of those, accepted
  uint64_t shadow = 0;    // proposals not fed, scored against the token that came
  uint64_t shadow_hits = 0;
};

// Counters of one engine (all its sequences); EngineStats carries a copy.
struct SpecStats {
  SpecMode mode = SpecMode::Off;
  int k = 0;
  uint64_t steps = 0;         // decode steps of sequences that may draft (one forward's rows each)
  uint64_t spec_steps = 0;    // of those, carrying at least one draft
  uint64_t tokens = 0;        // tokens those steps generated
  uint64_t decode_ns = 0;     // time of the decode forwards those steps rode in
  std::array<SpecSourceStats, kDraftSources> source{};
  uint64_t mtp_forwards = 0, mtp_rows = 0, mtp_ns = 0;  // the MTP layer: state sync and draft chains
  uint64_t mtp_drops = 0;     // auto: answers that stopped using the MTP layer (it lost)
  double one_row_ns = 0;      // measured time of a one-row decode forward (0: not measured)
  uint64_t decode_bytes = 0;  // expert bytes the decode forwards read (streamed experts)
  double read_ns_per_byte = 0;  // the store's measured read time per byte (0: nothing read)
  // Plans by the number of drafts chosen after the forced tokens (auto: the
  // controller's k per step; 0: one row).
  std::array<uint64_t, kSpecMaxDraft + 1> chosen{};

  uint64_t drafted() const;
  uint64_t accepted() const;
  double acceptance() const;         // accepted / drafted
  double tokens_per_step() const;    // tokens / steps
  // Time a one-row-per-token decode would have taken for these tokens minus
  // the time taken (decode forwards + MTP); > 0: saved. An estimate from
  // the measured one-row forward; 0 when that was never measured.
  double saved_s() const;
};

// Prompt lookup over the context a ++ b (the held tokens and the ones after
// them, so nothing is copied): for n from nmax down to nmin, the most recent
// earlier occurrence of the last n tokens; writes the tokens that followed it
// (at most out.size()) and returns how many. 0: no match.
size_t ngram_lookup(std::span<const int32_t> a, std::span<const int32_t> b, int nmin, int nmax,
                    std::span<int32_t> out);

// What a step verifies, chosen before the forward.
struct SpecPlan {
  DraftSource source = DraftSource::Ngram;  // after the forced tokens
  int count = 0;                            // drafts of `source` to verify (MTP: the chain's depth)
  // Auto: by the measured costs, keeping MTP state cannot pay even if every
  // draft of the chain were accepted (its MTP rows, one sync forward a step
  // included, cost more than the chain gains over the best plan without it).
  bool mtp_hopeless = false;
};

// One engine's speculation state: options, counters and (auto) the
// measured costs and acceptances. Owned by the Engine, passed to the
// Sequences that draft; used by the thread that runs the engine.
class Speculator {
 public:
  // `mtp_loaded`: the engine has the MTP layer; `mtp_prior`: a guess of an
  // MTP row's cost relative to a decode forward until measured.
  Speculator(const SpecOptions& o, bool mtp_loaded, double mtp_prior);

  const SpecOptions& options() const { return o_; }
  bool on() const { return o_.mode != SpecMode::Off; }
  // Sequences keep MTP state and may draft with the MTP layer.
  bool uses_mtp() const { return mtp_; }
  bool auto_mode() const { return o_.mode == SpecMode::Auto; }

  // The engine reports every forward: a decode forward (no prompt rows) of
  // `rows` rows that took `ns` and read `bytes` of experts in `read_ns` (the
  // store's read counters over the forward), and every MTP forward.
  void record_forward(int64_t rows, uint64_t ns, uint64_t bytes = 0, uint64_t read_ns = 0);
  // MTP forwards: `rows` in all, `whole` of them through the whole layer
  // (the rest, sync rows, only write its keys). Chain rows are priced from
  // forwards of whole rows alone: a sync-only forward costs a fraction of
  // one and is not a chain row's price.
  void record_mtp(int64_t rows, uint64_t ns, int64_t whole);
  // Decode rows a step holds before any drafts (the scheduler: its decoding
  // sequences; 1 otherwise): costs are relative to that.
  void set_batch(int64_t rows) { base_ = rows < 1 ? 1 : rows; }

  // Auto: the drafts worth verifying, given `forced` forced tokens, an
  // n-gram proposal of `ngram` tokens, whether the MTP chain is available,
  // and room for `cap` drafts in all. Fixed modes: everything the mode's
  // source offers.
  SpecPlan plan(int forced, int ngram, int cap, bool mtp);
  // Whether an answer starting now should keep MTP state (auto backs off
  // after answers where the MTP layer lost).
  bool start_mtp();
  // Auto: a plan of an answer that keeps MTP state, which chose the MTP
  // chain (`chain`) or not. Counted over the engine, across answers and
  // sequences: true when the last `kMtpIdleDrop` such plans in a row did not
  // choose it, and the answer should drop its MTP state (then mtp_dropped()).
  // Short answers (a server's) would never reach the limit within one.
  bool mtp_plan(bool chain);
  void mtp_dropped();
  static constexpr int kMtpIdleDrop = 8;

  // After verification: the sources of the `fed` drafts, how many positions
  // were verified (`reached`: drafts up to and including the first
  // rejection, fewer if the answer ended) and accepted, and the tokens the
  // step generated.
  void record_step(std::span<const uint8_t> sources, int fed, int reached, int accepted, int tokens);
  void record_shadow(DraftSource s, bool hit);
  // Auto's acceptance estimates: of a drafted position of `s`, and of the
  // `pos`-th draft of `s` in a step (0-based) given the ones before it were
  // accepted.
  double acceptance(DraftSource s) const;
  double acceptance(DraftSource s, int pos) const;
  // Auto's estimate of a decode forward over `rows` rows (ns; compute plus
  // expert bytes at the measured read time; 0: nothing measured yet), and of
  // the expert bytes it reads.
  double forward_ns(int64_t rows) const;
  double forward_bytes(int64_t rows) const;
  // Auto: a decode forward at the current batch has been measured, so the
  // MTP chain can be priced (SpecPlan::mtp_hopeless) before an answer pays
  // for its MTP state (Sequence: the prompt's sync waits for it).
  bool decode_measured() const { return forward_ns(base_) > 0; }
  // Auto's expected tokens per unit of time (one-row forwards at the current
  // batch) of a step verifying `forced` forced tokens then `count` drafts of `s`.
  double value(int forced, DraftSource s, int count) const;

  SpecStats stats() const;

 private:
  static constexpr int kMaxRows = 256;  // cost table size (rows per forward)
  // A row count's measured cost: the median of its last kSamples samples
  // (a forward slowed once by a page fault or a neighbour's burst moves it
  // not at all), trusted from kTrusted samples on (cost() below).
  static constexpr int kSamples = 5;
  static constexpr uint32_t kTrusted = 3;
  struct Est {
    double ns = 0;  // the estimate
    uint32_t n = 0;  // samples so far
    std::array<double, kSamples> last{};
  };
  using Table = std::array<Est, kMaxRows + 1>;
  static void update(Table& t, int64_t rows, double v);
  // Measured value at `rows`, else interpolated or extrapolated from the
  // nearest measured counts (one measured count: `prior` of its value per
  // extra row, or of its value per row when `per_row`). A count measured
  // fewer than kTrusted times is worth at most what the counts below it
  // predict: one slow first sample must not price a width out for good (it
  // would never be chosen, so never measured again).
  static double cost(const Table& t, int64_t rows, double prior, bool per_row);
  double rel_main(int extra) const;  // decode forward with base + extra rows over one with base rows
  double rel_mtp() const;            // one MTP chain row over a decode forward with base rows
  bool mtp_measured() const;         // an MTP forward was measured

  SpecOptions o_;
  bool mtp_;
  double mtp_prior_;
  int64_t base_ = 1;
  SpecStats st_;
  Table main_{};     // decode forward time (the one-row figure reported)
  Table compute_{};  // decode forward time less its expert bytes at read_ns_per_byte()
  Table bytes_{};    // expert bytes read per decode forward
  Table mtp_cost_{};
  double io_ns_ = 0, io_bytes_ = 0;  // decayed store read time and bytes over decode forwards
  double read_ns_per_byte() const { return io_bytes_ > 0 ? io_ns_ / io_bytes_ : 0.0; }
  std::array<double, kDraftSources> acc_{}, seen_{};  // decayed accepted / verified counts
  // Per source and draft position: accepted given the earlier drafts were / verified there.
  std::array<std::array<double, kSpecMaxDraft>, kDraftSources> pos_acc_{}, pos_seen_{};
  uint64_t plans_ = 0;
  uint64_t next_probe_ = 64, probe_gap_ = 64;  // auto: the next probe while drafting loses; its spacing
  int mtp_skip_ = 0, mtp_backoff_ = 1;  // auto: answers left without MTP; the next backoff
  int mtp_idle_ = 0;                    // auto: plans in a row (any answer) that did not choose the chain
};

}  // namespace strata
