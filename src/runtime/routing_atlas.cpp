#include "runtime/routing_atlas.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace strata {

namespace {

double entropy_bits(const std::vector<double>& p) {
  double h = 0;
  for (double x : p)
    if (x > 0) h -= x * std::log2(x);
  return h;
}

void finish_usage(ExpertUsage& u) {
  const double sum = static_cast<double>(std::accumulate(u.counts.begin(), u.counts.end(), uint64_t{0}));
  u.share.assign(u.counts.size(), 0.0);
  for (size_t e = 0; e < u.counts.size(); ++e) u.share[e] = sum > 0 ? static_cast<double>(u.counts[e]) / sum : 0.0;
  u.entropy_bits = entropy_bits(u.share);
  u.entropy_norm = u.counts.size() > 1 ? u.entropy_bits / std::log2(static_cast<double>(u.counts.size())) : 0.0;
}

// Adds the distinct experts of each token of `t`'s layer `li` to `u` (counts
// only; finish_usage computes the rest).
void add_usage(ExpertUsage& u, const RecordedTrace& t, size_t li, std::vector<char>& seen) {
  const size_t K = static_cast<size_t>(t.top_k);
  for (int64_t tok = 0; tok < t.tokens; ++tok) {
    const int32_t* ch = t.chosen_at(tok, li);
    std::fill(seen.begin(), seen.end(), 0);
    for (size_t k = 0; k < K; ++k)
      if (ch[k] >= 0 && !seen[static_cast<size_t>(ch[k])]) {
        seen[static_cast<size_t>(ch[k])] = 1;
        ++u.counts[static_cast<size_t>(ch[k])];
      }
  }
  u.tokens += t.tokens;
}

}  // namespace

ExpertUsage expert_usage(const RecordedTrace& t, size_t li) {
  ExpertUsage u;
  u.counts.assign(static_cast<size_t>(t.experts), 0);
  std::vector<char> seen(static_cast<size_t>(t.experts));
  add_usage(u, t, li, seen);
  finish_usage(u);
  return u;
}

double js_divergence_bits(const std::vector<double>& p, const std::vector<double>& q) {
  if (p.size() != q.size()) fail("js_divergence_bits: distributions of {} and {} values", p.size(), q.size());
  double js = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double m = 0.5 * (p[i] + q[i]);
    if (p[i] > 0) js += 0.5 * p[i] * std::log2(p[i] / m);
    if (q[i] > 0) js += 0.5 * q[i] * std::log2(q[i] / m);
  }
  return std::max(0.0, js);
}

Atlas build_atlas(const std::vector<AtlasInput>& kinds, const AtlasOptions& o) {
  if (kinds.empty()) fail("atlas: no routing to describe (give at least one id file or trace)");
  const RecordedTrace& t0 = *kinds[0].trace;
  Atlas a;
  a.model = t0.model;
  a.fingerprint = t0.fingerprint;
  a.experts = t0.experts;
  a.top_k = t0.top_k;
  int64_t total = 0;
  for (const AtlasInput& k : kinds) {
    const RecordedTrace& t = *k.trace;
    if (t.layers != t0.layers || t.experts != t0.experts || t.top_k != t0.top_k)
      fail("atlas: kind '{}' was routed over other layers, experts or top_k than kind '{}' ({} layers, {} experts, "
           "top-{} vs {} layers, {} experts, top-{})",
           k.name, kinds[0].name, t.layers.size(), t.experts, t.top_k, t0.layers.size(), t0.experts, t0.top_k);
    if (!t.fingerprint.empty() && !t0.fingerprint.empty() && t.fingerprint != t0.fingerprint)
      fail("atlas: kind '{}' comes from model {} (fingerprint {}), kind '{}' from {} ({})", k.name, t.model,
           t.fingerprint, kinds[0].name, t0.model, t0.fingerprint);
    for (const std::string& n : a.kinds)
      if (n == k.name) fail("atlas: two kinds named '{}' (name them: --ids-file NAME=PATH)", n);
    a.kinds.push_back(k.name);
    a.kind_tokens.push_back(t.tokens);
    total += t.tokens;
  }
  if (total < 1) fail("atlas: the routing holds no token");
  const size_t E = static_cast<size_t>(a.experts), K = static_cast<size_t>(a.top_k);
  std::vector<char> seen(E), pred(E);
  std::vector<int32_t> chosen;
  for (size_t li = 0; li < t0.layers.size(); ++li) {
    AtlasLayer L;
    L.layer = t0.layers[li];
    L.all.counts.assign(E, 0);
    L.together.assign(E * E, 0);
    std::vector<uint64_t> hits(K, 0);
    for (const AtlasInput& k : kinds) {
      const RecordedTrace& t = *k.trace;
      ExpertUsage u;
      u.counts.assign(E, 0);
      add_usage(u, t, li, seen);
      finish_usage(u);
      for (size_t e = 0; e < E; ++e) L.all.counts[e] += u.counts[e];
      L.all.tokens += u.tokens;
      L.by_kind.push_back(std::move(u));
      for (int64_t tok = 0; tok < t.tokens; ++tok) {
        // This token's distinct experts.
        const int32_t* ch = t.chosen_at(tok, li);
        chosen.clear();
        std::fill(seen.begin(), seen.end(), 0);
        for (size_t j = 0; j < K; ++j)
          if (ch[j] >= 0 && !seen[static_cast<size_t>(ch[j])]) {
            seen[static_cast<size_t>(ch[j])] = 1;
            chosen.push_back(ch[j]);
          }
        for (int32_t x : chosen)
          for (int32_t y : chosen) ++L.together[static_cast<size_t>(x) * E + static_cast<size_t>(y)];
        const int32_t* p = t.predicted_at(tok, li);
        if (p[0] < 0) continue;
        ++L.predicted_tokens;
        std::fill(pred.begin(), pred.end(), 0);
        uint64_t h = 0;
        for (size_t j = 0; j < K; ++j) {
          const size_t e = static_cast<size_t>(p[j]);
          if (p[j] >= 0 && !pred[e]) {
            pred[e] = 1;
            if (seen[e]) ++h;
          }
          hits[j] += h;  // found among the first j + 1 predicted
        }
      }
    }
    finish_usage(L.all);
    const double T = static_cast<double>(L.all.tokens);
    if (L.predicted_tokens > 0) {
      for (size_t j = 0; j < K; ++j) {
        const double found = static_cast<double>(hits[j]);
        L.recall_at.push_back(found / (static_cast<double>(L.predicted_tokens) * static_cast<double>(K)));
        L.precision_at.push_back(found / (static_cast<double>(L.predicted_tokens) * static_cast<double>(j + 1)));
      }
    }
    // The static baseline: the k most used experts (ties: the lower number).
    std::vector<int32_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
      return L.all.counts[static_cast<size_t>(x)] > L.all.counts[static_cast<size_t>(y)];
    });
    uint64_t pop = 0;
    for (size_t j = 0; j < K; ++j) {
      // Every token that chose order[j] finds it among the first j + 1.
      pop += L.all.counts[static_cast<size_t>(order[j])];
      L.popular_recall_at.push_back(static_cast<double>(pop) / (T * static_cast<double>(K)));
    }
    // Pairs against independence.
    std::vector<ExpertPair> pairs;
    for (size_t x = 0; x < E; ++x)
      for (size_t y = x + 1; y < E; ++y) {
        const double expected = static_cast<double>(L.all.counts[x]) * static_cast<double>(L.all.counts[y]) / T;
        if (expected < static_cast<double>(o.min_expected) || expected <= 0) continue;
        ExpertPair pr;
        pr.a = static_cast<int32_t>(x);
        pr.b = static_cast<int32_t>(y);
        pr.together = L.together[x * E + y];
        pr.lift = static_cast<double>(pr.together) / expected;
        pairs.push_back(pr);
      }
    auto by_lift = [](const ExpertPair& p, const ExpertPair& q) {
      if (p.lift != q.lift) return p.lift > q.lift;
      return p.a != q.a ? p.a < q.a : p.b < q.b;
    };
    std::sort(pairs.begin(), pairs.end(), by_lift);
    L.most_together.assign(pairs.begin(), pairs.begin() + static_cast<std::ptrdiff_t>(std::min(o.top_pairs, pairs.size())));
    std::sort(pairs.begin(), pairs.end(), [](const ExpertPair& p, const ExpertPair& q) {
      if (p.lift != q.lift) return p.lift < q.lift;
      return p.a != q.a ? p.a < q.a : p.b < q.b;
    });
    L.least_together.assign(pairs.begin(), pairs.begin() + static_cast<std::ptrdiff_t>(std::min(o.top_pairs, pairs.size())));
    // Shifts between kinds.
    for (size_t x = 0; x < kinds.size(); ++x)
      for (size_t y = x + 1; y < kinds.size(); ++y) {
        const std::vector<double>&p = L.by_kind[x].share, &q = L.by_kind[y].share;
        UsageShift s;
        s.a = x;
        s.b = y;
        for (size_t e = 0; e < E; ++e) s.tv += 0.5 * std::fabs(p[e] - q[e]);
        s.js_bits = js_divergence_bits(p, q);
        std::vector<int32_t> ord(E);
        std::iota(ord.begin(), ord.end(), 0);
        std::stable_sort(ord.begin(), ord.end(), [&](int32_t i, int32_t j) {
          return std::fabs(p[static_cast<size_t>(i)] - q[static_cast<size_t>(i)]) >
                 std::fabs(p[static_cast<size_t>(j)] - q[static_cast<size_t>(j)]);
        });
        ord.resize(std::min(o.top_shift_experts, E));
        s.top_experts = std::move(ord);
        L.shifts.push_back(std::move(s));
      }
    a.layers.push_back(std::move(L));
  }
  return a;
}

namespace {

// Rounded for a stable, small file (6 significant digits).
double r6(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  const double m = std::pow(10.0, 5 - std::floor(std::log10(std::fabs(x))));
  return std::round(x * m) / m;
}

Json usage_json(const ExpertUsage& u) {
  Json j;
  j["tokens"] = u.tokens;
  j["counts"] = u.counts;
  Json s = Json::array();
  for (double x : u.share) s.push_back(r6(x));
  j["share"] = std::move(s);
  j["entropy_bits"] = r6(u.entropy_bits);
  j["entropy_norm"] = r6(u.entropy_norm);
  return j;
}

Json pairs_json(const std::vector<ExpertPair>& ps) {
  Json a = Json::array();
  for (const ExpertPair& p : ps) a.push_back({{"a", p.a}, {"b", p.b}, {"together", p.together}, {"lift", r6(p.lift)}});
  return a;
}

Json rounded(const std::vector<double>& v) {
  Json a = Json::array();
  for (double x : v) a.push_back(r6(x));
  return a;
}

}  // namespace

Json atlas_json(const Atlas& a, int64_t coact_layer) {
  Json j;
  j["format"] = "strata-atlas";
  j["version"] = 1;
  j["model"] = a.model;
  j["fingerprint"] = a.fingerprint;
  j["experts"] = a.experts;
  j["top_k"] = a.top_k;
  Json kinds = Json::array();
  for (size_t i = 0; i < a.kinds.size(); ++i) kinds.push_back({{"name", a.kinds[i]}, {"tokens", a.kind_tokens[i]}});
  j["kinds"] = std::move(kinds);
  const size_t E = static_cast<size_t>(a.experts);
  Json layers = Json::array();
  double ent = 0;
  std::vector<double> rec(static_cast<size_t>(a.top_k), 0.0);
  int64_t n_rec = 0;
  for (const AtlasLayer& L : a.layers) {
    Json l;
    l["layer"] = L.layer;
    l["usage"] = usage_json(L.all);
    Json bk = Json::object();
    for (size_t i = 0; i < a.kinds.size(); ++i) bk[a.kinds[i]] = usage_json(L.by_kind[i]);
    l["usage_by_kind"] = std::move(bk);
    l["predicted_tokens"] = L.predicted_tokens;
    l["recall_at"] = L.recall_at.empty() ? Json(nullptr) : rounded(L.recall_at);
    l["precision_at"] = L.precision_at.empty() ? Json(nullptr) : rounded(L.precision_at);
    l["popular_recall_at"] = rounded(L.popular_recall_at);
    l["most_together"] = pairs_json(L.most_together);
    l["least_together"] = pairs_json(L.least_together);
    Json sh = Json::array();
    for (const UsageShift& s : L.shifts) {
      Json top = Json::array();
      for (int32_t e : s.top_experts) {
        Json t;
        t["expert"] = e;
        t[a.kinds[s.a]] = r6(L.by_kind[s.a].share[static_cast<size_t>(e)]);
        t[a.kinds[s.b]] = r6(L.by_kind[s.b].share[static_cast<size_t>(e)]);
        top.push_back(std::move(t));
      }
      sh.push_back({{"a", a.kinds[s.a]}, {"b", a.kinds[s.b]}, {"tv", r6(s.tv)}, {"js_bits", r6(s.js_bits)},
                    {"top_experts", std::move(top)}});
    }
    l["shift"] = std::move(sh);
    if (L.layer == coact_layer) {
      Json tog = Json::array(), lift = Json::array();
      const double T = static_cast<double>(L.all.tokens);
      for (size_t x = 0; x < E; ++x) {
        tog.push_back(std::vector<uint64_t>(L.together.begin() + static_cast<std::ptrdiff_t>(x * E),
                                            L.together.begin() + static_cast<std::ptrdiff_t>((x + 1) * E)));
        Json row = Json::array();
        for (size_t y = 0; y < E; ++y) {
          const double expected = static_cast<double>(L.all.counts[x]) * static_cast<double>(L.all.counts[y]) / T;
          row.push_back(x == y || expected <= 0 ? Json(nullptr) : Json(r6(static_cast<double>(L.together[x * E + y]) / expected)));
        }
        lift.push_back(std::move(row));
      }
      j["coactivation"] = {{"layer", L.layer}, {"together", std::move(tog)}, {"lift", std::move(lift)}};
    }
    ent += L.all.entropy_norm;
    if (!L.recall_at.empty()) {
      for (size_t k = 0; k < rec.size(); ++k) rec[k] += L.recall_at[k];
      ++n_rec;
    }
    layers.push_back(std::move(l));
  }
  j["layers"] = std::move(layers);
  Json s;
  s["entropy_norm_mean"] = r6(a.layers.empty() ? 0.0 : ent / static_cast<double>(a.layers.size()));
  if (n_rec > 0)
    for (double& r : rec) r /= static_cast<double>(n_rec);
  s["recall_at_mean"] = n_rec > 0 ? rounded(rec) : Json(nullptr);
  Json tv = Json::object();
  if (!a.layers.empty())
    for (size_t i = 0; i < a.layers[0].shifts.size(); ++i) {
      const UsageShift& s0 = a.layers[0].shifts[i];
      double m = 0, mj = 0;
      for (const AtlasLayer& L : a.layers) {
        m += L.shifts[i].tv;
        mj += L.shifts[i].js_bits;
      }
      tv[a.kinds[s0.a] + "/" + a.kinds[s0.b]] = {{"tv_mean", r6(m / static_cast<double>(a.layers.size()))},
                                                 {"js_bits_mean", r6(mj / static_cast<double>(a.layers.size()))}};
    }
  s["shift_mean"] = std::move(tv);
  j["summary"] = std::move(s);
  return j;
}

}  // namespace strata
