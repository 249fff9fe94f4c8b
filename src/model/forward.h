// One forward call over a batch of rows (ARCHITECTURE.md §1). A row is
// (sequence, position, token); prefill, decode, batched serving and
// speculative verification are all this call. The MTP layer is the same call
// over rows that carry the main model's final hidden state.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned.h"
#include "experts/expert_store.h"
#include "model/expert_peers.h"
#include "kernels/matmul.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "model/session.h"
#include "model/workspace.h"

namespace strata {

struct Row {
  Session* seq = nullptr;
  int32_t pos = 0;
  int32_t token = 0;
  bool want_logits = true;
  // forward_mtp only: nobody reads this row's output (hidden state or
  // logits; want_logits must be false), so it may write the layer's keys
  // and nothing else -- the MTP state's sync rows, whose attention, experts
  // and head would be thrown away. The keys are the same floats either way.
  bool keys_only = false;
};

enum class AttentionForm {
  Absorbed,  // attends over the cached latent directly (the decode form)
  Naive,     // expands k_nope/v from the latent per key (the prefill form)
};

struct ForwardOptions {
  AttentionForm form = AttentionForm::Absorbed;
  bool dense_attention = false;  // ignore DSA selection: every causal key is kept
  // How the sessions a front end makes store the MLA latent and roped key
  // (model/session.h). The forward reads each row's session as it is; this
  // is for whoever creates sessions, and part of a saved conversation's
  // identity (server/kv_store.h).
  KvType kv = KvType::F32;
};

// Every scratch buffer of a forward, grown to the largest batch seen and then
// reused: after warm-up a forward allocates nothing. Shapes in the comments:
// n = rows in the batch, D = hidden_size, H = attention heads, K =
// num_experts_per_tok, E = n_routed_experts, keys = positions attended to.
struct Workspace {
  // The residual stream and its normed copy, [n, D].
  ScratchFloats h, xn;
  // [n, 2D]: the MTP layer's (embedding, hidden) concatenation; then the
  // MLP / MoE output of a layer, [n, D].
  ScratchFloats tmp;
  std::vector<float> logits_in;  // [n, D]: final-normed rows that want logits

  // Attention.
  std::vector<float> rope_cos, rope_sin;  // [n, qk_rope_head_dim / 2] (GQA: [n, head_dim / 2])
  // The attention phase's views of `phase` (below).
  ScratchView q_lat;                      // [n, q_lora_rank]
  ScratchView q;                          // [n, H * qk_head_dim] (GQA: [n, H * head_dim])
  ScratchView kv;                         // [n, kv_lora_rank + qk_rope_head_dim] (GQA: k then v, [n, kv_heads * head_dim] each)
  ScratchView o;                          // [n, H * v_head_dim]: per-head outputs (GQA: [n, H * head_dim])
  ScratchView attn_out;                   // [n, D]
  ScratchFloats qabs, olat;               // absorbed form: [block rows, H, kv_lora_rank] (kAbsorbedBlockRows)
  std::vector<float> expanded;            // naive form: [keys, H * (qk_nope_head_dim + v_head_dim)]
  AlignedFloats lat32, rope32;            // naive form, f16 key cache: a session's keys as f32
  // Absorbed form, f16 key cache, a session with many rows in the call
  // (prefill) on a path whose kernels for halves convert into a buffer
  // (!KernelTable::halves_in_registers): its keys [0, last row's position]
  // as f32, once per call, [keys, kv_lora_rank] and [keys,
  // qk_rope_head_dim] per session.
  std::vector<const Session*> f16_seqs;
  std::vector<int64_t> f16_rows, f16_keys;  // per f16_seqs entry: its rows in the call, its keys
  std::vector<AlignedFloats> f16_lat, f16_rope;
  std::vector<Session*> sessions;         // naive form: the batch's distinct sessions
  // DSA indexer.
  std::vector<float> idx_q;  // [n, index_n_heads * index_head_dim]
  std::vector<float> idx_w;  // [n, index_n_heads]
  std::vector<float> idx_k;  // [n, index_head_dim]
  std::vector<float> idx_kn;  // [n, index_head_dim]: normed, roped (the cache's rows)
  std::vector<std::vector<int32_t>> selection;  // per row: its top-k keys, ascending
  std::vector<uint8_t> select_all;              // per row: 1 = every causal key (no selection)
  int64_t most_keys = 0;                        // the most keys a row attends (DSA: index_topk; 0: its capacity)

  // MLPs and the MoE.
  // The MLP / MoE phase's views of `phase` (below).
  ScratchView mlp_g, mlp_u;                  // [m, intermediate width] (m = rows of that MLP call)
  std::vector<float> router;                 // [n, E]: router scores
  std::vector<float> route_choice;           // [E]: biased scores of one row
  std::vector<float> route_group;            // [n_group]
  std::vector<int32_t> route_order;          // [max(E, n_group)]
  std::vector<int32_t> topk_idx;             // [n, K]
  std::vector<float> topk_w;                 // [n, K]
  std::vector<int32_t> pred_idx;             // [n, K]: the next layer's predicted experts (read-ahead)
  std::vector<float> pred_w;                 // [n, K]
  std::vector<int32_t> pred_union;           // the predicted union, sorted
  std::vector<int32_t> expert_union;         // the batch's routed experts, sorted
  std::vector<int32_t> expert_slot;          // (row, k) slots routed to one expert (joint: to each, expert after expert)
  std::vector<int32_t> expert_rows;          // joint experts: each one's row count, in expert_order
  std::vector<size_t> expert_order;          // joint experts: the chunk's experts in the order next() served them
  std::vector<MatmulTask> mm_tasks;          // joint experts: one matmul_batch's tasks
  std::vector<const MlpWeights*> experts;    // what the store handed out for one chunk
  ScratchView xs, ys;                        // [m, D]: one expert's input rows, its output
  ScratchView slot_out;                      // [n, K, D]: each (row, k) expert output, then [n, D]: the shared expert's
  // Experts over MPI (model/expert_peers.h): the union's experts other
  // processes own, packed in peer order, their row counts, and per peer the
  // first of them; the (row, k) slot of each packed row; the rows and outputs.
  std::vector<int32_t> peer_experts, peer_rows, peer_slots;
  std::vector<int64_t> peer_off;             // [peers + 1]
  std::vector<float> peer_x, peer_y;         // [packed rows, D]

  // The memory a layer's attention and its MLP / MoE take turns in: each
  // phase lays its views out from the start (ModelRunner::set_phase), so the
  // workspace holds the larger phase, not both. Nothing a phase writes is
  // read by the next one (attention's output is added into h first). At 512
  // rows of the GLM-5.2 slice: 146 MB instead of 85 + 50 + 146 MB.
  ScratchFloats phase;

  std::vector<std::pair<Session*, int32_t>> seen;  // check_rows: (session, position) of every row
  MatmulScratch mm;                                // every matmul's quantized activations
  MatmulBatchScratch mmb;                          // every matmul_batch's
  // A long batch's MoE input quantized once per activation layout for the
  // routed experts' gates and ups (moe_x[layout]), and one expert's rows of
  // it (moe_rows).
  static constexpr size_t kLayouts = 4;  // ActLayout's values
  std::array<QRows, kLayouts> moe_x;
  QRows moe_rows;
  std::vector<int32_t> moe_row_idx;  // moe_rows' rows of moe_x
  std::vector<int32_t> moe_counts;   // each union expert's rows

  // Per pool part (ThreadPool::parallel_parts): attention scratch.
  struct Part {
    std::vector<float> scores;   // [H, keys] or [keys]: one row's (or one head's) attention scores
    std::vector<float> scores2;  // [H, keys]: the rope part of the scores
    std::vector<float> qrope;    // [H, qk_rope_head_dim]: one row's rope queries, packed
    std::vector<float> wrow;     // [kv_lora_rank]: one kv_b row as f32
    std::vector<float> wv;       // [v_head_dim, kv_lora_rank]: one head's W_UV rows as f32
    std::vector<float> xh;       // [n, kv_lora_rank]: one head's latents over the batch
    MatmulScratch mm;            // [n, kv_lora_rank] quantized: W_UV's activations (integer kv_b)
    std::vector<float> iscore;   // [8, keys]: indexer scores of a group of rows (indexer.cpp)
    std::vector<float> idot;     // [index_n_heads, kIndexKeyBlock]: a key block's per-head indexer dots
    std::vector<int32_t> order;  // [keys]: key order for the indexer's top-k
  };
  std::vector<Part> parts;
};

// Where forward time goes; the parts add up to total (other = the rest).
struct PhaseStats {
  uint64_t total_ns = 0;
  uint64_t attention_ns = 0;    // MLA + indexer (or GQA), projections included
  uint64_t indexer_ns = 0;      // part of attention_ns: the DSA indexer's projections, key writes, scores and top-k
  uint64_t router_ns = 0;       // router matmul and top-k
  uint64_t expert_wait_ns = 0;  // waiting for the expert store (disk reads)
  uint64_t expert_ns = 0;       // routed-expert matmuls
  uint64_t peer_wait_ns = 0;    // experts over MPI: waiting for other ranks' outputs after computing our own
  uint64_t peer_bytes = 0;      // experts over MPI: rows sent + outputs received (bytes)
  uint64_t rows = 0;
  uint64_t other_ns() const {
    const uint64_t parts = attention_ns + router_ns + expert_wait_ns + expert_ns + peer_wait_ns;
    return total_ns > parts ? total_ns - parts : 0;
  }
};

// Sees every MoE layer's routing as the forward computes it (strata trace
// record): for n rows of layer `layer`, chosen[r * k + j] is row r's j-th
// expert; predicted_next (null when layer + 1 is not an MoE layer) holds the
// k experts per row the read-ahead predicts for layer + 1 (layer + 1's router
// applied to this layer's input). Called on the forward's thread; it may not
// change anything the forward uses. Unset (the default), it costs one branch.
class RoutingObserver {
 public:
  virtual ~RoutingObserver() = default;
  virtual void routed(int64_t layer, int64_t n, int64_t k, const int32_t* chosen, const int32_t* predicted_next) = 0;
};

// Sees every DSA indexer-full layer's key selection (a measurement hook, for
// the indexer key precision tests). keys_written: layer `layer`'s indexer
// has written the rows' index keys into their sessions and nothing has read
// them yet; a key-precision measurement may rewrite them there (e.g. round
// them to int8) to see what a lower-precision key cache would select.
// selected: row r of the batch keeps every causal key when all[r] is 1,
// else the ascending positions selection[r]. Both are called on the
// forward's thread, outside the phase timers; unset, they cost one branch.
class IndexerObserver {
 public:
  virtual ~IndexerObserver() = default;
  virtual void keys_written(int64_t layer, std::span<const Row> rows) = 0;
  virtual void selected(int64_t layer, std::span<const Row> rows, const std::vector<std::vector<int32_t>>& selection,
                        const uint8_t* all) = 0;
};

class ModelRunner {
 public:
  // `compute`: the kernel path and activation mode every matmul uses (the
  // best path, int8 activations by default).
  ModelRunner(const Model& model, ExpertStore& store, ThreadPool& pool, const ComputeOptions& compute = {});
  // Experts over MPI: the routed experts `peers` says other processes own
  // are computed there (nullptr, or one process: every expert here).
  ModelRunner(const Model& model, ExpertStore& store, ThreadPool& pool, const ComputeOptions& compute,
              ExpertPeers* peers);

  // Runs the decoder over `rows`, writing their keys into their sessions.
  // logits: [count of rows with want_logits, vocab] in row order (may be
  // null if none want logits). hidden_out (optional): [rows, hidden], the
  // final-normed hidden state (the MTP layer's input).
  void forward(std::span<const Row> rows, const ForwardOptions& opts, float* logits, float* hidden_out);

  // MTP: row i has token t_{i+1} and position p_i; hidden holds the main
  // model's final-normed hidden state at p_i. Writes next-next-token logits
  // (rows with want_logits, as forward does). hidden_out (optional): [rows,
  // hidden], the MTP layer's own output after its shared-head norm -- what
  // a chained draft feeds back as `hidden` for the position after p_i.
  // head_rows > 0: logits for the first head_rows token ids only (a draft
  // vocabulary: rows of `logits` are head_rows long), else for every id.
  void forward_mtp(std::span<const Row> rows, const float* hidden, const ForwardOptions& opts, float* logits,
                   float* hidden_out = nullptr, int64_t head_rows = 0);

  // A peer's side of experts over MPI: experts[i] of `layer` over its rows[i]
  // input rows (packed one expert after another in x, [sum rows, D]); the
  // outputs to the same place in y. The same store and kernels as forward().
  void compute_experts(int64_t layer, std::span<const int32_t> experts, std::span<const int32_t> rows, const float* x,
                       float* y);

  const Model& model() const { return m_; }
  const Compute& compute() const { return compute_; }
  ExpertStore& store() const { return store_; }
  const PhaseStats& stats() const { return stats_; }
  // Before a forward of more rows than any before it, the workspace's large
  // per-row buffers are grown to that many rows and their pages touched on
  // every pool thread (forward.cpp). Public for the test that checks the
  // forward then grows none of them.
  void touch_scratch(int64_t n);
  const Workspace& workspace() const { return ws_; }
  // Routing observer (nullptr: none). Not owned; must outlive its use.
  void set_routing_observer(RoutingObserver* o) { observer_ = o; }
  // Indexer observer (nullptr: none). Not owned; must outlive its use.
  void set_indexer_observer(IndexerObserver* o) { indexer_observer_ = o; }

 private:
  void check_rows(std::span<const Row> rows, bool mtp);
  void layer(int64_t L, std::span<const Row> rows, const ForwardOptions& opts);
  // The phases of a layer that share ws_.phase, and the views each lays out
  // there. Experts: compute_experts' MLPs, n = the most rows of one expert.
  enum class Phase { Attention, Dense, Moe, Experts };
  // Lays out phase `ph`'s views for n rows (growing ws_.phase if it must);
  // returns the floats it needs.
  size_t set_phase(Phase ph, int64_t n);
  size_t phase_floats(Phase ph, int64_t n) const;
  void attention(int64_t L, std::span<const Row> rows, const ForwardOptions& opts);
  void attention_gqa(int64_t L, std::span<const Row> rows);
  void attend_absorbed(int64_t L, std::span<const Row> rows);
  void attend_naive(int64_t L, std::span<const Row> rows);
  void indexer(int64_t L, std::span<const Row> rows);
  // The indexer's keys alone: wk over ws_.xn's rows, then write_index_keys.
  void indexer_keys(int64_t L, std::span<const Row> rows);
  // ws_.idx_k's rows normed and roped (ws_.rope_cos / rope_sin) into
  // ws_.idx_kn and the rows' index key caches.
  void write_index_keys(int64_t L, std::span<const Row> rows);
  // The rows' RoPE angles into ws_.rope_cos / rope_sin.
  void rope_tables(std::span<const Row> rows);
  // One row's kv_a output (kv: latent then rope key, normed and roped here
  // in place for f16 caches) into its session's layer-L key cache.
  void write_latent_key(int64_t L, const Row& row, float* kv, const float* cs, const float* sn);
  // Layer L's key cache entries (latent, rope key, indexer key) of rows whose
  // layer input is h ([rows, hidden]), and nothing else: the same floats as
  // attention() writes for them (MLA only).
  void write_keys(int64_t L, std::span<const Row> rows, const float* h);
  void select_keys(int64_t L, std::span<const Row> rows, const ForwardOptions& opts);
  void mm(const Weight& w, const float* x, int64_t n, float* y) { matmul(compute_, w, x, n, y, ws_.mm); }
  // fn(b, e) over [0, n): on the pool when the loop touches enough values
  // (n * per) to pay for a job, else on the caller. For per-row and
  // elementwise loops whose every index computes the same wherever it runs
  // (no index reads what another writes), so the floats do not depend on
  // the split. Not from inside a pool job.
  template <typename F>
  void split(int64_t n, int64_t per, const F& fn) {
    if (n > 1 && n * per >= kSplitValues && pool_.size() > 1)
      pool_.parallel_for(n, fn);
    else
      fn(int64_t{0}, n);
  }
  static constexpr int64_t kSplitValues = 32768;
  // qx (optional): x quantized for gate and up (MatmulTask::qx; x unused).
  void mlp(const MlpWeights& w, const float* x, int64_t n, float* y, const QActs* qx = nullptr);
  void moe(int64_t L, int64_t n, const float* x, float* y);
  // Batches of at most this many rows on resident experts compute a chunk's
  // experts jointly (compute_joint): two pool jobs per layer instead of
  // three per expert, the same floats.
  static constexpr int64_t kJointRows = 16;
  // The absorbed attention's rows per block (attention_absorbed.cpp).
  static constexpr int64_t kAbsorbedBlockRows = 64;
  // The next `wave` experts the store serves of the chunk that starts at
  // union index c0: every (row, k) slot of them into `slot`, gate/up of all
  // of them as one matmul_batch, down as one.
  void compute_joint(int64_t n, int64_t K, const float* x, size_t c0, size_t wave, float* slot);
  // Moves the union's experts other processes own out of ws_.expert_union,
  // packs their rows and starts the exchange; returns whether it started one.
  bool start_peers(int64_t L, int64_t n, const float* x, const int32_t* idx);
  // Routes n rows through layer L's router: top-k experts and their weights.
  void route(int64_t L, int64_t n, const float* x, int32_t* idx, float* wts);
  void head(std::span<const Row> rows, const std::vector<float>& norm, float* logits, float* hidden_out,
            const Weight* w = nullptr);
  Weight draft_head_;  // the lm_head's first rows: forward_mtp's head_rows
  // forward_mtp's scratch for Row::keys_only rows: the rows split, the
  // output rows' indices, the keys-only rows' inputs, the outputs' hidden.
  std::vector<Row> mtp_keys_rows_, mtp_out_rows_;
  std::vector<int64_t> mtp_out_index_;
  std::vector<float> mtp_keys_h_, mtp_hidden_;
  int64_t touched_rows_ = 0;  // touch_scratch's largest n so far

  const Model& m_;
  ExpertStore& store_;
  ExpertPeers* peers_ = nullptr;
  RoutingObserver* observer_ = nullptr;
  IndexerObserver* indexer_observer_ = nullptr;
  ThreadPool& pool_;
  Compute compute_;
  Workspace ws_;
  PhaseStats stats_;
};

}  // namespace strata
