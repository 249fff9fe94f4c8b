// UTF-8 and Unicode helpers for the tokenizer: decoding, the WHATWG handling
// of ill-formed bytes (what JavaScript's TextDecoder does), JavaScript's
// whitespace set, and Unicode normalization (utf8proc).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::unicode {

constexpr uint32_t kReplacement = 0xFFFD;

// Decodes the code point at s[i] of *valid* UTF-8 and sets `len` to its size.
inline uint32_t decode_at(std::string_view s, size_t i, size_t& len) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
  const uint32_t c = b(0);
  if (c < 0x80) {
    len = 1;
    return c;
  }
  if (c < 0xE0) {
    len = 2;
    return ((c & 0x1F) << 6) | (b(1) & 0x3F);
  }
  if (c < 0xF0) {
    len = 3;
    return ((c & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  }
  len = 4;
  return ((c & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

// Length in bytes of the UTF-8 sequence that starts with lead byte `c`
// (valid UTF-8 assumed).
inline size_t seq_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

void append_utf8(std::string& out, uint32_t cp);

bool is_valid_utf8(std::string_view s);

// Ill-formed input becomes U+FFFD, one per maximal subpart of an ill-formed
// sequence (Unicode ch. 3 "U+FFFD substitution of maximal subparts"; the
// WHATWG decoder, so JavaScript's `new TextDecoder()` gives the same string).
// Valid input comes back unchanged; a byte-order mark is kept.
std::string sanitize_utf8(std::string_view s);

// The same decoder, fed in pieces: never splits a code point across calls and
// holds back an incomplete trailing sequence until more bytes or finish().
class Utf8Stream {
 public:
  // Appends to `out` every code point completed by `bytes`.
  void feed(std::string_view bytes, std::string& out);
  // Ends the stream: a held incomplete sequence becomes one U+FFFD.
  void finish(std::string& out);
  bool pending() const { return needed_ != 0; }

 private:
  uint32_t cp_ = 0;
  int needed_ = 0, seen_ = 0;
  unsigned char lower_ = 0x80, upper_ = 0xBF;
};

// JavaScript's WhiteSpace and LineTerminator set: what `\s` matches and what
// String.prototype.trim() removes (it includes U+FEFF, unlike Unicode's
// White_Space, and excludes U+0085).
bool is_js_space(uint32_t cp);
std::string_view js_trim_start(std::string_view s);
std::string_view js_trim_end(std::string_view s);
inline std::string_view js_trim(std::string_view s) { return js_trim_end(js_trim_start(s)); }

enum class NormalForm { NFC, NFD, NFKC, NFKD };
// Normalizes valid UTF-8. Uses utf8proc's tables; text that cannot change
// (checked per code point) is returned without calling it.
std::string normalize(std::string_view s, NormalForm form);
const char* normalization_unicode_version();

// GPT-2's byte-level alphabet: byte b is spelled as the code point
// byte_to_code_point(b); every other code point maps back to byte 0, as in
// transformers.js (a Uint8Array stores `undefined` as 0).
uint32_t byte_to_code_point(uint8_t b);
uint8_t code_point_to_byte(uint32_t cp);

}  // namespace strata::unicode
