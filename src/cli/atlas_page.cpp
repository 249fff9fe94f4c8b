#include "cli/atlas_page.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace strata::cli {

namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

struct Rgb {
  double r, g, b;
};

std::string hex(Rgb c) {
  auto b = [](double x) { return static_cast<int>(std::lround(std::clamp(x, 0.0, 255.0))); };
  return fmt::format("#{:02x}{:02x}{:02x}", b(c.r), b(c.g), b(c.b));
}

// t in [0, 1] along the stops.
template <size_t N>
Rgb along(const std::array<Rgb, N>& stops, double t) {
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * static_cast<double>(N - 1);
  const size_t i = std::min(static_cast<size_t>(t), N - 2);
  const double f = t - static_cast<double>(i);
  return {stops[i].r + f * (stops[i + 1].r - stops[i].r), stops[i].g + f * (stops[i + 1].g - stops[i].g),
          stops[i].b + f * (stops[i + 1].b - stops[i].b)};
}

// Sequential (dark violet -> blue -> green -> yellow) and diverging (blue -> white -> red).
constexpr std::array<Rgb, 5> kSequential{{{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}};
constexpr std::array<Rgb, 3> kDiverging{{{33, 102, 172}, {247, 247, 247}, {178, 24, 43}}};
constexpr std::array<const char*, 10> kSeries{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                              "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

std::string color(bool diverging, double t) { return diverging ? hex(along(kDiverging, t)) : hex(along(kSequential, t)); }

std::string num(double x, int digits = 3) {
  if (!std::isfinite(x)) return "-";
  return fmt::format("{:.{}f}", x, digits);
}

// Shows every step-th of n labels so that they keep `min_px` apart at `px` each.
size_t label_step(double px, double min_px) {
  return std::max<size_t>(1, static_cast<size_t>(std::ceil(min_px / std::max(px, 1e-9))));
}

struct Heatmap {
  std::string id, title;
  std::vector<std::string> rows, cols;  // labels
  std::string row_axis, col_axis, legend;
  std::vector<double> v;  // [rows * cols], kNone: no value (grey)
  double lo = 0, hi = 1;
  bool diverging = false;
  std::function<std::string(double)> fmt_value = [](double x) { return num(x); };
};

std::string svg_heatmap(const Heatmap& h) {
  const size_t R = h.rows.size(), C = h.cols.size();
  const double cw = std::clamp(std::floor(820.0 / static_cast<double>(std::max<size_t>(C, 1))), 3.0, 36.0);
  const double ch = std::clamp(std::floor(520.0 / static_cast<double>(std::max<size_t>(R, 1))), 3.0, 28.0);
  const double left = 78, top = 34, gw = cw * static_cast<double>(C), gh = ch * static_cast<double>(R);
  const double lx = left + gw + 24, legend_h = std::max(gh, 120.0);
  const double width = lx + 110, height = top + std::max(gh, legend_h) + 58;
  const bool titles = R * C <= 4096;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{}-svg\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} "
      "{:.0f}\" role=\"img\" aria-label=\"{}\">\n",
      h.id, width, height, width, height, esc(h.title));
  s += fmt::format("<text x=\"{:.0f}\" y=\"18\" class=\"t\">{}</text>\n", left, esc(h.title));
  s += "<g class=\"cells\">\n";
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < C; ++c) {
      const double x = h.v[r * C + c];
      const std::string fill =
          std::isfinite(x) ? color(h.diverging, (x - h.lo) / (h.hi - h.lo > 0 ? h.hi - h.lo : 1.0)) : "#d0d0d0";
      s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">", left + cw * static_cast<double>(c),
                       top + ch * static_cast<double>(r), cw, ch, fill);
      if (titles)
        s += fmt::format("<title>{} {}, {} {}: {}</title>", esc(h.row_axis), esc(h.rows[r]), esc(h.col_axis), esc(h.cols[c]),
                         std::isfinite(x) ? esc(h.fmt_value(x)) : "-");
      s += "</rect>\n";
    }
  s += "</g>\n";
  // Axes: row labels on the left, column labels below, axis titles.
  const size_t rstep = label_step(ch, 12), cstep = label_step(cw, 22);
  for (size_t r = 0; r < R; r += rstep)
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\" class=\"l\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>\n",
                     left - 6, top + ch * (static_cast<double>(r) + 0.5), esc(h.rows[r]));
  for (size_t c = 0; c < C; c += cstep)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.0f}\" class=\"l\" text-anchor=\"middle\">{}</text>\n",
                     left + cw * (static_cast<double>(c) + 0.5), top + gh + 14, esc(h.cols[c]));
  s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" class=\"a\" text-anchor=\"middle\">{}</text>\n", left + gw / 2,
                   top + gh + 34, esc(h.col_axis));
  s += fmt::format(
      "<text x=\"16\" y=\"{:.0f}\" class=\"a\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.0f})\">{}</text>\n",
      top + gh / 2, top + gh / 2, esc(h.row_axis));
  // Legend: a vertical gradient, high at the top.
  s += fmt::format("<defs><linearGradient id=\"{}-grad\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">", h.id);
  for (int i = 0; i <= 10; ++i)
    s += fmt::format("<stop offset=\"{:.1f}\" stop-color=\"{}\"/>", i / 10.0, color(h.diverging, i / 10.0));
  s += "</linearGradient></defs>\n";
  s += fmt::format("<g class=\"legend\"><rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"14\" height=\"{:.0f}\" fill=\"url(#{}-grad)\" stroke=\"#888\"/>\n",
                   lx, top, legend_h, h.id);
  for (int i = 0; i <= 4; ++i) {
    const double y = top + legend_h * (1.0 - i / 4.0);
    s += fmt::format("<line x1=\"{:.0f}\" x2=\"{:.0f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#444\"/>", lx + 14, lx + 18, y, y);
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\" class=\"l\" dominant-baseline=\"middle\">{}</text>\n", lx + 21, y,
                     esc(h.fmt_value(h.lo + (h.hi - h.lo) * i / 4.0)));
  }
  s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" class=\"l\">{}</text></g>\n", lx - 10, top + legend_h + 16, esc(h.legend));
  s += "</svg>\n";
  return s;
}

struct Bars {
  std::string id, title;
  std::vector<std::string> groups, series;  // x labels; one bar per series in each group
  std::vector<std::vector<double>> v;       // [series][group], kNone: no bar
  std::string x_axis, y_axis;
  double ymax = 1;
};

std::string svg_bars(const Bars& b) {
  const size_t G = b.groups.size(), S = b.series.size();
  const double left = 62, top = 34, pw = std::max(520.0, std::min(900.0, 18.0 * static_cast<double>(G * S) + 40.0)), ph = 220;
  const double gw = pw / static_cast<double>(std::max<size_t>(G, 1)), bw = std::max(1.0, gw * 0.8 / static_cast<double>(S));
  const double legend_w = 190, width = left + pw + legend_w, height = top + ph + 56;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{}-svg\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} "
      "{:.0f}\" role=\"img\" aria-label=\"{}\">\n",
      b.id, width, height, width, height, esc(b.title));
  s += fmt::format("<text x=\"{:.0f}\" y=\"18\" class=\"t\">{}</text>\n", left, esc(b.title));
  for (int i = 0; i <= 4; ++i) {
    const double y = top + ph * (1.0 - i / 4.0);
    s += fmt::format("<line x1=\"{:.0f}\" x2=\"{:.0f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\"/>", left, left + pw, y, y,
                     i == 0 ? "#444" : "#e4e4e4");
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\" class=\"l\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>\n",
                     left - 5, y, fmt::format("{:.3g}", b.ymax * i / 4.0));
  }
  s += "<g class=\"bars\">\n";
  for (size_t g = 0; g < G; ++g)
    for (size_t si = 0; si < S; ++si) {
      const double x = b.v[si][g];
      if (!std::isfinite(x)) continue;
      const double hgt = ph * std::clamp(x / b.ymax, 0.0, 1.0);
      s += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{} {}, {}: {}</title></rect>\n",
          left + gw * static_cast<double>(g) + gw * 0.1 + bw * static_cast<double>(si), top + ph - hgt, bw, std::max(hgt, 0.5),
          kSeries[si % kSeries.size()], esc(b.x_axis), esc(b.groups[g]), esc(b.series[si]), num(x));
    }
  s += "</g>\n";
  const size_t step = label_step(gw, 22);
  for (size_t g = 0; g < G; g += step)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.0f}\" class=\"l\" text-anchor=\"middle\">{}</text>\n",
                     left + gw * (static_cast<double>(g) + 0.5), top + ph + 14, esc(b.groups[g]));
  s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" class=\"a\" text-anchor=\"middle\">{}</text>\n", left + pw / 2, top + ph + 36,
                   esc(b.x_axis));
  s += fmt::format(
      "<text x=\"14\" y=\"{:.0f}\" class=\"a\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.0f})\">{}</text>\n",
      top + ph / 2, top + ph / 2, esc(b.y_axis));
  s += "<g class=\"legend\">\n";
  for (size_t si = 0; si < S; ++si) {
    const double y = top + 4 + 18.0 * static_cast<double>(si);
    s += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"12\" height=\"12\" fill=\"{}\"/>", left + pw + 16, y,
                     kSeries[si % kSeries.size()]);
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" class=\"l\" dominant-baseline=\"middle\">{}</text>\n", left + pw + 34,
                     y + 6, esc(b.series[si]));
  }
  s += "</g>\n</svg>\n";
  return s;
}

std::string figure(const std::string& id, const std::string& svg, const std::string& caption) {
  return fmt::format("<figure id=\"{}\">\n{}<figcaption>{}</figcaption>\n</figure>\n", id, svg, caption);
}

std::string layer_label(int64_t L) { return fmt::to_string(L); }

}  // namespace

std::string atlas_page_html(const Atlas& a, const AtlasPageInfo& info) {
  const size_t E = static_cast<size_t>(a.experts), K = static_cast<size_t>(a.top_k), NL = a.layers.size();
  std::vector<std::string> layer_names, expert_names;
  for (const AtlasLayer& L : a.layers) layer_names.push_back(layer_label(L.layer));
  for (size_t e = 0; e < E; ++e) expert_names.push_back(fmt::to_string(e));
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += fmt::format("<title>strata expert atlas: {}</title>\n", esc(a.model));
  h += "<style>\n"
       "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1140px;padding:0 16px;color:#222}\n"
       "h1{font-size:22px}h2{font-size:17px;margin-top:30px;border-bottom:1px solid #ddd}\n"
       "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}\n"
       "th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\n"
       "figure{margin:10px 0;overflow-x:auto}figcaption{color:#555;max-width:900px}\n"
       "svg text.t{font-size:14px;font-weight:600}svg text.l{font-size:11px}svg text.a{font-size:12px}\n"
       "code{background:#f4f4f4;padding:1px 4px}td.x{text-align:left}\n"
       "</style>\n</head>\n<body>\n";
  h += fmt::format("<h1>Expert atlas: {}</h1>\n", esc(a.model));
  std::string kinds;
  for (size_t i = 0; i < a.kinds.size(); ++i)
    kinds += fmt::format("{}<b>{}</b> ({} tokens)", i ? ", " : "", esc(a.kinds[i]), a.kind_tokens[i]);
  h += fmt::format(
      "<p>Model fingerprint <code>{}</code>: {} MoE layers, {} routed experts, top-{}. Prompt kinds: {}.<br>Made by "
      "<code>{}</code>; the numbers are in <a href=\"atlas.json\">atlas.json</a>.</p>\n",
      esc(a.fingerprint), NL, E, K, kinds, esc(info.command));

  // Summary.
  double ent = 0;
  std::vector<double> rec(K, 0.0), pop(K, 0.0);
  double prec1 = 0;
  int n_rec = 0;
  for (const AtlasLayer& L : a.layers) {
    ent += L.all.entropy_norm;
    if (!L.recall_at.empty()) {
      for (size_t k = 0; k < K; ++k) {
        rec[k] += L.recall_at[k];
        pop[k] += L.popular_recall_at[k];
      }
      prec1 += L.precision_at[0];
      ++n_rec;
    }
  }
  h += "<h2>Summary</h2>\n<table>\n";
  h += fmt::format("<tr><td>normalized routing entropy, mean over layers (1 = uniform)</td><td>{}</td></tr>\n",
                   num(NL ? ent / static_cast<double>(NL) : 0.0));
  if (n_rec > 0)
    for (size_t k = 0; k < K; ++k)
      h += fmt::format(
          "<tr><td>read-ahead recall@{} (mean over {} predicted layers; most-used-{} baseline {}; random {})</td><td>{}</td></tr>\n",
          k + 1, n_rec, k + 1, num(pop[k] / n_rec), num(static_cast<double>(k + 1) / static_cast<double>(E)), num(rec[k] / n_rec));
  if (n_rec > 0)
    h += fmt::format("<tr><td>read-ahead precision@1: the first predicted expert is among the chosen (mean over layers)</td>"
                     "<td>{}</td></tr>\n",
                     num(prec1 / n_rec));
  if (!a.layers.empty())
    for (size_t i = 0; i < a.layers[0].shifts.size(); ++i) {
      double tv = 0, js = 0;
      for (const AtlasLayer& L : a.layers) {
        tv += L.shifts[i].tv;
        js += L.shifts[i].js_bits;
      }
      const UsageShift& s0 = a.layers[0].shifts[i];
      h += fmt::format("<tr><td>usage shift {} vs {}: total variation / JS divergence (bits), mean over layers</td><td>{} / {}</td></tr>\n",
                       esc(a.kinds[s0.a]), esc(a.kinds[s0.b]), num(tv / static_cast<double>(NL)), num(js / static_cast<double>(NL)));
    }
  h += "</table>\n";

  // 1. Usage heatmap.
  {
    Heatmap m;
    m.id = "fig-usage";
    m.title = "Expert usage per layer (all kinds)";
    m.rows = layer_names;
    m.cols = expert_names;
    m.row_axis = "layer";
    m.col_axis = "expert";
    m.legend = "tokens routed to it";
    m.hi = 0;
    for (const AtlasLayer& L : a.layers)
      for (size_t e = 0; e < E; ++e) {
        const double x = L.all.tokens ? static_cast<double>(L.all.counts[e]) / static_cast<double>(L.all.tokens) : 0.0;
        m.v.push_back(x);
        m.hi = std::max(m.hi, x);
      }
    if (m.hi <= 0) m.hi = 1;
    m.fmt_value = [](double x) { return fmt::format("{:.1f}%", 100 * x); };
    h += "<h2>Expert usage</h2>\n";
    h += figure(m.id, svg_heatmap(m),
                fmt::format("Share of the tokens whose top-{} includes each expert, per MoE layer. Uniform routing gives {:.1f}% "
                            "everywhere; bright cells are popular experts, dark ones rarely chosen.",
                            K, 100.0 * static_cast<double>(K) / static_cast<double>(E)));
  }
  // 2. Entropy bars.
  {
    Bars b;
    b.id = "fig-entropy";
    b.title = "Routing entropy relative to uniform";
    b.groups = layer_names;
    b.series.push_back("all");
    for (const std::string& k : a.kinds) b.series.push_back(k);
    b.v.assign(b.series.size(), {});
    for (const AtlasLayer& L : a.layers) {
      b.v[0].push_back(L.all.entropy_norm);
      for (size_t i = 0; i < a.kinds.size(); ++i) b.v[i + 1].push_back(L.by_kind[i].entropy_norm);
    }
    b.x_axis = "layer";
    b.y_axis = "H / log2(experts)";
    h += figure(b.id, svg_bars(b),
                "Entropy of each layer's usage distribution (share of routed slots per expert) over its maximum log2(experts): "
                "1 = every expert used equally, lower = routing concentrated on fewer experts. 2^H is the number of equally "
                "used experts with the same entropy.");
    h += "<table><tr><th>layer</th><th>entropy (bits)</th><th>normalized</th><th>effective experts 2^H</th></tr>\n";
    for (const AtlasLayer& L : a.layers)
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1f} of {}</td></tr>\n", L.layer, num(L.all.entropy_bits),
                       num(L.all.entropy_norm), std::exp2(L.all.entropy_bits), E);
    h += "</table>\n";
  }
  // 3. Co-activation.
  for (const AtlasLayer& L : a.layers) {
    if (L.layer != info.coact_layer) continue;
    Heatmap m;
    m.id = "fig-coact";
    m.title = fmt::format("Co-activation in layer {}: log2(observed / independent)", L.layer);
    m.rows = expert_names;
    m.cols = expert_names;
    m.row_axis = "expert";
    m.col_axis = "expert";
    m.legend = "log2 lift";
    m.diverging = true;
    m.lo = -2;
    m.hi = 2;
    const double T = static_cast<double>(L.all.tokens);
    for (size_t x = 0; x < E; ++x)
      for (size_t y = 0; y < E; ++y) {
        const double expected = static_cast<double>(L.all.counts[x]) * static_cast<double>(L.all.counts[y]) / T;
        if (x == y || expected <= 0) {
          m.v.push_back(kNone);
        } else {
          const double together = static_cast<double>(L.together[x * E + y]);
          // No co-occurrence at all: the lowest colour (log2 of 0).
          m.v.push_back(together > 0 ? std::clamp(std::log2(together / expected), -2.0, 2.0) : -2.0);
        }
      }
    m.fmt_value = [](double x) { return fmt::format("{:+.2f}", x); };
    h += "<h2>Co-activation</h2>\n";
    h += figure(m.id, svg_heatmap(m),
                fmt::format("For each pair of experts of layer {}: the tokens that chose both over the number expected if the two "
                            "were chosen independently (usage_a x usage_b / tokens), on a log2 scale clamped to &#177;2. Red: fire "
                            "together more often than chance; blue: avoid each other; grey: the diagonal or an unused expert. "
                            "Another layer: <code>--coact-layer</code>.",
                            L.layer));
    auto pair_table = [&](const char* what, const std::vector<ExpertPair>& ps) {
      std::string t = fmt::format("<table><tr><th>{}</th><th>tokens together</th><th>expected</th><th>lift</th></tr>\n", what);
      for (size_t i = 0; i < std::min<size_t>(ps.size(), 6); ++i) {
        const ExpertPair& p = ps[i];
        const double expected = static_cast<double>(L.all.counts[static_cast<size_t>(p.a)]) *
                                static_cast<double>(L.all.counts[static_cast<size_t>(p.b)]) / T;
        t += fmt::format("<tr><td>{} + {}</td><td>{}</td><td>{:.1f}</td><td>{}</td></tr>\n", p.a, p.b, p.together, expected,
                         num(p.lift, 2));
      }
      return t + "</table>\n";
    };
    h += "<div style=\"display:flex;gap:24px;flex-wrap:wrap\">";
    h += pair_table("most together", L.most_together);
    h += pair_table("least together", L.least_together);
    h += "</div>\n";
  }
  // 4. Recall at k.
  h += "<h2>Predicting the next layer's experts</h2>\n";
  if (n_rec > 0) {
    Bars b;
    b.id = "fig-recall";
    b.title = "Read-ahead recall@k: layer L's input predicting layer L+1's experts";
    std::vector<const AtlasLayer*> ls;
    for (const AtlasLayer& L : a.layers)
      if (!L.recall_at.empty()) ls.push_back(&L);
    for (const AtlasLayer* L : ls) b.groups.push_back(layer_label(L->layer));
    for (size_t k = 0; k < K; ++k) b.series.push_back(fmt::format("read-ahead, k = {}", k + 1));
    b.series.push_back(fmt::format("most-used {} (baseline)", K));
    b.v.assign(b.series.size(), {});
    for (const AtlasLayer* L : ls) {
      for (size_t k = 0; k < K; ++k) b.v[k].push_back(L->recall_at[k]);
      b.v[K].push_back(L->popular_recall_at[K - 1]);
    }
    b.x_axis = "predicted layer (L+1)";
    b.y_axis = fmt::format("share of the {} chosen experts", K);
    h += figure(b.id, svg_bars(b),
                fmt::format("The read-ahead applies layer L+1's router to layer L's input (before layer L's attention and MoE "
                            "change it) and reads those experts early. Recall@k: the share of layer L+1's {} chosen experts "
                            "found among the first k predicted (router order). The last bar, a baseline, predicts the layer's "
                            "{} most used experts for every token; random guessing recalls k/{} on average.",
                            K, K, E));
    h += "<table><tr><th>layer</th>";
    for (size_t k = 0; k < K; ++k) h += fmt::format("<th>recall@{}</th>", k + 1);
    h += fmt::format("<th>precision@1</th><th>precision@{}</th><th>most-used-{} recall</th></tr>\n", K, K);
    for (const AtlasLayer* L : ls) {
      h += fmt::format("<tr><td>{}</td>", L->layer);
      for (size_t k = 0; k < K; ++k) h += fmt::format("<td>{}</td>", num(L->recall_at[k]));
      h += fmt::format("<td>{}</td><td>{}</td><td>{}</td></tr>\n", num(L->precision_at[0]), num(L->precision_at[K - 1]),
                       num(L->popular_recall_at[K - 1]));
    }
    h += "</table>\n";
  } else {
    h += "<p>The routing holds no read-ahead prediction (a model with one MoE layer, or MoE layers that are not "
         "consecutive).</p>\n";
  }
  // 5. Shift across kinds.
  h += "<h2>Usage shift across prompt kinds</h2>\n";
  if (a.kinds.size() >= 2 && NL > 0) {
    const size_t P = a.layers[0].shifts.size();
    Bars b;
    b.id = "fig-shift";
    b.title = "Usage shift between prompt kinds (total variation)";
    b.groups = layer_names;
    double top = 0;
    for (size_t i = 0; i < P; ++i) {
      const UsageShift& s0 = a.layers[0].shifts[i];
      b.series.push_back(a.kinds[s0.a] + " vs " + a.kinds[s0.b]);
      b.v.emplace_back();
      for (const AtlasLayer& L : a.layers) {
        b.v[i].push_back(L.shifts[i].tv);
        top = std::max(top, L.shifts[i].tv);
      }
    }
    b.ymax = std::max(0.1, std::ceil(top * 10.0) / 10.0);
    b.x_axis = "layer";
    b.y_axis = "total variation";
    h += figure(b.id, svg_bars(b),
                "Total variation between two kinds' usage distributions per layer: the share of routed slots that would have "
                "to move to other experts to turn one into the other (0 = same usage, 1 = disjoint experts).");
    Heatmap m;
    m.id = "fig-shift-map";
    m.title = fmt::format("Usage difference: {} minus {}", a.kinds[1], a.kinds[0]);
    m.rows = layer_names;
    m.cols = expert_names;
    m.row_axis = "layer";
    m.col_axis = "expert";
    m.legend = "share difference";
    m.diverging = true;
    double big = 0;
    for (const AtlasLayer& L : a.layers)
      for (size_t e = 0; e < E; ++e) {
        const double d = L.by_kind[1].share[e] - L.by_kind[0].share[e];
        m.v.push_back(d);
        big = std::max(big, std::fabs(d));
      }
    if (big <= 0) big = 0.01;
    m.lo = -big;
    m.hi = big;
    m.fmt_value = [](double x) { return fmt::format("{:+.1f} pt", 100 * x); };
    h += figure(m.id, svg_heatmap(m),
                fmt::format("Per layer and expert, the share of routed slots under <b>{}</b> minus under <b>{}</b> (percentage "
                            "points): red experts serve {} more, blue ones {}.",
                            esc(a.kinds[1]), esc(a.kinds[0]), esc(a.kinds[1]), esc(a.kinds[0])));
    h += "<table><tr><th>layer</th><th>kinds</th><th>TV</th><th>JS (bits)</th><th>experts that shift most (share per kind)</th></tr>\n";
    for (const AtlasLayer& L : a.layers)
      for (const UsageShift& s : L.shifts) {
        std::string tops;
        for (size_t i = 0; i < std::min<size_t>(3, s.top_experts.size()); ++i) {
          const size_t e = static_cast<size_t>(s.top_experts[i]);
          tops += fmt::format("{}{}: {:.1f}% &#8594; {:.1f}%", i ? "; " : "", e, 100 * L.by_kind[s.a].share[e],
                              100 * L.by_kind[s.b].share[e]);
        }
        h += fmt::format("<tr><td>{}</td><td class=\"x\">{} &#8594; {}</td><td>{}</td><td>{}</td><td class=\"x\">{}</td></tr>\n", L.layer,
                         esc(a.kinds[s.a]), esc(a.kinds[s.b]), num(s.tv), num(s.js_bits), tops);
      }
    h += "</table>\n";
  } else {
    h += "<p>One prompt kind: give several <code>--ids-file NAME=PATH</code> (or <code>--trace</code>) to compare.</p>\n";
  }
  h += "</body>\n</html>\n";
  return h;
}

}  // namespace strata::cli
