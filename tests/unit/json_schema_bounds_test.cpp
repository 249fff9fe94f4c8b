// Numeric bounds (minimum/maximum/exclusiveMinimum/exclusiveMaximum,
// multipleOf for integers) and string formats (date, time, date-time, uuid)
// in the response_format recogniser (text/json_state.h): for small ranges the
// exact set of numbers it accepts, by enumerating every byte string; for
// large ones random byte walks whose every finished value is parsed and
// checked, and the bounds themselves reached; for formats the exact set of
// days of a year and times of a day, and random walks checked by an
// independent regex. Nothing it accepts as finished violates the schema.
#include <gtest/gtest.h>

#include <charconv>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json.h"
#include "text/json_grammar.h"
#include "text/json_state.h"

namespace strata::json_schema_bounds_test {
namespace {

std::shared_ptr<const JsonGrammar> schema(const std::string& s) {
  return JsonGrammar::from_schema(nlohmann::ordered_json::parse(s));
}

std::string schema_error(const std::string& s) {
  try {
    schema(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::string kNumAlphabet = "-0123456789.eE+";

// Every byte string over `alphabet` of at most `maxlen` bytes the state
// accepts as a finished answer; `dead` counts prefixes that can neither end
// nor go on (there must be none).
// Gives up (and the caller fails) past 1,000,000 prefixes: the sets here are
// small, and a recogniser that lets every digit through must fail, not hang.
void enumerate(const JsonState& st, std::string& cur, size_t maxlen, const std::string& alphabet,
               std::vector<std::string>& out, int& dead, int64_t& visits) {
  if (st.accepting()) out.push_back(cur);
  if (cur.size() >= maxlen || ++visits > 1000000) return;
  bool any = false;
  for (char c : alphabet) {
    JsonState n(st);
    if (!n.feed(static_cast<uint8_t>(c))) continue;
    any = true;
    cur.push_back(c);
    enumerate(n, cur, maxlen, alphabet, out, dead, visits);
    cur.pop_back();
  }
  if (!any && !st.accepting()) ++dead;
}

std::set<std::string> finished(const std::string& sch, size_t maxlen = 24) {
  auto g = schema(sch);
  std::vector<std::string> out;
  std::string cur;
  int dead = 0;
  int64_t visits = 0;
  enumerate(JsonState(*g), cur, maxlen, kNumAlphabet, out, dead, visits);
  EXPECT_EQ(dead, 0) << sch;
  EXPECT_LE(visits, 1000000) << sch;
  return {out.begin(), out.end()};
}

// The JSON integers in [lo, hi] that are multiples of m ("-0" too where 0 is).
std::set<std::string> ints(int64_t lo, int64_t hi, int64_t m = 1) {
  std::set<std::string> s;
  for (int64_t x = lo; x <= hi; ++x)
    if (x % m == 0) s.insert(std::to_string(x));
  if (lo <= 0 && hi >= 0) s.insert("-0");
  return s;
}

TEST(JsonSchemaBounds, IntegerSetsExact) {
  EXPECT_EQ(finished(R"({"type":"integer","minimum":10,"maximum":20})"), ints(10, 20));
  EXPECT_EQ(finished(R"({"type":"integer","minimum":-20,"maximum":-10})"), ints(-20, -10));
  EXPECT_EQ(finished(R"({"type":"integer","minimum":-5,"maximum":5})"), ints(-5, 5));
  EXPECT_EQ(finished(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})"), ints(1, 9));
  EXPECT_EQ(finished(R"({"type":"integer","minimum":0,"maximum":10,"exclusiveMinimum":true})"), ints(1, 10));
  EXPECT_EQ(finished(R"({"type":"integer","minimum":1.5,"maximum":4.5})"), ints(2, 4));
  EXPECT_EQ(finished(R"({"type":"integer","exclusiveMinimum":-3.5,"exclusiveMaximum":3.0})"), ints(-3, 2));
  EXPECT_EQ(finished(R"({"type":"integer","minimum":0,"maximum":100,"multipleOf":7})"), ints(0, 100, 7));
  EXPECT_EQ(finished(R"({"type":"integer","minimum":-35,"maximum":123,"multipleOf":10})"), ints(-35, 123, 10));
  EXPECT_EQ(finished(R"({"type":"integer","minimum":990,"maximum":1010})"), ints(990, 1010));
  EXPECT_EQ(finished(R"({"type":"integer","minimum":7,"maximum":7})"), ints(7, 7));
  // No type: the bounds say number; a number's integers are exact too.
  std::set<std::string> got = finished(R"({"minimum":-3,"maximum":3})", 2);
  for (const std::string& s : ints(-3, 3)) EXPECT_TRUE(got.count(s)) << s;
}

// Finish a random walk over the number alphabet (uniform over the bytes the
// state takes; ends with probability 1/4 where it may).
std::string walk(const JsonGrammar& g, std::mt19937_64& rng, const std::string& alphabet, int steps = 200) {
  JsonState st(g);
  std::string text;
  for (int step = 0; step < steps; ++step) {
    std::vector<char> ok;
    for (char c : alphabet) {
      JsonState n(st);
      if (n.feed(static_cast<uint8_t>(c))) ok.push_back(c);
    }
    if (st.accepting() && (ok.empty() || rng() % 4 == 0)) return text;
    EXPECT_FALSE(ok.empty()) << "dead end after " << text;
    if (ok.empty()) return "<dead>";
    const char c = ok[rng() % ok.size()];
    st.feed(static_cast<uint8_t>(c));
    text.push_back(c);
  }
  ADD_FAILURE() << "did not finish: " << text;
  return "<long>";
}

bool complete(const JsonGrammar& g, std::string_view text) {
  JsonState st(g);
  return st.feed(text) && st.accepting();
}

// What zod's z.number().int() emits.
TEST(JsonSchemaBounds, ZodSafeIntegerAndOneSided) {
  const std::string zod = R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})";
  auto g = schema(zod);
  EXPECT_TRUE(complete(*g, "9007199254740991"));
  EXPECT_TRUE(complete(*g, "-9007199254740991"));
  EXPECT_TRUE(complete(*g, "0"));
  EXPECT_FALSE(complete(*g, "9007199254740992"));
  EXPECT_FALSE(complete(*g, "-9007199254740992"));
  EXPECT_FALSE(complete(*g, "1.5"));
  std::mt19937_64 rng(3);
  for (int i = 0; i < 300; ++i) {
    const std::string t = walk(*g, rng, kNumAlphabet);
    const Json v = Json::parse(t);
    ASSERT_TRUE(v.is_number_integer()) << t;
    EXPECT_LE(std::abs(v.get<int64_t>()), int64_t{9007199254740991}) << t;
  }
  // One-sided bounds.
  auto nonneg = schema(R"({"type":"integer","minimum":0})");
  auto pos = schema(R"({"type":"integer","exclusiveMinimum":0})");
  auto neg = schema(R"({"type":"integer","maximum":-1})");
  EXPECT_TRUE(complete(*nonneg, "0"));
  EXPECT_TRUE(complete(*nonneg, "-0"));  // JSON -0 is 0
  EXPECT_FALSE(complete(*nonneg, "-1"));
  EXPECT_FALSE(complete(*pos, "0"));
  EXPECT_FALSE(complete(*pos, "-0"));
  EXPECT_TRUE(complete(*pos, "1"));
  EXPECT_TRUE(complete(*neg, "-1"));
  EXPECT_FALSE(complete(*neg, "0"));
  for (int i = 0; i < 200; ++i) {
    EXPECT_GE(Json::parse(walk(*nonneg, rng, kNumAlphabet)).get<double>(), 0);
    EXPECT_GT(Json::parse(walk(*pos, rng, kNumAlphabet)).get<double>(), 0);
    EXPECT_LE(Json::parse(walk(*neg, rng, kNumAlphabet)).get<double>(), -1);
  }
  // Inside an object, as AI SDK generateObject sends it.
  auto obj = schema(R"({"type":"object","properties":{"n":{"type":"integer","minimum":-9007199254740991,
      "maximum":9007199254740991}},"required":["n"],"additionalProperties":false,"$schema":"x"})");
  EXPECT_TRUE(complete(*obj, R"({"n":42})"));
  EXPECT_FALSE(complete(*obj, R"({"n":1e3})"));
}

// `number`: integers exact, fractions only where the unit interval is in
// range, no exponent; every finished value in range.
TEST(JsonSchemaBounds, NumberBoundsSound) {
  struct Case {
    std::string s;
    double lo, hi;
    bool lo_ex, hi_ex;
    std::vector<std::string> reach, not_reach;
  };
  const std::vector<Case> cases = {
      {R"({"type":"number","minimum":0,"maximum":1})", 0, 1, false, false, {"0", "1", "0.5", "0.999", "-0"},
       {"1.0", "-0.5", "1e0"}},
      {R"({"type":"number","minimum":-2.5,"maximum":2.5})", -2.5, 2.5, false, false,
       {"-2", "2", "1.99", "-1.99", "0.0"}, {"2.4", "-2.4", "3", "-3"}},
      {R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":10})", 0, 10, true, true,
       {"1", "9", "9.99", "1.5"}, {"0", "-0", "0.5", "10"}},
      {R"({"type":"number","minimum":-100,"exclusiveMaximum":-1})", -100, -1, false, true,
       {"-100", "-2", "-99.5", "-2.5"}, {"-1", "-100.5", "-0.5", "-1.5"}},
  };
  std::mt19937_64 rng(9);
  for (const Case& c : cases) {
    auto g = schema(c.s);
    for (const std::string& r : c.reach) EXPECT_TRUE(complete(*g, r)) << c.s << " " << r;
    for (const std::string& r : c.not_reach) EXPECT_FALSE(complete(*g, r)) << c.s << " " << r;
    auto in_range = [&](double x) {
      return (c.lo_ex ? x > c.lo : x >= c.lo) && (c.hi_ex ? x < c.hi : x <= c.hi);
    };
    for (const std::string& t : finished(c.s, 5)) EXPECT_TRUE(in_range(Json::parse(t).get<double>())) << c.s << " " << t;
    for (int i = 0; i < 300; ++i) {
      const std::string t = walk(*g, rng, kNumAlphabet);
      EXPECT_TRUE(in_range(Json::parse(t).get<double>())) << c.s << " " << t;
    }
  }
}

TEST(JsonSchemaBounds, Errors) {
  EXPECT_NE(schema_error(R"({"type":"integer","minimum":5,"maximum":4})").find("no integer"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"integer","minimum":1,"maximum":6,"multipleOf":7})").find("no integer"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"number","multipleOf":0.5})").find("'multipleOf'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"integer","multipleOf":2.5})").find("'multipleOf'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"integer","multipleOf":0})").find("'multipleOf'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"integer","minimum":"1"})").find("'minimum' must be a number"),
            std::string::npos);
  // A number range with no integer in it is beyond the generated subset.
  EXPECT_NE(schema_error(R"({"type":"number","minimum":0.2,"maximum":0.8})").find("no integer"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"string","format":"uri"})").find("'format'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"string","format":"date","maxLength":3})").find("'format'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"string","pattern":"\\Bx"})").find("'pattern'"), std::string::npos);
  EXPECT_NO_THROW(schema(R"({"type":"string","pattern":"a+"})"));
  EXPECT_NO_THROW(schema(R"({"type":"integer","title":"t","description":"d","default":1,"examples":[2],
      "$schema":"https://json-schema.org/draft/2020-12/schema","$comment":"c","deprecated":false,"$id":"x",
      "minimum":0})"));
}

// ---- formats ----

int days_in(int y, int m) {
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0) ? 29 : kDays[m - 1];
}

// Every completion of `prefix` over `alphabet` (counted, not kept).
int64_t count_completions(const JsonState& st, const std::string& alphabet, size_t left, std::set<std::string>* keep,
                          std::string& cur) {
  int64_t n = 0;
  if (st.accepting()) {
    ++n;
    if (keep) keep->insert(cur);
  }
  if (!left) return n;
  for (char c : alphabet) {
    JsonState x(st);
    if (!x.feed(static_cast<uint8_t>(c))) continue;
    cur.push_back(c);
    n += count_completions(x, alphabet, left - 1, keep, cur);
    cur.pop_back();
  }
  return n;
}

TEST(JsonSchemaFormats, DatesOfAYearAndTimesOfADayExact) {
  auto g = schema(R"({"type":"string","format":"date"})");
  for (int y : {2023, 2024, 1900, 2000, 0}) {
    JsonState st(*g);
    const std::string pre = fmt::format("\"{:04d}-", y);
    ASSERT_TRUE(st.feed(pre));
    std::set<std::string> got;
    std::string cur;
    count_completions(st, "0123456789-\"", 6, &got, cur);
    std::set<std::string> want;
    for (int m = 1; m <= 12; ++m)
      for (int d = 1; d <= days_in(y, m); ++d) want.insert(fmt::format("{:02d}-{:02d}\"", m, d));
    EXPECT_EQ(got, want) << y;
  }
  auto t = schema(R"({"type":"string","format":"time"})");
  JsonState st(*t);
  ASSERT_TRUE(st.feed("\""));
  std::string cur;
  // HH:MM:SSZ" : 10 bytes.
  EXPECT_EQ(count_completions(st, "0123456789:Z\"", 10, nullptr, cur), 86400);
  EXPECT_TRUE(complete(*t, "\"23:59:59.123456789+05:30\""));
  EXPECT_TRUE(complete(*t, "\"00:00:00-23:59\""));
  EXPECT_FALSE(complete(*t, "\"24:00:00Z\""));
  EXPECT_FALSE(complete(*t, "\"12:60:00Z\""));
  EXPECT_FALSE(complete(*t, "\"12:00:00\""));
  EXPECT_FALSE(complete(*t, "\"12:00:00.Z\""));
  EXPECT_FALSE(complete(*t, "\"12:00:00+24:00\""));
}

TEST(JsonSchemaFormats, RandomWalksMatchIndependentChecks) {
  const std::regex date_re(R"re(^"(\d{4})-(\d{2})-(\d{2})"$)re");
  const std::regex uuid_re(R"re(^"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"$)re");
  auto date_ok = [](int y, int m, int d) { return m >= 1 && m <= 12 && d >= 1 && d <= days_in(y, m); };
  auto time_ok = [&](const std::smatch& t, size_t at) {
    const int h = std::stoi(t[at]), mi = std::stoi(t[at + 1]), s = std::stoi(t[at + 2]);
    bool ok = h <= 23 && mi <= 59 && s <= 59;
    if (t[at + 5].matched) ok = ok && std::stoi(t[at + 5]) <= 23 && std::stoi(t[at + 6]) <= 59;
    return ok;
  };
  std::string alpha;
  for (int c = 0x20; c < 0x7f; ++c) alpha.push_back(static_cast<char>(c));
  std::mt19937_64 rng(21);
  auto d = schema(R"({"format":"date"})");
  auto t = schema(R"({"type":"string","format":"time"})");
  auto dt = schema(R"({"type":"string","format":"date-time"})");
  auto u = schema(R"({"type":"string","format":"uuid"})");
  const std::regex dt_re(R"re(^"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-](\d{2}):(\d{2}))"$)re");
  const std::regex t_re(R"re(^"(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-](\d{2}):(\d{2}))"$)re");
  for (int i = 0; i < 300; ++i) {
    std::smatch m;
    const std::string a = walk(*d, rng, alpha);
    ASSERT_TRUE(std::regex_match(a, m, date_re)) << a;
    EXPECT_TRUE(date_ok(std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]))) << a;
    const std::string b = walk(*t, rng, alpha);
    ASSERT_TRUE(std::regex_match(b, m, t_re)) << b;
    EXPECT_TRUE(time_ok(m, 1)) << b;
    const std::string c = walk(*dt, rng, alpha);
    ASSERT_TRUE(std::regex_match(c, m, dt_re)) << c;
    EXPECT_TRUE(date_ok(std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3])) && time_ok(m, 4)) << c;
    const std::string e = walk(*u, rng, alpha);
    EXPECT_TRUE(std::regex_match(e, uuid_re)) << e;
  }
  EXPECT_TRUE(complete(*d, "\"2024-02-29\""));
  EXPECT_FALSE(complete(*d, "\"2023-02-29\""));
  EXPECT_FALSE(complete(*d, "\"2024-04-31\""));
  EXPECT_TRUE(complete(*dt, "\"2024-12-31T23:59:59Z\""));
  EXPECT_TRUE(complete(*u, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_FALSE(complete(*u, "\"123E4567-e89b-12d3-a456-426614174000\""));
}

// format email: random walks (over printable ASCII, and over the characters
// an address uses, so long local parts and labels are reached) always end
// in an address an independent check accepts, within 254 characters; the
// walk never dead-ends (walk() fails the test if it does).
TEST(JsonSchemaFormats, EmailWalksMatchAnIndependentCheck) {
  auto g = schema(R"({"type":"string","format":"email"})");
  const std::regex re(R"re(^"([A-Za-z0-9_%+-]+(\.[A-Za-z0-9_%+-]+)*)@(([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,})"$)re");
  auto labels_ok = [](const std::string& domain) {
    size_t start = 0;
    while (start <= domain.size()) {
      const size_t dot = domain.find('.', start);
      const size_t len = (dot == std::string::npos ? domain.size() : dot) - start;
      if (len < 1 || len > 63) return false;
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return true;
  };
  std::string printable, address = "\"@.-";
  for (int c = 0x20; c < 0x7f; ++c) printable.push_back(static_cast<char>(c));
  for (char c = 'a'; c <= 'c'; ++c) address.push_back(c);
  address += "9";
  std::mt19937_64 rng(5);
  size_t longest = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string e = walk(*g, rng, i % 2 ? printable : address, 400);
    std::smatch m;
    ASSERT_TRUE(std::regex_match(e, m, re)) << e;
    EXPECT_LE(m[1].length(), 64u) << e;
    EXPECT_TRUE(labels_ok(m[3])) << e;
    EXPECT_LE(e.size(), 254u + 2) << e;
    longest = std::max(longest, e.size());
  }
  EXPECT_GT(longest, 100u) << "the walks never tested long addresses";
  EXPECT_TRUE(complete(*g, "\"first.last+tag@mail.example.org\""));
  EXPECT_TRUE(complete(*g, "\"a@b-c.io\""));
  for (const char* bad : {"\"a@b\"", "\".a@b.io\"", "\"a.@b.io\"", "\"a..b@c.io\"", "\"a@-b.io\"", "\"a@b-.io\"",
                          "\"a@b.c\"", "\"a@b.i9\"", "\"a@@b.io\"", "\"a b@c.io\"", "\"@b.io\""})
    EXPECT_FALSE(complete(*g, bad)) << bad;
  const std::string local64(64, 'x'), local65(65, 'x');
  EXPECT_TRUE(complete(*g, "\"" + local64 + "@b.io\""));
  EXPECT_FALSE(complete(*g, "\"" + local65 + "@b.io\""));
  std::string near_cap = "\"a@";
  while (near_cap.size() < 1 + 2 + 240) near_cap += "bbbbbbbbb.";
  JsonState st(*g);
  ASSERT_TRUE(st.feed(near_cap));
  // Close to 254: only what can still finish in time is taken.
  while (st.can_continue() && !st.accepting()) ASSERT_TRUE(st.feed('c') || st.feed('"'));
}

}  // namespace
}  // namespace strata::json_schema_bounds_test
