// Encoding (added-token split, normalizers, pre-tokenizers, BPE, post-processor)
// and decoding with a loaded Tokenizer (tokenizer_impl.h holds what it reads).
#include "text/tokenizer.h"

#include <algorithm>
#include <utility>

#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace strata {

namespace tok {

struct Piece {
  uint32_t off, len;
  bool bytes;  // raw bytes still to be spelled in the byte-level alphabet
};

// Everything one encode call needs; built per call so encode is reentrant.
struct EncodeState {
  MatchScratch match;
  BpeScratch bpe;
  std::string buf;
  std::vector<Piece> cur, next;
};

}  // namespace tok

using tok::EncodeState;
using tok::NormStep;
using tok::Piece;
using tok::PostStep;
using tok::PreStage;

namespace {

void clean_up_tokenization(std::string& s) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},     {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  for (const auto& [from, to] : kRules) {
    std::string out;
    size_t pos = 0;
    for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
      out.append(s, pos, hit - pos);
      out += to;
    }
    if (pos == 0) continue;
    out.append(s, pos);
    s = std::move(out);
  }
}

}  // namespace

// ---------------------------------------------------------------- encoding

std::vector<std::string_view> Tokenizer::Impl::split_added(std::string_view text) const {
  std::vector<std::string_view> sections;
  size_t start = 0, i = 0;
  const size_t n = text.size();
  while (i < n) {
    if (!trie_first[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    int32_t node = 0, best = -1;
    for (size_t k = i; k < n; ++k) {
      const auto it = trie.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[k]));
      if (it == trie.end()) break;
      node = it->second;
      if (trie_end[node] >= 0) best = trie_end[node];
    }
    if (best < 0) {
      ++i;
      continue;
    }
    if (i > start) sections.push_back(text.substr(start, i - start));
    sections.push_back(text.substr(i, static_cast<size_t>(best)));
    i += static_cast<size_t>(best);
    start = i;
  }
  if (start < n) sections.push_back(text.substr(start));
  return sections;
}

std::string Tokenizer::Impl::normalize(std::string_view x, EncodeState& st) const {
  std::string s(x);
  for (const NormStep& n : normalizer) {
    switch (n.kind) {
      case NormStep::Unicode: s = unicode::normalize(s, n.form); break;
      case NormStep::Prepend: s = n.content + s; break;
      case NormStep::Strip: {
        std::string_view v = s;
        if (n.left) v = unicode::js_trim_start(v);
        if (n.right) v = unicode::js_trim_end(v);
        s = std::string(v);
        break;
      }
      case NormStep::StripAccents:
      case NormStep::Replace: {
        // String.prototype.replaceAll with a global regex; `content` may use
        // $$, $&, $`, $' and $n like JavaScript's GetSubstitution.
        std::string out;
        size_t prev = 0;
        n.re.for_each_match(s, st.match, [&](size_t b, size_t e) {
          out.append(s, prev, b - prev);
          prev = e;
          if (n.kind == NormStep::StripAccents) return;
          const std::string& c = n.content;
          for (size_t k = 0; k < c.size(); ++k) {
            if (c[k] != '$' || k + 1 >= c.size()) {
              out += c[k];
              continue;
            }
            const char d = c[k + 1];
            if (d == '$') {
              out += '$';
              ++k;
            } else if (d == '&') {
              out.append(s, b, e - b);
              ++k;
            } else if (d == '`') {
              out.append(s, 0, b);
              ++k;
            } else if (d == '\'') {
              out.append(s, e);
              ++k;
            } else if (d >= '0' && d <= '9') {
              uint32_t g = static_cast<uint32_t>(d - '0');
              size_t used = 1;
              if (k + 2 < c.size() && c[k + 2] >= '0' && c[k + 2] <= '9' &&
                  g * 10 + static_cast<uint32_t>(c[k + 2] - '0') <= n.re.capture_count() &&
                  g * 10 + static_cast<uint32_t>(c[k + 2] - '0') > 0) {
                g = g * 10 + static_cast<uint32_t>(c[k + 2] - '0');
                used = 2;
              }
              if (g == 0 || g > n.re.capture_count()) {
                out += c[k];
                continue;
              }
              size_t gb, ge;
              if (n.re.group(st.match, g, gb, ge)) out.append(s, gb, ge - gb);
              k += used;
            } else {
              out += c[k];
            }
          }
        });
        out.append(s, prev);
        s = std::move(out);
        break;
      }
    }
  }
  return s;
}

void Tokenizer::Impl::pre_tokenize(EncodeState& st) const {
  for (const PreStage& stage : pre) {
    st.next.clear();
    for (Piece p : st.cur) {
      if (p.bytes) {
        // A step after ByteLevel sees the byte-level spelling.
        const size_t at = st.buf.size();
        st.buf.reserve(at + 2 * p.len);
        for (uint32_t k = 0; k < p.len; ++k) {
          unicode::append_utf8(st.buf, unicode::byte_to_code_point(static_cast<uint8_t>(st.buf[p.off + k])));
        }
        p = {static_cast<uint32_t>(at), static_cast<uint32_t>(st.buf.size() - at), false};
      }
      if (stage.kind == PreStage::ByteLevel && stage.add_prefix_space && (p.len == 0 || st.buf[p.off] != ' ')) {
        const size_t at = st.buf.size();
        st.buf.reserve(at + 1 + p.len);
        st.buf.push_back(' ');
        st.buf.append(st.buf.data() + p.off, p.len);
        p = {static_cast<uint32_t>(at), p.len + 1, false};
      }
      const std::string_view text(st.buf.data() + p.off, p.len);
      const auto add = [&](size_t b, size_t e, bool bytes) {
        st.next.push_back({static_cast<uint32_t>(p.off + b), static_cast<uint32_t>(e - b), bytes});
      };
      switch (stage.kind) {
        case PreStage::SplitIsolated: {
          size_t prev = 0;
          stage.re.for_each_match(text, st.match, [&](size_t b, size_t e) {
            if (prev < b) add(prev, b, false);
            if (e > b) add(b, e, false);
            prev = e;
          });
          if (prev < text.size()) add(prev, text.size(), false);
          break;
        }
        case PreStage::SplitRemoved: {
          // String.prototype.split with a regex: captured groups are kept;
          // transformers.js then drops empty strings.
          size_t p0 = 0, q = 0, b, e;
          while (q < text.size() && stage.re.find(text, q, st.match, b, e)) {
            if (e == p0) {  // empty match where the current piece starts
              q = b + unicode::seq_len(static_cast<unsigned char>(text[b]));
              continue;
            }
            if (b > p0) add(p0, b, false);
            for (uint32_t g = 1; g <= stage.re.capture_count(); ++g) {
              size_t gb, ge;
              if (stage.re.group(st.match, g, gb, ge) && ge > gb) add(gb, ge, false);
            }
            p0 = q = e;
          }
          if (p0 < text.size()) add(p0, text.size(), false);
          break;
        }
        case PreStage::MatchAll:
          stage.re.for_each_match(text, st.match, [&](size_t b, size_t e) { add(b, e, false); });
          break;
        case PreStage::ByteLevel:
          if (stage.re.valid()) {
            stage.re.for_each_match(text, st.match, [&](size_t b, size_t e) { add(b, e, true); });
          } else {
            add(0, text.size(), true);
          }
          break;
      }
    }
    std::swap(st.cur, st.next);
  }
}

void Tokenizer::Impl::encode_section(std::string_view x, EncodeState& st, std::vector<int32_t>& out) const {
  std::string spaced;
  if (remove_space) {
    // x.trim().split(/\s+/).join(" ")
    const std::string_view t = unicode::js_trim(x);
    for (size_t i = 0; i < t.size();) {
      size_t len;
      if (!unicode::is_js_space(unicode::decode_at(t, i, len))) {
        spaced.append(t, i, len);
        i += len;
        continue;
      }
      while (i < t.size() && unicode::is_js_space(unicode::decode_at(t, i, len))) i += len;
      spaced += ' ';
    }
    x = spaced;
  }
  st.buf.clear();
  if (normalizer.empty()) {
    st.buf.assign(x);
  } else {
    st.buf = normalize(x, st);
  }
  if (st.buf.empty()) return;
  st.cur.clear();
  st.cur.push_back({0, static_cast<uint32_t>(st.buf.size()), false});
  pre_tokenize(st);
  for (const Piece& p : st.cur) bpe->encode(std::string_view(st.buf.data() + p.off, p.len), p.bytes, st.bpe, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special) const {
  const Impl& m = *impl_;
  std::string sanitized;
  std::string_view text = input;
  if (!unicode::is_valid_utf8(text)) {
    sanitized = unicode::sanitize_utf8(text);
    text = sanitized;
  }
  std::vector<std::string_view> sections = m.split_added(text);
  const auto added_at = [&](size_t i) -> const Impl::Added* {
    const auto it = m.added_by_content.find(sections[i]);
    return it == m.added_by_content.end() ? nullptr : &m.added[it->second];
  };
  for (size_t i = 0; i < sections.size(); ++i) {
    if (const Impl::Added* a = added_at(i)) {
      if (a->lstrip && i > 0) sections[i - 1] = unicode::js_trim_end(sections[i - 1]);
      if (a->rstrip && i + 1 < sections.size()) sections[i + 1] = unicode::js_trim_start(sections[i + 1]);
    }
  }
  EncodeState st;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].empty()) continue;
    if (const Impl::Added* a = added_at(i)) {
      ids.push_back(m.token_ids.find(a->content)->second);
      continue;
    }
    m.encode_section(sections[i], st, ids);
  }
  for (const PostStep& p : m.post) {
    std::vector<int32_t> out;
    out.reserve(ids.size() + p.items.size());
    for (const int32_t item : p.items) {
      if (item < 0) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else if (add_special) {
        out.push_back(item);
      }
    }
    ids = std::move(out);
  }
  return ids;
}

// ---------------------------------------------------------------- decoding

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string out;
  if (m.decoder == Impl::Decoder::None) {
    // Without a decoder the tokens are joined with spaces.
    bool first = true;
    for (const int32_t id : ids) {
      const Impl::Entry& e = m.entry(id);
      if (skip_special && e.special) continue;
      if (!first) out += ' ';
      first = false;
      out += m.text_of(e);
    }
  } else {
    // Byte-level: runs of ordinary tokens are UTF-8 decoded together (bad
    // bytes become U+FFFD); added tokens are copied verbatim between runs.
    unicode::Utf8Stream run;
    for (const int32_t id : ids) {
      const Impl::Entry& e = m.entry(id);
      if (skip_special && e.special) continue;
      if (e.added) {
        run.finish(out);
        out += m.decoded_of(e);
      } else {
        run.feed(m.decoded_of(e), out);
      }
    }
    run.finish(out);
  }
  if (m.decoder != Impl::Decoder::None && !m.end_of_word_suffix.empty()) {
    std::string replaced;
    size_t pos = 0;
    for (size_t hit; (hit = out.find(m.end_of_word_suffix, pos)) != std::string::npos;
         pos = hit + m.end_of_word_suffix.size()) {
      replaced.append(out, pos, hit - pos);
      replaced += ' ';
    }
    replaced.append(out, pos);
    out = skip_special ? std::string(unicode::js_trim(replaced)) : std::move(replaced);
  }
  if (m.clean_up_spaces) clean_up_tokenization(out);
  return out;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  const auto it = impl_->token_ids.find(token);
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->entries.size() || !impl_->entries[id].known) return {};
  return impl_->text_of(impl_->entries[id]);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->entries.size() && impl_->entries[id].special;
}

bool Tokenizer::is_added(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->entries.size() && impl_->entries[id].added;
}

bool Tokenizer::is_byte_level() const { return impl_->decoder == Impl::Decoder::ByteLevel; }

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->entries.size() || !impl_->entries[id].known) return {};
  return impl_->decoded_of(impl_->entries[id]);
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->entries.size()); }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tok_(tokenizer.impl_.get()), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  const Tokenizer::Impl::Entry& e = tok_->entry(id);
  std::string out;
  if (skip_special_ && e.special) return out;
  if (tok_->decoder == Tokenizer::Impl::Decoder::None) {
    if (!first_) out += ' ';
    out += tok_->text_of(e);
  } else if (e.added) {
    utf8_.finish(out);
    out += tok_->decoded_of(e);
  } else {
    utf8_.feed(tok_->decoded_of(e), out);
  }
  first_ = false;
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8_.finish(out);
  return out;
}

}  // namespace strata
