// The JSON Schema `pattern` keyword (text/json_pattern.h): the regex subset
// compiled to a DFA agrees with PCRE2 (search semantics, as JSON Schema's
// unanchored patterns) on random strings, on strings the DFA generates and on
// their one-character mutations; ECMA-262 meanings where PCRE2 differs are
// checked by hand; unsupported constructs and oversize patterns are refused
// naming `pattern`; constrained generation with random token choices over
// many seeds (escapes, raw UTF-8, partial characters in the vocabulary)
// never dead-ends and always yields a string PCRE2 matches, within
// minLength/maxLength.
#include <gtest/gtest.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "constraint_fixtures.h"
#include "core/error.h"
#include "core/json.h"
#include "text/json_constraint.h"
#include "text/json_grammar.h"
#include "text/json_pattern.h"
#include "text/json_state.h"

namespace strata::json_pattern_test {
namespace {

// PCRE2 configured to read ECMA-262 patterns the way JSON Schema does:
// unanchored search, `$` only at the very end, [] empty and [^] anything,
// \uXXXX escapes, `.` stopping at \n and \r.
class Pcre {
 public:
  explicit Pcre(const std::string& p) {
    pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
    pcre2_set_newline(cc, PCRE2_NEWLINE_ANYCRLF);
    int err = 0;
    PCRE2_SIZE off = 0;
    re_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                        PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALLOW_EMPTY_CLASS | PCRE2_ALT_BSUX, &err, &off, cc);
    pcre2_compile_context_free(cc);
    if (re_) md_ = pcre2_match_data_create_from_pattern(re_, nullptr);
  }
  ~Pcre() {
    if (md_) pcre2_match_data_free(md_);
    if (re_) pcre2_code_free(re_);
  }
  Pcre(const Pcre&) = delete;
  Pcre& operator=(const Pcre&) = delete;
  bool ok() const { return re_ != nullptr; }
  bool search(const std::string& s) const {
    return pcre2_match(re_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md_, nullptr) >= 0;
  }

 private:
  pcre2_code* re_ = nullptr;
  pcre2_match_data* md_ = nullptr;
};

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

std::string utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) out += utf8(c);
  return out;
}

// Where ECMA-262 and PCRE2 agree: no U+2028/U+2029 (`.`) and no Unicode
// white space beyond ASCII (\s); those are checked by hand below.
std::u32string alphabet_for(const std::string& pattern) {
  std::u32string a = U"abcxyzABZ0159_-.@ ()[]{}|*+?^$\\/\"'\t\n\r\v\f\x01\x7f\u00e9\u00fc\u4e2d\U0001F600";
  for (char c : pattern)
    if (static_cast<unsigned char>(c) < 0x80 && c >= 0x20) a += static_cast<char32_t>(c);
  return a;
}

// Patterns PCRE2 reads as ECMA-262 does (with the options above).
const std::vector<std::string> kPatterns = {
    "^[A-Z]{3}-[0-9]{4}$",
    "^\\d+$",
    "^(foo|bar)+baz?$",
    "ab*c",
    "^a{2,4}$",
    "^(?:a|b)*abb$",
    "^[^aeiou\\s]{1,5}$",
    "^\\w+@\\w+\\.com$",
    "x",
    "^$",
    "",
    "^(a|)+$",
    "^[a-c-]+$",
    "^.{3}$",
    "^\\S\\s\\W\\D$",
    "^(ab|a)(bc|c)$",
    "^a+?b*?c??$",
    "^[\\u0041-\\u005A]{2}\\x2e$",
    "^\\t\\n?$",
    "^\u00e9+\u00fc?$",
    "^[^]$",
    "colou?r",
    "^(?<y>\\d{4})-(?<m>\\d\\d)$",
    "^\\(\\)\\[\\]\\{\\}\\.\\*\\+\\?\\^\\$\\|\\\\\\/$",
    "^a{2}b{1,}c{0,1}$",
    "a|^b|c$",
    "^[a-z0-9._%+-]+$",
    "^(\\d{3}|\\(\\d{3}\\))[ -]?\\d{4}$",
    "^[\U0001F600-\U0001F602\u4e2d]+$",
    "^a{0,30}b$",
    "^([01]?\\d|2[0-3]):[0-5]\\d$",
    "^[{}]$",
    "^a{,3}$",
    "z{2}}",
    "^[\\b\\cJ]$",
    "^\\0?[\\0-\\x1f]$",
    "^(((a)))*?$",
    "^(a*)*b$",
    "^(x|y|)(x|y|)x$",
    "^[.-\\/]+$",
};

// A random string matching `p` (a walk over its DFA within `alpha`), or
// nullopt when the walk found no way on.
std::optional<std::u32string> dfa_walk(const JsonPattern& p, const std::u32string& alpha, std::mt19937_64& rng) {
  std::u32string s;
  int32_t st = p.start();
  for (int step = 0; step < 40; ++step) {
    if (p.accepting(st) && rng() % 3 == 0) return s;
    std::vector<char32_t> ok;
    for (char32_t c : alpha)
      if (p.step(st, static_cast<uint32_t>(c)) >= 0) ok.push_back(c);
    if (ok.empty()) break;
    const char32_t c = ok[rng() % ok.size()];
    s += c;
    st = p.step(st, static_cast<uint32_t>(c));
  }
  if (p.accepting(st)) return s;
  return std::nullopt;
}

TEST(JsonPattern, AgreesWithPcre2) {
  std::mt19937_64 rng(42);
  int positives = 0, compared = 0;
  for (const std::string& pat : kPatterns) {
    SCOPED_TRACE(pat);
    Pcre re(pat);
    ASSERT_TRUE(re.ok());
    const JsonPattern p = JsonPattern::compile(pat);
    const std::u32string alpha = alphabet_for(pat);
    auto check = [&](const std::u32string& s) {
      const std::string u = utf8(s);
      const bool want = re.search(u);
      EXPECT_EQ(p.matches(u), want) << "'" << u << "'";
      positives += want;
      ++compared;
    };
    for (int i = 0; i < 400; ++i) {
      std::u32string s;
      for (size_t k = 0, n = rng() % 9; k < n; ++k) s += alpha[rng() % alpha.size()];
      check(s);
    }
    int walked = 0;
    for (int i = 0; i < 200; ++i) {
      const auto w = dfa_walk(p, alpha, rng);
      if (!w) continue;
      ++walked;
      EXPECT_TRUE(re.search(utf8(*w))) << "generated '" << utf8(*w) << "'";
      EXPECT_TRUE(p.matches(utf8(*w)));
      // One-character mutations.
      for (int m = 0; m < 4; ++m) {
        std::u32string t = *w;
        const size_t at = t.empty() ? 0 : rng() % (t.size() + 1);
        const char32_t c = alpha[rng() % alpha.size()];
        switch (rng() % 3) {
          case 0: t.insert(t.begin() + static_cast<ptrdiff_t>(at), c); break;
          case 1:
            if (at < t.size()) t.erase(at, 1);
            break;
          default:
            if (at < t.size()) t[at] = c;
        }
        check(t);
      }
    }
    if (pat.rfind("^", 0) == 0) {  // unanchored ones rarely spell their literal at random
      EXPECT_GT(walked, 0);
    }
  }
  EXPECT_GT(positives, compared / 10);
}

// ECMA-262 meanings where PCRE2 (as configured) reads the pattern otherwise.
TEST(JsonPattern, EcmaSemantics) {
  auto m = [](const std::string& pat, const std::string& s) { return JsonPattern::compile(pat).matches(s); };
  // `.`: anything but the four line terminators.
  for (const char* s : {"a", "\u00e9", "\U0001F600", "\t", "\x01"}) EXPECT_TRUE(m("^.$", s)) << s;
  for (const char* s : {"\n", "\r", "\u2028", "\u2029"}) EXPECT_FALSE(m("^.$", s)) << s;
  // \s: Unicode white space and line terminators.
  for (const char* s : {" ", "\t", "\n", "\v", "\f", "\r", "\u00a0", "\u1680", "\u2000", "\u200a", "\u2028",
                        "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff"})
    EXPECT_TRUE(m("^\\s$", s)) << s;
  for (const char* s : {"a", "\u200b", "\u0085", "_"}) EXPECT_FALSE(m("^\\s$", s)) << s;
  EXPECT_TRUE(m("^\\S$", "\u200b"));
  EXPECT_FALSE(m("^\\S$", "\u3000"));
  // \d and \w are ASCII.
  EXPECT_FALSE(m("^\\d$", "\u0663"));
  EXPECT_FALSE(m("^\\w$", "\u00e9"));
  // A class escape at a range's end: '-' is itself (Annex B).
  EXPECT_TRUE(m("^[\\d-z]+$", "1-z9"));
  EXPECT_FALSE(m("^[\\d-z]+$", "a"));
  // A surrogate pair escape is one character.
  EXPECT_TRUE(m("^\\uD83D\\uDE00$", "\U0001F600"));
  EXPECT_TRUE(m("^[\\uD83D\\uDE00-\\uD83D\\uDE02]$", "\U0001F601"));
  // Lazy quantifiers: the same language.
  for (const char* s : {"", "a", "aaa", "b"}) {
    EXPECT_EQ(m("^a+?$", s), m("^a+$", s)) << s;
    EXPECT_EQ(m("^a{1,2}?$", s), m("^a{1,2}$", s)) << s;
  }
  // Unanchored: a search.
  EXPECT_TRUE(m("b", "abc"));
  EXPECT_FALSE(m("^b", "ab"));
  EXPECT_TRUE(m("b$", "ab"));
  EXPECT_FALSE(m("b$", "ba"));
  EXPECT_TRUE(m("^a$|^b$", "b"));
  EXPECT_FALSE(m("^a$|^b$", "ab"));
  // [] matches nothing, so [] ? matches the empty string (PCRE2 10.42 reads
  // "[]?" as failing).
  EXPECT_TRUE(m("^[]?a$", "a"));
  EXPECT_FALSE(m("^[]?a$", ""));
  // Invalid UTF-8 never matches.
  EXPECT_FALSE(m("", "\xff"));
}

std::string refusal(const std::string& pat, uint32_t min_len = 0, uint32_t max_len = UINT32_MAX) {
  try {
    JsonPattern::compile(pat, min_len, max_len);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonPattern, RefusesUnsupportedConstructs) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"(a)\\1", "backreference '\\1'"},
      {"(?<n>a)\\k<n>", "named backreference"},
      {"(?=a)", "lookahead"},
      {"a(?!b)", "lookahead"},
      {"(?<=a)b", "lookbehind"},
      {"(?<!a)b", "lookbehind"},
      {"\\bword", "word boundary '\\b'"},
      {"\\Bx", "word boundary '\\B'"},
      {"\\p{L}", "Unicode property escape '\\p'"},
      {"\\P{L}", "Unicode property escape '\\P'"},
      {"\\u{41}", "u flag"},
      {"\\uD800", "lone surrogate"},
      {"\\a", "escape '\\a'"},
      {"\\Z", "escape '\\Z'"},
      {"\\012", "octal"},
      {"*a", "nothing to repeat"},
      {"a|+", "nothing to repeat"},
      {"{2}", "nothing to repeat"},
      {"a**", "quantifier after a quantifier"},
      {"a{2}{3}", "quantifier after a quantifier"},
      {"a*+", "quantifier after a quantifier"},
      {"a^b", "'^'"},
      {"(^a)", "'^'"},
      {"(a$)", "'$'"},
      {"a$b", "'$'"},
      {"(?i)abc", "group syntax"},
      {"(?<>a)", "named group"},
      {"[b-a]", "out of order"},
      {"a{3,2}", "out of order"},
      {"(a", "missing ')'"},
      {"a)", "unmatched ')'"},
      {"[a", "missing ']'"},
      {"a\\", "at the end"},
      {"\\x4", "two hex digits"},
      {"\\u12", "four hex digits"},
      {"\\c1", "followed by a letter"},
      {"(?:a{100}){300}", "too large"},
      {"^(a|b)*a(a|b){14}$", "too large"},
      {"^[]$", "no string matches"},
      {std::string(70, '(') + std::string(70, ')'), "nest deeper"},
  };
  for (const auto& [pat, what] : cases) {
    const std::string e = refusal(pat);
    EXPECT_NE(e.find("'pattern'"), std::string::npos) << pat << " -> " << e;
    EXPECT_NE(e.find(what), std::string::npos) << pat << " -> " << e;
  }
  // With the length bounds.
  EXPECT_NE(refusal("^a{5}$", 0, 3).find("more than maxLength 3"), std::string::npos);
  EXPECT_NE(refusal("^a{1,3}$", 5).find("at least minLength 5"), std::string::npos);
  EXPECT_NE(refusal("^(aa)*$", 5, 5).find("more than maxLength 5"), std::string::npos);
  EXPECT_NE(refusal("^[a-z]*$", 100000).find("too large with minLength"), std::string::npos);
  EXPECT_EQ(refusal("^(aa)*$", 5, 6), "");
  // Through a schema: a 400-style error naming the keyword and where it is.
  try {
    JsonGrammar::from_schema(nlohmann::ordered_json::parse(
        R"J({"type":"object","properties":{"code":{"type":"string","pattern":"(?=x)"}}})J"));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("'pattern'"), std::string::npos) << w;
    EXPECT_NE(w.find("lookahead"), std::string::npos) << w;
    EXPECT_NE(w.find("(at /properties/code)"), std::string::npos) << w;
  }
  for (const char* bad : {R"({"type":"string","pattern":5})", R"({"type":"string","pattern":"a","format":"date"})",
                          R"({"type":"string","pattern":"^a{4}$","maxLength":2})"}) {
    try {
      JsonGrammar::from_schema(nlohmann::ordered_json::parse(bad));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'pattern'"), std::string::npos) << e.what();
    }
  }
}

// minLength folds into the DFA; maxLength is exact through the distances.
TEST(JsonPattern, LengthBounds) {
  const JsonPattern p = JsonPattern::compile("^(aa)*$", 3, 9);
  for (int n = 0; n <= 12; ++n) {
    const bool want = n % 2 == 0 && n >= 3 && n <= 9;
    EXPECT_EQ(p.matches(std::string(static_cast<size_t>(n), 'a')), want) << n;
  }
  const JsonPattern q = JsonPattern::compile("^[a-z]+\\d?$", 2, UINT32_MAX);
  EXPECT_FALSE(q.matches("a"));
  EXPECT_TRUE(q.matches("a1"));
  EXPECT_TRUE(q.matches("ab"));
}

// Byte-level recogniser: escapes and raw UTF-8 are decoded before matching;
// surrogates (escaped or raw) and overlong forms never pass; a byte that
// starts a character is refused when no character it can become matches.
TEST(JsonPattern, RecogniserDecodesCharacters) {
  auto g = JsonGrammar::from_schema(nlohmann::ordered_json::parse(R"({"type":"string","pattern":"^[\"\\\\/\\n\u00e9\u4e2d\ud83d\ude00A]{1,3}$"})"));
  auto accepts = [&](const std::string& s) {
    JsonState st(*g);
    return st.feed(s) && st.accepting();
  };
  auto prefix = [&](const std::string& s) {
    JsonState st(*g);
    return st.feed(s);
  };
  EXPECT_TRUE(accepts("\"A\""));
  EXPECT_TRUE(accepts("\"\\u0041\""));
  EXPECT_TRUE(accepts("\"\\\"\\\\\\/\""));
  EXPECT_TRUE(accepts("\"\\n\""));
  EXPECT_TRUE(accepts("\"\\u000a\""));
  EXPECT_TRUE(accepts("\"\u00e9\u4e2d\U0001F600\""));
  EXPECT_TRUE(accepts("\"\\u00E9\\u4E2D\""));
  EXPECT_FALSE(prefix("\"B"));
  EXPECT_FALSE(prefix("\"\\t"));
  EXPECT_FALSE(prefix("\"\\u0042"));
  EXPECT_FALSE(prefix("\"\\u01"));   // no character in U+0100..U+01FF matches
  EXPECT_FALSE(prefix("\"\\ud83d"));  // surrogate escapes never
  EXPECT_FALSE(prefix("\"\xc3\xa8"));   // è
  EXPECT_FALSE(prefix("\"\xc4"));       // no match starts with this lead byte
  EXPECT_FALSE(prefix("\"\xc1\x81"));   // overlong 'A'
  EXPECT_FALSE(prefix("\"\xed\xa0\x80"));  // a raw surrogate
  EXPECT_FALSE(prefix("\"\xf5"));
  EXPECT_TRUE(prefix("\"\xe4\xb8"));     // on the way to 中
  EXPECT_FALSE(prefix("\"\xe4\xb9"));
  EXPECT_FALSE(accepts("\"\""));          // {1,3}
  EXPECT_FALSE(prefix("\"AAAA"));
  EXPECT_FALSE(prefix("\"AAA\\"));
}

struct GenCase {
  std::string schema;
  std::string pattern;
  uint32_t min_len = 0, max_len = UINT32_MAX;
};

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Random token choices through JsonConstraint: every step has an allowed
// token, the answer finishes, and PCRE2 matches the decoded string.
TEST(JsonPattern, ConstrainedGenerationAlwaysMatches) {
  std::vector<std::string> bytes = test_util::json_fake_vocab(3000);
  for (const char* t : {"\\u00", "\\u0041", "\\u00e9", "\\n", "\\t", "\\\"", "\\\\", "\\/", "\\u2028", "\\ud83d",
                        "\\u001f", "AB", "ABC-", "-", "12", "0000", "foo", "bar", "ba", "@", ".com", ".org", "aa",
                        "\xc3\xa9", "\xc3", "\xe4\xb8", "\xf0\x9f", "\xf0\x9f\x98\x81", "x\"", "1\"", "a\""})
    bytes.push_back(t);
  auto v = JsonVocab::from_bytes(bytes);
  const std::vector<GenCase> cases = {
      {R"({"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"})", "^[A-Z]{3}-[0-9]{4}$"},
      {R"({"type":"string","pattern":"^\\d+(\\.\\d{1,2})?$","maxLength":8})", "^\\d+(\\.\\d{1,2})?$", 0, 8},
      {R"({"type":"string","pattern":"^(foo|bar|baz)+$","maxLength":12})", "^(foo|bar|baz)+$", 0, 12},
      {R"({"type":"string","pattern":"^[^\"\\\\]{2,6}$"})", "^[^\"\\\\]{2,6}$"},
      {R"({"type":"string","pattern":"^[\\n\\t\"\\\\/\u00e9\u4e2d\ud83d\ude00-\ud83d\ude02]{1,5}$"})",
       "^[\\n\\t\"\\\\/\u00e9\u4e2d\U0001F600-\U0001F602]{1,5}$"},
      {R"({"type":"string","pattern":"ab","maxLength":10})", "ab", 0, 10},
      {R"({"type":"string","pattern":"^(aa)*$","minLength":3,"maxLength":9})", "^(aa)*$", 3, 9},
      {R"({"type":"string","pattern":"^[a-z]+$","minLength":5,"maxLength":7})", "^[a-z]+$", 5, 7},
      {R"({"type":"string","pattern":"^\\w+@\\w+\\.(com|org)$","maxLength":20})", "^\\w+@\\w+\\.(com|org)$", 0, 20},
      {R"({"type":"string","pattern":"^.{0,3}x$"})", "^.{0,3}x$"},
      {R"({"type":"string","pattern":"^[\\u0000-\\u001f]{2}$"})", "^[\\x00-\\x1f]{2}$"},
      {R"({"type":"string","pattern":"z","minLength":4,"maxLength":6})", "z", 4, 6},
  };
  std::mt19937_64 rng(7);
  int runs = 0;
  for (const GenCase& gc : cases) {
    SCOPED_TRACE(gc.schema);
    auto g = JsonGrammar::from_schema(nlohmann::ordered_json::parse(gc.schema));
    Pcre re(gc.pattern);
    ASSERT_TRUE(re.ok());
    std::vector<uint8_t> allowed;
    for (int seed = 0; seed < 60; ++seed) {
      JsonConstraint c(g, v);
      std::string text;
      bool ended = false;
      for (int step = 0; step < 300 && !ended; ++step) {
        const size_t n = c.allowed(allowed, {});
        ASSERT_GT(n, 0u) << "dead end after " << text;
        std::vector<int32_t> ok, ending;
        for (int32_t i = 0; i < static_cast<int32_t>(allowed.size()); ++i) {
          if (!allowed[static_cast<size_t>(i)]) continue;
          ok.push_back(i);
          JsonState st(c.state());
          if (st.feed(v->bytes(i)) && st.done()) ending.push_back(i);
        }
        const bool finish = !ending.empty() && (rng() % 5 == 0 || step > 40);
        const int32_t t = finish ? ending[rng() % ending.size()] : ok[rng() % ok.size()];
        ASSERT_TRUE(c.advance(t));
        text += v->bytes(t);
        ended = c.done();
      }
      ASSERT_TRUE(ended) << "did not finish: " << text;
      Json out;
      ASSERT_NO_THROW(out = Json::parse(text)) << text;
      ASSERT_TRUE(out.is_string()) << text;
      const std::string s = out.get<std::string>();
      EXPECT_TRUE(re.search(s)) << text;
      EXPECT_GE(code_points(s), gc.min_len) << text;
      EXPECT_LE(code_points(s), gc.max_len) << text;
      ++runs;
    }
  }
  EXPECT_EQ(runs, 60 * 12);
}

// Inside an object, next to other keywords, over the bundled model's vocab
// is covered end to end in server_json_test.cpp; here the grammar's node.
TEST(JsonPattern, InObjectsAndAnyOf) {
  auto g = JsonGrammar::from_schema(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}\\d$"},
          "alt":{"anyOf":[{"type":"string","pattern":"^x+$"},{"type":"integer"}]}},"required":["code","alt"]})"));
  auto accepts = [&](const std::string& s) {
    JsonState st(*g);
    return st.feed(s) && st.accepting();
  };
  EXPECT_TRUE(accepts(R"({"code":"AB1","alt":"xx"})"));
  EXPECT_TRUE(accepts(R"({"code":"ZZ9","alt":12})"));
  EXPECT_FALSE(accepts(R"({"code":"AB","alt":"xx"})"));
  EXPECT_FALSE(accepts(R"({"code":"AB1","alt":"xy"})"));
  // No type: `pattern` says string.
  auto h = JsonGrammar::from_schema(nlohmann::ordered_json::parse(R"({"pattern":"^a$"})"));
  JsonState st(*h);
  EXPECT_TRUE(st.feed("\"a\"") && st.accepting());
}

}  // namespace
}  // namespace strata::json_pattern_test
