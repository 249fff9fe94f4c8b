// The response_format recogniser (text/json_constraint.h): accepted and
// refused prefixes, every supported schema keyword, errors for unsupported
// ones, token masks (trie walk == feeding each token on its own), random
// constrained generation over the bundled model's vocabulary (always JSON that
// parses and validates), json_object answers to the end. What a mask costs is
// measured by bench/constraints (build/strata_constraint_bench).
#include "text/json_constraint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "constraint_fixtures.h"
#include "text/tokenizer.h"
#include "core/error.h"
#include "core/json.h"

namespace strata::json_constraint_test {
namespace {

const std::string kTinyTokenizer = std::string(STRATA_SOURCE_DIR) + "/models/glm5-strata-tiny/tokenizer.json";

std::shared_ptr<const JsonGrammar> schema(const std::string& s) {
  return JsonGrammar::from_schema(nlohmann::ordered_json::parse(s));
}

// Every byte of `text` is accepted.
bool prefix_ok(const JsonGrammar& g, std::string_view text) {
  JsonState st(g);
  return st.feed(text);
}
// `text` is a complete answer.
bool complete(const JsonGrammar& g, std::string_view text) {
  JsonState st(g);
  return st.feed(text) && st.accepting();
}

std::string schema_error(const std::string& s) {
  try {
    schema(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A validator for the supported subset (what the tests generate against).
bool validate(const Json& s, const Json& v, const Json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    return validate(root.at(Json::json_pointer(r.substr(1))), v, root);
  }
  if (s.contains("anyOf")) {
    for (const Json& b : s["anyOf"])
      if (validate(b, v, root)) return true;
    return false;
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum")) {
    bool any = false;
    for (const Json& e : s["enum"]) any = any || e == v;
    if (!any) return false;
  }
  if (s.contains("type")) {
    std::vector<std::string> ts;
    if (s["type"].is_string()) {
      ts.push_back(s["type"]);
    } else {
      for (const Json& t : s["type"]) ts.push_back(t);
    }
    bool ok = false;
    for (const std::string& t : ts) {
      ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
           (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
           (t == "integer" && (v.is_number_integer() || v.is_number_unsigned())) ||
           (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
    }
    if (!ok) return false;
  }
  if (v.is_string()) {
    // Code points.
    size_t n = 0;
    for (unsigned char c : v.get<std::string>()) n += (c & 0xC0) != 0x80;
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
    if (s.contains("multipleOf") && std::fmod(x, s["multipleOf"].get<double>()) != 0) return false;
  }
  if (v.is_string() && s.contains("format")) {
    const std::string f = s["format"], x = v.get<std::string>();
    const char* re = f == "date"   ? R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"
                     : f == "uuid" ? "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                     : f == "time" ? R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"
                                   : R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
    if (!std::regex_match(x, std::regex(re))) return false;
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items"))
      for (const Json& x : v)
        if (!validate(s["items"], x, root)) return false;
  }
  if (v.is_object()) {
    const Json props = s.value("properties", Json::object());
    if (s.contains("required"))
      for (const Json& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (props.contains(it.key())) {
        if (!validate(props[it.key()], it.value(), root)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!validate(s["additionalProperties"], it.value(), root)) return false;
      }
    }
  }
  return true;
}

TEST(JsonConstraint, JsonObjectMode) {
  auto g = JsonGrammar::any_object();
  for (const char* ok : {R"({})", R"({"a":1})", R"({"a": [1, 2.5e-3, {"b": null}], "c":"x\n\u00e9\"","d":true})",
                         "{\"k\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}", R"({"a":-0,"b":0.5,"c":1E+10})",
                         "{\n\"a\":\n1\n}", R"({"":[]})", R"({"a":{"a":{"a":[[[]]]}}})"}) {
    EXPECT_TRUE(complete(*g, ok)) << ok;
    EXPECT_TRUE(Json::accept(ok)) << ok;
  }
  // Prefixes are accepted but not complete.
  for (const char* p : {R"({)", R"({"a)", R"({"a":)", R"({"a":1)", R"({"a":1,)", R"({"a":[1,)", R"({"a":"\u00)"}) {
    EXPECT_TRUE(prefix_ok(*g, p)) << p;
    EXPECT_FALSE(complete(*g, p)) << p;
  }
  for (const char* bad :
       {"[1]", "1", "\"x\"", " {}", "{} ", "{}{}", "{  \"a\":1}", "{\"a\"  :1}", "{\"a\":01}", "{\"a\":1.}",
        "{\"a\":.5}", "{\"a\":+1}", "{\"a\":tru}x", "{\"a\":nul1}", "{\"a\":\"\\x\"}", "{\"a\":\"\x01\"}",
        "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\\ud800\"}", "{\"a\":1,}", "{,}", "{\"a\"1}",
        "{\"a\":1]", "{\"a\":[1}", "{a:1}", "{\"a\":\t1}", "{\"a\":12345678901234567}", "{\"a\":1e123}"}) {
    EXPECT_FALSE(complete(*g, bad)) << bad;
  }
  // Number caps: 16 digits are fine, 17 are not.
  EXPECT_TRUE(complete(*g, R"({"a":1234567890123456})"));
  EXPECT_TRUE(complete(*g, R"({"a":0.1234567890123456e-12})"));
  EXPECT_FALSE(prefix_ok(*g, R"({"a":0.12345678901234567)"));
  // Depth cap: 32 containers.
  std::string deep = "{\"a\":";
  for (int i = 1; i < kJsonMaxDepth; ++i) deep += "[";
  EXPECT_TRUE(prefix_ok(*g, deep));
  EXPECT_FALSE(prefix_ok(*g, deep + "["));
  EXPECT_TRUE(prefix_ok(*g, deep + "1"));
  // A complete object: nothing may follow.
  JsonState st(*g);
  ASSERT_TRUE(st.feed("{\"a\":1}"));
  EXPECT_TRUE(st.done());
}

TEST(JsonConstraint, TypesAndScalars) {
  EXPECT_TRUE(complete(*schema(R"({"type":"integer"})"), "-12"));
  EXPECT_FALSE(prefix_ok(*schema(R"({"type":"integer"})"), "1.5"));
  EXPECT_FALSE(prefix_ok(*schema(R"({"type":"integer"})"), "1e5"));
  EXPECT_TRUE(complete(*schema(R"({"type":"number"})"), "1.5e3"));
  EXPECT_TRUE(complete(*schema(R"({"type":"boolean"})"), "false"));
  EXPECT_FALSE(prefix_ok(*schema(R"({"type":"boolean"})"), "null"));
  EXPECT_TRUE(complete(*schema(R"({"type":"null"})"), "null"));
  EXPECT_TRUE(complete(*schema(R"({"type":"string"})"), R"("hi")"));
  auto multi = schema(R"({"type":["string","null"]})");
  EXPECT_TRUE(complete(*multi, "null"));
  EXPECT_TRUE(complete(*multi, R"("x")"));
  EXPECT_FALSE(prefix_ok(*multi, "1"));
  // A top-level number is complete but may go on; a 16-digit integer is done.
  auto integer = schema(R"({"type":"integer"})");  // a state points into its grammar
  JsonState st(*integer);
  ASSERT_TRUE(st.feed("12"));
  EXPECT_TRUE(st.accepting());
  EXPECT_TRUE(st.can_continue());
  ASSERT_TRUE(st.feed("34567890123456"));
  EXPECT_TRUE(st.done());
  // An empty schema (and true) is any value.
  EXPECT_TRUE(complete(*schema("{}"), "[1,\"a\",{}]"));
  EXPECT_TRUE(complete(*JsonGrammar::any_value(), "3"));
}

TEST(JsonConstraint, StringLengths) {
  auto g = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(complete(*g, R"("a")"));
  EXPECT_TRUE(complete(*g, R"("ab")"));
  EXPECT_TRUE(complete(*g, "\"\xc3\xa9\xc3\xa9\xc3\xa9\""));  // code points, not bytes
  EXPECT_TRUE(complete(*g, R"("a\nb")"));                  // an escape is one
  EXPECT_FALSE(prefix_ok(*g, R"("abcd)"));
  EXPECT_TRUE(complete(*schema(R"({"type":"string","maxLength":0})"), R"("")"));
  EXPECT_FALSE(prefix_ok(*schema(R"({"type":"string","maxLength":0})"), R"("a)"));
}

TEST(JsonConstraint, ObjectsPropertiesRequired) {
  auto g = schema(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
      "tags":{"type":"array","items":{"type":"string"}}},"required":["age"],"additionalProperties":false})");
  EXPECT_TRUE(complete(*g, R"({"name":"x","age":3})"));
  EXPECT_TRUE(complete(*g, R"({"age":3})"));  // optional ones may be skipped
  EXPECT_TRUE(complete(*g, R"({"age":3,"tags":["a"]})"));
  EXPECT_FALSE(prefix_ok(*g, R"({"age":3,"name")"));  // schema order
  EXPECT_FALSE(prefix_ok(*g, R"({"name":"x","name")"));
  EXPECT_FALSE(prefix_ok(*g, R"({"tags":[])"));     // may not skip the required age
  EXPECT_FALSE(complete(*g, R"({"name":"x"})"));    // age is required
  EXPECT_FALSE(prefix_ok(*g, R"({"other")"));
  EXPECT_FALSE(prefix_ok(*g, R"({"age":"3")"));
  EXPECT_FALSE(prefix_ok(*g, R"({"age":3,"tags":["a"],)"));  // nothing left to add
  EXPECT_TRUE(prefix_ok(*g, R"({"na)"));
  EXPECT_FALSE(prefix_ok(*g, R"({"nam")"));
  // additionalProperties true with properties: still only the listed keys.
  auto open = schema(R"({"type":"object","properties":{"a":{"type":"null"}},"additionalProperties":true})");
  EXPECT_TRUE(complete(*open, R"({"a":null})"));
  EXPECT_FALSE(prefix_ok(*open, R"({"b")"));
  // No properties: any keys, values per additionalProperties.
  auto map = schema(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(complete(*map, R"({"x":1,"y":2})"));
  EXPECT_FALSE(prefix_ok(*map, R"({"x":"1")"));
  auto none = schema(R"({"type":"object","additionalProperties":false})");
  EXPECT_TRUE(complete(*none, "{}"));
  EXPECT_FALSE(prefix_ok(*none, "{\""));
  // Keys needing escapes are matched as they are written in JSON.
  auto esc = schema(R"({"type":"object","properties":{"a\"b":{"type":"null"}},"required":["a\"b"]})");
  EXPECT_TRUE(complete(*esc, R"({"a\"b":null})"));
  // Whitespace: at most one byte between tokens.
  EXPECT_TRUE(complete(*g, "{ \"age\": 3 }"));
  EXPECT_FALSE(prefix_ok(*g, "{\"age\":  3"));
}

TEST(JsonConstraint, ArraysEnumConstAnyOfRefs) {
  auto arr = schema(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})");
  EXPECT_FALSE(complete(*arr, "[]"));
  EXPECT_TRUE(complete(*arr, "[1]"));
  EXPECT_TRUE(complete(*arr, "[1,2]"));
  EXPECT_FALSE(prefix_ok(*arr, "[1,2,"));
  EXPECT_TRUE(complete(*schema(R"({"type":"array","maxItems":0})"), "[]"));
  EXPECT_FALSE(prefix_ok(*schema(R"({"type":"array","maxItems":0})"), "[1"));

  auto en = schema(R"({"enum":["red","green",1,12,null,true,{"b":1,"a":2}]})");
  for (const char* ok : {R"("red")", R"("green")", "1", "12", "null", "true", R"({"b":1,"a":2})"})
    EXPECT_TRUE(complete(*en, ok)) << ok;
  for (const char* bad : {R"("blue")", "2", "false", R"("re")", "123", R"({"a":2,"b":1})"})
    EXPECT_FALSE(complete(*en, bad)) << bad;
  JsonState st(*en);
  ASSERT_TRUE(st.feed("\"red\""));
  EXPECT_TRUE(st.done());
  // `type` filters enum values.
  EXPECT_FALSE(complete(*schema(R"({"type":"string","enum":["a",1]})"), "1"));
  auto cst = schema(R"({"type":"object","properties":{"kind":{"const":"x"}},"required":["kind"]})");
  EXPECT_TRUE(complete(*cst, R"({"kind":"x"})"));
  EXPECT_FALSE(prefix_ok(*cst, R"({"kind":"y)"));

  auto any = schema(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer"},{"type":"null"}]})");
  EXPECT_TRUE(complete(*any, R"("ab")"));
  EXPECT_TRUE(complete(*any, "7"));
  EXPECT_TRUE(complete(*any, "null"));
  EXPECT_FALSE(prefix_ok(*any, R"("abc)"));
  EXPECT_FALSE(prefix_ok(*any, "true"));

  auto ref = schema(R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},
      "type":"array","items":{"$ref":"#/$defs/pt"}})");
  EXPECT_TRUE(complete(*ref, R"([{"x":1},{"x":2}])"));
  EXPECT_FALSE(prefix_ok(*ref, R"([{"y")"));
}

TEST(JsonConstraint, UnsupportedKeywordsAndBadSchemas) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"string","pattern":"\\bx"})", "'pattern'"},
      {R"({"type":"object","patternProperties":{}})", "'patternProperties'"},
      {R"({"type":"string","format":"uri"})", "'format'"},
      {R"({"type":"number","multipleOf":0.5})", "'multipleOf'"},
      {R"({"oneOf":[{"type":"string"}]})", "'oneOf'"},
      {R"({"allOf":[{"type":"string"}]})", "'allOf'"},
      {R"({"type":"object","properties":{"a":{"not":{}}}})", "'not'"},
      {R"({"type":"array","prefixItems":[]})", "'prefixItems'"},
      {R"({"type":"object","minProperties":1})", "'minProperties'"},
      {R"({"type":"wizard"})", "unknown type 'wizard'"},
      {R"({"type":"string","minLength":3,"maxLength":2})", "'minLength' is larger"},
      {R"({"type":"object","required":["a"]})", "required property 'a'"},
      {R"({"$ref":"https://example.com/s.json"})", "only local '$ref'"},
      {R"({"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"}}},"$ref":"#/$defs/n"})", "recursive"},
      {R"({"anyOf":[{"type":"integer"},{"type":"number"}]})", "different JSON types"},
      {R"({"type":"string","enum":[1,2]})", "no 'enum'"},
      {R"({"items":[{"type":"string"}]})", "tuple"},
      {R"({"type":"object","properties":{"a":false}})", "accepts nothing"},
  };
  for (const auto& [s, want] : cases) {
    const std::string e = schema_error(s);
    EXPECT_NE(e.find(want), std::string::npos) << s << " -> " << e;
  }
  std::string deep = "{}";
  for (int i = 0; i < 40; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_NE(schema_error(deep).find("deeper"), std::string::npos);
  // A flat chain of 20,000 $refs (a hostile request a few hundred KB long) is
  // refused by the nesting limit instead of recursing 20,000 frames deep; so
  // are nested anyOfs.
  std::string chain = R"({"$defs":{)";
  for (int i = 0; i < 20000; ++i) chain += fmt::format(R"("a{}":{{"$ref":"#/$defs/a{}"}},)", i, i + 1);
  chain += R"("a20000":{"type":"string"}},"$ref":"#/$defs/a0"})";
  EXPECT_NE(schema_error(chain).find("deeper"), std::string::npos);
  std::string any = R"({"type":"string"})";
  for (int i = 0; i < 40; ++i) any = R"({"anyOf":[)" + any + "]}";
  EXPECT_NE(schema_error(any).find("deeper"), std::string::npos);
  // A short chain is fine.
  EXPECT_NO_THROW(schema(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"type":"string"}},"$ref":"#/$defs/a"})"));
  // Annotations are fine.
  EXPECT_NO_THROW(schema(R"({"title":"t","description":"d","$schema":"x","type":"string","default":"a",
                             "examples":["b"]})"));
}

// Brute force: each token's bytes fed to a copy of the state.
std::vector<uint8_t> brute_mask(const JsonConstraint& c, const JsonVocab& v, std::span<const int32_t> stops) {
  std::vector<uint8_t> out(static_cast<size_t>(v.size()), 0);
  for (int32_t i = 0; i < v.size(); ++i) {
    if (!v.usable(i)) continue;
    JsonState st(c.state());
    out[static_cast<size_t>(i)] = st.feed(v.bytes(i));
  }
  for (int32_t s : stops) out[static_cast<size_t>(s)] = c.accepting();
  return out;
}

TEST(JsonConstraint, MaskEqualsBruteForce) {
  // Multi-byte tokens, shared prefixes, duplicates, partial UTF-8, an empty one.
  std::vector<std::string> bytes = {"{",   "}",    "{\"",  "\":",   "\"",     ",",   ", \"", "\"name", "\"na",
                                    "me",  "\":\"", "abc", "a",     "\xc3",   "\xa9", "\xc3\xa9", "1",  "12",
                                    "0",   ".",    "5e",   "-",     "true",   "tr",   "ue",    "null", " ",
                                    "  ",  "\n",   "[",    "]",     "[\"",    "\"]",  "\\",    "n",    "\\u00e9",
                                    "age", "\":1", "}\n",  "",      "{}",     "xyz\"", "\"a\"", "\"}", "<eos>"};
  // Every single byte is a token too, as in byte-level BPE (without them a
  // prefix may have no token to go on with: no ':' after a closed key).
  for (int b = 0; b < 256; ++b) bytes.insert(bytes.end() - 1, std::string(1, static_cast<char>(b)));
  const int32_t stop = static_cast<int32_t>(bytes.size()) - 1;
  bytes[static_cast<size_t>(stop)] = "";  // a stop token has no bytes of its own here
  auto v = JsonVocab::from_bytes(bytes);
  const std::vector<int32_t> stops{stop};
  const std::vector<std::shared_ptr<const JsonGrammar>> grammars = {
      JsonGrammar::any_object(),
      schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},"age":{"type":"integer"},
          "ok":{"type":"boolean"},"xs":{"type":"array","items":{"enum":["a","abc"]},"maxItems":3}},
          "required":["name","age"]})"),
      schema(R"({"type":"integer"})"),
      schema(R"({"type":"object","properties":{"n":{"type":"integer","minimum":-20,"maximum":300,"multipleOf":3},
          "x":{"type":"number","minimum":-1.5,"maximum":99},"d":{"type":"string","format":"date-time"}},
          "required":["n","x","d"]})"),
  };
  std::mt19937_64 rng(5);
  int checked = 0;
  for (const auto& g : grammars) {
    for (int run = 0; run < 20; ++run) {
      JsonConstraint c(g, v);
      std::vector<uint8_t> got;
      std::string text;
      for (int step = 0; step < 40; ++step) {
        const size_t n = c.allowed(got, stops);
        const std::vector<uint8_t> want = brute_mask(c, *v, stops);
        ASSERT_EQ(got, want) << "run " << run << " step " << step;
        ASSERT_EQ(n, static_cast<size_t>(std::count(want.begin(), want.end(), 1)));
        ++checked;
        std::vector<int32_t> ok;
        for (int32_t i = 0; i < v->size(); ++i)
          if (got[static_cast<size_t>(i)]) ok.push_back(i);
        ASSERT_FALSE(ok.empty()) << "dead end after " << text;
        const int32_t t = ok[rng() % ok.size()];
        if (t == stop) break;
        ASSERT_TRUE(c.advance(t));
        text += v->bytes(t);
        if (c.done()) break;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

// Random logits over the bundled model's 4096-token vocabulary: greedy and
// sampled, the output always parses and validates.
TEST(JsonConstraint, RandomGenerationOverModelVocab) {
  const Tokenizer tok = Tokenizer::load(kTinyTokenizer);
  auto v = JsonVocab::build(tok, 4096);
  std::vector<int32_t> stops;
  for (const char* s : {"<|endoftext|>", "<|user|>", "<|observation|>"})
    if (auto id = tok.token_id(s)) stops.push_back(*id);
  // Special tokens never come inside JSON.
  for (int32_t i = 0; i < 4096; ++i) {
    if (tok.is_special(i) || tok.is_added(i)) {
      EXPECT_FALSE(v->usable(i)) << i;
    }
  }
  const std::vector<std::string> schemas = {
      R"({"type":"object","properties":{"answer":{"enum":["yes","no","maybe"]},"confident":{"type":"boolean"},
          "score":{"type":"integer"},"note":{"type":"string","maxLength":12},
          "tags":{"type":"array","items":{"type":"string","maxLength":5},"maxItems":3}},
          "required":["answer","confident","score","note","tags"],"additionalProperties":false})",
      R"({"type":"array","items":{"anyOf":[{"type":"number"},{"type":"null"},{"type":"string","maxLength":3}]},
          "minItems":2,"maxItems":4})",
      R"({"$defs":{"p":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":["integer","null"]}},
          "required":["x","y"]}},"type":"object","properties":{"points":{"type":"array","items":{"$ref":"#/$defs/p"},
          "maxItems":2},"label":{"const":"ok"}},"required":["points","label"]})",
      R"({"enum":["alpha","beta",42]})",
      R"({"type":"object","properties":{"n":{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991},
          "pct":{"type":"number","minimum":0,"maximum":100},"k":{"type":"integer","exclusiveMinimum":2,
          "exclusiveMaximum":40,"multipleOf":4},"when":{"type":"string","format":"date-time"},
          "day":{"type":"string","format":"date"},"at":{"type":"string","format":"time"},
          "id":{"type":"string","format":"uuid"}},"required":["n","pct","k","when","day","at","id"],
          "additionalProperties":false})",
  };
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> logits(4096);
  int finished = 0;
  for (const std::string& sj : schemas) {
    const Json sch = Json::parse(sj);
    auto g = JsonGrammar::from_schema(nlohmann::ordered_json::parse(sj));
    for (int run = 0; run < 6; ++run) {
      const bool greedy = run % 2 == 0;
      JsonConstraint c(g, v);
      std::string text;
      bool ended = false;
      for (int step = 0; step < 400 && !ended; ++step) {
        for (float& x : logits) x = normal(rng);
        ASSERT_GT(c.mask(logits, stops), 0u) << text;
        int32_t t = 0;
        if (greedy) {
          t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        } else {  // uniform over the allowed tokens: an adversarial sampler
          std::vector<int32_t> ok;
          for (int32_t i = 0; i < 4096; ++i)
            if (logits[static_cast<size_t>(i)] > -INFINITY) ok.push_back(i);
          t = ok[rng() % ok.size()];
        }
        if (std::find(stops.begin(), stops.end(), t) != stops.end()) {
          ASSERT_TRUE(c.accepting());
          ended = true;
          break;
        }
        ASSERT_TRUE(c.advance(t));
        text += v->bytes(t);
        if (c.done()) ended = true;
      }
      ASSERT_TRUE(ended) << "did not finish: " << text;
      Json out;
      ASSERT_NO_THROW(out = Json::parse(text)) << text;
      EXPECT_TRUE(validate(sch, out, sch)) << sj << "\n -> " << text;
      ++finished;
    }
  }
  EXPECT_EQ(finished, 30);
}

// json_object mode to the end, over the bundled model's vocabulary: every
// token of an object is allowed in turn, stop ids only once it is complete,
// and once the top-level '}' is in, the answer is done: the mask leaves the
// stop ids alone (none at all without them) and no token advances it.
TEST(JsonConstraint, JsonObjectCompletesThenOnlyStopIds) {
  const Tokenizer tok = Tokenizer::load(kTinyTokenizer);
  auto v = JsonVocab::build(tok, 4096);
  std::vector<int32_t> stops;
  for (const char* s : {"<|endoftext|>", "<|user|>", "<|observation|>"})
    if (auto id = tok.token_id(s)) stops.push_back(*id);
  ASSERT_EQ(stops.size(), 3u);
  const std::string text = "{\"name\": \"caf\xc3\xa9\", \"tags\": [1, 2.5, {\"ok\": true}], \"none\": null}";
  ASSERT_TRUE(Json::accept(text));
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_GT(ids.size(), 5u);
  JsonConstraint c(JsonGrammar::any_object(), v);
  std::vector<uint8_t> allowed;
  std::string fed;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_FALSE(c.done()) << fed;
    EXPECT_FALSE(c.accepting()) << fed;  // an object is complete only at its '}'
    const size_t n = c.allowed(allowed, stops);
    ASSERT_TRUE(allowed[static_cast<size_t>(ids[i])]) << "token " << i << " after " << fed;
    for (int32_t s : stops) EXPECT_FALSE(allowed[static_cast<size_t>(s)]) << fed;
    EXPECT_GE(n, 1u) << fed;
    ASSERT_TRUE(c.advance(ids[i])) << fed;
    fed += v->bytes(ids[i]);
  }
  ASSERT_EQ(fed, text);
  EXPECT_TRUE(c.accepting());
  EXPECT_TRUE(c.done());
  // Only the stop ids remain.
  EXPECT_EQ(c.allowed(allowed, stops), stops.size());
  for (int32_t i = 0; i < 4096; ++i) {
    const bool stop = std::find(stops.begin(), stops.end(), i) != stops.end();
    EXPECT_EQ(allowed[static_cast<size_t>(i)], stop ? 1 : 0) << i;
  }
  std::vector<float> logits(4096, 1.f);
  EXPECT_EQ(c.mask(logits, stops), stops.size());
  for (int32_t i = 0; i < 4096; ++i) {
    const bool stop = std::find(stops.begin(), stops.end(), i) != stops.end();
    EXPECT_EQ(std::isfinite(logits[static_cast<size_t>(i)]), stop) << i;
  }
  std::fill(logits.begin(), logits.end(), 1.f);
  EXPECT_EQ(c.mask(logits, {}), 0u);
  for (float x : logits) EXPECT_EQ(x, -INFINITY);
  // Nothing may follow: not whitespace, not a second object, not a comma.
  for (const char* after : {" ", "\n", "}", "{", ","}) {
    const std::vector<int32_t> t = tok.encode(after);
    ASSERT_EQ(t.size(), 1u) << after;
    EXPECT_FALSE(c.advance(t[0])) << after;
  }
  EXPECT_TRUE(c.done());
  // The smallest object: "{" then "}".
  JsonConstraint e(JsonGrammar::any_object(), v);
  for (const char* piece : {"{", "}"}) {
    const std::vector<int32_t> t = tok.encode(piece);
    ASSERT_EQ(t.size(), 1u) << piece;
    EXPECT_FALSE(e.done());
    ASSERT_TRUE(e.advance(t[0])) << piece;
  }
  EXPECT_TRUE(e.done());
  EXPECT_EQ(e.allowed(allowed, stops), stops.size());
}

// The string fast path (plain tokens by length, the rest walked) == brute force.
TEST(JsonConstraint, MaskEqualsBruteForceLargeVocab) {
  auto v = JsonVocab::from_bytes(test_util::json_fake_vocab(20000));
  EXPECT_GT(v->plain_tokens(), 10000u);
  auto g = schema(R"({"type":"object","properties":{"s":{"type":"string","maxLength":6},"t":{"type":"string"},
      "m":{"type":"object","additionalProperties":{"type":"string","minLength":1,"maxLength":3}}},
      "required":["s","t","m"]})");
  std::mt19937_64 rng(9);
  int checked = 0;
  for (int run = 0; run < 4; ++run) {
    JsonConstraint c(g, v);
    std::vector<uint8_t> got;
    std::string text;
    for (int step = 0; step < 30 && !c.done(); ++step) {
      c.allowed(got, {});
      ASSERT_EQ(got, brute_mask(c, *v, {})) << text;
      ++checked;
      std::vector<int32_t> ok;
      for (int32_t i = 0; i < v->size(); ++i)
        if (got[static_cast<size_t>(i)]) ok.push_back(i);
      ASSERT_FALSE(ok.empty()) << text;
      // Prefer short tokens so the strings end sometimes.
      int32_t t = ok[rng() % ok.size()];
      for (int k = 0; k < 3 && v->bytes(t).size() > 1; ++k) t = ok[rng() % ok.size()];
      ASSERT_TRUE(c.advance(t));
      text += v->bytes(t);
    }
  }
  EXPECT_GE(checked, 40);
}

// Speculative decoding's queries (token_mask.h): forced() names the only
// token that may come next (-1 when none or several may); save() / restore()
// let drafts run the recogniser ahead and return it exactly where it was
// (its mask afterwards equals a constraint that never probed).
TEST(JsonConstraint, ForcedTokenAndProbe) {
  // No whitespace tokens: after '{' only '"' may come, and so on.
  const std::vector<std::string> bytes = {"{", "\"", "name", ":", "x", "y", "}", "na", "me"};
  auto v = JsonVocab::from_bytes(bytes);
  auto g = schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":3}},
                      "required":["name"],"additionalProperties":false})");
  const std::vector<int32_t> stops = {};
  JsonConstraint c(g, v);
  auto mask_of = [&](JsonConstraint& k) {
    std::vector<float> l(bytes.size(), 0.0f);
    k.mask(l, stops);
    return l;
  };
  EXPECT_EQ(c.forced(stops), 0);  // '{'
  ASSERT_TRUE(c.advance(0));
  EXPECT_EQ(c.forced(stops), 1);  // '"'
  ASSERT_TRUE(c.advance(1));
  EXPECT_EQ(c.forced(stops), -1);  // "name" or "na"
  ASSERT_TRUE(c.advance(7));
  EXPECT_EQ(c.forced(stops), 8);  // "me"
  ASSERT_TRUE(c.advance(8));
  EXPECT_EQ(c.forced(stops), 1);  // the key's closing quote
  // The reference: a constraint advanced to the same place, never probed.
  JsonConstraint ref(g, v);
  for (int32_t t : {0, 1, 7, 8}) ASSERT_TRUE(ref.advance(t));
  const std::vector<float> want = mask_of(ref);
  // Probe ahead over forced tokens and a draft, then come back.
  ASSERT_TRUE(c.save());
  for (int32_t t : {1, 3, 1}) {
    EXPECT_EQ(c.forced(stops), t);
    ASSERT_TRUE(c.advance(t));
  }
  EXPECT_EQ(c.forced(stops), -1);  // 'x', 'y' or the closing quote
  EXPECT_TRUE(c.advance(4));
  EXPECT_FALSE(c.advance(2));  // refused (past maxLength): the state stays
  c.restore();
  EXPECT_EQ(mask_of(c), want);
  EXPECT_EQ(c.forced(stops), 1);
  // save() then restore() without moving: the cached set holds.
  ASSERT_TRUE(c.save());
  EXPECT_EQ(c.forced(stops), 1);
  c.restore();
  EXPECT_EQ(mask_of(c), want);
  // ... and a probe that moves after forced() at the saved state puts that
  // set back: masks at the restored state are right without a new walk.
  ASSERT_TRUE(c.save());
  EXPECT_EQ(c.forced(stops), 1);
  ASSERT_TRUE(c.advance(1));
  EXPECT_NE(mask_of(c), want);
  c.restore();
  EXPECT_EQ(mask_of(c), want);
  ASSERT_TRUE(c.advance(1));
  ASSERT_TRUE(ref.advance(1));
  EXPECT_EQ(mask_of(c), mask_of(ref));
}

}  // namespace
}  // namespace strata::json_constraint_test
