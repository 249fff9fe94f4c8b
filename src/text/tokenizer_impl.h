// The inside of a loaded Tokenizer (tokenizer.h), shared by the two files
// that implement it: tokenizer_loader.cpp reads tokenizer.json and
// tokenizer_config.json into it, tokenizer.cpp runs the encode pipeline and
// decodes with it. Only those files (and StreamDecoder) see it.
//
// What a tokenizer.json describes, as data: the vocabulary and added tokens
// (Entry per id, spellings and decoded bytes packed in two strings), the
// added-token trie for the longest-match split, the normalizer steps, the
// pre-tokenizer stages, the BPE model and the post-processor template.
// Everything here is immutable after load (the BPE word cache aside, which
// tok::Bpe guards), so encode/decode may run on several threads at once.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/json.h"
#include "text/tokenizer.h"
#include "text/tokenizer_bpe.h"
#include "text/tokenizer_json.h"
#include "text/tokenizer_regex.h"
#include "text/unicode.h"

namespace strata {

namespace tok {

// One normalizer step (a Sequence is flattened into them).
struct NormStep {
  enum Kind { Unicode, Replace, Prepend, Strip, StripAccents } kind = Unicode;
  unicode::NormalForm form = unicode::NormalForm::NFC;
  Regex re;
  std::string content;
  bool left = false, right = false;
};

// One pre-tokenizer stage: splits every piece the stages before produced.
struct PreStage {
  enum Kind { SplitIsolated, SplitRemoved, MatchAll, ByteLevel } kind = MatchAll;
  Regex re;  // for ByteLevel: the GPT-2 split when use_regex
  bool add_prefix_space = false;
};

// One step of the post-processor for a single sequence: template items (a
// token id, or -1 for the sequence itself) or Bert-style cls/sep.
struct PostStep {
  std::vector<int32_t> items;
};

struct EncodeState;  // one encode call's scratch (tokenizer.cpp)
struct Reader;       // JSON accessors naming the field in errors (tokenizer_loader.cpp)

}  // namespace tok

struct Tokenizer::Impl {
  std::string origin;

  // Vocabulary plus added tokens (an added token overrides a vocabulary
  // entry of the same spelling, as in transformers.js).
  tok::TokenMap token_ids;
  struct Entry {
    uint32_t text_off = 0, text_len = 0;  // spelling, in `texts`
    uint32_t dec_off = 0, dec_len = 0;    // decoded bytes (added tokens: the content), in `decoded`
    bool known = false, added = false, special = false;
  };
  std::vector<Entry> entries;  // by id
  Entry unk_entry;             // what an id out of range decodes as
  std::string texts, decoded;

  struct Added {
    std::string content;
    int32_t id;
    bool lstrip, rstrip;
  };
  std::vector<Added> added;
  std::unordered_map<std::string, size_t, tok::StringHash, std::equal_to<>> added_by_content;  // last wins
  // Byte trie over added-token contents for the longest-match split.
  std::unordered_map<uint64_t, int32_t> trie;  // (node << 8 | byte) -> child
  std::vector<int32_t> trie_end;               // node -> content length ending there, or -1
  std::array<bool, 256> trie_first{};

  std::vector<tok::NormStep> normalizer;
  std::vector<tok::PreStage> pre;
  std::unique_ptr<tok::Bpe> bpe;
  std::string end_of_word_suffix;
  std::vector<tok::PostStep> post;
  enum class Decoder { None, ByteLevel } decoder = Decoder::None;
  bool clean_up_spaces = true;
  bool remove_space = false;

  void load(tok::TokenizerJson& tj, const Json& config, const std::string& config_origin);
  void load_normalizer(const tok::Reader& r, const Json& n, const std::string& field);
  void load_pre_tokenizer(const tok::Reader& r, const Json& p, const std::string& field);
  void load_post_processor(const tok::Reader& r, const Json& p, const std::string& field);
  void build_entries(const std::vector<const std::string*>& spelling, const std::unordered_set<std::string>& special,
                     const std::optional<std::string>& unk);

  std::vector<std::string_view> split_added(std::string_view text) const;
  void encode_section(std::string_view x, tok::EncodeState& st, std::vector<int32_t>& out) const;
  void pre_tokenize(tok::EncodeState& st) const;
  std::string normalize(std::string_view x, tok::EncodeState& st) const;

  const Entry& entry(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < entries.size() && entries[id].known ? entries[id] : unk_entry;
  }
  std::string_view text_of(const Entry& e) const { return std::string_view(texts).substr(e.text_off, e.text_len); }
  std::string_view decoded_of(const Entry& e) const {
    return std::string_view(decoded).substr(e.dec_off, e.dec_len);
  }
};

}  // namespace strata
