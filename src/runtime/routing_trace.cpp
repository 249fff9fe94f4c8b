#include "runtime/routing_trace.h"

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "core/io.h"
#include "core/json.h"
#include "runtime/engine.h"

namespace strata {

RoutingRecorder::RoutingRecorder(std::vector<int64_t> moe_layers, int64_t experts, int64_t top_k) {
  t_.layers = std::move(moe_layers);
  t_.experts = experts;
  t_.top_k = top_k;
  int64_t most = 0;
  for (int64_t L : t_.layers) most = std::max(most, L + 1);
  index_.assign(static_cast<size_t>(most), -1);
  for (size_t i = 0; i < t_.layers.size(); ++i) index_[static_cast<size_t>(t_.layers[i])] = static_cast<int32_t>(i);
}

void RoutingRecorder::routed(int64_t layer, int64_t n, int64_t k, const int32_t* chosen, const int32_t* predicted_next) {
  if (layer < 0 || layer >= static_cast<int64_t>(index_.size()) || index_[static_cast<size_t>(layer)] < 0) return;  // MTP
  if (k != t_.top_k) fail("routing trace: layer {} routed {} experts per token, expected {}", layer, k, t_.top_k);
  const size_t li = static_cast<size_t>(index_[static_cast<size_t>(layer)]);
  const size_t NL = t_.layers.size(), K = static_cast<size_t>(k);
  if (li == 0) {  // the first MoE layer starts a forward: its rows are the next tokens
    base_ = t_.tokens;
    t_.tokens += n;
    t_.chosen.resize(static_cast<size_t>(t_.tokens) * NL * K, -1);
    t_.predicted.resize(static_cast<size_t>(t_.tokens) * NL * K, -1);
  }
  if (base_ + n > t_.tokens) fail("routing trace: layer {} saw {} rows, more than its forward's first layer", layer, n);
  for (int64_t r = 0; r < n; ++r) {
    const size_t at = (static_cast<size_t>(base_ + r) * NL + li) * K;
    std::copy(chosen + r * k, chosen + (r + 1) * k, t_.chosen.begin() + static_cast<std::ptrdiff_t>(at));
    if (predicted_next && li + 1 < NL)
      std::copy(predicted_next + r * k, predicted_next + (r + 1) * k,
                t_.predicted.begin() + static_cast<std::ptrdiff_t>(at + K));
  }
}

RecordedTrace record_routing(Engine& e, std::span<const int32_t> ids, int64_t chunk, int64_t window, const std::string& model,
                            const std::string& fingerprint) {
  const ModelConfig& c = e.config();
  std::vector<int64_t> moe;
  for (int64_t L = 0; L < c.num_hidden_layers; ++L)
    if (c.is_moe(L)) moe.push_back(L);
  if (moe.empty()) fail("{}: the model has no MoE layer to trace", model);
  RoutingRecorder rec(moe, c.n_routed_experts, c.num_experts_per_tok);
  const int64_t T = static_cast<int64_t>(ids.size());
  const int64_t W = window > 0 ? std::min(window, T) : T;
  const int64_t step = chunk > 0 ? chunk : W;
  std::vector<Row> rows;
  e.runner().set_routing_observer(&rec);
  try {
    for (int64_t w0 = 0; w0 < T; w0 += W) {
      const int64_t n = std::min(W, T - w0);
      Session s(c, n, false, e.options().forward.kv);
      for (int64_t p0 = 0; p0 < n; p0 += step) {
        rows.clear();
        for (int64_t p = p0; p < std::min(n, p0 + step); ++p)
          rows.push_back({&s, static_cast<int32_t>(p), ids[static_cast<size_t>(w0 + p)], false});
        e.forward(rows, nullptr, nullptr, static_cast<int64_t>(rows.size()));
      }
    }
  } catch (...) {
    e.runner().set_routing_observer(nullptr);
    throw;
  }
  e.runner().set_routing_observer(nullptr);
  RecordedTrace t = std::move(rec.trace());
  if (t.tokens != T) fail("routing trace: recorded {} tokens of {}", t.tokens, T);
  t.model = model;
  t.fingerprint = fingerprint;
  return t;
}

void write_routing_trace(const std::string& path, const RecordedTrace& t) {
  Json h;
  h["format"] = "strata-routing-trace";
  h["version"] = 1;
  h["model"] = t.model;
  h["fingerprint"] = t.fingerprint;
  h["layers"] = t.layers;
  h["experts"] = t.experts;
  h["top_k"] = t.top_k;
  h["tokens"] = t.tokens;
  std::string out = h.dump() + "\n";
  const size_t K = static_cast<size_t>(t.top_k);
  for (int64_t tok = 0; tok < t.tokens; ++tok) {
    Json line;
    line["t"] = tok;
    Json ch = Json::array(), pr = Json::array();
    for (size_t li = 0; li < t.layers.size(); ++li) {
      ch.push_back(std::vector<int32_t>(t.chosen_at(tok, li), t.chosen_at(tok, li) + K));
      const int32_t* p = t.predicted_at(tok, li);
      pr.push_back(p[0] < 0 ? std::vector<int32_t>{} : std::vector<int32_t>(p, p + K));
    }
    line["chosen"] = std::move(ch);
    line["predicted"] = std::move(pr);
    out += line.dump();
    out += '\n';
  }
  write_file_atomic(path, out);
}

RecordedTrace read_routing_trace(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("{}: cannot open the routing trace", path);
  std::string line;
  if (!std::getline(f, line)) fail("{}: empty (expected a strata-routing-trace header line)", path);
  RecordedTrace t;
  Json h = parse_json(line, path + ":1");
  if (!h.is_object() || h.value("format", "") != "strata-routing-trace")
    fail("{}:1: not a strata routing trace (\"format\" is not \"strata-routing-trace\")", path);
  if (h.value("version", 0) != 1) fail("{}:1: trace version {} (this strata reads version 1)", path, h.value("version", 0));
  try {
    t.model = h.value("model", "");
    t.fingerprint = h.value("fingerprint", "");
    t.layers = h.at("layers").get<std::vector<int64_t>>();
    t.experts = h.at("experts").get<int64_t>();
    t.top_k = h.at("top_k").get<int64_t>();
    t.tokens = h.at("tokens").get<int64_t>();
  } catch (const std::exception& e) {
    fail("{}:1: bad header field: {}", path, e.what());
  }
  if (t.layers.empty() || t.experts < 1 || t.top_k < 1 || t.top_k > t.experts || t.tokens < 0)
    fail("{}:1: layers, experts, top_k or tokens out of range", path);
  const size_t NL = t.layers.size(), K = static_cast<size_t>(t.top_k);
  t.chosen.assign(static_cast<size_t>(t.tokens) * NL * K, -1);
  t.predicted.assign(static_cast<size_t>(t.tokens) * NL * K, -1);
  for (int64_t tok = 0; tok < t.tokens; ++tok) {
    const std::string where = fmt::format("{}:{}", path, tok + 2);
    if (!std::getline(f, line)) fail("{}: the header says {} tokens, the file ends after {}", path, t.tokens, tok);
    Json j = parse_json(line, where);
    auto rows = [&](const char* key, std::vector<int32_t>& dst, bool may_be_empty) {
      if (!j.contains(key) || !j[key].is_array() || j[key].size() != NL)
        fail("{}: \"{}\" must be an array of {} layers", where, key, NL);
      for (size_t li = 0; li < NL; ++li) {
        const Json& a = j[key][li];
        if (!a.is_array() || (a.size() != K && !(may_be_empty && a.empty())))
          fail("{}: \"{}\"[{}] must hold {} experts", where, key, li, K);
        for (size_t k = 0; k < a.size(); ++k) {
          if (!a[k].is_number_integer() || a[k].get<int64_t>() < 0 || a[k].get<int64_t>() >= t.experts)
            fail("{}: \"{}\"[{}][{}] is not an expert of 0..{}", where, key, li, k, t.experts - 1);
          dst[(static_cast<size_t>(tok) * NL + li) * K + k] = a[k].get<int32_t>();
        }
      }
    };
    if (!j.is_object() || j.value("t", -1) != tok) fail("{}: expected token {} (\"t\")", where, tok);
    rows("chosen", t.chosen, false);
    rows("predicted", t.predicted, true);
  }
  return t;
}

}  // namespace strata
