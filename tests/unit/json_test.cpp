// parse_json and read_small_file on hostile input: duplicate keys at any
// level, nesting beyond the bound (without recursing), syntax errors, and
// oversized files are strata::Errors naming the origin.
#include "core/io.h"
#include "core/json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"
#include "core/error.h"

namespace strata::json_test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using test_util::error_of;
using test_util::TempDir;
using test_util::write_file;

std::string parse_error(const std::string& text, int max_depth = kMaxJsonDepth) {
  return error_of([&] { parse_json(text, "doc.json", max_depth); });
}

std::string nested_arrays(int n) { return std::string(static_cast<size_t>(n), '[') + std::string(static_cast<size_t>(n), ']'); }

TEST(JsonTest, ValidDocument) {
  const Json j = parse_json(
      R"({"a": 1, "b": [true, null, 2.5, "x"], "c": {"d": {"e": -3}}, "u": 18446744073709551615, "s": "\u00e9"})",
      "doc.json");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"].size(), 4u);
  EXPECT_TRUE(j["b"][1].is_null());
  EXPECT_EQ(j["c"]["d"]["e"], -3);
  EXPECT_EQ(j["u"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(j["s"], "\xc3\xa9");
}

TEST(JsonTest, ScalarsAndEmptyContainers) {
  EXPECT_EQ(parse_json("  42 ", "x"), 42);
  EXPECT_TRUE(parse_json("{}", "x").is_object());
  EXPECT_TRUE(parse_json("[]", "x").is_array());
}

TEST(JsonTest, SameKeyInSiblingsAndAtDifferentLevelsIsFine) {
  const Json j = parse_json(R"({"a": {"a": {"a": 1}}, "l": [{"k": 1}, {"k": 2}], "m": {"k": 3}})", "doc.json");
  EXPECT_EQ(j["a"]["a"]["a"], 1);
  EXPECT_EQ(j["l"][1]["k"], 2);
  EXPECT_EQ(j["m"]["k"], 3);
}

TEST(JsonTest, DuplicateKeyTopLevel) {
  EXPECT_THAT(parse_error(R"({"k": 1, "j": 2, "k": 3})"), AllOf(HasSubstr("doc.json"), HasSubstr("duplicate key \"k\"")));
}

TEST(JsonTest, DuplicateKeyNested) {
  EXPECT_THAT(parse_error(R"({"outer": {"mid": {"x": 1, "y": 2, "x": 3}}})"),
              AllOf(HasSubstr("doc.json"), HasSubstr("duplicate key \"x\""), HasSubstr("\"outer\" > \"mid\"")));
}

TEST(JsonTest, DuplicateKeyInObjectInsideArray) {
  EXPECT_THAT(parse_error(R"({"list": [{"a": 1}, {"b": 1, "b": 2}]})"),
              AllOf(HasSubstr("doc.json"), HasSubstr("duplicate key \"b\""), HasSubstr("\"list\"")));
}

TEST(JsonTest, DuplicateKeyAfterNestedObjectClosed) {
  // The nested object's keys must not leak into, or hide, the outer ones.
  EXPECT_THAT(parse_error(R"({"a": {"b": 1}, "b": 2, "a": 3})"),
              AllOf(HasSubstr("doc.json"), HasSubstr("duplicate key \"a\"")));
  EXPECT_NO_THROW(parse_json(R"({"a": {"b": 1}, "b": 2})", "doc.json"));
}

TEST(JsonTest, DuplicateEmptyKey) {
  EXPECT_THAT(parse_error(R"({"": 1, "": 2})"), HasSubstr("duplicate key \"\""));
}

TEST(JsonTest, DuplicateKeyDifferentEscapes) {
  // "\u0041" and "A" are the same key once decoded.
  EXPECT_THAT(parse_error(R"({"A": 1, "\u0041": 2})"), HasSubstr("duplicate key \"A\""));
}

TEST(JsonTest, DepthAtLimitIsAcceptedOneMoreIsRefused) {
  EXPECT_NO_THROW(parse_json(nested_arrays(kMaxJsonDepth), "doc.json"));
  EXPECT_THAT(parse_error(nested_arrays(kMaxJsonDepth + 1)),
              AllOf(HasSubstr("doc.json"), HasSubstr("nesting deeper than 64 levels")));
  EXPECT_NO_THROW(parse_json(nested_arrays(3), "doc.json", 3));
  EXPECT_THAT(parse_error(nested_arrays(4), 3), HasSubstr("nesting deeper than 3 levels"));
}

TEST(JsonTest, DeepNestingDoesNotRecurse) {
  // Far deeper than any stack would survive if parsing or destruction
  // recursed per level; also unterminated, so only the bound can stop it.
  EXPECT_THAT(parse_error(std::string(10000, '[')), AllOf(HasSubstr("doc.json"), HasSubstr("nesting deeper")));
  EXPECT_THAT(parse_error(nested_arrays(2000000)), AllOf(HasSubstr("doc.json"), HasSubstr("nesting deeper")));
  std::string objs;
  for (int i = 0; i < 100000; ++i) objs += "{\"k\":[";
  EXPECT_THAT(parse_error(objs), AllOf(HasSubstr("doc.json"), HasSubstr("nesting deeper"), HasSubstr("\"k\"")));
}

TEST(JsonTest, DepthErrorNamesTheField) {
  EXPECT_THAT(parse_error(R"({"t": {"dtype": "F32", "shape": )" + nested_arrays(100) + "}}"),
              AllOf(HasSubstr("doc.json"), HasSubstr("\"t\" > \"shape\"")));
}

TEST(JsonTest, ManyKeys) {
  // 200,000 distinct keys in one object parse, and a duplicate of one of
  // them at the end is found. How long that takes (the duplicate check must
  // not be quadratic: that version took two minutes here) is measured by
  // build/strata_constraint_bench --benchmark_filter=ParseJson (docs/server.md).
  std::string doc = "{";
  for (int i = 0; i < 200000; ++i) doc += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  doc += "}";
  const Json j = parse_json(doc, "doc.json");
  ASSERT_EQ(j.size(), 200000u);
  EXPECT_EQ(j["k0"], 0);
  EXPECT_EQ(j["k199999"], 0);
  doc.back() = ',';
  doc += "\"k123456\":1}";
  EXPECT_THAT(parse_error(doc), HasSubstr("duplicate key \"k123456\""));
}

TEST(JsonTest, LongKeyIsShortenedInMessages) {
  const std::string k(100000, 'z');
  const std::string msg = parse_error("{\"" + k + "\": 1, \"" + k + "\": 2}");
  EXPECT_THAT(msg, HasSubstr("duplicate key \"zzzz"));
  EXPECT_LT(msg.size(), 1000u);
}

TEST(JsonTest, SyntaxErrors) {
  for (const char* bad : {"", "{", "{\"a\" 1}", "[1,]", "{\"a\":1} x", "nul", "\"\xff\"", "{'a': 1}", "[1e999]"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(parse_error(bad), AllOf(HasSubstr("doc.json"), HasSubstr("invalid JSON")));
  }
}

TEST(JsonTest, ReadSmallFile) {
  TempDir dir;
  const std::string path = dir.file("f.json");
  const std::string content("{\"a\":\0 1}", 9);
  write_file(path, content);
  EXPECT_EQ(read_small_file(path, 9), content);
  EXPECT_THAT(error_of([&] { read_small_file(path, 8); }),
              AllOf(HasSubstr(path), HasSubstr("file is 9 bytes, limit is 8")));
  EXPECT_THAT(error_of([&] { read_small_file(dir.file("missing.json"), 100); }),
              AllOf(HasSubstr(dir.file("missing.json")), HasSubstr("cannot open")));
  EXPECT_THAT(error_of([&] { read_small_file(dir.str(), 100); }),
              AllOf(HasSubstr(dir.str()), HasSubstr("not a regular file")));
  write_file(path, "");
  EXPECT_EQ(read_small_file(path, 0), "");
  // What was read is still refused by the parser when it contains a NUL.
  write_file(path, content);
  EXPECT_THAT(error_of([&] { parse_json(read_small_file(path, 100), path); }),
              AllOf(HasSubstr(path), Not(HasSubstr("duplicate"))));
}

}  // namespace
}  // namespace strata::json_test
