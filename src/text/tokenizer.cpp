#include "text/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "text/tokenizer_bpe.h"
#include "text/tokenizer_json.h"
#include "text/tokenizer_regex.h"
#include "text/unicode.h"
#include "core/error.h"
#include "core/json.h"

namespace strata {

using tok::Regex;

namespace {

constexpr size_t kMaxTokenizerJson = size_t{512} << 20;
constexpr size_t kMaxConfigJson = size_t{64} << 20;
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

// transformers.js's PUNCTUATION_REGEX, the GPT-2 split of the ByteLevel
// pre-tokenizer, and the Digits/Whitespace patterns.
constexpr std::string_view kPunct = "\\p{P}\\u0021-\\u002F\\u003A-\\u0040\\u005B-\\u0060\\u007B-\\u007E";
constexpr std::string_view kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct NormStep {
  enum Kind { Unicode, Replace, Prepend, Strip, StripAccents } kind = Unicode;
  unicode::NormalForm form = unicode::NormalForm::NFC;
  Regex re;
  std::string content;
  bool left = false, right = false;
};

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

struct Piece {
  uint32_t off, len;
  bool bytes;  // raw bytes still to be spelled in the byte-level alphabet
};

// Everything one encode call needs; built per call so encode is reentrant.
struct EncodeState {
  tok::MatchScratch match;
  tok::BpeScratch bpe;
  std::string buf;
  std::vector<Piece> cur, next;
};

// JSON accessors that name the field in errors.
struct Reader {
  const std::string& origin;

  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    fail("{}: {}: {}", origin, field, what);
  }
  const Json* member(const Json& o, const char* key) const {
    if (!o.is_object()) return nullptr;
    const auto it = o.find(key);
    return it == o.end() || it->is_null() ? nullptr : &*it;
  }
  bool flag(const Json& o, const char* key, bool def, const std::string& field) const {
    const Json* v = member(o, key);
    if (!v) return def;
    if (!v->is_boolean()) bad(field + "." + key, "expected true or false");
    return v->get<bool>();
  }
  std::string str(const Json& o, const char* key, const std::string& field, bool required = true) const {
    const Json* v = member(o, key);
    if (!v) {
      if (required) bad(field + "." + key, "missing");
      return "";
    }
    if (!v->is_string()) bad(field + "." + key, "expected a string");
    return v->get<std::string>();
  }
  std::string type(const Json& o, const std::string& field) const {
    if (!o.is_object()) bad(field, "expected an object");
    return str(o, "type", field);
  }
};

// A pattern object {"Regex": ...} or {"String": ...} as transformers.js's
// createPattern compiles it; `group` wraps a String pattern in a capture.
Regex make_pattern(const Reader& r, const Json& cfg, const std::string& field, bool group) {
  const Json* p = r.member(cfg, "pattern");
  if (!p || !p->is_object()) r.bad(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
  if (const Json* re = r.member(*p, "Regex")) {
    if (!re->is_string()) r.bad(field + ".pattern.Regex", "expected a string");
    return Regex::from_js(tok::transformers_js_pattern_fixups(re->get<std::string>()),
                          r.origin + ": " + field + ".pattern.Regex");
  }
  if (const Json* s = r.member(*p, "String")) {
    if (!s->is_string()) r.bad(field + ".pattern.String", "expected a string");
    return Regex::from_literal(s->get<std::string>(), group, r.origin + ": " + field + ".pattern.String");
  }
  r.bad(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
}

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

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

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

  std::vector<NormStep> normalizer;
  std::vector<PreStage> pre;
  std::unique_ptr<tok::Bpe> bpe;
  std::string end_of_word_suffix;
  std::vector<PostStep> post;
  enum class Decoder { None, ByteLevel } decoder = Decoder::None;
  bool clean_up_spaces = true;
  bool remove_space = false;

  void load(tok::TokenizerJson& tj, const Json& config, const std::string& config_origin);
  void load_normalizer(const Reader& r, const Json& n, const std::string& field);
  void load_pre_tokenizer(const Reader& r, const Json& p, const std::string& field);
  void load_post_processor(const Reader& r, const Json& p, const std::string& field);
  void build_entries(const std::vector<const std::string*>& spelling, const std::unordered_set<std::string>& special,
                     const std::optional<std::string>& unk);

  std::vector<std::string_view> split_added(std::string_view text) const;
  void encode_section(std::string_view x, EncodeState& st, std::vector<int32_t>& out) const;
  void pre_tokenize(EncodeState& st) const;
  std::string normalize(std::string_view x, EncodeState& st) const;

  const Entry& entry(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < entries.size() && entries[id].known ? entries[id] : unk_entry;
  }
  std::string_view text_of(const Entry& e) const { return std::string_view(texts).substr(e.text_off, e.text_len); }
  std::string_view decoded_of(const Entry& e) const {
    return std::string_view(decoded).substr(e.dec_off, e.dec_len);
  }
};

// ---------------------------------------------------------------- loading

void Tokenizer::Impl::load_normalizer(const Reader& r, const Json& n, const std::string& field) {
  const std::string type = r.type(n, field);
  NormStep s;
  if (type == "Sequence") {
    const Json* list = r.member(n, "normalizers");
    if (!list || !list->is_array()) r.bad(field + ".normalizers", "expected an array");
    for (size_t i = 0; i < list->size(); ++i) {
      if (!(*list)[i].is_null()) load_normalizer(r, (*list)[i], fmt::format("{}.normalizers[{}]", field, i));
    }
    return;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    s.form = type == "NFC"    ? unicode::NormalForm::NFC
             : type == "NFD"  ? unicode::NormalForm::NFD
             : type == "NFKC" ? unicode::NormalForm::NFKC
                              : unicode::NormalForm::NFKD;
  } else if (type == "Replace") {
    s.kind = NormStep::Replace;
    s.re = make_pattern(r, n, field, false);
    s.content = r.str(n, "content", field);
  } else if (type == "Prepend") {
    s.kind = NormStep::Prepend;
    s.content = r.str(n, "prepend", field);
  } else if (type == "Strip") {
    s.kind = NormStep::Strip;
    s.left = r.flag(n, "strip_left", false, field);
    s.right = r.flag(n, "strip_right", false, field);
  } else if (type == "StripAccents") {
    s.kind = NormStep::StripAccents;
    s.re = Regex::from_js("\\p{M}", field);
  } else {
    r.bad(field + ".type", fmt::format("normalizer '{}' is not supported (docs/tokenizer.md)", type));
  }
  normalizer.push_back(std::move(s));
}

void Tokenizer::Impl::load_pre_tokenizer(const Reader& r, const Json& p, const std::string& field) {
  const std::string type = r.type(p, field);
  const auto match_all = [&](const std::string& js) {
    pre.push_back({PreStage::MatchAll, Regex::from_js(js, r.origin + ": " + field)});
  };
  if (type == "Sequence") {
    // A nested sequence applies its steps to every piece in turn: the same
    // as splicing them into the outer list.
    const Json* list = r.member(p, "pretokenizers");
    if (!list || !list->is_array()) r.bad(field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < list->size(); ++i) {
      load_pre_tokenizer(r, (*list)[i], fmt::format("{}.pretokenizers[{}]", field, i));
    }
  } else if (type == "Split") {
    const bool invert = r.flag(p, "invert", false, field);
    std::string behavior = r.str(p, "behavior", field, false);
    std::transform(behavior.begin(), behavior.end(), behavior.begin(), [](char c) { return std::tolower(c); });
    // transformers.js implements Removed, and Isolated for every other
    // behavior (MergedWithPrevious/Next, Contiguous) — so does strata.
    PreStage st{invert ? PreStage::MatchAll : behavior == "removed" ? PreStage::SplitRemoved : PreStage::SplitIsolated,
                make_pattern(r, p, field, !invert)};
    pre.push_back(std::move(st));
  } else if (type == "ByteLevel") {
    PreStage st;
    st.kind = PreStage::ByteLevel;
    st.add_prefix_space = r.flag(p, "add_prefix_space", false, field);
    if (r.flag(p, "use_regex", true, field)) st.re = Regex::from_js(std::string(kGpt2), r.origin + ": " + field);
    pre.push_back(std::move(st));
  } else if (type == "Digits") {
    match_all(r.flag(p, "individual_digits", false, field) ? "[^\\d]+|\\d" : "[^\\d]+|\\d+");
  } else if (type == "Whitespace") {
    match_all("\\w+|[^\\w\\s]+");
  } else if (type == "WhitespaceSplit") {
    match_all("\\S+");
  } else if (type == "Punctuation") {
    match_all(fmt::format("[^{0}]+|[{0}]+", kPunct));
  } else {
    r.bad(field + ".type", fmt::format("pre-tokenizer '{}' is not supported (docs/tokenizer.md)", type));
  }
}

void Tokenizer::Impl::load_post_processor(const Reader& r, const Json& p, const std::string& field) {
  const std::string type = r.type(p, field);
  const auto id_of = [&](const std::string& token, const std::string& f) {
    const auto it = token_ids.find(token);
    if (it == token_ids.end()) r.bad(f, fmt::format("token '{}' is not in the vocabulary", token));
    return it->second;
  };
  if (type == "Sequence") {
    const Json* list = r.member(p, "processors");
    if (!list || !list->is_array()) r.bad(field + ".processors", "expected an array");
    for (size_t i = 0; i < list->size(); ++i) {
      load_post_processor(r, (*list)[i], fmt::format("{}.processors[{}]", field, i));
    }
  } else if (type == "ByteLevel") {
    // Offsets only; the ids pass through.
  } else if (type == "TemplateProcessing") {
    const Json* single = r.member(p, "single");
    if (!single || !single->is_array()) r.bad(field + ".single", "expected an array");
    PostStep s;
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& item = (*single)[i];
      const std::string f = fmt::format("{}.single[{}]", field, i);
      if (const Json* st = r.member(item, "SpecialToken")) {
        s.items.push_back(id_of(r.str(*st, "id", f + ".SpecialToken"), f + ".SpecialToken.id"));
      } else if (const Json* seq = r.member(item, "Sequence")) {
        // transformers.js only knows "A" and "B"; B has no text for a single sequence.
        if (r.str(*seq, "id", f + ".Sequence") == "A") s.items.push_back(-1);
      } else {
        r.bad(f, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      }
    }
    post.push_back(std::move(s));
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    const auto first = [&](const char* key) {
      const Json* v = r.member(p, key);
      if (!v || !v->is_array() || v->empty() || !(*v)[0].is_string()) r.bad(field + "." + key, "expected [token, id]");
      return id_of((*v)[0].get<std::string>(), field + "." + key);
    };
    post.push_back({{first("cls"), -1, first("sep")}});
  } else {
    r.bad(field + ".type", fmt::format("post-processor '{}' is not supported (docs/tokenizer.md)", type));
  }
}

// `spelling`: id -> token text (the vocabulary, then added tokens over it).
void Tokenizer::Impl::build_entries(const std::vector<const std::string*>& spelling,
                                    const std::unordered_set<std::string>& special,
                                    const std::optional<std::string>& unk) {
  entries.assign(spelling.size(), Entry{});
  std::unordered_set<std::string> added_contents;
  for (const Added& a : added) added_contents.insert(a.content);
  const auto fill = [&](Entry& e, const std::string& s) {
    e.known = true;
    e.text_off = static_cast<uint32_t>(texts.size());
    e.text_len = static_cast<uint32_t>(s.size());
    texts += s;
    e.added = added_contents.count(s) > 0;
    e.special = special.count(s) > 0;
    e.dec_off = static_cast<uint32_t>(decoded.size());
    if (e.added || decoder == Decoder::None) {
      decoded += s;
    } else {
      for (size_t i = 0; i < s.size();) {
        size_t len;
        decoded.push_back(static_cast<char>(unicode::code_point_to_byte(unicode::decode_at(s, i, len))));
        i += len;
      }
    }
    e.dec_len = static_cast<uint32_t>(decoded.size() - e.dec_off);
  };
  for (size_t id = 0; id < entries.size(); ++id) {
    if (spelling[id]) fill(entries[id], *spelling[id]);
  }
  if (unk) {
    fill(unk_entry, *unk);
  }
  if (texts.size() > UINT32_MAX || decoded.size() > UINT32_MAX) fail("{}: vocabulary text is too large", origin);
}

void Tokenizer::Impl::load(tok::TokenizerJson& tj, const Json& config, const std::string& config_origin) {
  const Reader r{origin};
  const Json& j = tj.doc;
  if (!j.is_object()) r.bad("(top level)", "expected an object");
  const Json* model = r.member(j, "model");
  if (!model || !model->is_object()) r.bad("model", "missing or not an object");
  const std::string mtype = r.str(*model, "type", "model", false);
  if (!mtype.empty() && mtype != "BPE") {
    r.bad("model.type", fmt::format("'{}' is not supported (only BPE)", mtype));
  }
  if (!tj.has_vocab) r.bad("model.vocab", "missing; expected an object of token -> id");
  if (mtype.empty() && !tj.has_merges) r.bad("model", "no type and no merges: not a BPE model");

  token_ids.reserve(tj.vocab.size() + 1024);
  std::vector<const std::string*> spelling;  // id -> text
  const auto spell = [&](int32_t id, const std::string* text) {
    if (static_cast<size_t>(id) >= spelling.size()) spelling.resize(static_cast<size_t>(id) + 1, nullptr);
    spelling[static_cast<size_t>(id)] = text;
  };
  for (const auto& [tokstr, id] : tj.vocab) {
    if (id < 0 || id >= kMaxTokenId) {
      r.bad("model.vocab", fmt::format("id of token '{}' is not an integer in [0, {})", tokstr, kMaxTokenId));
    }
    if (!token_ids.emplace(tokstr, static_cast<int32_t>(id)).second) {
      r.bad("model.vocab", fmt::format("duplicate token '{}'", tokstr));
    }
    spell(static_cast<int32_t>(id), &tokstr);
  }

  if (const Json* at = r.member(j, "added_tokens")) {
    if (!at->is_array()) r.bad("added_tokens", "expected an array");
    for (size_t i = 0; i < at->size(); ++i) {
      const Json& t = (*at)[i];
      const std::string f = fmt::format("added_tokens[{}]", i);
      const Json* idv = r.member(t, "id");
      if (!idv || !idv->is_number_integer() || idv->get<int64_t>() < 0 || idv->get<int64_t>() >= kMaxTokenId) {
        r.bad(f + ".id", fmt::format("expected an integer in [0, {})", kMaxTokenId));
      }
      // single_word and normalized are read by HF tokenizers but not by
      // transformers.js, the reference; strata follows the reference.
      Added a{r.str(t, "content", f), static_cast<int32_t>(idv->get<int64_t>()), r.flag(t, "lstrip", false, f),
              r.flag(t, "rstrip", false, f)};
      token_ids[a.content] = a.id;
      added_by_content[a.content] = added.size();
      added.push_back(std::move(a));
    }
    added.shrink_to_fit();
    for (const Added& a : added) spell(a.id, &a.content);
  }

  std::unordered_set<std::string> special;
  if (const Json* at = r.member(j, "added_tokens")) {
    for (size_t i = 0; i < at->size(); ++i) {
      if (r.flag((*at)[i], "special", false, fmt::format("added_tokens[{}]", i))) {
        special.insert((*at)[i]["content"].get<std::string>());
      }
    }
  }

  // tokenizer_config.json: the fields transformers.js reads for BPE models.
  const Reader rc{config_origin};
  if (const Json* extra = rc.member(config, "additional_special_tokens")) {
    if (!extra->is_array()) rc.bad("additional_special_tokens", "expected an array");
    for (const Json& e : *extra) {
      if (e.is_string()) special.insert(e.get<std::string>());
    }
  }
  clean_up_spaces = rc.flag(config, "clean_up_tokenization_spaces", true, "(top level)");
  remove_space = rc.flag(config, "remove_space", false, "(top level)");
  if (rc.flag(config, "do_lowercase_and_remove_accent", false, "(top level)")) {
    rc.bad("do_lowercase_and_remove_accent", "is not supported (docs/tokenizer.md)");
  }
  if (const Json* cls = rc.member(config, "tokenizer_class"); cls && cls->is_string()) {
    const std::string c = cls->get<std::string>();
    if ((c == "LlamaTokenizer" || c == "LlamaTokenizerFast") && !rc.flag(config, "legacy", true, "(top level)")) {
      rc.bad("legacy", "false (the SentencePiece-style Llama mode) is not supported (docs/tokenizer.md)");
    }
  }

  // Trie of added-token contents (longest match wins, like transformers.js).
  trie_end.push_back(-1);
  for (const Added& a : added) {
    if (a.content.empty()) continue;
    int32_t node = 0;
    for (const char c : a.content) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
      auto [it, inserted] = trie.try_emplace(key, static_cast<int32_t>(trie_end.size()));
      if (inserted) trie_end.push_back(-1);
      node = it->second;
    }
    trie_end[node] = static_cast<int32_t>(a.content.size());
    trie_first[static_cast<unsigned char>(a.content[0])] = true;
  }

  if (const Json* n = r.member(j, "normalizer")) load_normalizer(r, *n, "normalizer");
  if (const Json* p = r.member(j, "pre_tokenizer")) load_pre_tokenizer(r, *p, "pre_tokenizer");
  if (const Json* p = r.member(j, "post_processor")) load_post_processor(r, *p, "post_processor");
  if (const Json* d = r.member(j, "decoder")) {
    std::string type = r.type(*d, "decoder");
    if (type == "Sequence") {
      const Json* list = r.member(*d, "decoders");
      if (!list || !list->is_array() || list->size() != 1) {
        r.bad("decoder.decoders", "only a sequence of exactly one ByteLevel decoder is supported");
      }
      type = r.type((*list)[0], "decoder.decoders[0]");
    }
    if (type != "ByteLevel") r.bad("decoder.type", fmt::format("decoder '{}' is not supported (docs/tokenizer.md)", type));
    decoder = Decoder::ByteLevel;
  }

  // The BPE model.
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(tj.merges.size());
  for (tok::TokenizerJson::Merge& m : tj.merges) {
    if (!m.legacy) {
      merges.emplace_back(std::move(m.a), std::move(m.b));
      continue;
    }
    // "a b": transformers.js takes x.split(" ", 2); a merge with an empty or
    // missing part keeps its rank but never applies.
    const std::string& s = m.a;
    const size_t sp = s.find(' ');
    if (sp == std::string::npos) {
      merges.emplace_back(s, "");
      continue;
    }
    const size_t sp2 = s.find(' ', sp + 1);
    merges.emplace_back(s.substr(0, sp), s.substr(sp + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp - 1));
  }
  tj.merges.clear();
  tj.merges.shrink_to_fit();
  tok::BpeOptions opt;
  end_of_word_suffix = r.str(*model, "end_of_word_suffix", "model", false);
  opt.end_of_word_suffix = end_of_word_suffix;
  opt.continuing_subword_suffix = r.str(*model, "continuing_subword_suffix", "model", false);
  opt.byte_fallback = r.flag(*model, "byte_fallback", false, "model");
  opt.ignore_merges = r.flag(*model, "ignore_merges", false, "model");
  std::optional<std::string> unk;
  if (const Json* u = r.member(*model, "unk_token"); u && u->is_string()) {
    unk = u->get<std::string>();
    if (const auto it = token_ids.find(*unk); it != token_ids.end()) opt.unk_id = it->second;
  }
  bpe = std::make_unique<tok::Bpe>(&token_ids, merges, std::move(opt));
  build_entries(spelling, special, unk);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  tok::TokenizerJson tj = tok::parse_tokenizer_json(tokenizer_json, origin);
  const std::string config_origin = origin + " (tokenizer_config)";
  const Json config = config_json.empty() ? Json::object() : parse_json(config_json, config_origin);
  impl->load(tj, config, config_origin);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::string file = path, dir;
  if (is_dir(path)) {
    dir = path;
    file = path + "/tokenizer.json";
    if (!is_file(file)) fail("{}: directory has no tokenizer.json", path);
  } else {
    const size_t slash = path.rfind('/');
    dir = slash == std::string::npos ? "." : path.substr(0, slash);
  }
  const std::string text = read_small_file(file, kMaxTokenizerJson);
  const std::string config_path = dir + "/tokenizer_config.json";
  auto impl = std::make_unique<Impl>();
  impl->origin = file;
  tok::TokenizerJson tj = tok::parse_tokenizer_json(text, file);
  Json config = Json::object();
  if (is_file(config_path)) config = parse_json(read_small_file(config_path, kMaxConfigJson), config_path);
  impl->load(tj, config, config_path);
  return Tokenizer(std::move(impl));
}

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
