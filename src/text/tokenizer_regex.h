// Regular expressions for the tokenizer's normalizers and pre-tokenizers.
// tokenizer.json patterns are run by the reference (transformers.js) as
// JavaScript regexes with the `u` flag; they are translated to PCRE2 (UTF
// mode, JIT) so that they match the same text. docs/tokenizer.md lists the
// translation rules and what is not covered.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "text/unicode.h"

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_jit_stack_8;
struct pcre2_real_match_context_8;

namespace strata::tok {

// Per-call matching state (PCRE2 match data, a JIT stack grown on demand).
// One per encode call; never shared between threads.
class MatchScratch {
 public:
  MatchScratch();
  ~MatchScratch();
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;

 private:
  friend class Regex;
  pcre2_real_match_data_8* md_ = nullptr;
  pcre2_real_jit_stack_8* jit_stack_ = nullptr;
  pcre2_real_match_context_8* mc_ = nullptr;
  size_t jit_stack_size_ = 0;
};

// A compiled pattern. Offsets are byte offsets into valid UTF-8 text.
class Regex {
 public:
  Regex() = default;
  Regex(Regex&& o) noexcept;
  Regex& operator=(Regex&& o) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();

  // `pattern` is JavaScript syntax; `origin` names the tokenizer.json field
  // for errors (strata::Error on a pattern PCRE2 cannot compile).
  static Regex from_js(std::string_view pattern, const std::string& origin);
  // Matches `literal` verbatim; with `capture` the whole match is group 1
  // (transformers.js wraps String split patterns in a group).
  static Regex from_literal(std::string_view literal, bool capture, const std::string& origin);

  bool valid() const { return code_ != nullptr; }
  uint32_t capture_count() const { return captures_; }

  // Leftmost match that starts at or after `start`; false when there is none.
  // A pattern that exceeds PCRE2's match limit or the JIT stack (64 MiB) on
  // this text throws strata::Error naming it: treating that as "no match"
  // would silently tokenize the text differently.
  bool find(std::string_view text, size_t start, MatchScratch& s, size_t& begin, size_t& end) const;
  // After a successful find(): group `k` (1-based), false if it did not take part.
  bool group(const MatchScratch& s, uint32_t k, size_t& begin, size_t& end) const;

  // JavaScript String.prototype.matchAll / match with the g flag: after an
  // empty match the search resumes one code point further on.
  template <typename F>
  void for_each_match(std::string_view text, MatchScratch& s, F&& fn) const {
    size_t pos = 0, b, e;
    while (find(text, pos, s, b, e)) {
      fn(b, e);
      if (e > b) {
        pos = e;
      } else if (e >= text.size()) {
        break;
      } else {
        pos = e + unicode::seq_len(static_cast<unsigned char>(text[e]));
      }
    }
  }

 private:
  pcre2_real_code_8* code_ = nullptr;
  std::string origin_;  // the tokenizer.json field, for errors
  uint32_t captures_ = 0;
  bool jit_ = false;
};

// The PCRE2 pattern used for a JavaScript pattern (exposed for tests).
std::string translate_js_regex(std::string_view js, const std::string& origin);

// transformers.js rewrites a few patterns before compiling them
// (createPattern): drops the backslash of \# \& \~ and replaces the
// case-insensitive contraction group, which JavaScript cannot parse.
std::string transformers_js_pattern_fixups(std::string_view pattern);

}  // namespace strata::tok
