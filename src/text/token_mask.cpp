#include "text/token_mask.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.h"
#include "text/tokenizer.h"

namespace strata {

std::shared_ptr<const JsonVocab> JsonVocab::build(const Tokenizer& tok, int64_t vocab) {
  if (!tok.is_byte_level())
    fail("response_format needs a byte-level tokenizer (its decoder is not ByteLevel)");
  auto v = std::make_shared<JsonVocab>();
  v->size_ = vocab;
  v->bytes_.resize(static_cast<size_t>(vocab));
  v->usable_.assign(static_cast<size_t>(vocab), 0);
  const int64_t n = std::min(vocab, tok.vocab_size());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (tok.is_added(id) || tok.is_special(id)) continue;
    v->bytes_[static_cast<size_t>(i)] = std::string(tok.token_bytes(id));
    v->usable_[static_cast<size_t>(i)] = !v->bytes_[static_cast<size_t>(i)].empty();
  }
  v->build_tries();
  return v;
}

std::shared_ptr<const JsonVocab> JsonVocab::from_bytes(std::vector<std::string> bytes) {
  auto v = std::make_shared<JsonVocab>();
  v->size_ = static_cast<int64_t>(bytes.size());
  v->usable_.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) v->usable_[i] = !bytes[i].empty();
  v->bytes_ = std::move(bytes);
  v->build_tries();
  return v;
}

namespace {
// Code points of `s` if it is whole string characters with no '"', '\\' or
// control byte (valid UTF-8 as JsonState reads it); -1 otherwise.
int64_t plain_code_points(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\' || c == 0x7f) return -1;
      ++i, ++n;
      continue;
    }
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else return -1;
    if (i + need >= s.size()) return -1;
    for (size_t k = 1; k <= need; ++k) {
      const uint8_t d = static_cast<uint8_t>(s[i + k]);
      if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) return -1;
    }
    i += need + 1;
    ++n;
  }
  return n;
}
}  // namespace

void JsonVocab::build_tries() {
  std::vector<int32_t> all, rest;
  std::vector<std::pair<uint32_t, int32_t>> plain;
  for (int64_t i = 0; i < size_; ++i) {
    std::string& b = bytes_[static_cast<size_t>(i)];
    if (b.size() > 0xfff0) usable_[static_cast<size_t>(i)] = 0;
    if (!usable_[static_cast<size_t>(i)]) continue;
    const int32_t id = static_cast<int32_t>(i);
    all.push_back(id);
    max_len_ = std::max(max_len_, b.size());
    const int64_t cps = plain_code_points(b);
    if (cps > 0) plain.emplace_back(static_cast<uint32_t>(cps), id);
    else rest.push_back(id);
  }
  std::sort(plain.begin(), plain.end());
  plain_.clear();
  plain_cps_.clear();
  for (auto [n, id] : plain) {
    plain_cps_.push_back(n);
    plain_.push_back(id);
  }
  build_trie(all_, std::move(all));
  build_trie(rest_, std::move(rest));
}

void JsonVocab::build_trie(Trie& t, std::vector<int32_t> ids) const {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const std::string& x = bytes_[static_cast<size_t>(a)];
    const std::string& y = bytes_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  t.byte.assign(1, 0);
  t.depth.assign(1, 0);
  t.skip.assign(1, 0);
  t.tok_start.assign(1, 0);
  t.toks.clear();
  std::vector<uint32_t> path{0};  // node per depth
  std::string_view prev;
  for (int32_t id : ids) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    size_t l = 0;
    while (l < prev.size() && l < s.size() && prev[l] == s[l]) ++l;
    const uint32_t count = static_cast<uint32_t>(t.byte.size());
    while (path.size() > l + 1) {
      t.skip[path.back()] = count;
      path.pop_back();
    }
    for (size_t k = l; k < s.size(); ++k) {
      path.push_back(static_cast<uint32_t>(t.byte.size()));
      t.byte.push_back(static_cast<uint8_t>(s[k]));
      t.depth.push_back(static_cast<uint16_t>(k + 1));
      t.skip.push_back(0);
      t.tok_start.push_back(static_cast<uint32_t>(t.toks.size()));
    }
    t.toks.push_back(id);  // at the last node made (or the same node as prev)
    prev = s;
  }
  const uint32_t count = static_cast<uint32_t>(t.byte.size());
  for (uint32_t p : path) t.skip[p] = count;
  t.tok_start.push_back(static_cast<uint32_t>(t.toks.size()));
}

void mask_logits(std::span<float> logits, const std::vector<uint8_t>& allowed) {
  const size_t n = std::min(logits.size(), allowed.size());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i)
    if (!allowed[i]) logits[i] = kNegInf;
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
}

int32_t only_allowed(const std::vector<uint8_t>& allowed, size_t count) {
  if (count != 1) return -1;
  const auto it = std::find(allowed.begin(), allowed.end(), uint8_t{1});
  return it == allowed.end() ? -1 : static_cast<int32_t>(it - allowed.begin());
}

}  // namespace strata
