// The JSON Schema string keyword `pattern` for constrained decoding: a
// regular expression compiled once per schema into a DFA over Unicode code
// points, which the recogniser (json_state.h) steps with each DECODED string
// character (raw UTF-8 and JSON escapes alike).
//
// The supported subset (docs/server.md spells it out for users):
//   - ECMA-262 syntax as JSON Schema uses it, without flags; characters are
//     Unicode code points (a \uD83D\uDE00 pair is one character);
//   - literals; escapes \t \n \v \f \r \0 \cX \xHH \uHHHH and an escaped
//     punctuation character; `.` (any character but \n \r \u2028 \u2029);
//     classes [...] and [^...] with ranges, \d \w \s \D \W \S (ECMA's
//     meaning: ASCII digits and word characters, Unicode white space) also
//     inside classes, \b in a class as backspace; [] matches nothing, [^]
//     anything;
//   - groups (...), (?:...), (?<name>...); alternation |; quantifiers * + ?
//     {n} {n,} {n,m}, each optionally lazy (same language);
//   - anchors: `^` at the start and `$` at the end of the pattern or of a
//     top-level alternative. JSON Schema patterns are unanchored searches:
//     an alternative without `^` may be preceded by anything, one without
//     `$` followed by anything (compiled as [^]*P and P[^]*);
//   - refused, naming the construct: backreferences (\1, \k<name>),
//     lookahead and lookbehind, \b \B word boundaries, \p{..} \P{..},
//     \u{..}, lone surrogates, `^`/`$` elsewhere, other (?..) groups, other
//     letter escapes, a quantifier with nothing to repeat;
//   - size: at most kPatternMaxNfa NFA states, kPatternMaxStates DFA states
//     (after minLength is folded in) and kPatternMaxTable transition entries;
//     bigger patterns are refused.
// minLength is folded into the DFA (a counter up to minLength); maxLength is
// kept exact by the distance of each state to acceptance: a character is
// taken only if the string can still match within maxLength. Every state
// kept can reach acceptance, so a constrained answer never dead-ends.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

constexpr int32_t kPatternMaxNfa = 20000;
constexpr int32_t kPatternMaxStates = 8192;
constexpr int64_t kPatternMaxTable = int64_t{1} << 20;
constexpr uint32_t kPatternMaxCodePoint = 0x10FFFF;

class JsonPattern {
 public:
  // Throws strata::Error ("'pattern' ...: <construct>") for what the subset
  // refuses, patterns past the size limits, or no matching string of a length
  // in [min_len, max_len].
  static JsonPattern compile(std::string_view pattern, uint32_t min_len = 0, uint32_t max_len = UINT32_MAX);

  int32_t start() const { return 0; }
  bool accepting(int32_t s) const { return accept_[static_cast<size_t>(s)] != 0; }
  // The state after code point `cp`, or -1 (no match can follow).
  int32_t step(int32_t s, uint32_t cp) const {
    return next_[static_cast<size_t>(s) * static_cast<size_t>(n_classes_) + static_cast<size_t>(class_of(cp))];
  }
  // Fewest more characters from `s` to a match.
  uint32_t dist(int32_t s) const { return dist_[static_cast<size_t>(s)]; }
  // Some code point in [lo, hi] leads from `s` to a state that can match
  // within `room` more characters (counting that one).
  bool live(int32_t s, uint32_t lo, uint32_t hi, uint64_t room) const;
  // Whether the whole UTF-8 string (within the length bounds) matches; for tests.
  bool matches(std::string_view utf8) const;
  int32_t states() const { return static_cast<int32_t>(accept_.size()); }
  int32_t classes() const { return n_classes_; }
  uint32_t max_len() const { return max_len_; }

 private:
  int32_t class_of(uint32_t cp) const;
  std::vector<uint32_t> starts_;  // class i = [starts_[i], starts_[i + 1]); ends with 0x110000
  std::array<uint16_t, 128> ascii_{};
  int32_t n_classes_ = 0;
  std::vector<int32_t> next_;  // state * n_classes_ + class
  std::vector<uint8_t> accept_;
  std::vector<uint32_t> dist_;
  uint32_t max_len_ = UINT32_MAX;
};

}  // namespace strata
