// One forward call over a batch of rows (ARCHITECTURE.md §1). A row is
// (sequence, position, token); prefill, decode, batched serving and
// speculative verification are all this call. The MTP layer is the same call
// over rows that carry the main model's final hidden state.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "experts/expert_store.h"
#include "model/model.h"
#include "runtime/session.h"
#include "runtime/thread_pool.h"

namespace strata {

struct Row {
  Session* seq = nullptr;
  int32_t pos = 0;
  int32_t token = 0;
  bool want_logits = true;
};

enum class AttentionForm {
  Absorbed,  // attends over the cached latent directly (the decode form)
  Naive,     // expands k_nope/v from the latent per key (the prefill form)
};

struct ForwardOptions {
  AttentionForm form = AttentionForm::Absorbed;
  bool dense_attention = false;  // ignore DSA selection: every causal key is kept
};

// All scratch, grown to the largest batch seen and then reused: no
// allocation per token.
struct Workspace {
  std::vector<float> h, xn, tmp, q_lat, q, kv, attn_out, o, idx_q, idx_w, idx_k, rope_cos, rope_sin;
  std::vector<float> mlp_g, mlp_u, xs, ys, slot_out, router, expanded, scores, qabs, olat, logits_in;
  std::vector<std::vector<int32_t>> selection;  // DSA top-k per row (sorted); empty = all causal keys
  std::vector<uint8_t> select_all;
  std::vector<int32_t> topk_idx;
  std::vector<float> topk_w;
  std::vector<float> route_choice, route_group;
  std::vector<int32_t> route_order, expert_union, expert_slot, pred_idx, pred_union;
  std::vector<float> pred_w;
  std::vector<const MlpWeights*> experts;
};

// Where forward time goes; the parts add up to total (other = the rest).
struct PhaseStats {
  uint64_t total_ns = 0;
  uint64_t attention_ns = 0;    // MLA + indexer, projections included
  uint64_t router_ns = 0;       // router matmul and top-k
  uint64_t expert_wait_ns = 0;  // waiting for the expert store (disk reads)
  uint64_t expert_ns = 0;       // routed-expert matmuls
  uint64_t rows = 0;
  uint64_t other_ns() const {
    const uint64_t parts = attention_ns + router_ns + expert_wait_ns + expert_ns;
    return total_ns > parts ? total_ns - parts : 0;
  }
};

class ModelRunner {
 public:
  ModelRunner(const Model& model, ExpertStore& store, ThreadPool& pool) : m_(model), store_(store), pool_(pool) {}

  // Runs the decoder over `rows`, writing their keys into their sessions.
  // logits: [count of rows with want_logits, vocab] in row order (may be
  // null if none want logits). hidden_out (optional): [rows, hidden], the
  // final-normed hidden state (the MTP layer's input).
  void forward(std::span<const Row> rows, const ForwardOptions& opts, float* logits, float* hidden_out);

  // MTP: row i has token t_{i+1} and position p_i; hidden holds the main
  // model's final-normed hidden state at p_i. Writes next-next-token logits.
  void forward_mtp(std::span<const Row> rows, const float* hidden, const ForwardOptions& opts, float* logits);

  const Model& model() const { return m_; }
  const PhaseStats& stats() const { return stats_; }

 private:
  void check_rows(std::span<const Row> rows, bool mtp) const;
  void layer(int64_t L, std::span<const Row> rows, const ForwardOptions& opts);
  void attention(int64_t L, std::span<const Row> rows, const ForwardOptions& opts);
  void select_keys(int64_t L, std::span<const Row> rows, const ForwardOptions& opts);
  void mlp(const MlpWeights& w, const float* x, int64_t n, float* y);
  void moe(int64_t L, int64_t n, const float* x, float* y);
  // Routes n rows through layer L's router: top-k experts and their weights.
  void route(int64_t L, int64_t n, const float* x, int32_t* idx, float* wts);
  void head(std::span<const Row> rows, const std::vector<float>& norm, float* logits, float* hidden_out);

  const Model& m_;
  ExpertStore& store_;
  ThreadPool& pool_;
  Workspace ws_;
  PhaseStats stats_;
};

}  // namespace strata
