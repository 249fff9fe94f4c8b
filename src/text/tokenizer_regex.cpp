#include "text/tokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>
#include <new>
#include <utility>
#include <vector>

#include "core/error.h"

namespace strata::tok {

namespace {

struct GcExtra {
  char cat[3];
  uint32_t lo, hi;
};
#include "text/unicode_v8_extras.inc"

struct Range {
  uint32_t lo, hi;
};

// JavaScript's \d, \w and \s (the `u` flag does not widen \d and \w).
const std::vector<Range> kDigit = {{0x30, 0x39}};
const std::vector<Range> kWord = {{0x30, 0x39}, {0x41, 0x5A}, {0x5F, 0x5F}, {0x61, 0x7A}};
const std::vector<Range> kSpace = {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                                   {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                   {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

std::string hex_cp(uint32_t cp) { return fmt::format("\\x{{{:X}}}", cp); }

// A range as PCRE2 class items, leaving out the surrogate block (UTF mode
// rejects surrogate code points in patterns; valid text has none anyway).
std::string class_range(uint32_t lo, uint32_t hi) {
  std::string s;
  const auto emit = [&](uint32_t a, uint32_t b) {
    if (a > b) return;
    s += hex_cp(a);
    if (b != a) {
      s += '-';
      s += hex_cp(b);
    }
  };
  if (hi < 0xD800 || lo > 0xDFFF) {
    emit(lo, hi);
  } else {
    if (lo < 0xD800) emit(lo, 0xD7FF);
    if (hi > 0xDFFF) emit(0xE000, hi);
  }
  return s;
}

std::string class_items(const std::vector<Range>& rs) {
  std::string s;
  for (const Range& r : rs) s += class_range(r.lo, r.hi);
  return s;
}

std::string complement_items(const std::vector<Range>& rs) {
  std::string s;
  uint32_t next = 0;
  for (const Range& r : rs) {
    if (r.lo > next) s += class_range(next, r.lo - 1);
    next = r.hi + 1;
  }
  if (next <= 0x10FFFF) s += class_range(next, 0x10FFFF);
  return s;
}

// Short general-category name for a JavaScript property value, or "".
std::string gc_short_name(std::string v) {
  static const std::pair<const char*, const char*> kLong[] = {
      {"Letter", "L"},
      {"Cased_Letter", "LC"},
      {"Uppercase_Letter", "Lu"},
      {"Lowercase_Letter", "Ll"},
      {"Titlecase_Letter", "Lt"},
      {"Modifier_Letter", "Lm"},
      {"Other_Letter", "Lo"},
      {"Mark", "M"},
      {"Combining_Mark", "M"},
      {"Nonspacing_Mark", "Mn"},
      {"Spacing_Mark", "Mc"},
      {"Enclosing_Mark", "Me"},
      {"Number", "N"},
      {"Decimal_Number", "Nd"},
      {"digit", "Nd"},
      {"Letter_Number", "Nl"},
      {"Other_Number", "No"},
      {"Punctuation", "P"},
      {"punct", "P"},
      {"Connector_Punctuation", "Pc"},
      {"Dash_Punctuation", "Pd"},
      {"Open_Punctuation", "Ps"},
      {"Close_Punctuation", "Pe"},
      {"Initial_Punctuation", "Pi"},
      {"Final_Punctuation", "Pf"},
      {"Other_Punctuation", "Po"},
      {"Symbol", "S"},
      {"Math_Symbol", "Sm"},
      {"Currency_Symbol", "Sc"},
      {"Modifier_Symbol", "Sk"},
      {"Other_Symbol", "So"},
      {"Separator", "Z"},
      {"Space_Separator", "Zs"},
      {"Line_Separator", "Zl"},
      {"Paragraph_Separator", "Zp"},
      {"Other", "C"},
      {"Control", "Cc"},
      {"cntrl", "Cc"},
      {"Format", "Cf"},
      {"Surrogate", "Cs"},
      {"Private_Use", "Co"},
      {"Unassigned", "Cn"},
  };
  for (const char* prefix : {"General_Category=", "gc="}) {
    if (v.rfind(prefix, 0) == 0) v = v.substr(std::char_traits<char>::length(prefix));
  }
  for (const auto& [l, s] : kLong) {
    if (v == l) return s;
  }
  static const char* kShort[] = {"L",  "LC", "Lu", "Ll", "Lt", "Lm", "Lo", "M",  "Mn", "Mc", "Me", "N",  "Nd",
                                 "Nl", "No", "P",  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S",  "Sm", "Sc",
                                 "Sk", "So", "Z",  "Zs", "Zl", "Zp", "C",  "Cc", "Cf", "Cs", "Co", "Cn"};
  for (const char* s : kShort) {
    if (v == s) return s;
  }
  return "";
}

// Class items for \p{name}: PCRE2's property plus the code points that the
// reference's newer Unicode has added to it.
std::string property_items(const std::string& name) {
  const std::string gc = gc_short_name(name);
  if (gc.empty()) return "\\p{" + name + "}";
  std::string s = gc == "LC" ? "\\p{Lu}\\p{Ll}\\p{Lt}" : "\\p{" + gc + "}";
  for (const GcExtra& e : kGcExtras) {
    const bool in = gc.size() == 1 ? e.cat[0] == gc[0]
                    : gc == "LC"   ? (e.cat[0] == 'L' && (e.cat[1] == 'u' || e.cat[1] == 'l' || e.cat[1] == 't'))
                                   : gc == e.cat;
    if (in) s += class_range(e.lo, e.hi);
  }
  return s;
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

struct Translator {
  std::string_view js;
  const std::string& origin;
  size_t i = 0;

  [[noreturn]] void error(const std::string& what) const {
    fail("{}: regex {:?}: {} at offset {}", origin, std::string(js), what, i);
  }

  uint32_t parse_hex(size_t count) {
    if (i + count > js.size()) error("truncated escape");
    uint32_t v = 0;
    for (size_t k = 0; k < count; ++k) {
      const char c = js[i + k];
      if (!is_hex(c)) error("bad hex digit in escape");
      v = v * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    i += count;
    return v;
  }

  // After "\u": \uXXXX (a surrogate pair of two escapes is one code point) or \u{X...}.
  uint32_t parse_u() {
    if (i < js.size() && js[i] == '{') {
      const size_t close = js.find('}', i);
      if (close == std::string_view::npos || close == i + 1 || close - i - 1 > 6) error("bad \\u{...} escape");
      ++i;
      const uint32_t v = parse_hex(close - i);
      ++i;
      if (v > 0x10FFFF) error("code point out of range");
      return v;
    }
    uint32_t v = parse_hex(4);
    if (v >= 0xD800 && v <= 0xDBFF && i + 6 <= js.size() && js[i] == '\\' && js[i + 1] == 'u') {
      const size_t save = i;
      i += 2;
      bool ok = true;
      for (size_t k = 0; k < 4; ++k) ok = ok && is_hex(js[i + k]);
      if (ok) {
        const uint32_t lo = parse_hex(4);
        if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
      }
      i = save;
    }
    return v;
  }

  // One escape (i points after the backslash). A single character comes
  // back in `cp` (returns true); anything else is appended to `out` as the
  // text to use inside a class (`in_class`) or outside one.
  bool escape(bool in_class, std::string& out, uint32_t& cp) {
    if (i >= js.size()) error("pattern ends with a backslash");
    const char c = js[i++];
    const auto set = [&](const std::vector<Range>& rs, bool negated) {
      if (in_class) {
        out += negated ? complement_items(rs) : class_items(rs);
      } else {
        out += negated ? "[^" : "[";
        out += class_items(rs);
        out += ']';
      }
    };
    switch (c) {
      case 'd': set(kDigit, false); return false;
      case 'D': set(kDigit, true); return false;
      case 'w': set(kWord, false); return false;
      case 'W': set(kWord, true); return false;
      case 's': set(kSpace, false); return false;
      case 'S': set(kSpace, true); return false;
      case 'p':
      case 'P': {
        if (i >= js.size() || js[i] != '{') error("\\p without {...}");
        const size_t close = js.find('}', i);
        if (close == std::string_view::npos) error("unterminated \\p{...}");
        const std::string name(js.substr(i + 1, close - i - 1));
        i = close + 1;
        if (c == 'p') {
          if (!in_class) out += '[';
          out += property_items(name);
          if (!in_class) out += ']';
        } else {
          // Inside a class the added code points cannot be taken out again;
          // docs/tokenizer.md lists this.
          if (in_class) {
            const std::string gc = gc_short_name(name);
            out += "\\P{";
            out += gc.empty() ? name : gc;
            out += '}';
          } else {
            out += "[^";
            out += property_items(name);
            out += ']';
          }
        }
        return false;
      }
      case 'u': cp = parse_u(); return true;
      case 'x': cp = parse_hex(2); return true;
      case 'c':
        if (i < js.size() && ((js[i] >= 'a' && js[i] <= 'z') || (js[i] >= 'A' && js[i] <= 'Z'))) {
          cp = static_cast<uint32_t>(js[i++]) % 32;
          return true;
        }
        error("bad \\c escape");
      case 't': cp = 0x09; return true;
      case 'n': cp = 0x0A; return true;
      case 'v': cp = 0x0B; return true;
      case 'f': cp = 0x0C; return true;
      case 'r': cp = 0x0D; return true;
      case '0':
        if (i < js.size() && js[i] >= '0' && js[i] <= '9') error("octal escapes are not allowed with the u flag");
        cp = 0;
        return true;
      case 'b':
        if (in_class) {
          cp = 0x08;
          return true;
        }
        out += "\\b";  // ASCII word boundary in both engines (no UCP)
        return false;
      default: break;
    }
    if (c >= '1' && c <= '9') {
      out += '\\';
      out += c;
      while (i < js.size() && js[i] >= '0' && js[i] <= '9') out += js[i++];
      return false;
    }
    if (c == 'k' && i < js.size() && js[i] == '<') {
      const size_t close = js.find('>', i);
      if (close == std::string_view::npos) error("unterminated \\k<name>");
      out += "\\k";
      out += js.substr(i, close - i + 1);
      i = close + 1;
      return false;
    }
    if (static_cast<unsigned char>(c) >= 0x80) {
      --i;
      size_t len;
      cp = unicode::decode_at(js, i, len);
      i += len;
      return true;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      // Not JavaScript (it rejects these with the u flag); PCRE2's meaning,
      // which for \A \z \h \R and the like is also Oniguruma's.
      out += '\\';
      out += c;
      return false;
    }
    cp = static_cast<unsigned char>(c);  // identity escape of punctuation
    return true;
  }

  uint32_t literal_cp() {
    size_t len;
    const uint32_t cp = unicode::decode_at(js, i, len);
    i += len;
    return cp;
  }

  // i points after '['.
  void char_class(std::string& out) {
    std::string items;
    bool negated = false;
    if (i < js.size() && js[i] == '^') {
      negated = true;
      ++i;
    }
    while (true) {
      if (i >= js.size()) error("unterminated character class");
      if (js[i] == ']') {
        ++i;
        break;
      }
      uint32_t lo = 0;
      bool single;
      std::string frag;
      if (js[i] == '\\') {
        ++i;
        single = escape(true, frag, lo);
      } else {
        lo = literal_cp();
        single = true;
      }
      if (!single) {
        items += frag;
        continue;
      }
      if (i + 1 < js.size() && js[i] == '-' && js[i + 1] != ']') {
        ++i;
        uint32_t hi = 0;
        bool hi_single;
        std::string hi_frag;
        if (js[i] == '\\') {
          ++i;
          hi_single = escape(true, hi_frag, hi);
        } else {
          hi = literal_cp();
          hi_single = true;
        }
        if (!hi_single) error("class escape used as a range bound");
        if (hi < lo) error("range out of order in character class");
        items += class_range(lo, hi);
      } else {
        items += class_range(lo, lo);
      }
    }
    // PCRE2_ALLOW_EMPTY_CLASS gives "[]" and "[^]" their JavaScript meaning.
    out += negated ? "[^" : "[";
    out += items;
    out += "]";
  }

  std::string run() {
    std::string out;
    out.reserve(js.size() * 2);
    while (i < js.size()) {
      const char c = js[i];
      if (c == '\\') {
        ++i;
        uint32_t cp = 0;
        if (escape(false, out, cp)) out += class_range(cp, cp).empty() ? "(?!)" : hex_cp(cp);
      } else if (c == '[') {
        ++i;
        char_class(out);
      } else if (c == '.') {
        ++i;
        out += "[^\\n\\r\\x{2028}\\x{2029}]";  // JavaScript's `.` without the s flag
      } else {
        out += c;
        ++i;
      }
    }
    return out;
  }
};

constexpr uint32_t kCompileOptions = PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALLOW_EMPTY_CLASS |
                                     PCRE2_NEVER_BACKSLASH_C | PCRE2_NO_UTF_CHECK;

}  // namespace

std::string translate_js_regex(std::string_view js, const std::string& origin) {
  Translator t{js, origin};
  return t.run();
}

std::string transformers_js_pattern_fixups(std::string_view pattern) {
  std::string s;
  s.reserve(pattern.size());
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size() &&
        (pattern[i + 1] == '#' || pattern[i + 1] == '&' || pattern[i + 1] == '~')) {
      continue;  // like JS .replace(/\\([#&~])/g, "$1"), left to right
    }
    s += pattern[i];
  }
  static const std::pair<std::string_view, std::string_view> kReplace[] = {
      {"(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))"},
      {" ?[^(\\s|[.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C])]+",
       " ?[^\\s.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C]+"},
  };
  for (const auto& [from, to] : kReplace) {
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
      s.replace(pos, from.size(), to);
    }
  }
  return s;
}

namespace {

pcre2_code* compile(const std::string& pcre, const std::string& origin, std::string_view shown) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(), kCompileOptions, &err,
                                   &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("{}: regex {:?} cannot be compiled (PCRE2: {} at offset {} of {:?})", origin, std::string(shown),
         reinterpret_cast<const char*>(msg), off, pcre);
  }
  return code;
}

}  // namespace

Regex Regex::from_js(std::string_view pattern, const std::string& origin) {
  Regex r;
  r.code_ = compile(translate_js_regex(pattern, origin), origin, pattern);
  r.origin_ = origin;
  r.jit_ = pcre2_jit_compile(r.code_, PCRE2_JIT_COMPLETE) == 0;
  pcre2_pattern_info(r.code_, PCRE2_INFO_CAPTURECOUNT, &r.captures_);
  return r;
}

Regex Regex::from_literal(std::string_view literal, bool capture, const std::string& origin) {
  std::string js;
  for (char c : literal) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
      js += fmt::format("\\x{:02X}", u);
    } else {
      js += c;
    }
  }
  if (capture) js = "(" + js + ")";
  return from_js(js, origin);
}

Regex::Regex(Regex&& o) noexcept
    : code_(std::exchange(o.code_, nullptr)), origin_(std::move(o.origin_)), captures_(o.captures_), jit_(o.jit_) {}

Regex& Regex::operator=(Regex&& o) noexcept {
  if (this != &o) {
    if (code_) pcre2_code_free(code_);
    code_ = std::exchange(o.code_, nullptr);
    origin_ = std::move(o.origin_);
    captures_ = o.captures_;
    jit_ = o.jit_;
  }
  return *this;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(code_);
}

MatchScratch::MatchScratch() {
  // Enough pairs for any pattern's groups; created once per encode call.
  md_ = pcre2_match_data_create(64, nullptr);
  if (!md_) throw std::bad_alloc();
}

MatchScratch::~MatchScratch() {
  if (mc_) pcre2_match_context_free(mc_);
  if (jit_stack_) pcre2_jit_stack_free(jit_stack_);
  pcre2_match_data_free(md_);
}

bool Regex::find(std::string_view text, size_t start, MatchScratch& s, size_t& begin, size_t& end) const {
  if (start > text.size()) return false;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc;
  if (jit_) {
    rc = pcre2_jit_match(code_, subject, text.size(), start, 0, s.md_, s.mc_);
    // Deep backtracking outgrew the JIT stack: grow it (up to 64 MiB) and retry.
    while (rc == PCRE2_ERROR_JIT_STACKLIMIT && s.jit_stack_size_ < (size_t{64} << 20)) {
      s.jit_stack_size_ = s.jit_stack_size_ ? s.jit_stack_size_ * 4 : (size_t{1} << 20);
      if (s.jit_stack_) pcre2_jit_stack_free(s.jit_stack_);
      s.jit_stack_ = pcre2_jit_stack_create(32 * 1024, s.jit_stack_size_, nullptr);
      if (!s.mc_) s.mc_ = pcre2_match_context_create(nullptr);
      if (!s.jit_stack_ || !s.mc_) throw std::bad_alloc();
      pcre2_jit_stack_assign(s.mc_, nullptr, s.jit_stack_);
      rc = pcre2_jit_match(code_, subject, text.size(), start, 0, s.md_, s.mc_);
    }
  } else {
    rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, s.md_, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    fail("{}: the regex failed on this text at byte {} of {} (PCRE2: {}); refusing to tokenize it "
         "differently",
         origin_, start, text.size(), reinterpret_cast<const char*>(msg));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md_);
  begin = ov[0];
  end = ov[1];
  return true;
}

bool Regex::group(const MatchScratch& s, uint32_t k, size_t& begin, size_t& end) const {
  if (k > captures_ || k >= pcre2_get_ovector_count(s.md_)) return false;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md_);
  if (ov[2 * k] == PCRE2_UNSET) return false;
  begin = ov[2 * k];
  end = ov[2 * k + 1];
  return true;
}

}  // namespace strata::tok
