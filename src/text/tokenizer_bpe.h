// The BPE model of a tokenizer.json: a word (one pre-tokenizer piece) is
// split into characters and adjacent pairs are merged by rank, lowest first,
// leftmost first among equal ranks (what transformers.js and HF tokenizers
// compute). Words are cached (bounded) because text repeats them a lot.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata::tok {

struct StringHash {
  using is_transparent = void;
  // Deliberately not noexcept: libstdc++ then stores each node's hash, so a
  // lookup does not rehash the keys it walks past.
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
// Token string -> id, looked up with string_views.
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::string end_of_word_suffix;
  std::string continuing_subword_suffix;  // transformers.js extension
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::optional<int32_t> unk_id;  // the unk token's id, if it has one
};

// Per-call scratch for merging (reused across the words of one encode call).
struct BpeScratch {
  struct Node {
    int32_t sym, prev, next;
    uint32_t begin, end;  // byte range of the symbol in the word's spelling
  };
  struct Entry {
    int32_t rank, left, lsym, rsym, result;
  };
  std::vector<Node> nodes;
  std::vector<Entry> heap;
  std::string spelled;  // the word in the byte-level alphabet, when needed
  std::vector<int32_t> ids;
};

class Bpe {
 public:
  // `tokens` is the tokenizer's string -> id map (vocabulary plus added
  // tokens); it must outlive the model. `merges` in file order.
  Bpe(const TokenMap* tokens, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt);
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  // Appends the ids of `word`. With `bytes`, `word` holds raw bytes that the
  // ByteLevel pre-tokenizer spells as GPT-2's byte alphabet.
  void encode(std::string_view word, bool bytes, BpeScratch& s, std::vector<int32_t>& out) const;

  size_t cache_entries() const;

 private:
  struct MergeSlot {
    uint64_t key;  // (left sym << 32) | right sym; kEmpty when free
    int32_t rank, result;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  int32_t intern(const std::string& s);
  int32_t lookup_sym(std::string_view s) const;
  const MergeSlot* find_merge(int32_t a, int32_t b) const;
  void merge_word(BpeScratch& s) const;
  void emit(std::string_view spelled, const BpeScratch::Node& n, bool last, std::vector<int32_t>& out) const;
  void encode_uncached(std::string_view word, bool bytes, BpeScratch& s, std::vector<int32_t>& out) const;

  const TokenMap* tokens_;
  BpeOptions opt_;
  TokenMap sym_of_;                  // symbol string -> symbol
  std::vector<std::string> sym_str_;  // symbol -> string
  std::vector<int32_t> sym_id_;      // symbol -> token id, -1 if not in the vocabulary
  std::array<int32_t, 256> byte_sym_{};
  std::vector<MergeSlot> merges_;  // open addressing, power-of-two size
  uint64_t merge_mask_ = 0;

  // Bounded word cache, sharded so concurrent encode calls rarely contend.
  // A full shard is cleared (cheap, and frequent words come straight back).
  static constexpr size_t kShards = 16, kShardEntries = 4096, kMaxCachedWord = 255;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> cache_;
};

}  // namespace strata::tok
