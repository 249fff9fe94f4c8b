// Hostile-input tests for the safetensors reader, sharded checkpoints and
// weight loading: every malformed file must be refused with a strata::Error
// naming the file and the tensor, never a crash; valid files must read back
// exactly.
#include "format/checkpoint_tensors.h"
#include "format/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "core/weight.h"
#include "test_util.h"
#include "core/error.h"

namespace strata::safetensors_test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using test_util::error_of;
using test_util::le64;
using test_util::safetensors_bytes;
using test_util::SafetensorsBuilder;
using test_util::TempDir;
using test_util::write_file;

std::string open_error(const std::string& path, const SafetensorsLimits& limits = {}) {
  return error_of([&] { SafetensorsFile f(path, limits); });
}

// A file holding the given raw header and `data_bytes` zero bytes of data.
std::string write_raw(const TempDir& dir, const std::string& header, size_t data_bytes = 64,
                      const std::string& name = "model.safetensors") {
  const std::string path = dir.file(name);
  write_file(path, safetensors_bytes(header, std::string(data_bytes, '\0')));
  return path;
}

// ---------------------------------------------------------------------------
// SafetensorsFile: the length prefix and the header text.

TEST(SafetensorsTest, FileShorterThan8Bytes) {
  TempDir dir;
  const std::string path = dir.file("short.safetensors");
  write_file(path, std::string("\x10\x00\x00\x00\x00", 5));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("5 bytes"), HasSubstr("too small")));
}

TEST(SafetensorsTest, EmptyFile) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  write_file(path, "");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("too small")));
}

TEST(SafetensorsTest, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("nope.safetensors");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("cannot open")));
}

TEST(SafetensorsTest, DirectoryInsteadOfFile) {
  TempDir dir;
  EXPECT_THAT(open_error(dir.str()), AllOf(HasSubstr(dir.str()), HasSubstr("not a regular file")));
}

TEST(SafetensorsTest, TruncatedDataArea) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  std::string bytes = SafetensorsBuilder()
                          .add("a.weight", "F32", {4}, std::string(16, '\1'))
                          .add("b.weight", "F32", {8}, std::string(32, '\2'))
                          .bytes();
  bytes.resize(bytes.size() - 10);  // cut the last tensor short
  write_file(path, bytes);
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("\"b.weight\""), HasSubstr("run past the data area")));
}

TEST(SafetensorsTest, TruncatedInsideHeader) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  std::string bytes = SafetensorsBuilder().add("a.weight", "F32", {4}, std::string(16, '\1')).bytes();
  bytes.resize(20);  // the length prefix promises more header than there is
  write_file(path, bytes);
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("exceeds the file size 20")));
}

TEST(SafetensorsTest, HeaderLengthBeyondFileSize) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_file(path, safetensors_bytes("{}", std::string(100, ' '), uint64_t{1} << 40));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("header length 1099511627776"),
                                      HasSubstr("exceeds the file size")));
}

TEST(SafetensorsTest, HeaderLengthMaxU64) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_file(path, safetensors_bytes("{}", "", std::numeric_limits<uint64_t>::max()));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("exceeds the file size")));
}

TEST(SafetensorsTest, HeaderLengthBeyondCap) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  SafetensorsBuilder().add("a.weight", "F32", {64}, std::string(256, '\0')).write(path);
  SafetensorsLimits limits;
  limits.max_header_bytes = 16;  // the file is large enough; the header is over the cap
  EXPECT_THAT(open_error(path, limits),
              AllOf(HasSubstr(path), HasSubstr("exceeds the limit of 16 bytes")));
  // The same file opens under the default limits.
  EXPECT_NO_THROW(SafetensorsFile f(path));
}

TEST(SafetensorsTest, HeaderLengthTooSmall) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_file(path, safetensors_bytes("", std::string(16, '\0')));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("header length 0 is too small")));
}

TEST(SafetensorsTest, HeaderNotJson) {
  TempDir dir;
  const std::string path = write_raw(dir, "{\"a.weight\": {\"dtype\": \"F32\", ");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("safetensors header"), HasSubstr("invalid JSON")));
}

TEST(SafetensorsTest, HeaderNotUtf8) {
  TempDir dir;
  const std::string path = write_raw(dir, "{\"a\xff\xfe\": {}}");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("invalid JSON")));
}

TEST(SafetensorsTest, HeaderTrailingGarbage) {
  TempDir dir;
  const std::string path = write_raw(dir, "{} {}");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("invalid JSON")));
}

TEST(SafetensorsTest, HeaderIsArray) {
  TempDir dir;
  const std::string path = write_raw(dir, "[{\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}]");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("not a JSON object")));
}

TEST(SafetensorsTest, HeaderIsScalar) {
  TempDir dir;
  const std::string path = write_raw(dir, "42");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("not a JSON object")));
}

TEST(SafetensorsTest, NestingDeeperThanLimit) {
  TempDir dir;
  // 10,000 nested arrays inside the shape field: refused at the depth bound,
  // not by recursing 10,000 frames deep.
  const std::string deep = std::string(10000, '[') + "1" + std::string(10000, ']');
  const std::string path = write_raw(
      dir, "{\"deep.weight\": {\"dtype\": \"F32\", \"shape\": " + deep + ", \"data_offsets\": [0, 4]}}");
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("nesting deeper than"), HasSubstr("\"deep.weight\"")));
}

TEST(SafetensorsTest, NestingOfAMillionObjects) {
  TempDir dir;
  std::string deep;
  for (int i = 0; i < 1000000; ++i) deep += "{\"a\":";
  deep += "1";
  deep += std::string(1000000, '}');
  const std::string path = write_raw(dir, deep);
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("nesting deeper than")));
}

TEST(SafetensorsTest, DuplicateTensorNames) {
  TempDir dir;
  const std::string path = write_raw(dir,
                                     "{\"dup.weight\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                                     " \"dup.weight\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("duplicate key \"dup.weight\"")));
}

// ---------------------------------------------------------------------------
// SafetensorsFile: tensor entries.

// A header with one tensor entry `name` whose JSON body is `body`.
std::string one(const std::string& name, const std::string& body) { return "{\"" + name + "\": " + body + "}"; }

TEST(SafetensorsTest, UnknownDtype) {
  TempDir dir;
  const std::string path =
      write_raw(dir, one("x.weight", R"({"dtype": "F4", "shape": [2], "data_offsets": [0, 1]})"));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("tensor \"x.weight\""), HasSubstr("unknown dtype \"F4\"")));
}

TEST(SafetensorsTest, DtypeNotAString) {
  TempDir dir;
  const std::string path =
      write_raw(dir, one("x.weight", R"({"dtype": 7, "shape": [2], "data_offsets": [0, 8]})"));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("tensor \"x.weight\""), HasSubstr("dtype is not a string")));
}

TEST(SafetensorsTest, EntryNotAnObject) {
  TempDir dir;
  const std::string path = write_raw(dir, one("x.weight", "[\"F32\", [2], [0, 8]]"));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("tensor \"x.weight\""), HasSubstr("not an object")));
}

TEST(SafetensorsTest, ShapeNotAnArray) {
  TempDir dir;
  const std::string path =
      write_raw(dir, one("x.weight", R"({"dtype": "F32", "shape": 2, "data_offsets": [0, 8]})"));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("tensor \"x.weight\""), HasSubstr("shape is not an array")));
}

TEST(SafetensorsTest, NegativeDimension) {
  TempDir dir;
  const std::string path =
      write_raw(dir, one("neg.weight", R"({"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]})"));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"neg.weight\""),
                                      HasSubstr("dimension -1 is negative")));
}

TEST(SafetensorsTest, NonIntegerDimension) {
  TempDir dir;
  const std::string path =
      write_raw(dir, one("f.weight", R"({"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]})"));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("tensor \"f.weight\""), HasSubstr("non-integer dimension")));
}

TEST(SafetensorsTest, DimensionBeyondUint64IsRefused) {
  TempDir dir;
  // Too big for any integer type, so JSON gives a float: still refused.
  const std::string path = write_raw(
      dir, one("big.weight", R"({"dtype": "U8", "shape": [100000000000000000000000], "data_offsets": [0, 8]})"));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"big.weight\"")));
}

TEST(SafetensorsTest, DimensionAboveMaxDim) {
  TempDir dir;
  const std::string path = write_raw(
      dir, one("big.weight", R"({"dtype": "U8", "shape": [2199023255552], "data_offsets": [0, 8]})"));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("tensor \"big.weight\""), HasSubstr("exceeds 1099511627776")));
}

TEST(SafetensorsTest, ShapeProductOverflows) {
  TempDir dir;
  // 2^40 * 2^40 = 2^80: each dimension is within max_dim, the product is not.
  const std::string path = write_raw(
      dir, one("ovf.weight", R"({"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 16]})"));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("tensor \"ovf.weight\""), HasSubstr("shape product overflows")));
}

TEST(SafetensorsTest, ByteSizeOverflows) {
  TempDir dir;
  // 2^32 * 2^31 = 2^63 elements fit in 64 bits; 2^63 * 8 bytes does not.
  const std::string path = write_raw(
      dir, one("ovf.weight", R"({"dtype": "F64", "shape": [4294967296, 2147483648], "data_offsets": [0, 16]})"));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("tensor \"ovf.weight\""), HasSubstr("byte size overflows")));
}

TEST(SafetensorsTest, RankAboveLimit) {
  TempDir dir;
  const std::string path = write_raw(
      dir, one("r.weight", R"({"dtype": "U8", "shape": [1,1,1,1,1,1,1,1,1], "data_offsets": [0, 1]})"));
  EXPECT_THAT(open_error(path),
              AllOf(HasSubstr(path), HasSubstr("tensor \"r.weight\""), HasSubstr("rank 9 exceeds the limit 8")));
}

TEST(SafetensorsTest, ShapeDisagreesWithSpan) {
  TempDir dir;
  const std::string path =
      write_raw(dir, one("m.weight", R"({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]})"));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"m.weight\""),
                                      HasSubstr("need 24 bytes but data_offsets span 20")));
}

TEST(SafetensorsTest, DataOffsetsReversed) {
  TempDir dir;
  const std::string path =
      write_raw(dir, one("rev.weight", R"({"dtype": "U8", "shape": [8], "data_offsets": [16, 8]})"));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"rev.weight\""),
                                      HasSubstr("data_offsets [16, 8] are reversed")));
}

TEST(SafetensorsTest, DataOffsetsOutOfRange) {
  TempDir dir;
  const std::string path =
      write_raw(dir, one("oob.weight", R"({"dtype": "U8", "shape": [1000], "data_offsets": [0, 1000]})"), 64);
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"oob.weight\""),
                                      HasSubstr("run past the data area of 64 bytes")));
}

TEST(SafetensorsTest, DataOffsetsHugeValues) {
  TempDir dir;
  // begin + size would wrap around 2^64 if added carelessly.
  const std::string path = write_raw(
      dir, one("wrap.weight",
               R"({"dtype": "U8", "shape": [16], "data_offsets": [18446744073709551600, 18446744073709551615]})"));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"wrap.weight\"")));
}

TEST(SafetensorsTest, OverlappingTensors) {
  TempDir dir;
  const std::string path =
      write_raw(dir,
                R"({"a.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                    "b.weight": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("\"a.weight\""), HasSubstr("\"b.weight\""),
                                      HasSubstr("overlap")));
}

TEST(SafetensorsTest, IdenticalSpansOverlap) {
  TempDir dir;
  const std::string path =
      write_raw(dir,
                R"({"a.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                    "b.weight": {"dtype": "I32", "shape": [4], "data_offsets": [0, 16]}})");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("\"a.weight\""), HasSubstr("\"b.weight\""),
                                      HasSubstr("overlap")));
}

TEST(SafetensorsTest, OverlapHiddenBehindAnEmptyTensor) {
  TempDir dir;
  // The empty tensor sorts between the two overlapping ones; the overlap must
  // still be found.
  const std::string path =
      write_raw(dir,
                R"({"a.weight": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]},
                    "empty": {"dtype": "U8", "shape": [0], "data_offsets": [4, 4]},
                    "c.weight": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]}})");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("\"a.weight\""), HasSubstr("\"c.weight\""),
                                      HasSubstr("overlap")));
}

TEST(SafetensorsTest, OverlapOfContainedTensorAfterAnother) {
  TempDir dir;
  // a contains both b and c; c overlaps a but not b.
  const std::string path =
      write_raw(dir,
                R"({"a.weight": {"dtype": "U8", "shape": [32], "data_offsets": [0, 32]},
                    "b.weight": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                    "c.weight": {"dtype": "U8", "shape": [4], "data_offsets": [20, 24]}})");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("overlap")));
}

TEST(SafetensorsTest, DataOffsetsThreeEntries) {
  TempDir dir;
  const std::string path =
      write_raw(dir, one("o.weight", R"({"dtype": "U8", "shape": [4], "data_offsets": [0, 4, 8]})"));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"o.weight\""),
                                      HasSubstr("data_offsets must be an array of two integers")));
}

TEST(SafetensorsTest, DataOffsetsOneEntry) {
  TempDir dir;
  const std::string path = write_raw(dir, one("o.weight", R"({"dtype": "U8", "shape": [4], "data_offsets": [4]})"));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"o.weight\""),
                                      HasSubstr("data_offsets must be an array of two integers")));
}

TEST(SafetensorsTest, DataOffsetsNotIntegers) {
  TempDir dir;
  for (const char* offs : {R"(["0", "4"])", "[0.0, 4.0]", "{\"begin\": 0}", "4", "[null, 4]"}) {
    SCOPED_TRACE(offs);
    const std::string path = write_raw(
        dir, one("o.weight", std::string(R"({"dtype": "U8", "shape": [4], "data_offsets": )") + offs + "}"));
    EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"o.weight\""),
                                        HasSubstr("data_offsets must be an array of two integers")));
  }
}

TEST(SafetensorsTest, DataOffsetsNegative) {
  TempDir dir;
  const std::string path =
      write_raw(dir, one("n.weight", R"({"dtype": "U8", "shape": [4], "data_offsets": [-4, 0]})"));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"n.weight\""),
                                      HasSubstr("data_offsets are negative")));
}

TEST(SafetensorsTest, ExtraFieldInEntry) {
  TempDir dir;
  const std::string path = write_raw(
      dir, one("e.weight", R"({"dtype": "U8", "shape": [4], "data_offsets": [0, 4], "quant": "q4"})"));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"e.weight\""),
                                      HasSubstr("exactly the fields dtype, shape, data_offsets")));
}

TEST(SafetensorsTest, MissingFieldInEntry) {
  TempDir dir;
  const std::string path = write_raw(dir, one("e.weight", R"({"dtype": "U8", "shape": [4], "offsets": [0, 4]})"));
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("tensor \"e.weight\""),
                                      HasSubstr("exactly the fields dtype, shape, data_offsets")));
}

TEST(SafetensorsTest, MetadataNonStringValue) {
  TempDir dir;
  const std::string path = write_raw(
      dir, R"({"__metadata__": {"format": "pt", "step": 1000},
               "a.weight": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("__metadata__ field \"step\" is not a string")));
}

TEST(SafetensorsTest, MetadataNotAnObject) {
  TempDir dir;
  const std::string path = write_raw(dir, R"({"__metadata__": "pt"})");
  EXPECT_THAT(open_error(path), AllOf(HasSubstr(path), HasSubstr("__metadata__ is not an object")));
}

// ---------------------------------------------------------------------------
// SafetensorsFile: valid files.

TEST(SafetensorsTest, ValidFileReadsBackExactly) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 1e-30f, -0.0f, 65504.0f};
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc020, 0x0001, 0x7f80, 0x8000};
  std::vector<uint8_t> u8(300);
  for (size_t i = 0; i < u8.size(); ++i) u8[i] = static_cast<uint8_t>(i * 37 + 11);
  SafetensorsBuilder b;
  b.metadata("format", "pt")
      .add_values("f32.weight", "F32", {2, 3}, f32)
      .add_values("bf16.bias", "BF16", {5}, bf16)
      .add("empty", "F32", {0, 7}, "")
      .add_values("bytes", "U8", {3, 10, 10}, u8)
      .add("scalar", "I64", {}, test_util::bytes_of(std::vector<int64_t>{-42}));
  b.write(path);

  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.data_offset() % 8, 0u);  // the builder pads the header with spaces
  EXPECT_EQ(f.file_size(), f.data_offset() + 24 + 10 + 300 + 8);
  EXPECT_EQ(f.find("missing"), nullptr);

  const TensorEntry* t = f.find("f32.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::F32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->numel, 6u);
  EXPECT_EQ(t->bytes(), 24u);
  std::vector<float> got_f32(6);
  f.read(*t, got_f32.data());
  EXPECT_EQ(std::memcmp(got_f32.data(), f32.data(), 24), 0);

  t = f.find("bf16.bias");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::BF16);
  std::vector<uint16_t> got_bf16(5);
  f.read(*t, got_bf16.data());
  EXPECT_EQ(got_bf16, bf16);

  t = f.find("empty");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->numel, 0u);
  EXPECT_EQ(t->bytes(), 0u);
  f.read(*t, nullptr);  // zero bytes: no access

  t = f.find("bytes");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::U8);
  EXPECT_EQ(t->numel, 300u);
  std::vector<uint8_t> got_u8(300);
  f.read(*t, got_u8.data());
  EXPECT_EQ(got_u8, u8);

  t = f.find("scalar");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->shape.empty());
  EXPECT_EQ(t->numel, 1u);
  int64_t s = 0;
  f.read(*t, &s);
  EXPECT_EQ(s, -42);
}

TEST(SafetensorsTest, DtypeNamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::F8_E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
  EXPECT_STREQ(dtype_name(DType::BF16), "BF16");
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::BOOL), 1u);
}

TEST(SafetensorsTest, ReadRangeInsideAndOutside) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  std::vector<uint8_t> first(16), second(100);
  for (size_t i = 0; i < first.size(); ++i) first[i] = static_cast<uint8_t>(0xA0 + i);
  for (size_t i = 0; i < second.size(); ++i) second[i] = static_cast<uint8_t>(i);
  SafetensorsBuilder().add_values("first", "U8", {16}, first).add_values("range.weight", "U8", {10, 10}, second).write(path);
  SafetensorsFile f(path);
  const TensorEntry& t = *f.find("range.weight");

  std::vector<uint8_t> buf(30, 0xEE);
  f.read_range(t, 40, 30, buf.data());
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(buf[i], 40 + i);
  f.read_range(t, 100, 0, buf.data());  // empty range at the very end is fine
  f.read_range(t, 99, 1, buf.data());
  EXPECT_EQ(buf[0], 99);

  auto range_error = [&](uint64_t off, uint64_t n) { return error_of([&] { f.read_range(t, off, n, buf.data()); }); };
  EXPECT_THAT(range_error(101, 0), AllOf(HasSubstr(path), HasSubstr("\"range.weight\""), HasSubstr("outside its 100 bytes")));
  EXPECT_THAT(range_error(90, 11), AllOf(HasSubstr(path), HasSubstr("\"range.weight\""), HasSubstr("outside")));
  EXPECT_THAT(range_error(1, std::numeric_limits<uint64_t>::max()),
              AllOf(HasSubstr(path), HasSubstr("\"range.weight\""), HasSubstr("outside")));
  EXPECT_THAT(range_error(std::numeric_limits<uint64_t>::max(), 2),
              AllOf(HasSubstr(path), HasSubstr("\"range.weight\""), HasSubstr("outside")));
}

TEST(SafetensorsTest, FileTruncatedAfterOpen) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  SafetensorsBuilder().add("a.weight", "U8", {64}, std::string(64, 'a')).add("b.weight", "U8", {64}, std::string(64, 'b')).write(path);
  SafetensorsFile f(path);
  std::filesystem::resize_file(path, f.data_offset() + 70);  // someone truncates it under us
  std::vector<uint8_t> buf(64);
  f.read(*f.find("a.weight"), buf.data());
  EXPECT_THAT(error_of([&] { f.read(*f.find("b.weight"), buf.data()); }),
              AllOf(HasSubstr(path), HasSubstr("\"b.weight\""), HasSubstr("ended early")));
}

// ---------------------------------------------------------------------------
// Checkpoint: single file and sharded.

std::string checkpoint_error(const std::string& dir) {
  return error_of([&] { Checkpoint ck(dir); });
}

TEST(SafetensorsCheckpointTest, SingleFile) {
  TempDir dir;
  SafetensorsBuilder()
      .add_values("b.weight", "F32", {2}, std::vector<float>{1, 2})
      .add_values("a.weight", "F32", {1}, std::vector<float>{3})
      .write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  EXPECT_EQ(ck.num_files(), 1u);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a.weight", "b.weight"}));
  EXPECT_TRUE(ck.has("a.weight"));
  EXPECT_FALSE(ck.has("c.weight"));
  EXPECT_EQ(ck.entry("b.weight").numel, 2u);
  EXPECT_EQ(ck.file_of("b.weight").path(), dir.file("model.safetensors"));
  EXPECT_THAT(error_of([&] { ck.entry("c.weight"); }),
              AllOf(HasSubstr(dir.str()), HasSubstr("\"c.weight\""), HasSubstr("missing from the checkpoint")));
  EXPECT_THAT(error_of([&] { ck.file_of("c.weight"); }), AllOf(HasSubstr(dir.str()), HasSubstr("\"c.weight\"")));
}

TEST(SafetensorsCheckpointTest, EmptyDirectory) {
  TempDir dir;
  EXPECT_THAT(checkpoint_error(dir.str()),
              AllOf(HasSubstr(dir.str()), HasSubstr("no model.safetensors or model.safetensors.index.json")));
}

TEST(SafetensorsCheckpointTest, NotADirectory) {
  TempDir dir;
  write_file(dir.file("file"), "x");
  EXPECT_THAT(checkpoint_error(dir.file("file")), AllOf(HasSubstr(dir.file("file")), HasSubstr("not a directory")));
  EXPECT_THAT(checkpoint_error(dir.file("absent")), AllOf(HasSubstr(dir.file("absent")), HasSubstr("not a directory")));
  EXPECT_THAT(checkpoint_error(dir.file("file") + "/sub"), HasSubstr("not a directory"));
}

TEST(SafetensorsCheckpointTest, CorruptSingleFileNamesIt) {
  TempDir dir;
  write_file(dir.file("model.safetensors"), safetensors_bytes("{", "", 1));
  EXPECT_THAT(checkpoint_error(dir.str()), AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("too small")));
}

// Writes two shards and an index mapping every tensor to its shard; the
// index text can be replaced to make it hostile.
struct Sharded {
  TempDir dir;
  std::string index_path = dir.file("model.safetensors.index.json");
  Sharded() {
    SafetensorsBuilder()
        .add_values("a.weight", "F32", {2}, std::vector<float>{1, 2})
        .add_values("b.weight", "F32", {1}, std::vector<float>{3})
        .write(dir.file("model-00001-of-00002.safetensors"));
    SafetensorsBuilder()
        .add_values("c.weight", "BF16", {2}, std::vector<uint16_t>{0x3f80, 0x4000})
        .write(dir.file("model-00002-of-00002.safetensors"));
  }
  void index(const std::string& text) const { write_file(index_path, text); }
  void weight_map(const Json& wm) const { index(Json{{"metadata", {{"total_size", 14}}}, {"weight_map", wm}}.dump()); }
  Json good_map() const {
    return {{"a.weight", "model-00001-of-00002.safetensors"},
            {"b.weight", "model-00001-of-00002.safetensors"},
            {"c.weight", "model-00002-of-00002.safetensors"}};
  }
};

TEST(SafetensorsShardTest, ValidIndex) {
  Sharded s;
  s.weight_map(s.good_map());
  Checkpoint ck(s.dir.str());
  EXPECT_EQ(ck.num_files(), 2u);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a.weight", "b.weight", "c.weight"}));
  EXPECT_EQ(ck.file_of("c.weight").path(), s.dir.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(ck.file_of("a.weight").path(), s.dir.file("model-00001-of-00002.safetensors"));
  std::vector<uint16_t> c(2);
  ck.file_of("c.weight").read(ck.entry("c.weight"), c.data());
  EXPECT_EQ(c, (std::vector<uint16_t>{0x3f80, 0x4000}));
  std::vector<float> a(2);
  ck.file_of("a.weight").read(ck.entry("a.weight"), a.data());
  EXPECT_EQ(a, (std::vector<float>{1, 2}));
}

TEST(SafetensorsShardTest, IndexWinsOverSingleFile) {
  Sharded s;
  s.weight_map(s.good_map());
  SafetensorsBuilder().add("z", "U8", {1}, "z").write(s.dir.file("model.safetensors"));
  Checkpoint ck(s.dir.str());
  EXPECT_TRUE(ck.has("c.weight"));
  EXPECT_FALSE(ck.has("z"));
}

TEST(SafetensorsShardTest, MissingShardFile) {
  Sharded s;
  Json wm = s.good_map();
  wm["c.weight"] = "model-00003-of-00002.safetensors";
  s.weight_map(wm);
  EXPECT_THAT(checkpoint_error(s.dir.str()),
              AllOf(HasSubstr(s.dir.file("model-00003-of-00002.safetensors")), HasSubstr("cannot open"),
                    HasSubstr("\"c.weight\""), HasSubstr(s.index_path)));
}

TEST(SafetensorsShardTest, PathTraversalRefused) {
  for (const char* bad : {"../model-00001-of-00002.safetensors", "/etc/passwd", "sub/x.safetensors",
                          "..\\x.safetensors", "..", ".", ""}) {
    SCOPED_TRACE(bad);
    Sharded s;
    Json wm = s.good_map();
    wm["b.weight"] = bad;
    s.weight_map(wm);
    EXPECT_THAT(checkpoint_error(s.dir.str()), AllOf(HasSubstr(s.index_path), HasSubstr("weight_map[\"b.weight\"]"),
                                                     HasSubstr("not a plain file name")));
  }
}

TEST(SafetensorsShardTest, TensorListedButAbsentFromShard) {
  Sharded s;
  Json wm = s.good_map();
  wm["ghost.weight"] = "model-00002-of-00002.safetensors";
  s.weight_map(wm);
  EXPECT_THAT(checkpoint_error(s.dir.str()),
              AllOf(HasSubstr(s.dir.file("model-00002-of-00002.safetensors")), HasSubstr("\"ghost.weight\""),
                    HasSubstr("listed in the index but missing from the shard")));
}

TEST(SafetensorsShardTest, TensorInWrongShard) {
  Sharded s;
  Json wm = s.good_map();
  wm["a.weight"] = "model-00002-of-00002.safetensors";
  s.weight_map(wm);
  EXPECT_THAT(checkpoint_error(s.dir.str()),
              AllOf(HasSubstr(s.dir.file("model-00002-of-00002.safetensors")), HasSubstr("\"a.weight\"")));
}

TEST(SafetensorsShardTest, WeightMapNotAnObject) {
  Sharded s;
  s.weight_map(Json::array({"a.weight", "model-00001-of-00002.safetensors"}));
  EXPECT_THAT(checkpoint_error(s.dir.str()), AllOf(HasSubstr(s.index_path), HasSubstr("\"weight_map\"")));
}

TEST(SafetensorsShardTest, WeightMapMissing) {
  Sharded s;
  s.index(R"({"metadata": {}})");
  EXPECT_THAT(checkpoint_error(s.dir.str()), AllOf(HasSubstr(s.index_path), HasSubstr("\"weight_map\"")));
}

TEST(SafetensorsShardTest, IndexNotAnObject) {
  Sharded s;
  s.index(R"(["weight_map"])");
  EXPECT_THAT(checkpoint_error(s.dir.str()), AllOf(HasSubstr(s.index_path), HasSubstr("\"weight_map\"")));
}

TEST(SafetensorsShardTest, WeightMapValueNotAString) {
  Sharded s;
  Json wm = s.good_map();
  wm["b.weight"] = 1;
  s.weight_map(wm);
  EXPECT_THAT(checkpoint_error(s.dir.str()),
              AllOf(HasSubstr(s.index_path), HasSubstr("weight_map[\"b.weight\"] is not a string")));
}

TEST(SafetensorsShardTest, IndexNotJson) {
  Sharded s;
  s.index("{\"weight_map\": {\"a.weight\": \"model-00001-of-00002.safetensors\",");
  EXPECT_THAT(checkpoint_error(s.dir.str()), AllOf(HasSubstr(s.index_path), HasSubstr("invalid JSON")));
}

TEST(SafetensorsShardTest, IndexDuplicateTensor) {
  Sharded s;
  s.index(R"({"weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                             "a.weight": "model-00002-of-00002.safetensors"}})");
  EXPECT_THAT(checkpoint_error(s.dir.str()),
              AllOf(HasSubstr(s.index_path), HasSubstr("duplicate key \"a.weight\"")));
}

TEST(SafetensorsShardTest, IndexIsADirectory) {
  Sharded s;
  std::filesystem::create_directory(s.index_path);
  EXPECT_THAT(checkpoint_error(s.dir.str()), AllOf(HasSubstr(s.index_path), HasSubstr("not a regular file")));
}

TEST(SafetensorsShardTest, CorruptShardNamesShardAndIndex) {
  Sharded s;
  write_file(s.dir.file("model-00002-of-00002.safetensors"),
             safetensors_bytes(R"({"c.weight": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 400]}})",
                               std::string(4, '\0')));
  s.weight_map(s.good_map());
  EXPECT_THAT(checkpoint_error(s.dir.str()),
              AllOf(HasSubstr(s.dir.file("model-00002-of-00002.safetensors")), HasSubstr("\"c.weight\""),
                    HasSubstr("run past the data area")));
}

// ---------------------------------------------------------------------------
// Weights: load_weight / load_f32.

// Independent float8_e4m3fn decoder (1 sign, 4 exponent with bias 7, 3
// mantissa; exponent 15 with mantissa 7 is NaN).
float ref_fp8e4m3(uint8_t b) {
  const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = e == 0 ? (m / 8.0f) * std::ldexp(1.0f, -6) : (1.0f + m / 8.0f) * std::ldexp(1.0f, e - 7);
  return sign ? -mag : mag;
}

float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::string weight_error(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols) {
  return error_of([&] { load_weight(ck, name, rows, cols); });
}

TEST(WeightTest, Fp8ReferenceDecoderAgreesWithKnownValues) {
  EXPECT_EQ(ref_fp8e4m3(0x38), 1.0f);
  EXPECT_EQ(ref_fp8e4m3(0x7e), 448.0f);
  EXPECT_EQ(ref_fp8e4m3(0xfe), -448.0f);
  EXPECT_EQ(ref_fp8e4m3(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(ref_fp8e4m3(0x08), std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(ref_fp8e4m3(0x7f)));
  for (int b = 0; b < 256; ++b) {
    const float want = ref_fp8e4m3(static_cast<uint8_t>(b)), got = fp8e4m3_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got)) << b;
    else
      EXPECT_EQ(got, want) << b;
  }
}

TEST(WeightTest, WrongShapeNamesTensorAndBothShapes) {
  TempDir dir;
  SafetensorsBuilder().add("layer.weight", "BF16", {8, 4}, std::string(64, '\0')).write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  EXPECT_THAT(weight_error(ck, "layer.weight", 4, 8),
              AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("\"layer.weight\""),
                    HasSubstr("shape [8, 4]"), HasSubstr("expected [4, 8]")));
}

TEST(WeightTest, RankMismatchIsAShapeError) {
  TempDir dir;
  SafetensorsBuilder().add("v.weight", "F32", {32}, std::string(128, '\0')).write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  EXPECT_THAT(weight_error(ck, "v.weight", 4, 8),
              AllOf(HasSubstr("\"v.weight\""), HasSubstr("shape [32]"), HasSubstr("expected [4, 8]")));
}

TEST(WeightTest, MissingTensor) {
  TempDir dir;
  SafetensorsBuilder().add("v.weight", "F32", {1}, std::string(4, '\0')).write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  EXPECT_THAT(weight_error(ck, "w.weight", 1, 1),
              AllOf(HasSubstr(dir.str()), HasSubstr("\"w.weight\""), HasSubstr("missing")));
}

TEST(WeightTest, Fp8WithoutScale) {
  TempDir dir;
  SafetensorsBuilder().add("mlp.up_proj.weight", "F8_E4M3", {4, 4}, std::string(16, '\x38')).write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  EXPECT_THAT(weight_error(ck, "mlp.up_proj.weight", 4, 4),
              AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("\"mlp.up_proj.weight\""),
                    HasSubstr("\"mlp.up_proj.weight_scale_inv\"")));
}

TEST(WeightTest, Fp8ScaleWrongShape) {
  TempDir dir;
  // [200, 300] with 128x128 blocks needs a [2, 3] scale.
  SafetensorsBuilder()
      .add("o_proj.weight", "F8_E4M3", {200, 300}, std::string(60000, '\x38'))
      .add_values("o_proj.weight_scale_inv", "F32", {2, 2}, std::vector<float>(4, 1.0f))
      .write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  EXPECT_THAT(weight_error(ck, "o_proj.weight", 200, 300),
              AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("\"o_proj.weight_scale_inv\""),
                    HasSubstr("shape [2, 2]"), HasSubstr("expected [2, 3]")));
}

TEST(WeightTest, Fp8ScaleWrongDtype) {
  TempDir dir;
  SafetensorsBuilder()
      .add("o_proj.weight", "F8_E4M3", {4, 4}, std::string(16, '\x38'))
      .add_values("o_proj.weight_scale_inv", "BF16", {1, 1}, std::vector<uint16_t>{0x3f80})
      .write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  EXPECT_THAT(weight_error(ck, "o_proj.weight", 4, 4),
              AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("\"o_proj.weight_scale_inv\""),
                    HasSubstr("dtype BF16"), HasSubstr("expected F32")));
}

TEST(WeightTest, Fp8ScaleNanNegativeOrInfinite) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, -1.0f, inf, -inf, -1e-30f}) {
    SCOPED_TRACE(bad);
    TempDir dir;
    SafetensorsBuilder()
        .add("q.weight", "F8_E4M3", {130, 4}, std::string(520, '\x38'))
        .add_values("q.weight_scale_inv", "F32", {2, 1}, std::vector<float>{1.0f, bad})
        .write(dir.file("model.safetensors"));
    Checkpoint ck(dir.str());
    EXPECT_THAT(weight_error(ck, "q.weight", 130, 4),
                AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("\"q.weight_scale_inv\""),
                      HasSubstr("negative or non-finite")));
  }
}

TEST(WeightTest, UnsupportedDtype) {
  TempDir dir;
  SafetensorsBuilder()
      .add("int.weight", "I32", {2, 2}, std::string(16, '\0'))
      .add("e5.weight", "F8_E5M2", {2, 2}, std::string(4, '\0'))
      .write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  EXPECT_THAT(weight_error(ck, "int.weight", 2, 2),
              AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("\"int.weight\""), HasSubstr("dtype I32")));
  EXPECT_THAT(weight_error(ck, "e5.weight", 2, 2), AllOf(HasSubstr("\"e5.weight\""), HasSubstr("dtype F8_E5M2")));
  EXPECT_THAT(error_of([&] { load_f32(ck, "int.weight", {2, 2}); }),
              AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("\"int.weight\""), HasSubstr("dtype I32")));
}

TEST(WeightTest, Fp8ZeroBlockSizeRefused) {
  TempDir dir;
  SafetensorsBuilder()
      .add("z.weight", "F8_E4M3", {4, 4}, std::string(16, '\x38'))
      .add_values("z.weight_scale_inv", "F32", {1, 1}, std::vector<float>{1.0f})
      .write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  EXPECT_THAT(error_of([&] { load_weight(ck, "z.weight", 4, 4, 0, 128); }),
              AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("\"z.weight\""), HasSubstr("block size")));
}

TEST(WeightTest, Fp8DequantizationWithPartialBlocks) {
  TempDir dir;
  const int64_t R = 200, C = 300, B = 128;  // 2x3 blocks, the last row and column partial
  std::vector<uint8_t> q(static_cast<size_t>(R * C));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      uint8_t b = static_cast<uint8_t>((r * 7 + c * 13 + (r * c) % 5) & 0xff);
      if ((b & 0x7f) == 0x7f) b = 0x7e;  // avoid the NaN codes
      q[static_cast<size_t>(r * C + c)] = b;
    }
  const std::vector<float> scales = {0.5f, 2.0f, 0.003f, 1.7f, 0.25f, 1e-3f};  // [2, 3]
  SafetensorsBuilder()
      .add_values("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", "F8_E4M3", {R, C}, q)
      .add_values("model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv", "F32", {2, 3}, scales)
      .write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  const Weight w = load_weight(ck, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", R, C, B, B);
  EXPECT_EQ(w.format, WeightFormat::FP8_BLOCK);
  EXPECT_EQ(w.rows, R);
  EXPECT_EQ(w.cols, C);
  EXPECT_EQ(w.block_rows, B);
  EXPECT_EQ(w.block_cols, B);
  EXPECT_EQ(w.scales, scales);
  EXPECT_EQ(w.data, q);
  std::vector<float> row(static_cast<size_t>(C));
  int mismatches = 0;
  for (int64_t r = 0; r < R; ++r) {
    w.row_f32(r, row.data());
    for (int64_t c = 0; c < C; ++c) {
      const float want = ref_fp8e4m3(q[static_cast<size_t>(r * C + c)]) * scales[static_cast<size_t>((r / B) * 3 + c / B)];
      if (row[static_cast<size_t>(c)] != want && mismatches++ < 10)
        ADD_FAILURE() << "row " << r << " col " << c << ": got " << row[static_cast<size_t>(c)] << ", want " << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(WeightTest, Fp8NonSquareBlocks) {
  TempDir dir;
  const int64_t R = 70, C = 50, BR = 64, BC = 32;  // scale [2, 2]
  std::vector<uint8_t> q(static_cast<size_t>(R * C));
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>((i * 29) % 0x7e);
  const std::vector<float> scales = {1.0f, 2.0f, 4.0f, 8.0f};
  SafetensorsBuilder()
      .add_values("p.weight", "F8_E4M3", {R, C}, q)
      .add_values("p.weight_scale_inv", "F32", {2, 2}, scales)
      .write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  EXPECT_THAT(weight_error(ck, "p.weight", R, C), HasSubstr("expected [1, 1]"));  // default 128x128 blocks
  const Weight w = load_weight(ck, "p.weight", R, C, BR, BC);
  std::vector<float> row(static_cast<size_t>(C));
  for (int64_t r : {int64_t{0}, int64_t{63}, int64_t{64}, int64_t{69}}) {
    w.row_f32(r, row.data());
    for (int64_t c = 0; c < C; ++c)
      ASSERT_EQ(row[static_cast<size_t>(c)],
                ref_fp8e4m3(q[static_cast<size_t>(r * C + c)]) * scales[static_cast<size_t>((r / BR) * 2 + c / BC)])
          << r << "," << c;
  }
}

TEST(WeightTest, Bf16LoadIsExact) {
  TempDir dir;
  const std::vector<uint16_t> bits = {0x3f80, 0xc020, 0x0001, 0x7f7f, 0x8000, 0x3e20,
                                      0x4049, 0xbf00, 0x0080, 0x7f80, 0xff80, 0x4480};
  SafetensorsBuilder().add_values("embed.weight", "BF16", {3, 4}, bits).write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  const Weight w = load_weight(ck, "embed.weight", 3, 4);
  EXPECT_EQ(w.format, WeightFormat::BF16);
  EXPECT_EQ(w.name, "embed.weight");
  EXPECT_EQ(w.bytes(), 24u);
  std::vector<float> row(4);
  for (int64_t r = 0; r < 3; ++r) {
    w.row_f32(r, row.data());
    for (int64_t c = 0; c < 4; ++c) {
      const float want = bits_to_f32(static_cast<uint32_t>(bits[static_cast<size_t>(r * 4 + c)]) << 16);
      EXPECT_EQ(std::memcmp(&row[static_cast<size_t>(c)], &want, 4), 0) << r << "," << c;
    }
  }
  const std::vector<float> flat = load_f32(ck, "embed.weight", {3, 4});
  for (size_t i = 0; i < bits.size(); ++i) {
    const float want = bits_to_f32(static_cast<uint32_t>(bits[i]) << 16);
    EXPECT_EQ(std::memcmp(&flat[i], &want, 4), 0) << i;
  }
}

TEST(WeightTest, F16AndF32Loads) {
  TempDir dir;
  const std::vector<uint16_t> h = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555, 0x8000};
  const std::vector<float> h_want = {1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), 0.333251953125f, -0.0f};
  const std::vector<float> f = {0.1f, -7.25f, 3e38f, 1e-42f};
  SafetensorsBuilder()
      .add_values("h.weight", "F16", {2, 3}, h)
      .add_values("f.weight", "F32", {2, 2}, f)
      .add_values("norm.weight", "F32", {4}, f)
      .write(dir.file("model.safetensors"));
  Checkpoint ck(dir.str());
  const Weight wh = load_weight(ck, "h.weight", 2, 3);
  EXPECT_EQ(wh.format, WeightFormat::F32);
  std::vector<float> row(3);
  for (int64_t r = 0; r < 2; ++r) {
    wh.row_f32(r, row.data());
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(row[static_cast<size_t>(c)], h_want[static_cast<size_t>(r * 3 + c)]);
  }
  const Weight wf = load_weight(ck, "f.weight", 2, 2);
  EXPECT_EQ(wf.format, WeightFormat::F32);
  std::vector<float> frow(2);
  wf.row_f32(1, frow.data());
  EXPECT_EQ(frow[0], f[2]);
  EXPECT_EQ(frow[1], f[3]);
  EXPECT_EQ(load_f32(ck, "norm.weight", {4}), f);
  EXPECT_EQ(load_f32(ck, "h.weight", {2, 3}), h_want);
  EXPECT_THAT(error_of([&] { load_f32(ck, "norm.weight", {2, 2}); }),
              AllOf(HasSubstr(dir.file("model.safetensors")), HasSubstr("\"norm.weight\""), HasSubstr("shape [4]"),
                    HasSubstr("expected [2, 2]")));
}

TEST(WeightTest, Fp8ScaleInAnotherShard) {
  TempDir dir;
  SafetensorsBuilder().add("x.weight", "F8_E4M3", {2, 2}, std::string("\x38\x40\xb8\x00", 4)).write(dir.file("s1.safetensors"));
  SafetensorsBuilder().add_values("x.weight_scale_inv", "F32", {1, 1}, std::vector<float>{0.5f}).write(dir.file("s2.safetensors"));
  write_file(dir.file("model.safetensors.index.json"),
             R"({"weight_map": {"x.weight": "s1.safetensors", "x.weight_scale_inv": "s2.safetensors"}})");
  Checkpoint ck(dir.str());
  const Weight w = load_weight(ck, "x.weight", 2, 2);
  std::vector<float> row(2);
  w.row_f32(0, row.data());
  EXPECT_EQ(row[0], 0.5f);
  EXPECT_EQ(row[1], 1.0f);
  w.row_f32(1, row.data());
  EXPECT_EQ(row[0], -0.5f);
  EXPECT_EQ(row[1], 0.0f);
}

}  // namespace
}  // namespace strata::safetensors_test
