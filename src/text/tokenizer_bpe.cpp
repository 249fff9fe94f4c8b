#include "text/tokenizer_bpe.h"

#include <fmt/format.h>

#include <algorithm>

#include "text/unicode.h"

namespace strata::tok {

namespace {

uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

int32_t Bpe::intern(const std::string& s) {
  auto [it, inserted] = sym_of_.try_emplace(s, static_cast<int32_t>(sym_str_.size()));
  if (inserted) {
    sym_str_.push_back(s);
    const auto t = tokens_->find(s);
    sym_id_.push_back(t == tokens_->end() ? -1 : t->second);
  }
  return it->second;
}

int32_t Bpe::lookup_sym(std::string_view s) const {
  const auto it = sym_of_.find(s);
  return it == sym_of_.end() ? -1 : it->second;
}

Bpe::Bpe(const TokenMap* tokens, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt)
    : tokens_(tokens), opt_(std::move(opt)) {
  sym_of_.reserve(tokens->size() + merges.size() + 256);
  for (const auto& [s, id] : *tokens) intern(s);
  for (int b = 0; b < 256; ++b) {
    std::string s;
    unicode::append_utf8(s, unicode::byte_to_code_point(static_cast<uint8_t>(b)));
    byte_sym_[b] = intern(s);
  }
  size_t cap = 16;
  while (cap < merges.size() * 2) cap *= 2;
  merges_.assign(cap, MergeSlot{kEmpty, 0, 0});
  merge_mask_ = cap - 1;
  for (size_t r = 0; r < merges.size(); ++r) {
    if (merges[r].first.empty() || merges[r].second.empty()) continue;  // can never apply
    const int32_t a = intern(merges[r].first), b = intern(merges[r].second);
    const int32_t result = intern(merges[r].first + merges[r].second);
    const uint64_t key = pair_key(a, b);
    for (uint64_t h = mix(key) & merge_mask_;; h = (h + 1) & merge_mask_) {
      MergeSlot& slot = merges_[h];
      if (slot.key == kEmpty || slot.key == key) {
        // A repeated pair keeps its last rank, as a JS Map built from the list does.
        slot = MergeSlot{key, static_cast<int32_t>(r), result};
        break;
      }
    }
  }
}

const Bpe::MergeSlot* Bpe::find_merge(int32_t a, int32_t b) const {
  if (a < 0 || b < 0) return nullptr;
  const uint64_t key = pair_key(a, b);
  for (uint64_t h = mix(key) & merge_mask_;; h = (h + 1) & merge_mask_) {
    const MergeSlot& slot = merges_[h];
    if (slot.key == key) return &slot;
    if (slot.key == kEmpty) return nullptr;
  }
}

void Bpe::merge_word(BpeScratch& s) const {
  auto& nodes = s.nodes;
  auto& heap = s.heap;
  heap.clear();
  // Min-heap on (rank, position of the left symbol).
  const auto later = [](const BpeScratch::Entry& x, const BpeScratch::Entry& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.left > y.left;
  };
  const auto push = [&](int32_t left) {
    const int32_t right = nodes[left].next;
    if (right < 0) return;
    if (const MergeSlot* m = find_merge(nodes[left].sym, nodes[right].sym)) {
      heap.push_back({m->rank, left, nodes[left].sym, nodes[right].sym, m->result});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(nodes.size()); ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const BpeScratch::Entry e = heap.back();
    heap.pop_back();
    BpeScratch::Node& l = nodes[e.left];
    // Stale entry: a neighbour has merged since it was pushed. Symbols only
    // grow, so an unchanged (left, right) pair of symbols is the same pair.
    if (l.sym != e.lsym || l.next < 0 || nodes[l.next].sym != e.rsym) continue;
    BpeScratch::Node& r = nodes[l.next];
    l.sym = e.result;
    l.end = r.end;
    l.next = r.next;
    if (r.next >= 0) nodes[r.next].prev = e.left;
    r.sym = -2;  // dead
    if (l.prev >= 0) push(l.prev);
    push(e.left);
  }
}

void Bpe::emit(std::string_view spelled, const BpeScratch::Node& n, bool last, std::vector<int32_t>& out) const {
  std::string piece;
  const bool suffixed = !opt_.continuing_subword_suffix.empty() && !last;
  if (n.sym >= 0 && !suffixed) {
    if (sym_id_[n.sym] >= 0) {
      out.push_back(sym_id_[n.sym]);
      return;
    }
    piece = sym_str_[n.sym];
  } else {
    piece = n.sym >= 0 ? sym_str_[n.sym] : std::string(spelled.substr(n.begin, n.end - n.begin));
    if (n.sym < 0 && last) piece += opt_.end_of_word_suffix;
    if (suffixed) piece += opt_.continuing_subword_suffix;
    if (const auto it = tokens_->find(piece); it != tokens_->end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (opt_.byte_fallback) {
    std::vector<int32_t> bytes;
    for (const char c : piece) {
      const auto it = tokens_->find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(c)));
      if (it == tokens_->end()) {
        bytes.clear();
        break;
      }
      bytes.push_back(it->second);
    }
    if (!bytes.empty()) {
      out.insert(out.end(), bytes.begin(), bytes.end());
      return;
    }
  }
  // Out of vocabulary: the unk token, or nothing when the model has none
  // (transformers.js would return an undefined id).
  if (opt_.unk_id) out.push_back(*opt_.unk_id);
}

void Bpe::encode_uncached(std::string_view word, bool bytes, BpeScratch& s, std::vector<int32_t>& out) const {
  std::string_view spelled = word;
  if (bytes && (opt_.ignore_merges || !opt_.end_of_word_suffix.empty())) {
    s.spelled.clear();
    for (const char c : word) unicode::append_utf8(s.spelled, unicode::byte_to_code_point(static_cast<uint8_t>(c)));
    spelled = s.spelled;
    bytes = false;
  }
  if (opt_.ignore_merges) {
    if (const auto it = tokens_->find(spelled); it != tokens_->end()) {
      out.push_back(it->second);
      return;
    }
  }
  auto& nodes = s.nodes;
  nodes.clear();
  if (bytes) {
    for (size_t i = 0; i < word.size(); ++i) {
      const int32_t k = static_cast<int32_t>(i);
      nodes.push_back({byte_sym_[static_cast<uint8_t>(word[i])], k - 1, k + 1, static_cast<uint32_t>(i),
                       static_cast<uint32_t>(i + 1)});
    }
  } else {
    for (size_t i = 0; i < spelled.size();) {
      const size_t len = unicode::seq_len(static_cast<unsigned char>(spelled[i]));
      const int32_t k = static_cast<int32_t>(nodes.size());
      nodes.push_back({lookup_sym(spelled.substr(i, len)), k - 1, k + 1, static_cast<uint32_t>(i),
                       static_cast<uint32_t>(i + len)});
      i += len;
    }
    if (!opt_.end_of_word_suffix.empty() && !nodes.empty()) {
      BpeScratch::Node& n = nodes.back();
      n.sym = lookup_sym(std::string(spelled.substr(n.begin, n.end - n.begin)) + opt_.end_of_word_suffix);
    }
  }
  if (nodes.empty()) return;
  nodes.back().next = -1;
  if (nodes.size() > 1) merge_word(s);
  for (int32_t i = 0; i >= 0; i = nodes[i].next) emit(spelled, nodes[i], nodes[i].next < 0, out);
}

void Bpe::encode(std::string_view word, bool bytes, BpeScratch& s, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() > kMaxCachedWord) {
    encode_uncached(word, bytes, s, out);
    return;
  }
  // The key carries the mode so raw bytes and spelled text never collide.
  std::string& key = s.spelled;
  key.assign(word);
  key.push_back(bytes ? '\1' : '\0');
  Shard& shard = cache_[StringHash{}(key) % kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    if (const auto it = shard.map.find(key); it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::string cache_key = key;  // s.spelled is reused below
  s.ids.clear();
  encode_uncached(word, bytes, s, s.ids);
  out.insert(out.end(), s.ids.begin(), s.ids.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kShardEntries) shard.map.clear();
  shard.map.emplace(std::move(cache_key), s.ids);
}

size_t Bpe::cache_entries() const {
  size_t n = 0;
  for (Shard& sh : cache_) {
    std::lock_guard<std::mutex> lock(sh.mu);
    n += sh.map.size();
  }
  return n;
}

}  // namespace strata::tok
