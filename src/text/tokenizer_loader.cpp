// Loading a Tokenizer: tokenizer.json (and tokenizer_config.json beside it)
// into Tokenizer::Impl (tokenizer_impl.h), refusing what transformers.js,
// the reference, would not read the same way, with the file and field named.
#include <sys/stat.h>

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "core/io.h"
#include "core/error.h"
#include "core/json.h"
#include "text/tokenizer_impl.h"

namespace strata {

using tok::NormStep;
using tok::PostStep;
using tok::PreStage;
using tok::Reader;
using tok::Regex;

namespace {

constexpr size_t kMaxTokenizerJson = size_t{512} << 20;
constexpr size_t kMaxConfigJson = size_t{64} << 20;
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

// transformers.js's PUNCTUATION_REGEX, the GPT-2 split of the ByteLevel
// pre-tokenizer, and the Digits/Whitespace patterns.
constexpr std::string_view kPunct = "\\p{P}\\u0021-\\u002F\\u003A-\\u0040\\u005B-\\u0060\\u007B-\\u007E";
constexpr std::string_view kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

namespace tok {

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

}  // namespace tok

namespace {

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

}  // namespace

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

}  // namespace strata
