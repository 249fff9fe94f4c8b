#include "cli/usage.h"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>

namespace strata::cli {

namespace {

// Optimal string alignment distance (Damerau-Levenshtein without repeated
// edits of one substring): a typo's transposed pair costs 1.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// The name without leading dashes: "--temprature" and "--temperature" are
// compared as words.
std::string_view bare(std::string_view s) {
  while (!s.empty() && s.front() == '-') s.remove_prefix(1);
  return s;
}

}  // namespace

std::vector<std::string> suggestions(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string_view w = bare(word);
  if (w.empty()) return {};
  const size_t limit = w.size() >= 5 ? 2 : 1;
  std::vector<std::pair<size_t, std::string>> close;
  for (const std::string& c : candidates) {
    const std::string_view cb = bare(c);
    size_t d = edit_distance(w, cb);
    if (d > limit && w.size() >= 3 && cb.size() > w.size() && cb.substr(0, w.size()) == w) d = limit;  // a prefix
    if (d <= limit && d > 0) close.emplace_back(d, c);
  }
  std::stable_sort(close.begin(), close.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [d, c] : close)
    if (d == close.front().first && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  return out;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::vector<std::string> s = suggestions(word, candidates);
  if (s.empty()) return "";
  if (s.size() == 1) return fmt::format("; did you mean '{}'?", s[0]);
  std::string out = "; did you mean ";
  for (size_t i = 0; i < s.size() && i < 3; ++i) {
    if (i) out += i + 1 == std::min<size_t>(s.size(), 3) ? " or " : ", ";
    out += "'" + s[i] + "'";
  }
  return out + "?";
}

std::vector<std::string> flag_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::string unknown_flag_error(const CLI::App& cmd, const std::vector<std::string>& args) {
  std::vector<std::string> known = flag_names(cmd);
  if (const CLI::App* parent = cmd.get_parent()) {
    const std::vector<std::string> p = flag_names(*parent);
    known.insert(known.end(), p.begin(), p.end());
  }
  for (const std::string& a : args) {
    if (a == "--") break;
    const bool long_flag = a.size() > 2 && a[0] == '-' && a[1] == '-';
    const bool short_flag = a.size() >= 2 && a[0] == '-' && std::isalpha(static_cast<unsigned char>(a[1]));
    if (!long_flag && !short_flag) continue;
    // -n5 / -qn: CLI11 also reads a short flag followed by its value or more flags.
    const std::string name = long_flag ? a.substr(0, a.find('=')) : a.substr(0, 2);
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    return fmt::format("unknown flag '{}'{}", name, did_you_mean(name, known));
  }
  return "";
}

}  // namespace strata::cli
