#include "text/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/error.h"

namespace strata::unicode {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the well-formed sequence at s[i], or 0 if it is ill-formed
// (Unicode Table 3-7).
size_t valid_seq_at(const unsigned char* s, size_t n, size_t i) {
  const unsigned char c = s[i];
  if (c < 0x80) return 1;
  const auto cont = [&](size_t k, unsigned char lo, unsigned char hi) {
    return i + k < n && s[i + k] >= lo && s[i + k] <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) return cont(1, 0x80, 0xBF) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

}  // namespace

bool is_valid_utf8(std::string_view sv) {
  const auto* s = reinterpret_cast<const unsigned char*>(sv.data());
  const size_t n = sv.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const size_t len = valid_seq_at(s, n, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

void Utf8Stream::feed(std::string_view bytes, std::string& out) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    const unsigned char b = static_cast<unsigned char>(bytes[i]);
    if (needed_ == 0) {
      if (b < 0x80) {
        out.push_back(static_cast<char>(b));
      } else if (b >= 0xC2 && b <= 0xDF) {
        needed_ = 1, cp_ = b & 0x1F;
      } else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) lower_ = 0xA0;
        if (b == 0xED) upper_ = 0x9F;
        needed_ = 2, cp_ = b & 0x0F;
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) lower_ = 0x90;
        if (b == 0xF4) upper_ = 0x8F;
        needed_ = 3, cp_ = b & 0x07;
      } else {
        append_utf8(out, kReplacement);
      }
      continue;
    }
    if (b < lower_ || b > upper_) {
      // The sequence so far is a maximal subpart: one U+FFFD, and the byte
      // is looked at again as a possible lead byte.
      needed_ = seen_ = 0, cp_ = 0, lower_ = 0x80, upper_ = 0xBF;
      append_utf8(out, kReplacement);
      --i;
      continue;
    }
    lower_ = 0x80, upper_ = 0xBF;
    cp_ = (cp_ << 6) | (b & 0x3F);
    if (++seen_ == needed_) {
      append_utf8(out, cp_);
      needed_ = seen_ = 0, cp_ = 0;
    }
  }
}

void Utf8Stream::finish(std::string& out) {
  if (needed_ != 0) append_utf8(out, kReplacement);
  needed_ = seen_ = 0, cp_ = 0, lower_ = 0x80, upper_ = 0xBF;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  Utf8Stream d;
  d.feed(s, out);
  d.finish(out);
  return out;
}

bool is_js_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0xA0) return false;
  return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

std::string_view js_trim_start(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    if (!is_js_space(decode_at(s, i, len))) break;
    i += len;
  }
  return s.substr(i);
}

std::string_view js_trim_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len;
    if (!is_js_space(decode_at(s, start, len))) break;
    end = start;
  }
  return s.substr(0, end);
}

namespace {

// Normalization data newer than utf8proc's (tests/tokenizer/gen_unicode_extras.sh).
struct NormExtra {
  uint32_t cp;
  bool canonical;                // has a canonical decomposition (else compatibility only)
  uint32_t canon[8], compat[8];  // full decompositions, 0-terminated
};
struct ComposePair {
  uint32_t first, second, composite;
};
#include "text/unicode_v8_norm.inc"

// The code points above and the parts of the pairs they compose from.
bool is_norm_extra(uint32_t cp) {
  static const std::vector<uint32_t> touchy = [] {
    std::vector<uint32_t> v;
    for (const NormExtra& e : kNormExtras) v.push_back(e.cp);
    for (const ComposePair& p : kComposeExtras) {
      v.push_back(p.first);
      v.push_back(p.second);
    }
    std::sort(v.begin(), v.end());
    return v;
  }();
  return cp >= touchy.front() && std::binary_search(touchy.begin(), touchy.end(), cp);
}

// True if `cp` cannot change under `form` whatever surrounds it: no
// decomposition, combining class 0, no part in any canonical composition.
// Conservative: false sends the text through utf8proc, which is exact.
bool is_inert(uint32_t cp, NormalForm form) {
  if (cp < 0xA0) return true;
  if (form == NormalForm::NFC && cp < 0x300) return true;
  if (cp >= 0x1100 && cp <= 0x11FF) return false;  // conjoining jamo
  if (cp >= 0xAC00 && cp <= 0xD7A3) return form == NormalForm::NFC || form == NormalForm::NFKC;  // syllables
  if (is_norm_extra(cp)) return false;
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  return p->combining_class == 0 && p->decomp_seqindex == UINT16_MAX && p->comb_index == UINT16_MAX;
}

// Applies the newer decompositions ahead of utf8proc; returns whether any did.
bool pre_decompose(std::string_view s, bool compat, std::string& out) {
  bool changed = false;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const uint32_t cp = decode_at(s, i, len);
    const NormExtra* hit = nullptr;
    if (cp >= 0xA000 && is_norm_extra(cp)) {
      for (const NormExtra& e : kNormExtras) {
        if (e.cp == cp) hit = &e;
      }
    }
    if (hit && (compat || hit->canonical)) {
      for (const uint32_t* d = compat ? hit->compat : hit->canon; *d; ++d) append_utf8(out, *d);
      changed = true;
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  return changed;
}

// Composes the newer pairs where they are adjacent. Their second parts are
// starters, except U+0307 for two Vithkuqi letters, where a mark in between
// is not looked through (docs/tokenizer.md).
std::string post_compose(std::string_view s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const uint32_t cp = decode_at(s, i, len);
    i += len;
    bool composed = false;
    if (!cps.empty()) {
      for (const ComposePair& p : kComposeExtras) {
        if (p.first == cps.back() && p.second == cp) {
          cps.back() = p.composite;
          composed = true;
          break;
        }
      }
    }
    if (!composed) cps.push_back(cp);
  }
  std::string out;
  for (const uint32_t cp : cps) append_utf8(out, cp);
  return out;
}

}  // namespace

std::string normalize(std::string_view s, NormalForm form) {
  bool inert = true;
  for (size_t i = 0; i < s.size() && inert;) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    inert = is_inert(decode_at(s, i, len), form);
    i += len;
  }
  if (inert) return std::string(s);
  const bool compat = form == NormalForm::NFKC || form == NormalForm::NFKD;
  const bool compose = form == NormalForm::NFC || form == NormalForm::NFKC;
  std::string pre;
  pre_decompose(s, compat, pre);
  const int options =
      UTF8PROC_STABLE | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) | (compat ? UTF8PROC_COMPAT : 0);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(pre.data()),
                                          static_cast<utf8proc_ssize_t>(pre.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    // Only reachable with invalid UTF-8, which callers never pass.
    std::free(out);
    return std::string(s);
  }
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
  const std::string_view result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  bool pair_part = false;
  for (size_t i = 0; compose && i < result.size() && !pair_part;) {
    size_t len;
    const uint32_t cp = decode_at(result, i, len);
    pair_part = cp >= 0xA000 && is_norm_extra(cp);
    i += len;
  }
  return pair_part ? post_compose(result) : std::string(result);
}

const char* normalization_unicode_version() { return utf8proc_unicode_version(); }

namespace {

struct ByteTables {
  uint32_t to_cp[256];
  uint8_t from_cp[324];
  ByteTables() {
    bool direct[256] = {};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    for (uint8_t& x : from_cp) x = 0;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = direct[b] ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      from_cp[to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

uint32_t byte_to_code_point(uint8_t b) { return byte_tables().to_cp[b]; }

uint8_t code_point_to_byte(uint32_t cp) { return cp < 324 ? byte_tables().from_cp[cp] : 0; }

}  // namespace strata::unicode
