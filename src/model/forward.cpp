// The decoder stack: embeddings, layers (attention + dense MLP or MoE), the
// final norm and the head. Attention lives in attention.cpp.
#include "model/forward.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/clock.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "model/workspace.h"

namespace strata {

ModelRunner::ModelRunner(const Model& model, ExpertStore& store, ThreadPool& pool, const ComputeOptions& compute)
    : ModelRunner(model, store, pool, compute, nullptr) {}

ModelRunner::ModelRunner(const Model& model, ExpertStore& store, ThreadPool& pool, const ComputeOptions& compute,
                         ExpertPeers* peers)
    : m_(model), store_(store), peers_(peers && peers->size() > 1 ? peers : nullptr), pool_(pool),
      compute_(&pool, compute) {
  ws_.parts.resize(static_cast<size_t>(pool.size()));
}

void ModelRunner::check_rows(std::span<const Row> rows, bool mtp) {
  const ModelConfig& c = m_.config;
  std::vector<std::pair<Session*, int32_t>>& seen = ws_.seen;
  seen.clear();
  for (const Row& r : rows) {
    if (!r.seq) fail("forward: row without a session");
    if (r.pos < 0 || r.pos >= r.seq->capacity())
      fail("forward: position {} is outside the session's context of {}", r.pos, r.seq->capacity());
    if (r.token < 0 || r.token >= c.vocab_size)
      fail("forward: token id {} is outside the vocabulary of {}", r.token, c.vocab_size);
    if (mtp && !r.seq->has_mtp()) fail("forward: the session has no MTP state");
    seen.emplace_back(r.seq, r.pos);
  }
  // Every key a row attends to must be cached already or computed in this batch.
  std::sort(seen.begin(), seen.end());
  for (size_t i = 0; i < seen.size();) {
    const Session* s = seen[i].first;
    const int64_t have = mtp ? s->mtp_n_past : s->n_past;
    int64_t expect = have;  // positions >= have must form the run have, have+1, ...
    size_t j = i;
    for (; j < seen.size() && seen[j].first == s; ++j) {
      if (j > i && seen[j - 1].second == seen[j].second)
        fail("forward: position {} appears twice in one batch", seen[j].second);
      if (seen[j].second < have) continue;
      if (seen[j].second != expect)
        fail("forward: position {} leaves a gap (the session holds {} positions)", seen[j].second, have);
      ++expect;
    }
    i = j;
  }
}

void ModelRunner::forward(std::span<const Row> rows, const ForwardOptions& opts, float* logits, float* hidden_out) {
  check_rows(rows, false);
  ScopedTimer timer{stats_.total_ns};
  stats_.rows += rows.size();
  const ModelConfig& c = m_.config;
  const int64_t n = static_cast<int64_t>(rows.size()), D = c.hidden_size;
  if (n > touched_rows_) touch_scratch(n);
  float* h = grow(ws_.h, static_cast<size_t>(n * D));
  for (int64_t r = 0; r < n; ++r) m_.weights.embed.row_f32(rows[r].token, h + r * D);
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) layer(L, rows, opts);
  head(rows, m_.weights.final_norm, logits, hidden_out);
  for (const Row& r : rows) r.seq->n_past = std::max<int64_t>(r.seq->n_past, r.pos + 1);
}

namespace {
// One view of a phase and its floats; each starts on a 64-byte boundary.
struct PhasePart {
  ScratchView Workspace::*view;
  int64_t floats;
};
constexpr size_t kPartAlign = 16;  // floats
size_t aligned_part(int64_t floats) { return (static_cast<size_t>(floats) + kPartAlign - 1) / kPartAlign * kPartAlign; }

// Phase ph's views at n rows, in the order they are laid out; returns how
// many. The sizes are what the phase's code asks of each view (attention.cpp,
// attention_gqa.cpp, mlp(), moe(), compute_joint()).
template <typename Phase>
int phase_parts(const ModelConfig& c, Phase ph, int64_t n, int64_t joint_rows, PhasePart (&out)[5]) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, K = c.num_experts_per_tok;
  switch (ph) {
    case Phase::Attention:
      if (c.attention == AttentionKind::Gqa) {
        out[0] = {&Workspace::q, n * H * c.head_dim};
        out[1] = {&Workspace::kv, 2 * n * c.num_key_value_heads * c.head_dim};
        out[2] = {&Workspace::o, n * H * c.head_dim};
        out[3] = {&Workspace::attn_out, n * D};
        return 4;
      }
      out[0] = {&Workspace::q_lat, n * c.q_lora_rank};
      out[1] = {&Workspace::q, n * H * (c.qk_nope_head_dim + c.qk_rope_head_dim)};
      out[2] = {&Workspace::kv, n * (c.kv_lora_rank + c.qk_rope_head_dim)};
      out[3] = {&Workspace::o, n * H * c.v_head_dim};
      out[4] = {&Workspace::attn_out, n * D};
      return 5;
    case Phase::Dense:
      out[0] = {&Workspace::mlp_g, n * c.intermediate_size};
      out[1] = {&Workspace::mlp_u, n * c.intermediate_size};
      return 2;
    case Phase::Moe: {
      // An expert gets m <= n of the rows: xs / ys / mlp_g / mlp_u are sized
      // for all n, so a forward never grows the phase after one of at least
      // as many rows, whichever experts its rows share (a decode step after
      // the prompt's forward allocates nothing, however speculation groups
      // rows). Batches of up to joint_rows rows compute a chunk's experts
      // jointly: their rows packed one expert after another, n * K at most.
      const int64_t packed = std::max(n, std::min(n, joint_rows) * K);
      const int64_t gu = std::max(n * c.n_shared_experts * c.moe_intermediate_size, packed * c.moe_intermediate_size);
      out[0] = {&Workspace::slot_out, n * (K + 1) * D};
      out[1] = {&Workspace::xs, packed * D};
      out[2] = {&Workspace::ys, packed * D};
      out[3] = {&Workspace::mlp_g, gu};
      out[4] = {&Workspace::mlp_u, gu};
      return 5;
    }
    case Phase::Experts:
      out[0] = {&Workspace::mlp_g, n * c.moe_intermediate_size};
      out[1] = {&Workspace::mlp_u, n * c.moe_intermediate_size};
      return 2;
  }
  return 0;
}
}  // namespace

size_t ModelRunner::phase_floats(Phase ph, int64_t n) const {
  PhasePart parts[5];
  const int cnt = phase_parts(m_.config, ph, n, kJointRows, parts);
  size_t total = 0;
  for (int i = 0; i < cnt; ++i) total += aligned_part(parts[i].floats);
  return total;
}

size_t ModelRunner::set_phase(Phase ph, int64_t n) {
  PhasePart parts[5];
  const int cnt = phase_parts(m_.config, ph, n, kJointRows, parts);
  size_t total = 0;
  for (int i = 0; i < cnt; ++i) total += aligned_part(parts[i].floats);
  if (ws_.phase.size() < total) {
    ws_.phase.clear();  // no phase reads what the one before it left: nothing to move
    grow(ws_.phase, total);
  }
  float* p = ws_.phase.data();
  for (int i = 0; i < cnt; ++i) {
    ws_.*(parts[i].view) = {p, static_cast<size_t>(parts[i].floats)};
    p += aligned_part(parts[i].floats);
  }
  return total;
}

// The first forward of a long prompt grows the workspace by hundreds of MB
// (~0.18 GB touched here at 512 rows on the GLM-5.2 slice; 0.31 GB before
// attention and the MoE shared one memory). Left to the
// forward, each fresh 2 MiB page faults inside a kernel on one thread while
// the other waits for it at the job's end; touched here first, on every
// pool thread, the same pages cost less: slice-int4's first 512-token
// prefill ran 1.10x as fast (docs/kernels.md, "The first prefill"), slice-
// int8's the same as before. Only the large per-row buffers and the phase
// memory (the forward grows the rest); the sizes are the forward's own, which
// Forward.TouchedScratchIsWhatTheForwardUses checks. Nothing is held that the
// forward would not grow into anyway, and the contents need no care: every
// user of a workspace buffer writes it before reading it.
void ModelRunner::touch_scratch(int64_t n) {
  touched_rows_ = n;
  const ModelConfig& c = m_.config;
  const int64_t D = c.hidden_size;
  std::vector<std::pair<float*, size_t>> fresh;
  auto add = [&](ScratchFloats& v, int64_t count) {
    if (count <= 0 || v.size() >= static_cast<size_t>(count)) return;
    v.clear();  // what it held is not needed: growing then moves nothing
    grow(v, static_cast<size_t>(count));
    fresh.emplace_back(v.data(), v.size());
  };
  add(ws_.h, n * D);
  add(ws_.xn, n * D);
  add(ws_.tmp, n * D);
  // The phases' shared memory: the largest of them at n rows.
  size_t phase = phase_floats(Phase::Attention, n);
  for (int64_t L = 0; L < c.num_hidden_layers; ++L)
    if (!c.is_moe(L)) phase = std::max(phase, phase_floats(Phase::Dense, n));
  if (c.n_routed_experts > 0 && c.num_experts_per_tok > 0) phase = std::max(phase, phase_floats(Phase::Moe, n));
  add(ws_.phase, static_cast<int64_t>(phase));
  constexpr size_t kPiece = size_t{1} << 19;  // floats: 2 MiB
  int64_t pieces = 0;
  for (const auto& f : fresh) pieces += static_cast<int64_t>((f.second + kPiece - 1) / kPiece);
  pool_.parallel_for(pieces, [&](int64_t b, int64_t e) {
    int64_t i = 0;
    for (const auto& f : fresh)
      for (size_t off = 0; off < f.second; off += kPiece, ++i)
        if (i >= b && i < e) std::memset(f.first + off, 0, std::min(kPiece, f.second - off) * sizeof(float));
  });
}

void ModelRunner::forward_mtp(std::span<const Row> rows, const float* hidden, const ForwardOptions& opts,
                              float* logits, float* hidden_out, int64_t head_rows) {
  const ModelConfig& c = m_.config;
  if (c.num_nextn_predict_layers < 1 || static_cast<int64_t>(m_.weights.layers.size()) <= c.num_hidden_layers)
    fail("forward_mtp: the model has no MTP layer loaded");
  check_rows(rows, true);
  ScopedTimer timer{stats_.total_ns};
  stats_.rows += rows.size();
  const int64_t n = static_cast<int64_t>(rows.size()), D = c.hidden_size, N = c.num_hidden_layers;
  const LayerWeights& lw = m_.weights.layers[static_cast<size_t>(N)];
  float* cat = grow(ws_.tmp, static_cast<size_t>(n * 2 * D));
  for (int64_t r = 0; r < n; ++r) {
    float* e = cat + r * 2 * D;
    m_.weights.embed.row_f32(rows[r].token, e);
    rmsnorm(e, lw.enorm.data(), D, c.rms_norm_eps, e);
    rmsnorm(hidden + r * D, lw.hnorm.data(), D, c.rms_norm_eps, e + D);
  }
  float* h = grow(ws_.h, static_cast<size_t>(n * D));
  mm(lw.eh_proj, cat, n, h);
  // Rows::keys_only rows (the MTP state's sync rows) write the layer's keys
  // and stop: their attention, experts and head would be thrown away. The
  // other rows then run the whole layer over the keys of both (each row's
  // keys are computed from its own input alone, so the same floats as one
  // forward over all of them). GQA layers (GLM-4.5) run every row whole.
  std::span<const Row> out_rows = rows;
  float* out_hidden = hidden_out;
  int64_t nk = 0;
  for (const Row& r : rows) nk += r.keys_only && !r.want_logits;
  if (nk > 0 && c.attention != AttentionKind::Gqa) {
    mtp_keys_rows_.clear();
    mtp_out_rows_.clear();
    mtp_out_index_.clear();
    mtp_keys_h_.resize(static_cast<size_t>(nk * D));
    for (int64_t r = 0; r < n; ++r) {
      const float* hr = h + r * D;
      if (rows[r].keys_only && !rows[r].want_logits) {
        std::copy(hr, hr + D, mtp_keys_h_.begin() + static_cast<std::ptrdiff_t>(mtp_keys_rows_.size()) * D);
        mtp_keys_rows_.push_back(rows[r]);
      } else {
        std::copy(hr, hr + D, h + static_cast<int64_t>(mtp_out_rows_.size()) * D);  // to a lower or the same row
        mtp_out_rows_.push_back(rows[r]);
        mtp_out_index_.push_back(r);
      }
    }
    write_keys(N, mtp_keys_rows_, mtp_keys_h_.data());
    out_rows = mtp_out_rows_;
    if (hidden_out) out_hidden = grow(mtp_hidden_, mtp_out_rows_.size() * static_cast<size_t>(D));
  }
  if (!out_rows.empty()) {
    layer(N, out_rows, opts);
    const Weight* w = nullptr;
    if (head_rows > 0 && head_rows < m_.weights.lm_head.rows) {
      if (draft_head_.rows != head_rows) draft_head_ = m_.weights.lm_head.row_prefix(head_rows);
      w = &draft_head_;
    }
    head(out_rows, lw.shared_head_norm, logits, out_hidden, w);
    if (hidden_out && out_hidden != hidden_out)
      for (size_t i = 0; i < mtp_out_index_.size(); ++i)
        std::copy(out_hidden + static_cast<int64_t>(i) * D, out_hidden + static_cast<int64_t>(i + 1) * D,
                  hidden_out + mtp_out_index_[i] * D);
  }
  for (const Row& r : rows) r.seq->mtp_n_past = std::max<int64_t>(r.seq->mtp_n_past, r.pos + 1);
}

void ModelRunner::layer(int64_t L, std::span<const Row> rows, const ForwardOptions& opts) {
  const ModelConfig& c = m_.config;
  const LayerWeights& lw = m_.weights.layers[static_cast<size_t>(L)];
  const int64_t n = static_cast<int64_t>(rows.size()), D = c.hidden_size;
  float* h = ws_.h.data();
  float* xn = grow(ws_.xn, static_cast<size_t>(n * D));
  split(n, D, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) rmsnorm(h + r * D, lw.input_norm.data(), D, c.rms_norm_eps, xn + r * D);
  });
  {
    ScopedTimer t{stats_.attention_ns};
    set_phase(Phase::Attention, n);
    attention(L, rows, opts);
  }
  const float* a = ws_.attn_out.data();
  split(n, D, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * D; i < r1 * D; ++i) h[i] += a[i];
    for (int64_t r = r0; r < r1; ++r)
      rmsnorm(h + r * D, lw.post_attention_norm.data(), D, c.rms_norm_eps, xn + r * D);
  });
  float* y = grow(ws_.tmp, static_cast<size_t>(n * D));
  if (lw.is_moe) {
    moe(L, n, xn, y);
  } else {
    set_phase(Phase::Dense, n);
    mlp(lw.dense, xn, n, y);
  }
  split(n, D, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * D; i < r1 * D; ++i) h[i] += y[i];
  });
}

void ModelRunner::mlp(const MlpWeights& w, const float* x, int64_t n, float* y, const QActs* qx) {
  const int64_t I = w.gate.rows;
  float* g = grow(ws_.mlp_g, static_cast<size_t>(n * I));
  float* u = grow(ws_.mlp_u, static_cast<size_t>(n * I));
  const MatmulTask gate_up[] = {{&w.gate, x, n, g, qx}, {&w.up, x, n, u, qx}};  // one pool job, the same floats
  matmul_batch(compute_, gate_up, ws_.mmb);
  const KernelTable& kt = compute_.kernels();
  split(n * I, 1, [&](int64_t b, int64_t e) { kt.silu_mul(g + b, u + b, e - b); });
  mm(w.down, g, n, y);
}

void ModelRunner::route(int64_t L, int64_t n, const float* x, int32_t* idx, float* wts) {
  const ModelConfig& c = m_.config;
  const LayerWeights& lw = m_.weights.layers[static_cast<size_t>(L)];
  const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok;
  const int64_t G = c.n_group, gsize = E / G;
  // Router in f32: sigmoid scores; the bias only steers the choice.
  float* logit = grow(ws_.router, static_cast<size_t>(n * E));
  mm(lw.router.gate, x, n, logit);
  if (c.router == RouterKind::Softmax) {
    // Softmax over every expert, the top-k by probability (lower index
    // first on a tie), renormalised to sum 1 when norm_topk_prob.
    int32_t* ord = grow(ws_.route_order, static_cast<size_t>(E));
    for (int64_t r = 0; r < n; ++r) {
      float* s = logit + r * E;
      compute_.kernels().softmax(s, E);
      for (int64_t e = 0; e < E; ++e) ord[e] = static_cast<int32_t>(e);
      std::partial_sort(ord, ord + K, ord + E,
                        [&](int32_t a, int32_t b) { return s[a] != s[b] ? s[a] > s[b] : a < b; });
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        idx[r * K + k] = ord[k];
        wts[r * K + k] = s[ord[k]];
        sum += s[ord[k]];
      }
      if (c.norm_topk_prob)
        for (int64_t k = 0; k < K; ++k) wts[r * K + k] /= sum;
    }
    return;
  }
  float* choice = grow(ws_.route_choice, static_cast<size_t>(E));
  int32_t* order = grow(ws_.route_order, static_cast<size_t>(std::max(E, G)));
  float* gscore = grow(ws_.route_group, static_cast<size_t>(G));
  for (int64_t r = 0; r < n; ++r) {
    float* s = logit + r * E;
    for (int64_t e = 0; e < E; ++e) {
      s[e] = sigmoid(s[e]);
      choice[e] = s[e] + lw.router.bias[e];
    }
    if (G > 1) {
      // Group-limited routing: keep the topk_group groups whose two best
      // experts score highest; experts outside them cannot be chosen.
      for (int64_t g = 0; g < G; ++g) {
        float b1 = -INFINITY, b2 = -INFINITY;
        for (int64_t e = g * gsize; e < (g + 1) * gsize; ++e) {
          if (choice[e] > b1) {
            b2 = b1;
            b1 = choice[e];
          } else if (choice[e] > b2) {
            b2 = choice[e];
          }
        }
        gscore[g] = b1 + b2;
        order[g] = static_cast<int32_t>(g);
      }
      std::sort(order, order + G, [&](int32_t a, int32_t b) {
        return gscore[a] != gscore[b] ? gscore[a] > gscore[b] : a < b;
      });
      for (int64_t gi = c.topk_group; gi < G; ++gi)
        for (int64_t e = order[gi] * gsize; e < (order[gi] + 1) * gsize; ++e) choice[e] = -INFINITY;
    }
    for (int64_t e = 0; e < E; ++e) order[e] = static_cast<int32_t>(e);
    std::partial_sort(order, order + K, order + E, [&](int32_t a, int32_t b) {
      return choice[a] != choice[b] ? choice[a] > choice[b] : a < b;
    });
    float sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      idx[r * K + k] = order[k];
      wts[r * K + k] = s[order[k]];
      sum += s[order[k]];
    }
    for (int64_t k = 0; k < K; ++k) {
      if (c.norm_topk_prob) wts[r * K + k] /= (sum + 1e-20f);
      wts[r * K + k] *= c.routed_scaling_factor;
    }
  }
}

void ModelRunner::moe(int64_t L, int64_t n, const float* x, float* y) {
  const ModelConfig& c = m_.config;
  const LayerWeights& lw = m_.weights.layers[static_cast<size_t>(L)];
  const int64_t K = c.num_experts_per_tok, D = c.hidden_size;
  uint64_t t_router = now_ns();
  int32_t* idx = grow(ws_.topk_idx, static_cast<size_t>(n * K));
  float* wts = grow(ws_.topk_w, static_cast<size_t>(n * K));
  route(L, n, x, idx, wts);
  stats_.router_ns += now_ns() - t_router;

  // The union of the batch's experts, each computed once over its rows.
  std::vector<int32_t>& uni = ws_.expert_union;
  uni.assign(idx, idx + n * K);
  std::sort(uni.begin(), uni.end());
  uni.erase(std::unique(uni.begin(), uni.end()), uni.end());
  // slot_out, xs / ys and mlp_g / mlp_u for n rows (phase_parts: sized so
  // that whichever experts the rows share, nothing grows).
  set_phase(Phase::Moe, n);
  float* slot = ws_.slot_out.data();
  const bool joint = n <= kJointRows;
  const int64_t packed_rows = std::max(n, std::min(n, kJointRows) * K);
  ws_.expert_slot.reserve(static_cast<size_t>(packed_rows));
  ws_.expert_rows.reserve(static_cast<size_t>(n * K));
  ws_.experts.reserve(static_cast<size_t>(n * K));
  ws_.mm_tasks.reserve(static_cast<size_t>(2 * n * K));
  // The joint experts' batches: gate and up of every packed row, then down.
  ws_.mmb.reserve(static_cast<size_t>(2 * n * K), 2 * packed_rows, D);
  ws_.mmb.reserve(static_cast<size_t>(2 * n * K), packed_rows, c.moe_intermediate_size);
  // Experts over MPI: other processes compute theirs while we compute ours.
  const bool exchanging = peers_ && start_peers(L, n, x, idx);
  // The work that needs none of this layer's routed experts runs once,
  // while the first chunk's reads are in flight: after begin() has
  // submitted them, before the first wait.
  // slot_out holds [n, K, D] routed outputs, then the shared expert's [n, D].
  float* shared = slot + n * K * D;
  bool independent_done = false;
  const auto independent = [&] {
    independent_done = true;
    // Read ahead: the next layer's router applied to this layer's input
    // predicts most of its experts; the store starts reading them (after
    // this layer's demand reads) while this layer computes. Only what is
    // loaded depends on it, never a result.
    const uint64_t t_predict = now_ns();
    const int64_t next = L + 1;
    const bool predict = next < c.num_hidden_layers && c.is_moe(next);
    int32_t* pidx = nullptr;
    if (predict && (store_.wants_prefetch() || observer_)) {
      pidx = grow(ws_.pred_idx, static_cast<size_t>(n * K));
      float* pw = grow(ws_.pred_w, static_cast<size_t>(n * K));
      route(next, n, x, pidx, pw);
    }
    if (observer_) observer_->routed(L, n, K, idx, pidx);
    if (predict && store_.wants_prefetch()) {
      std::vector<int32_t>& pu = ws_.pred_union;
      pu.assign(pidx, pidx + n * K);
      std::sort(pu.begin(), pu.end());
      pu.erase(std::unique(pu.begin(), pu.end()), pu.end());
      if (peers_) std::erase_if(pu, [&](int32_t e) { return peers_->owner(next, e) != 0; });
      store_.prefetch(next, pu);
    }
    stats_.router_ns += now_ns() - t_predict;
    // The shared expert, into its own rows after the routed outputs.
    if (lw.has_shared) mlp(lw.shared, x, n, shared);
  };
  const int64_t chunk = std::max<int64_t>(1, store_.max_batch(L));
  // Long batches: per activation layout, x quantized in it for the experts'
  // gates and ups (1), judged not worth it (2), or not asked for yet (0).
  static_assert(static_cast<size_t>(ActLayout::Offset128Dword) + 1 == Workspace::kLayouts);
  std::array<uint8_t, Workspace::kLayouts> x_state{};
  std::vector<int32_t>& counts = ws_.moe_counts;
  if (!joint) {
    // (Experts over MPI: start_peers took other processes' experts out of
    // the union; their rows are not counted.)
    counts.assign(uni.size(), 0);
    for (int64_t j = 0; j < n * K; ++j) {
      const auto it = std::lower_bound(uni.begin(), uni.end(), idx[j]);
      if (it != uni.end() && *it == idx[j]) ++counts[static_cast<size_t>(it - uni.begin())];
    }
  }
  for (size_t c0 = 0; c0 < uni.size(); c0 += static_cast<size_t>(chunk)) {
    const size_t c1 = std::min(uni.size(), c0 + static_cast<size_t>(chunk));
    {
      ScopedTimer t{stats_.expert_wait_ns};
      store_.begin(L, std::span<const int32_t>(uni.data() + c0, c1 - c0), ws_.experts);
    }
    if (!independent_done) independent();
    if (joint) {
      // In waves: every expert ready now (all of them when resident), then
      // each as its read lands.
      for (size_t left = c1 - c0; left > 0;) {
        const size_t wave = std::max<size_t>(1, std::min(left, store_.ready()));
        compute_joint(n, K, x, c0, wave, slot);
        left -= wave;
      }
      store_.release(L);
      continue;
    }
    // Each expert as soon as its bytes are ready (resident ones first, then
    // as reads land): it writes only its own rows of `slot`, and the sum
    // below runs in a fixed order, so the order changes no result.
    for (size_t k = c0; k < c1; ++k) {
      size_t ui;
      {
        ScopedTimer t{stats_.expert_wait_ns};
        ui = c0 + store_.next();
      }
      ScopedTimer t{stats_.expert_ns};
      ws_.expert_slot.clear();
      for (int64_t j = 0; j < n * K; ++j)
        if (idx[j] == uni[ui]) ws_.expert_slot.push_back(static_cast<int32_t>(j));
      const int64_t m = static_cast<int64_t>(ws_.expert_slot.size());
      float* ys = grow(ws_.ys, static_cast<size_t>(m * D));
      const int32_t* es = ws_.expert_slot.data();
      const MlpWeights& ew = *ws_.experts[ui - c0];
      // Its rows' gate/up input: the batch's rows quantized once, gathered
      // (the same bytes each expert would quantize itself, so the same
      // floats) when the kernels take these m rows in that layout; else
      // the rows as floats.
      const std::optional<ActLayout> lay = int_act_layout(compute_, ew.gate, m);
      size_t li = 0;
      bool gathered = false;
      if (lay && lay == int_act_layout(compute_, ew.up, m)) {
        li = static_cast<size_t>(*lay);
        if (x_state[li] == 0) {
          // Worth quantizing the n rows in this layout when the experts
          // whose row counts pick it (in this expert's format) take at
          // least n rows in all: the quantizing it replaces.
          int64_t rows_in = 0;
          for (int32_t cnt : counts)
            if (int_act_layout(compute_, ew.gate, cnt) == lay) rows_in += cnt;
          x_state[li] = rows_in >= n ? 1 : 2;
          if (x_state[li] == 1) quantize_rows(compute_, x, n, D, *lay, ws_.moe_x[li]);
        }
        gathered = x_state[li] == 1;
      }
      if (gathered) {
        std::vector<int32_t>& rows = ws_.moe_row_idx;
        rows.resize(static_cast<size_t>(m));
        for (int64_t j = 0; j < m; ++j) rows[static_cast<size_t>(j)] = es[j] / static_cast<int32_t>(K);
        copy_qrows(ws_.moe_x[li].a, rows.data(), m, ws_.moe_rows);
        mlp(ew, nullptr, m, ys, &ws_.moe_rows.a);
      } else {
        float* xs = grow(ws_.xs, static_cast<size_t>(m * D));
        split(m, D, [&](int64_t b, int64_t e) {
          for (int64_t j = b; j < e; ++j) std::memcpy(xs + j * D, x + (es[j] / K) * D, D * sizeof(float));
        });
        mlp(ew, xs, m, ys);
      }
      split(m, D, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) std::memcpy(slot + es[j] * D, ys + j * D, D * sizeof(float));
      });
    }
    store_.release(L);
  }
  if (!independent_done) independent();  // every routed expert is another process's
  if (exchanging) {
    {
      ScopedTimer t{stats_.peer_wait_ns};
      peers_->wait();
    }
    const float* py = ws_.peer_y.data();
    for (size_t j = 0; j < ws_.peer_slots.size(); ++j)
      std::memcpy(slot + static_cast<int64_t>(ws_.peer_slots[j]) * D, py + static_cast<int64_t>(j) * D, D * sizeof(float));
  }

  // Per row, in the row's own top-k order: the same sum whatever the batch.
  // The shared expert's output (computed above, under the reads) is added
  // last, as it always was: the float order of the sum does not change.
  split(n, (K + 1) * D, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* yr = y + r * D;
      std::fill(yr, yr + D, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const float w = wts[r * K + k];
        const float* o = slot + (r * K + k) * D;
        for (int64_t d = 0; d < D; ++d) yr[d] += w * o[d];
      }
      if (lw.has_shared)
        for (int64_t d = 0; d < D; ++d) yr[d] += shared[r * D + d];
    }
  });
}

void ModelRunner::compute_joint(int64_t n, int64_t K, const float* x, size_t c0, size_t wave, float* slot) {
  const int64_t D = m_.config.hidden_size;
  const std::vector<int32_t>& uni = ws_.expert_union;
  std::vector<int32_t>& slots = ws_.expert_slot;
  std::vector<int32_t>& rows = ws_.expert_rows;  // per expert of the chunk, in next() order: its row count
  std::vector<size_t>& order = ws_.expert_order;
  const int32_t* idx = ws_.topk_idx.data();
  order.clear();
  {
    ScopedTimer t{stats_.expert_wait_ns};
    for (size_t k = 0; k < wave; ++k) order.push_back(store_.next());
  }
  ScopedTimer t{stats_.expert_ns};
  slots.clear();
  rows.clear();
  for (size_t i : order) {
    const size_t before = slots.size();
    for (int64_t j = 0; j < n * K; ++j)
      if (idx[j] == uni[c0 + i]) slots.push_back(static_cast<int32_t>(j));
    rows.push_back(static_cast<int32_t>(slots.size() - before));
  }
  const int64_t m = static_cast<int64_t>(slots.size());
  float* xs = ws_.xs.data();
  float* ys = ws_.ys.data();
  for (int64_t j = 0; j < m; ++j) std::memcpy(xs + j * D, x + (slots[j] / K) * D, D * sizeof(float));
  // gate and up of every expert as one job, then down of every expert: the
  // same floats per row as mlp() on each expert alone.
  std::vector<MatmulTask>& tasks = ws_.mm_tasks;
  const auto each = [&](auto&& fn) {
    int64_t r0 = 0, a0 = 0;
    for (size_t e = 0; e < order.size(); ++e) {
      const MlpWeights& w = *ws_.experts[order[e]];
      fn(w, r0, a0, static_cast<int64_t>(rows[e]));
      r0 += rows[e];
      a0 += rows[e] * w.gate.rows;
    }
  };
  tasks.clear();
  each([&](const MlpWeights& w, int64_t r0, int64_t a0, int64_t mr) {
    tasks.push_back({&w.gate, xs + r0 * D, mr, ws_.mlp_g.data() + a0});
    tasks.push_back({&w.up, xs + r0 * D, mr, ws_.mlp_u.data() + a0});
  });
  matmul_batch(compute_, tasks, ws_.mmb);
  each([&](const MlpWeights& w, int64_t, int64_t a0, int64_t mr) {
    float* g = ws_.mlp_g.data() + a0;
    const float* u = ws_.mlp_u.data() + a0;
    compute_.kernels().silu_mul(g, u, mr * w.gate.rows);
  });
  tasks.clear();
  each([&](const MlpWeights& w, int64_t r0, int64_t a0, int64_t mr) {
    tasks.push_back({&w.down, ws_.mlp_g.data() + a0, mr, ys + r0 * D});
  });
  matmul_batch(compute_, tasks, ws_.mmb);
  for (int64_t j = 0; j < m; ++j) std::memcpy(slot + slots[j] * D, ys + j * D, D * sizeof(float));
}

bool ModelRunner::start_peers(int64_t L, int64_t n, const float* x, const int32_t* idx) {
  const int64_t K = m_.config.num_experts_per_tok, D = m_.config.hidden_size;
  const int P = peers_->size();
  std::vector<int32_t>& uni = ws_.expert_union;
  std::vector<int32_t>& pe = ws_.peer_experts;
  std::vector<int32_t>& pr = ws_.peer_rows;
  std::vector<int32_t>& ps = ws_.peer_slots;
  std::vector<int64_t>& off = ws_.peer_off;
  pe.clear();
  pr.clear();
  ps.clear();
  off.assign(static_cast<size_t>(P) + 1, 0);
  // Peer by peer, each peer's experts in union (ascending) order, each
  // expert's slots in (row, k) order: the packing the peer computes over.
  for (int p = 1; p < P; ++p) {
    off[static_cast<size_t>(p)] = static_cast<int64_t>(pe.size());
    for (int32_t e : uni) {
      if (peers_->owner(L, e) != p) continue;
      const size_t before = ps.size();
      for (int64_t j = 0; j < n * K; ++j)
        if (idx[j] == e) ps.push_back(static_cast<int32_t>(j));
      pe.push_back(e);
      pr.push_back(static_cast<int32_t>(ps.size() - before));
    }
  }
  off[static_cast<size_t>(P)] = static_cast<int64_t>(pe.size());
  if (pe.empty()) return false;
  std::erase_if(uni, [&](int32_t e) { return peers_->owner(L, e) != 0; });
  const int64_t m = static_cast<int64_t>(ps.size());
  float* px = grow(ws_.peer_x, static_cast<size_t>(m * D));
  float* py = grow(ws_.peer_y, static_cast<size_t>(m * D));
  for (int64_t j = 0; j < m; ++j) std::memcpy(px + j * D, x + (ps[static_cast<size_t>(j)] / K) * D, D * sizeof(float));
  PeerWork w;
  w.layer = L;
  w.hidden = D;
  w.experts = pe;
  w.rows = pr;
  w.expert_off = off;
  w.x = px;
  w.y = py;
  peers_->start(w);
  stats_.peer_bytes += static_cast<uint64_t>(2 * m * D) * sizeof(float) + pe.size() * 2 * sizeof(int32_t);
  return true;
}

void ModelRunner::compute_experts(int64_t L, std::span<const int32_t> experts, std::span<const int32_t> rows,
                                  const float* x, float* y) {
  const int64_t D = m_.config.hidden_size;
  const int64_t chunk = std::max<int64_t>(1, store_.max_batch(L));
  int64_t row = 0;
  int32_t most = 0;
  for (int32_t m : rows) most = std::max(most, m);
  set_phase(Phase::Experts, most);
  for (size_t c0 = 0; c0 < experts.size(); c0 += static_cast<size_t>(chunk)) {
    const size_t c1 = std::min(experts.size(), c0 + static_cast<size_t>(chunk));
    {
      ScopedTimer t{stats_.expert_wait_ns};
      store_.acquire(L, experts.subspan(c0, c1 - c0), ws_.experts);
    }
    ScopedTimer t{stats_.expert_ns};
    for (size_t i = c0; i < c1; ++i) {
      const int64_t m = rows[i];
      mlp(*ws_.experts[i - c0], x + row * D, m, y + row * D);
      row += m;
    }
    store_.release(L);
  }
}

void ModelRunner::head(std::span<const Row> rows, const std::vector<float>& norm, float* logits, float* hidden_out,
                       const Weight* w) {
  const ModelConfig& c = m_.config;
  const int64_t n = static_cast<int64_t>(rows.size()), D = c.hidden_size;
  const float* h = ws_.h.data();
  float* in = grow(ws_.logits_in, static_cast<size_t>(n * D));
  int64_t cnt = 0;
  for (int64_t r = 0; r < n; ++r) {
    float* dst = in + cnt * D;
    rmsnorm(h + r * D, norm.data(), D, c.rms_norm_eps, dst);
    if (hidden_out) std::memcpy(hidden_out + r * D, dst, D * sizeof(float));
    if (rows[r].want_logits) ++cnt;
  }
  if (cnt > 0) {
    if (!logits) fail("forward: rows want logits but no logits buffer was given");
    mm(w ? *w : m_.weights.lm_head, in, cnt, logits);
  }
}

}  // namespace strata
