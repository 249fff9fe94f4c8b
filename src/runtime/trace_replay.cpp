#include "runtime/trace_replay.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace strata {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

TraceMapping map_trace(const RecordedTrace& t, const std::vector<int64_t>& container_layers, int64_t container_experts) {
  if (container_layers.empty()) fail("trace replay: the container has no MoE layer");
  if (container_experts < 1) fail("trace replay: the container has no routed experts");
  TraceMapping m;
  m.layers = container_layers;
  m.experts = container_experts;
  const int64_t Et = t.experts, Lt = static_cast<int64_t>(t.layers.size()), Lc = static_cast<int64_t>(container_layers.size());
  m.groups = container_experts >= 2 * Et ? container_experts / Et : 1;
  if (m.groups > 1)
    m.describe = fmt::format(
        "container layer j holds trace layers (j*{m}+g) mod {lt}, g < {m}: trace expert e of group g -> container expert "
        "g*{et}+e ({used} of {ec} experts used per layer; {k} experts per token per layer)",
        fmt::arg("m", m.groups), fmt::arg("lt", Lt), fmt::arg("et", Et), fmt::arg("used", m.groups * Et),
        fmt::arg("ec", container_experts), fmt::arg("k", m.groups * t.top_k));
  else if (container_experts >= Et)
    m.describe = fmt::format("container layer j <- trace layer j mod {}; expert e -> e ({} of {} experts used)", Lt, Et,
                             container_experts);
  else
    m.describe = fmt::format("container layer j <- trace layer j mod {}; expert e -> e mod {} (trace experts merged)",
                             Lt, container_experts);
  if (Lc * m.groups > Lt) m.describe += fmt::format("; the trace's {} layers repeat over {} slots", Lt, Lc * m.groups);
  return m;
}

RoutingTrace cache_model_trace(const RecordedTrace& t, const std::string& path) {
  const int64_t L = static_cast<int64_t>(t.layers.size()), K = t.top_k;
  if (L < 1 || K < 1 || t.experts < K || t.tokens < 1)
    fail("{}: a trace of {} layers, {} experts, top-{}, {} tokens: nothing to replay", path, L, t.experts, K, t.tokens);
  RoutingTrace r{L, t.experts, K, {}};
  r.ids.reserve(static_cast<size_t>(t.tokens * L * K));
  std::vector<int32_t> row;
  for (int64_t tok = 0; tok < t.tokens; ++tok)
    for (int64_t li = 0; li < L; ++li) {
      const int32_t* e = t.chosen_at(tok, static_cast<size_t>(li));
      row.assign(e, e + K);
      std::sort(row.begin(), row.end());
      for (int64_t k = 0; k < K; ++k) {
        if (row[static_cast<size_t>(k)] < 0 || row[static_cast<size_t>(k)] >= t.experts)
          fail("{}: token {}: \"chosen\"[{}] holds {}, not an expert of 0..{}", path, tok, li, row[static_cast<size_t>(k)],
               t.experts - 1);
        if (k > 0 && row[static_cast<size_t>(k)] == row[static_cast<size_t>(k - 1)])
          fail("{}: token {}: \"chosen\"[{}] names expert {} twice (a router's top-k is distinct)", path, tok, li,
               row[static_cast<size_t>(k)]);
      }
      r.ids.insert(r.ids.end(), e, e + K);
    }
  return r;
}

ReplayResult replay_trace(const RecordedTrace& t, const TraceMapping& m, ExpertStore& store, bool prefetch,
                          int64_t max_tokens) {
  const int64_t Lt = static_cast<int64_t>(t.layers.size()), K = t.top_k;
  const int64_t T = max_tokens > 0 ? std::min(max_tokens, t.tokens) : t.tokens;
  const size_t Lc = m.layers.size();
  std::vector<int32_t> uni, pred;
  std::vector<const MlpWeights*> out;
  // The container experts of (token, container layer j), chosen or predicted.
  auto gather = [&](int64_t tok, size_t j, bool predicted, std::vector<int32_t>& dst) {
    dst.clear();
    for (int64_t g = 0; g < m.groups; ++g) {
      const size_t li = static_cast<size_t>((static_cast<int64_t>(j) * m.groups + g) % Lt);
      const int32_t* e = predicted ? t.predicted_at(tok, li) : t.chosen_at(tok, li);
      for (int64_t k = 0; k < K; ++k) {
        if (e[k] < 0) continue;
        dst.push_back(static_cast<int32_t>(m.groups > 1 ? g * t.experts + e[k] : e[k] % m.experts));
      }
    }
    std::sort(dst.begin(), dst.end());
    dst.erase(std::unique(dst.begin(), dst.end()), dst.end());
  };
  ReplayResult r;
  const double t0 = now_s();
  double wait = 0;
  for (int64_t tok = 0; tok < T; ++tok) {
    for (size_t j = 0; j < Lc; ++j) {
      if (prefetch && store.wants_prefetch() && j + 1 < Lc) {
        gather(tok, j + 1, true, pred);
        if (!pred.empty()) store.prefetch(m.layers[j + 1], pred);
      }
      gather(tok, j, false, uni);
      const int64_t L = m.layers[j];
      const size_t chunk = static_cast<size_t>(std::max<int64_t>(1, store.max_batch(L)));
      for (size_t c0 = 0; c0 < uni.size(); c0 += chunk) {
        const size_t c1 = std::min(uni.size(), c0 + chunk);
        const double w0 = now_s();
        store.begin(L, std::span<const int32_t>(uni.data() + c0, c1 - c0), out);
        for (size_t i = c0; i < c1; ++i) store.next();
        wait += now_s() - w0;
        store.release(L);
      }
    }
  }
  r.tokens = T;
  r.wall_s = now_s() - t0;
  r.wait_s = wait;
  r.stats = store.stats();
  return r;
}

}  // namespace strata
