#include "text/json_pattern.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

#include "core/error.h"

namespace strata {

namespace {

constexpr uint32_t kInf = UINT32_MAX;
constexpr int kMaxGroupDepth = 64;
constexpr uint32_t kMaxCount = 1000000;  // {n,m} numbers are clamped here (the state limit refuses long before)
constexpr int64_t kMaxWork = 40000000;   // subset construction steps

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive, sorted, disjoint, no surrogates

[[noreturn]] void refuse(const std::string& what) { fail("'pattern': {}", what); }

// Sorted, merged, without surrogates (which no JSON string holds).
Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges m;
  for (auto [lo, hi] : r) {
    if (!m.empty() && lo <= m.back().second + 1) m.back().second = std::max(m.back().second, hi);
    else m.emplace_back(lo, hi);
  }
  Ranges out;
  for (auto [lo, hi] : m) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) out.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) out.emplace_back(0xE000, hi);
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t from = 0;
  for (auto [lo, hi] : r) {
    if (lo > from) out.emplace_back(from, lo - 1);
    from = hi + 1;
  }
  if (from <= kPatternMaxCodePoint) out.emplace_back(from, kPatternMaxCodePoint);
  return normalize(std::move(out));
}

const Ranges& digits() {
  static const Ranges r = {{'0', '9'}};
  return r;
}
const Ranges& word() {
  static const Ranges r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
// ECMA-262 WhiteSpace and LineTerminator.
const Ranges& space() {
  static const Ranges r = normalize({{0x09, 0x0D},
                                     {0x20, 0x20},
                                     {0xA0, 0xA0},
                                     {0x1680, 0x1680},
                                     {0x2000, 0x200A},
                                     {0x2028, 0x2029},
                                     {0x202F, 0x202F},
                                     {0x205F, 0x205F},
                                     {0x3000, 0x3000},
                                     {0xFEFF, 0xFEFF}});
  return r;
}

struct Re {
  enum Kind : uint8_t { kSet, kCat, kAlt, kRep } kind = kCat;
  int32_t set = -1;
  std::vector<int32_t> kids;
  uint32_t min = 0, max = 0;  // kRep; max kInf: unbounded
};

bool is_hex(char32_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
uint32_t hex_val(char32_t c) {
  return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

// ECMA-262 pattern -> syntax tree over code-point sets.
class Parser {
 public:
  explicit Parser(std::u32string p) : p_(std::move(p)) {}
  std::vector<Re> re;
  std::vector<Ranges> sets;

  int32_t parse() {
    const int32_t r = disjunction(true);
    if (more()) err("unmatched ')'");
    return r;
  }

 private:
  std::u32string p_;
  size_t i_ = 0;
  int depth_ = 0;

  [[noreturn]] void err(const std::string& what) const { refuse(fmt::format("{} (at character {})", what, i_)); }
  bool more() const { return i_ < p_.size(); }
  char32_t peek() const { return p_[i_]; }
  int32_t add(Re r) {
    re.push_back(std::move(r));
    return static_cast<int32_t>(re.size() - 1);
  }
  int32_t add_set(Ranges r) {
    sets.push_back(normalize(std::move(r)));
    Re n;
    n.kind = Re::kSet;
    n.set = static_cast<int32_t>(sets.size() - 1);
    return add(std::move(n));
  }
  int32_t any_star() {
    Re n;
    n.kind = Re::kRep;
    n.min = 0;
    n.max = kInf;
    n.kids = {add_set({{0, kPatternMaxCodePoint}})};
    return add(std::move(n));
  }

  int32_t disjunction(bool top) {
    std::vector<int32_t> alts{alternative(top)};
    while (more() && peek() == '|') {
      ++i_;
      alts.push_back(alternative(top));
    }
    if (alts.size() == 1) return alts[0];
    Re n;
    n.kind = Re::kAlt;
    n.kids = std::move(alts);
    return add(std::move(n));
  }

  int32_t alternative(bool top) {
    std::vector<int32_t> items;
    bool a_start = false, a_end = false;
    if (top && more() && peek() == '^') {
      ++i_;
      a_start = true;
    }
    while (more() && peek() != '|' && peek() != ')') {
      const char32_t c = peek();
      if (c == '$') {
        ++i_;
        if (top && (!more() || peek() == '|')) {
          a_end = true;
          break;
        }
        --i_;
        err("'$' is supported only at the end of the pattern or of a top-level alternative");
      }
      if (c == '^') err("'^' is supported only at the start of the pattern or of a top-level alternative");
      int32_t a = atom();
      uint32_t lo = 0, hi = 0;
      if (quantifier(lo, hi)) {
        Re r;
        r.kind = Re::kRep;
        r.min = lo;
        r.max = hi;
        r.kids = {a};
        a = add(std::move(r));
        if (more() && (peek() == '*' || peek() == '+' || peek() == '?' || quantifier_at(i_)))
          err("a quantifier after a quantifier (nothing to repeat)");
      }
      items.push_back(a);
    }
    if (top) {
      // JSON Schema patterns search: unanchored ends take anything.
      if (!a_start) items.insert(items.begin(), any_star());
      if (!a_end) items.push_back(any_star());
    }
    if (items.size() == 1) return items[0];
    Re n;
    n.kind = Re::kCat;
    n.kids = std::move(items);
    return add(std::move(n));
  }

  // {n}, {n,} or {n,m} at position j.
  bool quantifier_at(size_t j) const {
    if (j >= p_.size() || p_[j] != '{') return false;
    ++j;
    if (j >= p_.size() || !is_digit(p_[j])) return false;
    while (j < p_.size() && is_digit(p_[j])) ++j;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      while (j < p_.size() && is_digit(p_[j])) ++j;
    }
    return j < p_.size() && p_[j] == '}';
  }

  uint32_t number() {
    uint64_t v = 0;
    while (more() && is_digit(peek())) {
      v = std::min<uint64_t>(v * 10 + (peek() - '0'), kMaxCount);
      ++i_;
    }
    return static_cast<uint32_t>(v);
  }

  bool quantifier(uint32_t& lo, uint32_t& hi) {
    if (!more()) return false;
    const char32_t c = peek();
    if (c == '*') lo = 0, hi = kInf, ++i_;
    else if (c == '+') lo = 1, hi = kInf, ++i_;
    else if (c == '?') lo = 0, hi = 1, ++i_;
    else if (quantifier_at(i_)) {
      ++i_;
      lo = hi = number();
      if (peek() == ',') {
        ++i_;
        hi = more() && is_digit(peek()) ? number() : kInf;
      }
      ++i_;  // '}'
      if (lo > hi) err("numbers out of order in a {n,m} quantifier");
    } else {
      return false;
    }
    if (more() && peek() == '?') ++i_;  // lazy: the same language
    return true;
  }

  int32_t atom() {
    const char32_t c = peek();
    switch (c) {
      case '.':
        ++i_;
        return add_set(complement(normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})));
      case '(': return group();
      case '[': return add_set(char_class());
      case '\\': {
        ++i_;
        Ranges r;
        escape(false, r);
        return add_set(std::move(r));
      }
      case '*':
      case '+':
      case '?': err(fmt::format("nothing to repeat before '{}'", static_cast<char>(c)));
      case '{':
        if (quantifier_at(i_)) err("nothing to repeat before '{'");
        [[fallthrough]];
      default: ++i_; return add_set({{c, c}});
    }
  }

  int32_t group() {
    ++i_;  // '('
    if (more() && peek() == '?') {
      const char32_t k = i_ + 1 < p_.size() ? p_[i_ + 1] : 0;
      if (k == ':') {
        i_ += 2;
      } else if (k == '=' || k == '!') {
        err("lookahead '(?=' / '(?!' is not supported");
      } else if (k == '<' && i_ + 2 < p_.size() && (p_[i_ + 2] == '=' || p_[i_ + 2] == '!')) {
        err("lookbehind '(?<=' / '(?<!' is not supported");
      } else if (k == '<') {
        i_ += 2;
        const size_t name = i_;
        while (more() && peek() != '>' && peek() != ')') ++i_;
        if (!more() || peek() != '>' || i_ == name) err("a named group needs '(?<name>'");
        ++i_;
      } else {
        err("the group syntax '(?' is supported only as '(?:' and '(?<name>'");
      }
    }
    if (++depth_ > kMaxGroupDepth) err(fmt::format("groups nest deeper than {}", kMaxGroupDepth));
    const int32_t r = disjunction(false);
    --depth_;
    if (!more() || peek() != ')') err("missing ')'");
    ++i_;
    return r;
  }

  // After '\': adds the set (or single character) to `out`; returns the
  // character, or -1 for a class escape (\d \w \s and their negations).
  int64_t escape(bool in_class, Ranges& out) {
    if (!more()) err("'\\' at the end of the pattern");
    const char32_t c = p_[i_++];
    auto one = [&](uint32_t cp) -> int64_t {
      out.emplace_back(cp, cp);
      return cp;
    };
    auto cls = [&](const Ranges& r) -> int64_t {
      out.insert(out.end(), r.begin(), r.end());
      return -1;
    };
    switch (c) {
      case 'd': return cls(digits());
      case 'D': return cls(complement(digits()));
      case 'w': return cls(word());
      case 'W': return cls(complement(word()));
      case 's': return cls(space());
      case 'S': return cls(complement(space()));
      case 'b':
        if (in_class) return one(0x08);
        err("the word boundary '\\b' is not supported");
      case 'B': err("the word boundary '\\B' is not supported");
      case 'k': err("the named backreference '\\k' is not supported");
      case 'p':
      case 'P': err(fmt::format("the Unicode property escape '\\{}' is not supported", static_cast<char>(c)));
      case 't': return one(0x09);
      case 'n': return one(0x0A);
      case 'v': return one(0x0B);
      case 'f': return one(0x0C);
      case 'r': return one(0x0D);
      case '0':
        if (more() && is_digit(peek())) err("octal escapes ('\\0' followed by a digit) are not supported");
        return one(0);
      case 'c':
        if (more() && ((peek() >= 'a' && peek() <= 'z') || (peek() >= 'A' && peek() <= 'Z')))
          return one(static_cast<uint32_t>(p_[i_++] % 32));
        err("'\\c' must be followed by a letter");
      case 'x': {
        if (i_ + 2 > p_.size() || !is_hex(p_[i_]) || !is_hex(p_[i_ + 1])) err("'\\x' needs two hex digits");
        const uint32_t v = hex_val(p_[i_]) * 16 + hex_val(p_[i_ + 1]);
        i_ += 2;
        return one(v);
      }
      case 'u': {
        if (more() && peek() == '{') err("'\\u{...}' (the u flag) is not supported; use '\\uXXXX'");
        auto hex4 = [&](size_t j, uint32_t& v) {
          if (j + 4 > p_.size()) return false;
          v = 0;
          for (size_t k = 0; k < 4; ++k) {
            if (!is_hex(p_[j + k])) return false;
            v = v * 16 + hex_val(p_[j + k]);
          }
          return true;
        };
        uint32_t v = 0;
        if (!hex4(i_, v)) err("'\\u' needs four hex digits");
        i_ += 4;
        if (v >= 0xD800 && v <= 0xDBFF) {
          uint32_t lo = 0;
          if (i_ + 6 <= p_.size() && p_[i_] == '\\' && p_[i_ + 1] == 'u' && hex4(i_ + 2, lo) && lo >= 0xDC00 &&
              lo <= 0xDFFF) {
            i_ += 6;
            return one(0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00));
          }
        }
        if (v >= 0xD800 && v <= 0xDFFF) err("a lone surrogate '\\u' escape matches no JSON string character");
        return one(v);
      }
      default:
        if (is_digit(c)) err(fmt::format("the backreference '\\{}' is not supported", static_cast<char>(c)));
        if (c < 0x80 && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
          err(fmt::format("the escape '\\{}' is not supported", static_cast<char>(c)));
        return one(c);  // an escaped punctuation (or other) character is itself
    }
  }

  Ranges char_class() {
    ++i_;  // '['
    bool neg = false;
    if (more() && peek() == '^') {
      neg = true;
      ++i_;
    }
    Ranges r;
    auto class_atom = [&](Ranges& out) -> int64_t {
      if (peek() == '\\') {
        ++i_;
        return escape(true, out);
      }
      const char32_t c = p_[i_++];
      out.emplace_back(c, c);
      return c;
    };
    for (;;) {
      if (!more()) err("missing ']'");
      if (peek() == ']') {
        ++i_;
        break;
      }
      Ranges a_set;
      const int64_t a = class_atom(a_set);
      if (more() && peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;  // '-'
        Ranges b_set;
        if (!more()) err("missing ']'");
        const int64_t b = class_atom(b_set);
        if (a < 0 || b < 0) {  // a class escape at either end: '-' is itself (ECMA-262 Annex B)
          r.insert(r.end(), a_set.begin(), a_set.end());
          r.emplace_back('-', '-');
          r.insert(r.end(), b_set.begin(), b_set.end());
          continue;
        }
        if (a > b) err("a range out of order in a character class");
        r.emplace_back(static_cast<uint32_t>(a), static_cast<uint32_t>(b));
        continue;
      }
      r.insert(r.end(), a_set.begin(), a_set.end());
    }
    r = normalize(std::move(r));
    return neg ? complement(r) : r;
  }
};

// Thompson NFA: each state has at most one character edge and any epsilons.
struct Nfa {
  struct State {
    int32_t set = -1, to = -1;
    std::vector<int32_t> eps;
  };
  std::vector<State> st;
  const std::vector<Re>& re;
  explicit Nfa(const std::vector<Re>& r) : re(r) {}

  int32_t make() {
    if (st.size() >= static_cast<size_t>(kPatternMaxNfa))
      refuse(fmt::format("too large: more than {} automaton states (a long counted repetition?)", kPatternMaxNfa));
    st.emplace_back();
    return static_cast<int32_t>(st.size() - 1);
  }
  std::pair<int32_t, int32_t> emit(int32_t node) {
    const Re& r = re[static_cast<size_t>(node)];
    switch (r.kind) {
      case Re::kSet: {
        const int32_t a = make(), b = make();
        st[static_cast<size_t>(a)].set = r.set;
        st[static_cast<size_t>(a)].to = b;
        return {a, b};
      }
      case Re::kCat: {
        if (r.kids.empty()) {
          const int32_t a = make();
          return {a, a};
        }
        auto f = emit(r.kids[0]);
        for (size_t k = 1; k < r.kids.size(); ++k) {
          const auto g = emit(r.kids[k]);
          st[static_cast<size_t>(f.second)].eps.push_back(g.first);
          f.second = g.second;
        }
        return f;
      }
      case Re::kAlt: {
        const int32_t a = make(), b = make();
        for (int32_t k : r.kids) {
          const auto g = emit(k);
          st[static_cast<size_t>(a)].eps.push_back(g.first);
          st[static_cast<size_t>(g.second)].eps.push_back(b);
        }
        return {a, b};
      }
      case Re::kRep: {
        const int32_t a = make();
        int32_t cur = a;
        for (uint32_t i = 0; i < r.min; ++i) {
          const auto g = emit(r.kids[0]);
          st[static_cast<size_t>(cur)].eps.push_back(g.first);
          cur = g.second;
        }
        if (r.max == kInf) {
          const int32_t s = make();
          st[static_cast<size_t>(cur)].eps.push_back(s);
          const auto g = emit(r.kids[0]);
          st[static_cast<size_t>(s)].eps.push_back(g.first);
          st[static_cast<size_t>(g.second)].eps.push_back(s);
          return {a, s};
        }
        // Optional copies, each able to skip straight to the end (small closures).
        const int32_t e = make();
        for (uint32_t j = r.min; j < r.max; ++j) {
          const auto g = emit(r.kids[0]);
          st[static_cast<size_t>(cur)].eps.push_back(e);
          st[static_cast<size_t>(cur)].eps.push_back(g.first);
          cur = g.second;
        }
        st[static_cast<size_t>(cur)].eps.push_back(e);
        return {a, e};
      }
    }
    return {-1, -1};
  }
};

std::u32string decode_pattern(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    uint32_t cp = 0, n = 0;
    if (c < 0x80) cp = c, n = 0;
    else if (c >= 0xC2 && c <= 0xDF) cp = c & 0x1F, n = 1;
    else if (c >= 0xE0 && c <= 0xEF) cp = c & 0x0F, n = 2;
    else if (c >= 0xF0 && c <= 0xF4) cp = c & 0x07, n = 3;
    else refuse("not valid UTF-8");
    if (n && i + n >= s.size()) refuse("not valid UTF-8");
    for (uint32_t k = 1; k <= n; ++k) {
      const uint8_t d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xC0) != 0x80) refuse("not valid UTF-8");
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > kPatternMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) refuse("not valid UTF-8");
    out.push_back(static_cast<char32_t>(cp));
    i += n + 1;
  }
  return out;
}

}  // namespace

int32_t JsonPattern::class_of(uint32_t cp) const {
  if (cp < 128) return ascii_[cp];
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), std::min(cp, kPatternMaxCodePoint));
  return static_cast<int32_t>(it - starts_.begin()) - 1;
}

bool JsonPattern::live(int32_t s, uint32_t lo, uint32_t hi, uint64_t room) const {
  hi = std::min(hi, kPatternMaxCodePoint);
  if (lo > hi) return false;
  const size_t row = static_cast<size_t>(s) * static_cast<size_t>(n_classes_);
  for (int32_t c = class_of(lo); c < n_classes_ && starts_[static_cast<size_t>(c)] <= hi; ++c) {
    const int32_t t = next_[row + static_cast<size_t>(c)];
    if (t >= 0 && dist_[static_cast<size_t>(t)] < room) return true;
  }
  return false;
}

bool JsonPattern::matches(std::string_view utf8) const {
  std::u32string cps;
  try {
    cps = decode_pattern(utf8);
  } catch (const Error&) {
    return false;
  }
  int32_t s = start();
  for (char32_t c : cps) {
    s = step(s, static_cast<uint32_t>(c));
    if (s < 0) return false;
  }
  return accepting(s) && cps.size() <= max_len_;
}

JsonPattern JsonPattern::compile(std::string_view pattern, uint32_t min_len, uint32_t max_len) {
  Parser parser(decode_pattern(pattern));
  const int32_t root = parser.parse();

  // Character classes: the code points every set treats alike.
  std::vector<uint32_t> b = {0, 0xD800, 0xE000, kPatternMaxCodePoint + 1};
  for (const Ranges& r : parser.sets)
    for (auto [lo, hi] : r) b.push_back(lo), b.push_back(hi + 1);
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  JsonPattern p;
  p.starts_ = b;
  p.n_classes_ = static_cast<int32_t>(b.size() - 1);
  const size_t nc = static_cast<size_t>(p.n_classes_);
  for (uint32_t cp = 0; cp < 128; ++cp) {
    const auto it = std::upper_bound(b.begin(), b.end(), cp);
    p.ascii_[cp] = static_cast<uint16_t>(it - b.begin() - 1);
  }
  auto cls = [&](uint32_t cp) {
    return static_cast<size_t>(std::upper_bound(b.begin(), b.end(), cp) - b.begin() - 1);
  };
  std::vector<std::vector<std::pair<size_t, size_t>>> set_classes(parser.sets.size());
  for (size_t i = 0; i < parser.sets.size(); ++i)
    for (auto [lo, hi] : parser.sets[i]) set_classes[i].emplace_back(cls(lo), cls(hi + 1) - 1);

  Nfa nfa(parser.re);
  // Plain variables, not a structured binding: clang 14 (the fuzz build)
  // refuses a lambda that names a binding.
  const auto nfa_ends = nfa.emit(root);
  const auto nfa_in = nfa_ends.first;
  const auto nfa_out = nfa_ends.second;

  // Subset construction.
  int64_t work = 0;
  auto spend = [&](int64_t n) {
    work += n;
    if (work > kMaxWork) refuse("too complex to compile (the subset construction ran past its budget)");
  };
  std::vector<uint32_t> seen(nfa.st.size(), 0);
  uint32_t stamp = 0;
  std::vector<int32_t> stack;
  auto closure = [&](std::vector<int32_t>& set) {
    ++stamp;
    stack.assign(set.begin(), set.end());
    set.clear();
    for (int32_t s : stack) seen[static_cast<size_t>(s)] = stamp;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      set.push_back(s);
      for (int32_t t : nfa.st[static_cast<size_t>(s)].eps)
        if (seen[static_cast<size_t>(t)] != stamp) {
          seen[static_cast<size_t>(t)] = stamp;
          stack.push_back(t);
        }
    }
    spend(static_cast<int64_t>(set.size()));
    std::sort(set.begin(), set.end());
  };
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<const std::vector<int32_t>*> dsets;
  std::vector<int32_t> next;
  std::vector<uint8_t> accept;
  auto intern = [&](std::vector<int32_t>&& set) {
    auto [it, fresh] = ids.try_emplace(std::move(set), static_cast<int32_t>(dsets.size()));
    if (fresh) {
      if (dsets.size() >= static_cast<size_t>(kPatternMaxStates) ||
          static_cast<int64_t>(dsets.size() + 1) * static_cast<int64_t>(nc) > kPatternMaxTable)
        refuse(fmt::format("too large: more than {} automaton states or {} transitions", kPatternMaxStates,
                           kPatternMaxTable));
      dsets.push_back(&it->first);
      accept.push_back(std::binary_search(it->first.begin(), it->first.end(), nfa_out));
    }
    return it->second;
  };
  {
    std::vector<int32_t> s0{nfa_in};
    closure(s0);
    intern(std::move(s0));
  }
  std::vector<std::vector<int32_t>> buckets(nc);
  for (size_t d = 0; d < dsets.size(); ++d) {
    for (auto& bk : buckets) bk.clear();
    for (int32_t s : *dsets[d]) {
      const Nfa::State& ns = nfa.st[static_cast<size_t>(s)];
      if (ns.set < 0) continue;
      for (auto [c0, c1] : set_classes[static_cast<size_t>(ns.set)]) {
        spend(static_cast<int64_t>(c1 - c0 + 1));
        for (size_t c = c0; c <= c1; ++c) buckets[c].push_back(ns.to);
      }
    }
    next.resize((d + 1) * nc, -1);
    for (size_t c = 0; c < nc; ++c) {
      if (buckets[c].empty()) continue;
      std::vector<int32_t> set = buckets[c];
      closure(set);
      next[d * nc + c] = intern(std::move(set));
    }
  }
  size_t n = dsets.size();

  // minLength: a counter up to it, folded into the states.
  if (min_len > 0) {
    std::unordered_map<uint64_t, int32_t> pid;
    std::vector<std::pair<int32_t, uint32_t>> pst;
    std::vector<int32_t> pnext;
    std::vector<uint8_t> pacc;
    auto get = [&](int32_t d, uint32_t k) {
      const uint64_t key = static_cast<uint64_t>(d) << 32 | k;
      auto [it, fresh] = pid.try_emplace(key, static_cast<int32_t>(pst.size()));
      if (fresh) {
        if (pst.size() >= static_cast<size_t>(kPatternMaxStates) ||
            static_cast<int64_t>(pst.size() + 1) * static_cast<int64_t>(nc) > kPatternMaxTable)
          refuse(fmt::format("too large with minLength {}: more than {} automaton states or {} transitions", min_len,
                             kPatternMaxStates, kPatternMaxTable));
        pst.emplace_back(d, k);
        pacc.push_back(accept[static_cast<size_t>(d)] && k == min_len);
      }
      return it->second;
    };
    get(0, 0);
    for (size_t i = 0; i < pst.size(); ++i) {
      const auto [d, k] = pst[i];
      pnext.resize((i + 1) * nc, -1);
      for (size_t c = 0; c < nc; ++c) {
        const int32_t t = next[static_cast<size_t>(d) * nc + c];
        if (t >= 0) pnext[i * nc + c] = get(t, std::min(k + 1, min_len));
      }
    }
    next = std::move(pnext);
    accept = std::move(pacc);
    n = pst.size();
  }

  // Keep the states that can reach a match; dist = fewest characters to one.
  std::vector<std::vector<int32_t>> preds(n);
  for (size_t s = 0; s < n; ++s)
    for (size_t c = 0; c < nc; ++c)
      if (const int32_t t = next[s * nc + c]; t >= 0) preds[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
  std::vector<uint32_t> dist(n, kInf);
  std::vector<int32_t> queue;
  for (size_t s = 0; s < n; ++s)
    if (accept[s]) dist[s] = 0, queue.push_back(static_cast<int32_t>(s));
  for (size_t qi = 0; qi < queue.size(); ++qi) {
    const int32_t s = queue[qi];
    for (int32_t q : preds[static_cast<size_t>(s)])
      if (dist[static_cast<size_t>(q)] == kInf) {
        dist[static_cast<size_t>(q)] = dist[static_cast<size_t>(s)] + 1;
        queue.push_back(q);
      }
  }
  if (dist[0] == kInf)
    refuse(min_len > 0 ? fmt::format("no string of at least minLength {} characters matches it", min_len)
                       : std::string("no string matches it"));
  if (max_len != kInf && dist[0] > max_len)
    refuse(fmt::format("the shortest matching string has {} characters, more than maxLength {}", dist[0], max_len));
  // Renumber the live states (the start stays 0).
  std::vector<int32_t> id(n, -1);
  int32_t kept = 0;
  for (size_t s = 0; s < n; ++s)
    if (dist[s] != kInf) id[s] = kept++;
  p.next_.assign(static_cast<size_t>(kept) * nc, -1);
  p.accept_.assign(static_cast<size_t>(kept), 0);
  p.dist_.assign(static_cast<size_t>(kept), 0);
  for (size_t s = 0; s < n; ++s) {
    if (id[s] < 0) continue;
    const size_t i = static_cast<size_t>(id[s]);
    p.accept_[i] = accept[s];
    p.dist_[i] = dist[s];
    for (size_t c = 0; c < nc; ++c) {
      const int32_t t = next[s * nc + c];
      p.next_[i * nc + c] = t >= 0 ? id[static_cast<size_t>(t)] : -1;
    }
  }
  p.max_len_ = max_len;
  return p;
}

}  // namespace strata
