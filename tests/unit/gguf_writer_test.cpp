// GgufWriter: write small files and parse them back with an independent
// reader written here from the GGUF v3 layout.
#include "format/gguf_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "gguf_reader.h"
#include "format/checkpoint_tensors.h"
#include "format/safetensors.h"
#include "core/numeric.h"
#include "core/config.h"
#include "core/weight.h"
#include "core/error.h"
#include "core/io.h"
#include "core/json.h"

namespace strata::gguf_writer_test {
namespace {

namespace fs = std::filesystem;

using namespace gguf_test;

class GgufWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_gguf_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(GgufWriterTest, RoundTripsHeaderKvTensorsAndData) {
  GgufWriter w;
  w.add_string("general.architecture", "glm-dsa");
  w.add_u32("glm-dsa.block_count", 3);
  w.add_i32("test.neg", -7);
  w.add_f32("test.eps", 1e-5f);
  w.add_bool("test.flag", true);
  w.add_u64("test.big", uint64_t{1} << 40);
  w.add_array_string("tokenizer.ggml.tokens", {"[T0]", "[T1]", ""});
  w.add_array_i32("tokenizer.ggml.token_type", {1, 3, 5});
  w.add_array_u32("test.u32s", {4, 5});
  w.add_array_f32("test.f32s", {0.5f, -2.0f});
  w.add_array_bool("glm-dsa.attention.indexer.types", {true, false, false, true});
  w.add_array_string("tokenizer.ggml.merges", {});

  // [2, 3] f32 in PyTorch order -> GGUF dims {3, 2}.
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  w.add_tensor_f32("a.weight", {2, 3}, GgmlType::F32, a);
  // 1-D of 5 f16 values (10 bytes, so the next tensor needs padding).
  std::vector<float> b = {0.0f, 1.0f, -2.5f, 65504.0f, 1e-7f};
  w.add_tensor_f32("b.weight", {5}, GgmlType::F16, b);
  // 3-D raw bytes via a streaming producer: [2, 1, 4] u16 (bf16) -> GGUF {4, 1, 2}.
  w.add_tensor("c.weight", {2, 1, 4}, GgmlType::BF16, [](const GgufWriter::Sink& sink) {
    for (uint16_t i = 0; i < 8; ++i) {
      uint16_t v = f32_to_bf16(static_cast<float>(i));
      sink(&v, 2);
    }
  });
  std::vector<uint8_t> raw(4 * 7);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * 3);
  w.add_tensor("d.bias", {7}, GgmlType::F32, raw);
  EXPECT_EQ(w.num_tensors(), 4u);
  EXPECT_EQ(w.num_kv(), 12u);

  const std::string p = path("m.gguf");
  w.write(p);
  EXPECT_FALSE(fs::exists(p + ".tmp." + std::to_string(::getpid())));

  ParsedFile f = parse(p);
  EXPECT_EQ(f.version, 3u);
  ASSERT_EQ(f.key_order.size(), 12u);
  EXPECT_EQ(f.key_order[0], "general.architecture");  // insertion order is kept
  EXPECT_EQ(std::get<std::string>(f.kv["general.architecture"].values[0]), "glm-dsa");
  EXPECT_EQ(f.kv["glm-dsa.block_count"].type, static_cast<uint32_t>(GgufType::U32));
  EXPECT_EQ(std::get<uint64_t>(f.kv["glm-dsa.block_count"].values[0]), 3u);
  EXPECT_EQ(f.kv["test.neg"].type, static_cast<uint32_t>(GgufType::I32));
  EXPECT_EQ(std::get<int64_t>(f.kv["test.neg"].values[0]), -7);
  EXPECT_EQ(f.kv["test.eps"].type, static_cast<uint32_t>(GgufType::F32));
  EXPECT_EQ(static_cast<float>(std::get<double>(f.kv["test.eps"].values[0])), 1e-5f);
  EXPECT_EQ(f.kv["test.flag"].type, static_cast<uint32_t>(GgufType::BOOL));
  EXPECT_TRUE(std::get<bool>(f.kv["test.flag"].values[0]));
  EXPECT_EQ(std::get<uint64_t>(f.kv["test.big"].values[0]), uint64_t{1} << 40);

  const ParsedKv& toks = f.kv["tokenizer.ggml.tokens"];
  EXPECT_EQ(toks.type, static_cast<uint32_t>(GgufType::ARRAY));
  EXPECT_EQ(toks.elem_type, static_cast<uint32_t>(GgufType::STRING));
  ASSERT_EQ(toks.values.size(), 3u);
  EXPECT_EQ(std::get<std::string>(toks.values[1]), "[T1]");
  EXPECT_EQ(std::get<std::string>(toks.values[2]), "");
  EXPECT_EQ(f.kv["tokenizer.ggml.token_type"].elem_type, static_cast<uint32_t>(GgufType::I32));
  EXPECT_EQ(std::get<int64_t>(f.kv["tokenizer.ggml.token_type"].values[1]), 3);
  EXPECT_EQ(f.kv["test.u32s"].elem_type, static_cast<uint32_t>(GgufType::U32));
  EXPECT_EQ(std::get<uint64_t>(f.kv["test.u32s"].values[1]), 5u);
  EXPECT_EQ(std::get<double>(f.kv["test.f32s"].values[1]), -2.0);
  const ParsedKv& types = f.kv["glm-dsa.attention.indexer.types"];
  EXPECT_EQ(types.elem_type, static_cast<uint32_t>(GgufType::BOOL));
  ASSERT_EQ(types.values.size(), 4u);
  EXPECT_TRUE(std::get<bool>(types.values[0]));
  EXPECT_FALSE(std::get<bool>(types.values[1]));
  EXPECT_EQ(f.kv["tokenizer.ggml.merges"].values.size(), 0u);
  EXPECT_EQ(f.kv.count("general.alignment"), 0u);  // default 32 is implied

  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors[0].name, "a.weight");
  EXPECT_EQ(f.tensors[0].dims, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(f.tensors[0].type, 0u);
  EXPECT_EQ(f.tensors[1].dims, (std::vector<uint64_t>{5}));
  EXPECT_EQ(f.tensors[1].type, 1u);
  EXPECT_EQ(f.tensors[2].dims, (std::vector<uint64_t>{4, 1, 2}));
  EXPECT_EQ(f.tensors[2].type, 30u);
  EXPECT_EQ(f.tensors[3].dims, (std::vector<uint64_t>{7}));

  // Alignment: the data area and every tensor offset are multiples of 32.
  EXPECT_EQ(f.data_start % 32, 0u);
  EXPECT_EQ(f.tensors[0].offset, 0u);
  EXPECT_EQ(f.tensors[1].offset, 32u);
  EXPECT_EQ(f.tensors[2].offset, 64u);
  EXPECT_EQ(f.tensors[3].offset, 96u);
  for (const ParsedTensor& t : f.tensors) EXPECT_EQ(t.offset % 32, 0u) << t.name;
  // The file ends on the padded end of the last tensor.
  EXPECT_EQ(f.bytes.size(), f.data_start + 96 + 32);
  // Padding between the header and the data is zero.
  for (uint64_t i = f.header_end; i < f.data_start; ++i) EXPECT_EQ(f.bytes[i], 0u) << i;
  const uint8_t* data = f.bytes.data() + f.data_start;
  std::vector<float> a_back(6);
  std::memcpy(a_back.data(), data + f.tensors[0].offset, 24);
  EXPECT_EQ(a_back, a);
  for (size_t i = 0; i < b.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, data + f.tensors[1].offset + 2 * i, 2);
    EXPECT_EQ(h, f32_to_f16(b[i]));
  }
  for (int i = 0; i < 8; ++i) {
    uint16_t h;
    std::memcpy(&h, data + f.tensors[2].offset + 2 * i, 2);
    EXPECT_EQ(bf16_to_f32(h), static_cast<float>(i));
  }
  EXPECT_EQ(std::memcmp(data + f.tensors[3].offset, raw.data(), raw.size()), 0);
  for (uint64_t i = f.tensors[1].offset + 10; i < f.tensors[2].offset; ++i) EXPECT_EQ(data[i], 0u);
}

TEST_F(GgufWriterTest, CustomAlignmentIsRecordedAndHonoured) {
  GgufWriter w(64);
  EXPECT_EQ(w.alignment(), 64u);
  w.add_string("general.architecture", "x");
  w.add_tensor_f32("t0", {3}, GgmlType::F32, {1, 2, 3});
  w.add_tensor_f32("t1", {1}, GgmlType::F32, {4});
  const std::string p = path("a.gguf");
  w.write(p);
  ParsedFile f = parse(p);
  ASSERT_EQ(f.kv.count("general.alignment"), 1u);
  EXPECT_EQ(f.kv["general.alignment"].type, static_cast<uint32_t>(GgufType::U32));
  EXPECT_EQ(std::get<uint64_t>(f.kv["general.alignment"].values[0]), 64u);
  EXPECT_EQ(f.data_start % 64, 0u);
  EXPECT_EQ(f.tensors[1].offset, 64u);
  float v;
  std::memcpy(&v, f.bytes.data() + f.data_start + 64, 4);
  EXPECT_EQ(v, 4.0f);
  EXPECT_THROW(GgufWriter(48), Error);
}

TEST_F(GgufWriterTest, RejectsBadInput) {
  GgufWriter w;
  w.add_u32("k", 1);
  EXPECT_THROW(w.add_string("k", "again"), Error);
  w.add_tensor_f32("t", {2}, GgmlType::F32, {1, 2});
  EXPECT_THROW(w.add_tensor_f32("t", {2}, GgmlType::F32, {1, 2}), Error);
  EXPECT_THROW(w.add_tensor_f32("u", {3}, GgmlType::F32, {1, 2}), Error);
  EXPECT_THROW(w.add_tensor_f32("v", {1, 1, 1, 1, 1}, GgmlType::F32, {1}), Error);
  EXPECT_THROW(w.add_tensor_f32("w", {0}, GgmlType::F32, {}), Error);
  EXPECT_THROW(w.add_tensor_f32(std::string(64, 'n'), {1}, GgmlType::F32, {1}), Error);
  EXPECT_THROW(w.add_tensor("x", {2}, GgmlType::F16, std::vector<uint8_t>(3)), Error);
}

TEST_F(GgufWriterTest, ShortOrLongProducerFailsAndLeavesNoFile) {
  const std::string p = path("bad.gguf");
  {
    GgufWriter w;
    w.add_tensor("t", {4}, GgmlType::F32, [](const GgufWriter::Sink& sink) {
      float x[3] = {1, 2, 3};
      sink(x, sizeof x);
    });
    EXPECT_THROW(w.write(p), Error);
  }
  {
    GgufWriter w;
    w.add_tensor("t", {2}, GgmlType::F32, [](const GgufWriter::Sink& sink) {
      float x[3] = {1, 2, 3};
      sink(x, sizeof x);
    });
    EXPECT_THROW(w.write(p), Error);
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_TRUE(fs::is_empty(dir_));  // the temp file was removed too
}

TEST_F(GgufWriterTest, FailedWriteKeepsAnExistingFile) {
  const std::string p = path("keep.gguf");
  {
    std::ofstream o(p);
    o << "old";
  }
  GgufWriter w;
  w.add_tensor("t", {1}, GgmlType::F32, [](const GgufWriter::Sink&) { throw Error("producer failed"); });
  EXPECT_THROW(w.write(p), Error);
  std::ifstream in(p);
  std::string s;
  in >> s;
  EXPECT_EQ(s, "old");
}

TEST(F32ToF16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(F32ToF16, RoundsToNearestEven) {
  // Midpoints between neighbouring halves go to the even one; anything past
  // the midpoint goes up. Checked for normals, subnormals and the top range.
  for (uint32_t h : {0x0001u, 0x0002u, 0x03ffu, 0x0400u, 0x3c00u, 0x3c01u, 0x7bfeu, 0x8401u}) {
    const float lo = f16_to_f32(static_cast<uint16_t>(h)), hi = f16_to_f32(static_cast<uint16_t>(h + 1));
    const double mid = (static_cast<double>(lo) + hi) / 2;
    const uint32_t even = (h & 1) ? h + 1 : h;
    EXPECT_EQ(f32_to_f16(static_cast<float>(mid)), even) << std::hex << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(static_cast<float>(mid), hi)), h + 1) << std::hex << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(static_cast<float>(mid), lo)), h) << std::hex << h;
  }
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bffu);  // max half 65504
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);  // rounds to inf
  EXPECT_EQ(f32_to_f16(1e30f), 0x7c00u);
  EXPECT_EQ(f32_to_f16(-1e30f), 0xfc00u);
  EXPECT_EQ(f32_to_f16(1e-9f), 0x0000u);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000u);  // exactly half the smallest subnormal: ties to 0
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001u);
}

// ---------------------------------------------------------------------------
// `strata export-gguf` on a fixture checkpoint: the layout llama.cpp's glm-dsa
// loader expects (docs/llama-cpp-crosscheck.md), checked value by value
// against the safetensors it came from.

const ParsedTensor* find_tensor(const ParsedFile& f, const std::string& name) {
  for (const ParsedTensor& t : f.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

float f32_at(const ParsedFile& f, const ParsedTensor& t, uint64_t index) {
  float v;
  std::memcpy(&v, f.bytes.data() + f.data_start + t.offset + 4 * index, 4);
  return v;
}

uint64_t kv_u(ParsedFile& f, const std::string& key) { return std::get<uint64_t>(f.kv.at(key).values.at(0)); }

class ExportGgufTest : public GgufWriterTest {
 protected:
  std::string fixture(const std::string& name) {
    std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/" + name;
    if (!fs::exists(dir + "/config.json")) return "";
    return dir;
  }
  int run_export(const std::string& model, const std::string& out, const std::string& extra = "") {
    std::string cmd = std::string(STRATA_BINARY) + " export-gguf -q --model '" + model + "' --out '" + out + "' " +
                      extra + " 2> '" + path("stderr.txt") + "'";
    return std::system(cmd.c_str());
  }
  std::string stderr_text() {
    std::ifstream in(path("stderr.txt"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_F(ExportGgufTest, Glm52FixtureHasTheGlmDsaLayout) {
  const std::string fx = fixture("glm52-tiny-bf16");
  if (fx.empty()) GTEST_SKIP() << "tests/fixtures/glm52-tiny-bf16 not present";
  const std::string out = path("m.gguf");
  ASSERT_EQ(run_export(fx, out), 0) << stderr_text();
  ParsedFile f = parse(out);
  const ModelConfig c = load_model_config(fx);
  const Checkpoint ck(fx);

  EXPECT_EQ(std::get<std::string>(f.kv.at("general.architecture").values[0]), "glm-dsa");
  const int64_t L = c.num_hidden_layers;
  EXPECT_EQ(kv_u(f, "glm-dsa.block_count"), static_cast<uint64_t>(L + 1));  // + MTP layer
  EXPECT_EQ(kv_u(f, "glm-dsa.nextn_predict_layers"), 1u);
  EXPECT_EQ(kv_u(f, "glm-dsa.leading_dense_block_count"), 1u);
  EXPECT_EQ(kv_u(f, "glm-dsa.attention.head_count_kv"), 1u);
  EXPECT_EQ(kv_u(f, "glm-dsa.attention.key_length"), static_cast<uint64_t>(c.kv_lora_rank + c.qk_rope_head_dim));
  EXPECT_EQ(kv_u(f, "glm-dsa.attention.value_length"), static_cast<uint64_t>(c.kv_lora_rank));
  EXPECT_EQ(kv_u(f, "glm-dsa.attention.key_length_mla"), static_cast<uint64_t>(c.qk_head_dim()));
  EXPECT_EQ(kv_u(f, "glm-dsa.expert_group_count"), static_cast<uint64_t>(c.n_group));
  EXPECT_EQ(kv_u(f, "glm-dsa.expert_gating_func"), 2u);
  EXPECT_EQ(static_cast<float>(std::get<double>(f.kv.at("glm-dsa.rope.freq_base").values[0])),
            static_cast<float>(c.rope_theta));
  const ParsedKv& types = f.kv.at("glm-dsa.attention.indexer.types");
  ASSERT_EQ(types.values.size(), static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) EXPECT_EQ(std::get<bool>(types.values[i]), c.indexer_full(i)) << "layer " << i;
  EXPECT_EQ(f.kv.at("tokenizer.ggml.tokens").values.size(), static_cast<size_t>(c.vocab_size));
  EXPECT_EQ(f.kv.at("tokenizer.ggml.merges").values.size(), 0u);

  // Shared-indexer layers carry no indexer tensors; full ones and MTP do.
  for (int64_t i = 0; i <= L; ++i)
    EXPECT_EQ(find_tensor(f, "blk." + std::to_string(i) + ".indexer.attn_k.weight") != nullptr, c.indexer_full(i))
        << "layer " << i;
  for (const char* n : {"nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight",
                        "nextn.shared_head_norm.weight", "exp_probs_b.bias"})
    EXPECT_NE(find_tensor(f, "blk." + std::to_string(L) + "." + n), nullptr) << n;
  for (const ParsedTensor& t : f.tensors) {
    EXPECT_EQ(t.offset % 32, 0u) << t.name;
    EXPECT_EQ(t.type, 0u) << t.name;  // the default export is all f32
  }

  // attn_k_b: GGUF dims {nope, kv_lora, H}; element (j, col, h) = kv_b[h*(nope+v) + j][col].
  // attn_v_b: GGUF dims {kv_lora, v, H}; element (col, j, h) = kv_b[h*(nope+v) + nope + j][col].
  const int64_t H = c.num_attention_heads, nope = c.qk_nope_head_dim, vd = c.v_head_dim, r = c.kv_lora_rank;
  for (int64_t layer : {int64_t{0}, L}) {
    const std::string b = "blk." + std::to_string(layer) + ".";
    const ParsedTensor* kb = find_tensor(f, b + "attn_k_b.weight");
    const ParsedTensor* vb = find_tensor(f, b + "attn_v_b.weight");
    ASSERT_TRUE(kb && vb);
    EXPECT_EQ(kb->dims, (std::vector<uint64_t>{uint64_t(nope), uint64_t(r), uint64_t(H)}));
    EXPECT_EQ(vb->dims, (std::vector<uint64_t>{uint64_t(r), uint64_t(vd), uint64_t(H)}));
    Weight kv = load_weight(ck, "model.layers." + std::to_string(layer) + ".self_attn.kv_b_proj.weight",
                            H * (nope + vd), r);
    std::vector<float> row(static_cast<size_t>(r));
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t j = 0; j < nope + vd; ++j) {
        kv.row_f32(h * (nope + vd) + j, row.data());
        for (int64_t col = 0; col < r; ++col) {
          if (j < nope)
            ASSERT_EQ(f32_at(f, *kb, (h * r + col) * nope + j), row[col]) << b << " k_b h" << h << " j" << j;
          else
            ASSERT_EQ(f32_at(f, *vb, (h * vd + (j - nope)) * r + col), row[col]) << b << " v_b h" << h;
        }
      }
    }
  }

  // Routed experts stacked: ffn_down_exps dims {ff, d, E}; element (col, row, e) = experts.e.down_proj[row][col].
  const ParsedTensor* down = find_tensor(f, "blk.2.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  const int64_t E = c.n_routed_experts, ff = c.moe_intermediate_size, d = c.hidden_size;
  EXPECT_EQ(down->dims, (std::vector<uint64_t>{uint64_t(ff), uint64_t(d), uint64_t(E)}));
  std::vector<float> drow(static_cast<size_t>(ff));
  for (int64_t e = 0; e < E; ++e) {
    Weight w = load_weight(ck, "model.layers.2.mlp.experts." + std::to_string(e) + ".down_proj.weight", d, ff);
    for (int64_t row = 0; row < d; row += 7) {
      w.row_f32(row, drow.data());
      for (int64_t col = 0; col < ff; ++col)
        ASSERT_EQ(f32_at(f, *down, (e * d + row) * ff + col), drow[col]) << "expert " << e;
    }
  }
  const ParsedTensor* bias = find_tensor(f, "blk.2.exp_probs_b.bias");
  ASSERT_NE(bias, nullptr);
  std::vector<float> bv = load_f32(ck, "model.layers.2.mlp.gate.e_score_correction_bias", {E});
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(f32_at(f, *bias, e), bv[e]);
}

TEST_F(ExportGgufTest, F16ExportStoresMatricesAsF16AndNormsAsF32) {
  const std::string fx = fixture("glm5-tiny-fp8");
  if (fx.empty()) GTEST_SKIP() << "tests/fixtures/glm5-tiny-fp8 not present";
  const std::string out = path("h.gguf");
  ASSERT_EQ(run_export(fx, out, "--type f16 --no-mtp"), 0) << stderr_text();
  ParsedFile f = parse(out);
  const ModelConfig c = load_model_config(fx);
  EXPECT_EQ(kv_u(f, "glm-dsa.block_count"), static_cast<uint64_t>(c.num_hidden_layers));
  EXPECT_EQ(f.kv.count("glm-dsa.nextn_predict_layers"), 0u);
  EXPECT_EQ(kv_u(f, "general.file_type"), 1u);
  for (const ParsedTensor& t : f.tensors) {
    EXPECT_EQ(t.type, t.dims.size() == 1 ? 0u : 1u) << t.name;
    EXPECT_EQ(t.name.find("nextn"), std::string::npos) << t.name;
  }
  // An FP8 weight is dequantized (code * block scale) and then rounded to f16.
  const Checkpoint ck(fx);
  Weight w = load_weight(ck, "model.layers.1.self_attn.q_a_proj.weight", c.q_lora_rank, c.hidden_size,
                         c.fp8_block_rows, c.fp8_block_cols);
  ASSERT_EQ(w.format, WeightFormat::FP8_BLOCK);
  const ParsedTensor* t = find_tensor(f, "blk.1.attn_q_a.weight");
  ASSERT_NE(t, nullptr);
  std::vector<float> row(static_cast<size_t>(c.hidden_size));
  w.row_f32(c.q_lora_rank - 1, row.data());
  for (int64_t col = 0; col < c.hidden_size; ++col) {
    uint16_t h;
    std::memcpy(&h, f.bytes.data() + f.data_start + t->offset + 2 * ((c.q_lora_rank - 1) * c.hidden_size + col), 2);
    ASSERT_EQ(h, f32_to_f16(row[col])) << col;
  }
}

TEST_F(ExportGgufTest, RejectsADenseLayerAfterMoeLayers) {
  const std::string fx = fixture("glm5-tiny-bf16");
  if (fx.empty()) GTEST_SKIP() << "tests/fixtures/glm5-tiny-bf16 not present";
  const fs::path model = dir_ / "model";
  fs::create_directories(model);
  Json cfg = parse_json(read_small_file(fx + "/config.json", 1 << 20), "config.json");
  const int64_t L = cfg["num_hidden_layers"].get<int64_t>();
  Json types = Json::array();
  for (int64_t i = 0; i < L; ++i) types.push_back(i == 1 ? "dense" : "sparse");
  cfg["mlp_layer_types"] = types;
  std::ofstream(model / "config.json") << cfg.dump();
  fs::create_symlink(fs::path(fx) / "model.safetensors", model / "model.safetensors");
  const std::string out = path("x.gguf");
  EXPECT_NE(run_export(model.string(), out), 0);
  EXPECT_NE(stderr_text().find("leading dense"), std::string::npos) << stderr_text();
  EXPECT_FALSE(fs::exists(out));
}

// qwen3moe: GQA tensors under llama.cpp's names, the dense layer 0
// (mlp_only_layers) as a zero router over E copies of the dense MLP, and every
// expert zero-padded to the one expert width llama.cpp's qwen3moe allows.
TEST_F(ExportGgufTest, Qwen3FixtureHasTheQwen3moeLayout) {
  const std::string fx = fixture("qwen3moe-tiny-bf16");
  if (fx.empty()) GTEST_SKIP() << "tests/fixtures/qwen3moe-tiny-bf16 not present";
  const std::string out = path("q.gguf");
  ASSERT_EQ(run_export(fx, out), 0) << stderr_text();
  ParsedFile f = parse(out);
  const ModelConfig c = load_model_config(fx);
  const Checkpoint ck(fx);
  ASSERT_FALSE(c.is_moe(0));
  ASSERT_GT(c.intermediate_size, c.moe_intermediate_size);
  const int64_t L = c.num_hidden_layers, E = c.n_routed_experts, d = c.hidden_size, F = c.intermediate_size,
                fe = c.moe_intermediate_size;
  EXPECT_EQ(std::get<std::string>(f.kv.at("general.architecture").values[0]), "qwen3moe");
  EXPECT_EQ(kv_u(f, "qwen3moe.block_count"), static_cast<uint64_t>(L));
  EXPECT_EQ(kv_u(f, "qwen3moe.attention.head_count_kv"), static_cast<uint64_t>(c.num_key_value_heads));
  EXPECT_EQ(kv_u(f, "qwen3moe.attention.key_length"), static_cast<uint64_t>(c.head_dim));
  EXPECT_EQ(kv_u(f, "qwen3moe.attention.value_length"), static_cast<uint64_t>(c.head_dim));
  EXPECT_EQ(kv_u(f, "qwen3moe.rope.dimension_count"), static_cast<uint64_t>(c.head_dim));
  EXPECT_EQ(kv_u(f, "qwen3moe.expert_feed_forward_length"), static_cast<uint64_t>(F));  // padded to the dense width
  EXPECT_EQ(kv_u(f, "qwen3moe.expert_used_count"), static_cast<uint64_t>(c.num_experts_per_tok));
  EXPECT_EQ(f.kv.count("qwen3moe.nextn_predict_layers"), 0u);
  for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "attn_q_norm.weight",
                        "attn_k_norm.weight", "ffn_norm.weight", "ffn_gate_inp.weight"})
    for (int64_t i = 0; i < L; ++i) EXPECT_NE(find_tensor(f, "blk." + std::to_string(i) + "." + n), nullptr) << n;
  EXPECT_EQ(find_tensor(f, "blk.1.post_attention_norm.weight"), nullptr);
  EXPECT_EQ(find_tensor(f, "blk.1.attn_q.bias"), nullptr);

  // Dense layer 0: zero router, each expert = the dense MLP (F wide, no padding).
  const ParsedTensor* r0 = find_tensor(f, "blk.0.ffn_gate_inp.weight");
  ASSERT_NE(r0, nullptr);
  for (int64_t k = 0; k < E * d; ++k) ASSERT_EQ(f32_at(f, *r0, k), 0.0f);
  const ParsedTensor* down0 = find_tensor(f, "blk.0.ffn_down_exps.weight");
  ASSERT_NE(down0, nullptr);
  EXPECT_EQ(down0->dims, (std::vector<uint64_t>{uint64_t(F), uint64_t(d), uint64_t(E)}));
  Weight dw = load_weight(ck, "model.layers.0.mlp.down_proj.weight", d, F);
  std::vector<float> row(static_cast<size_t>(F));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < d; r += 5) {
      dw.row_f32(r, row.data());
      for (int64_t col = 0; col < F; ++col) ASSERT_EQ(f32_at(f, *down0, (e * d + r) * F + col), row[col]) << e;
    }
  // MoE layer 1: expert e's gate rows, then zero rows up to F; down columns padded the same way.
  const ParsedTensor* g1 = find_tensor(f, "blk.1.ffn_gate_exps.weight");
  const ParsedTensor* d1 = find_tensor(f, "blk.1.ffn_down_exps.weight");
  ASSERT_TRUE(g1 && d1);
  EXPECT_EQ(g1->dims, (std::vector<uint64_t>{uint64_t(d), uint64_t(F), uint64_t(E)}));
  EXPECT_EQ(d1->dims, (std::vector<uint64_t>{uint64_t(F), uint64_t(d), uint64_t(E)}));
  std::vector<float> grow(static_cast<size_t>(d)), drow(static_cast<size_t>(fe));
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = "model.layers.1.mlp.experts." + std::to_string(e) + ".";
    Weight g = load_weight(ck, ep + "gate_proj.weight", fe, d);
    Weight dn = load_weight(ck, ep + "down_proj.weight", d, fe);
    for (int64_t r = 0; r < F; ++r) {
      if (r < fe) g.row_f32(r, grow.data());
      for (int64_t col = 0; col < d; ++col)
        ASSERT_EQ(f32_at(f, *g1, (e * F + r) * d + col), r < fe ? grow[col] : 0.0f) << "expert " << e << " row " << r;
    }
    for (int64_t r = 0; r < d; r += 3) {
      dn.row_f32(r, drow.data());
      for (int64_t col = 0; col < F; ++col)
        ASSERT_EQ(f32_at(f, *d1, (e * d + r) * F + col), col < fe ? drow[col] : 0.0f) << "expert " << e;
    }
  }
}

// glm4moe: q/k/v biases and q/k norms only when the checkpoint has them,
// post_attention_norm, leading dense layer, router bias, shared expert, the
// expert groups only when one can be dropped, and the MTP block's nextn tensors.
TEST_F(ExportGgufTest, Glm4FixturesHaveTheGlm4moeLayout) {
  for (const char* name : {"glm4moe-tiny-bf16", "glm4moe-air-tiny-bf16"}) {
    SCOPED_TRACE(name);
    const std::string fx = fixture(name);
    if (fx.empty()) GTEST_SKIP() << "tests/fixtures/" << name << " not present";
    const std::string out = path(std::string(name) + ".gguf");
    ASSERT_EQ(run_export(fx, out), 0) << stderr_text();
    ParsedFile f = parse(out);
    const ModelConfig c = load_model_config(fx);
    const Checkpoint ck(fx);
    const int64_t L = c.num_hidden_layers;
    EXPECT_EQ(std::get<std::string>(f.kv.at("general.architecture").values[0]), "glm4moe");
    EXPECT_EQ(kv_u(f, "glm4moe.block_count"), static_cast<uint64_t>(L + 1));
    EXPECT_EQ(kv_u(f, "glm4moe.nextn_predict_layers"), 1u);
    EXPECT_EQ(kv_u(f, "glm4moe.leading_dense_block_count"), 1u);
    EXPECT_EQ(kv_u(f, "glm4moe.attention.key_length"), static_cast<uint64_t>(c.head_dim));
    EXPECT_EQ(kv_u(f, "glm4moe.rope.dimension_count"), static_cast<uint64_t>(c.rotary_dim));
    EXPECT_EQ(kv_u(f, "glm4moe.expert_shared_count"), static_cast<uint64_t>(c.n_shared_experts));
    EXPECT_EQ(kv_u(f, "glm4moe.expert_gating_func"), 2u);
    EXPECT_EQ(f.kv.count("glm4moe.expert_group_count"), c.n_group > 1 ? 1u : 0u);
    if (c.n_group > 1) {
      EXPECT_EQ(kv_u(f, "glm4moe.expert_group_used_count"), static_cast<uint64_t>(c.topk_group));
    }
    EXPECT_FLOAT_EQ(static_cast<float>(std::get<double>(f.kv.at("glm4moe.expert_weights_scale").values[0])),
                    c.routed_scaling_factor);
    for (int64_t i = 0; i <= L; ++i) {
      const std::string b = "blk." + std::to_string(i) + ".";
      EXPECT_EQ(find_tensor(f, b + "attn_q.bias") != nullptr, c.attention_bias) << i;
      EXPECT_EQ(find_tensor(f, b + "attn_k_norm.weight") != nullptr, c.qk_norm) << i;
      EXPECT_NE(find_tensor(f, b + "post_attention_norm.weight"), nullptr) << i;
      EXPECT_EQ(find_tensor(f, b + "ffn_norm.weight"), nullptr) << i;
      EXPECT_EQ(find_tensor(f, b + "ffn_gate.weight") != nullptr, i == 0) << i;
      EXPECT_EQ(find_tensor(f, b + "exp_probs_b.bias") != nullptr, i > 0) << i;
      EXPECT_EQ(find_tensor(f, b + "ffn_up_shexp.weight") != nullptr, i > 0) << i;
      EXPECT_EQ(find_tensor(f, b + "nextn.eh_proj.weight") != nullptr, i == L) << i;
    }
    if (c.attention_bias) {
      const ParsedTensor* vb = find_tensor(f, "blk.1.attn_v.bias");
      ASSERT_NE(vb, nullptr);
      const int64_t n = c.num_key_value_heads * c.head_dim;
      std::vector<float> want = load_f32(ck, "model.layers.1.self_attn.v_proj.bias", {n});
      for (int64_t k = 0; k < n; ++k) EXPECT_EQ(f32_at(f, *vb, k), want[k]);
    }
  }
}

// deepseek2: the MLA layout of glm-dsa without indexer keys or tensors, the
// expert groups, and YaRN in llama.cpp's terms. llama.cpp's deepseek2 scales
// the rotary cos/sin by R = rope.scaling.attn_factor and the softmax scale by
// (R * (1 + 0.1 m ln f))^2 with m = yarn_log_multiplier / 0.1; transformers
// by mscale(f, mscale) / mscale(f, mscale_all_dim) and mscale(f, mscale_all_dim)^2,
// computed here from the fixture's config.json.
TEST_F(ExportGgufTest, Dsv3FixtureHasTheDeepseek2Layout) {
  const std::string fx = fixture("dsv3-tiny-bf16");
  if (fx.empty()) GTEST_SKIP() << "tests/fixtures/dsv3-tiny-bf16 not present";
  const std::string out = path("d.gguf");
  ASSERT_EQ(run_export(fx, out), 0) << stderr_text();
  ParsedFile f = parse(out);
  const ModelConfig c = load_model_config(fx);
  const int64_t L = c.num_hidden_layers;
  auto f32 = [&](const std::string& k) { return std::get<double>(f.kv.at(k).values.at(0)); };
  EXPECT_EQ(std::get<std::string>(f.kv.at("general.architecture").values[0]), "deepseek2");
  EXPECT_EQ(kv_u(f, "deepseek2.block_count"), static_cast<uint64_t>(L + 1));
  EXPECT_EQ(kv_u(f, "deepseek2.nextn_predict_layers"), 1u);
  EXPECT_EQ(kv_u(f, "deepseek2.leading_dense_block_count"), 1u);
  EXPECT_EQ(kv_u(f, "deepseek2.attention.head_count_kv"), 1u);
  EXPECT_EQ(kv_u(f, "deepseek2.attention.key_length"), static_cast<uint64_t>(c.kv_lora_rank + c.qk_rope_head_dim));
  EXPECT_EQ(kv_u(f, "deepseek2.attention.value_length"), static_cast<uint64_t>(c.kv_lora_rank));
  EXPECT_EQ(kv_u(f, "deepseek2.attention.key_length_mla"), static_cast<uint64_t>(c.qk_head_dim()));
  EXPECT_EQ(kv_u(f, "deepseek2.attention.value_length_mla"), static_cast<uint64_t>(c.v_head_dim));
  EXPECT_EQ(kv_u(f, "deepseek2.attention.q_lora_rank"), static_cast<uint64_t>(c.q_lora_rank));
  EXPECT_EQ(kv_u(f, "deepseek2.attention.kv_lora_rank"), static_cast<uint64_t>(c.kv_lora_rank));
  EXPECT_EQ(kv_u(f, "deepseek2.rope.dimension_count"), static_cast<uint64_t>(c.qk_rope_head_dim));
  EXPECT_EQ(kv_u(f, "deepseek2.expert_shared_count"), 1u);
  EXPECT_EQ(kv_u(f, "deepseek2.expert_group_count"), 4u);
  EXPECT_EQ(kv_u(f, "deepseek2.expert_group_used_count"), 2u);
  EXPECT_EQ(kv_u(f, "deepseek2.expert_gating_func"), 2u);
  EXPECT_TRUE(std::get<bool>(f.kv.at("deepseek2.expert_weights_norm").values.at(0)));
  EXPECT_FLOAT_EQ(static_cast<float>(f32("deepseek2.expert_weights_scale")), 2.5f);
  for (const auto& kv : f.kv) EXPECT_EQ(kv.first.find("indexer"), std::string::npos) << kv.first;

  const Json raw = parse_json(read_small_file(fx + "/config.json", 1 << 20), "config.json");
  const Json& rs = raw.at("rope_scaling");
  const double fac = rs.at("factor").get<double>();
  auto mscale = [&](double m) { return 0.1 * m * std::log(fac) + 1.0; };
  const double rot = mscale(rs.at("mscale").get<double>()) / mscale(rs.at("mscale_all_dim").get<double>());
  const double soft = std::pow(mscale(rs.at("mscale_all_dim").get<double>()), 2);
  ASSERT_GT(std::fabs(rot - 1.0), 0.01);  // the fixture makes the two factors differ
  EXPECT_EQ(std::get<std::string>(f.kv.at("deepseek2.rope.scaling.type").values[0]), "yarn");
  EXPECT_FLOAT_EQ(static_cast<float>(f32("deepseek2.rope.scaling.factor")), static_cast<float>(fac));
  EXPECT_EQ(kv_u(f, "deepseek2.rope.scaling.original_context_length"),
            rs.at("original_max_position_embeddings").get<uint64_t>());
  const double R = f32("deepseek2.rope.scaling.attn_factor");
  const double m = f32("deepseek2.rope.scaling.yarn_log_multiplier") / 0.1;
  EXPECT_NEAR(R, rot, 1e-6);
  EXPECT_NEAR(std::pow(R * (1.0 + 0.1 * m * std::log(fac)), 2), soft, 1e-5);

  // Tensors: dense layer 0, MoE layers with router bias and shared expert,
  // the MTP block with its nextn tensors (this checkpoint has no own
  // embedding or head), no indexer anywhere.
  for (int64_t i = 0; i <= L; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    for (const char* n : {"attn_q_a.weight", "attn_q_a_norm.weight", "attn_q_b.weight", "attn_kv_a_mqa.weight",
                          "attn_kv_a_norm.weight", "attn_k_b.weight", "attn_v_b.weight", "attn_output.weight",
                          "ffn_norm.weight"})
      EXPECT_NE(find_tensor(f, b + n), nullptr) << b << n;
    EXPECT_EQ(find_tensor(f, b + "attn_kv_b.weight"), nullptr) << i;
    EXPECT_EQ(find_tensor(f, b + "ffn_gate.weight") != nullptr, i == 0) << i;
    EXPECT_EQ(find_tensor(f, b + "exp_probs_b.bias") != nullptr, i > 0) << i;
    EXPECT_EQ(find_tensor(f, b + "ffn_down_shexp.weight") != nullptr, i > 0) << i;
    EXPECT_EQ(find_tensor(f, b + "nextn.eh_proj.weight") != nullptr, i == L) << i;
    EXPECT_EQ(find_tensor(f, b + "nextn.shared_head_norm.weight") != nullptr, i == L) << i;
    EXPECT_EQ(find_tensor(f, b + "nextn.embed_tokens.weight"), nullptr) << i;
  }
  for (const ParsedTensor& t : f.tensors) EXPECT_EQ(t.name.find("indexer"), std::string::npos) << t.name;
}

// dsv3-tiny-fp8 (DeepSeek-V3's block FP8, 32 x 48 blocks, two shards): the f32
// export holds code * scale_inv[row / 32][col / 48] for every element,
// decoded here from the raw bytes without strata's Weight: partial edge
// blocks in both directions, the MTP eh_proj, and the expert whose
// weight_scale_inv lies in the other shard than its weight.
float e4m3_value(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return static_cast<float>(b & 0x80 ? -v : v);
}

TEST_F(ExportGgufTest, Dsv3Fp8ExportDequantizesEveryBlock) {
  const std::string fx = fixture("dsv3-tiny-fp8");
  if (fx.empty()) GTEST_SKIP() << "tests/fixtures/dsv3-tiny-fp8 not present";
  const std::string out = path("d8.gguf");
  ASSERT_EQ(run_export(fx, out), 0) << stderr_text();
  ParsedFile f = parse(out);
  const ModelConfig c = load_model_config(fx);
  ASSERT_TRUE(c.fp8);
  ASSERT_EQ(c.fp8_block_rows, 32);
  ASSERT_EQ(c.fp8_block_cols, 48);
  const Checkpoint ck(fx);
  const Json index = parse_json(read_small_file(fx + "/model.safetensors.index.json", 1 << 20), "index");
  const std::string split = "model.layers.2.mlp.experts.2.down_proj.weight";
  ASSERT_NE(index.at("weight_map").at(split), index.at("weight_map").at(split + "_scale_inv")) << "fixture changed";
  struct Case {
    std::string gguf, hf;
    int64_t rows, cols, first;  // `first`: element offset of this matrix in the GGUF tensor
  };
  const int64_t d = c.hidden_size, ff = c.moe_intermediate_size;
  const std::vector<Case> cases = {
      {"blk.1.attn_kv_a_mqa.weight", "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
       c.kv_lora_rank + c.qk_rope_head_dim, d, 0},
      {"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight", d, c.intermediate_size, 0},
      {"blk.3.nextn.eh_proj.weight", "model.layers.3.eh_proj.weight", d, 2 * d, 0},
      {"blk.2.ffn_down_exps.weight", split, d, ff, 2 * d * ff},
      {"blk.2.ffn_gate_exps.weight", "model.layers.2.mlp.experts.5.gate_proj.weight", ff, d, 5 * ff * d},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.hf);
    const TensorEntry& e = ck.entry(k.hf);
    ASSERT_EQ(e.dtype, DType::F8_E4M3);
    std::vector<uint8_t> codes(e.numel);
    ck.file_of(k.hf).read(e, codes.data());
    const int64_t nbr = (k.rows + 31) / 32, nbc = (k.cols + 47) / 48;
    const std::vector<float> scale =
        load_f32(ck, k.hf.substr(0, k.hf.size() - 7) + ".weight_scale_inv", {nbr, nbc});
    const ParsedTensor* t = find_tensor(f, k.gguf);
    ASSERT_NE(t, nullptr);
    for (int64_t i = 0; i < k.rows; ++i)
      for (int64_t j = 0; j < k.cols; ++j) {
        const float want = e4m3_value(codes[static_cast<size_t>(i * k.cols + j)]) *
                           scale[static_cast<size_t>((i / 32) * nbc + j / 48)];
        ASSERT_EQ(f32_at(f, *t, static_cast<uint64_t>(k.first + i * k.cols + j)), want) << i << "," << j;
      }
  }
}

// The test reader itself (tests/unit/gguf_reader.h) refuses bad files with an
// error instead of reading past its buffer or dividing by zero: inputs found
// by tests/fuzz/fuzz_gguf (tests/fuzz/corpus/gguf/crash-*).
std::vector<uint8_t> gguf_bytes(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
  std::vector<uint8_t> b;
  auto put = [&b](const void* p, size_t n) { b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); };
  const uint32_t magic = 0x46554747u, version = 3;
  const uint64_t n_tensors = 0, n_kv = 1, key_len = key.size();
  put(&magic, 4), put(&version, 4), put(&n_tensors, 8), put(&n_kv, 8), put(&key_len, 8), put(key.data(), key.size());
  put(&type, 4), put(value.data(), value.size());
  return b;
}

TEST(GgufReader, RefusesAStringLengthThatWrapsPastTheBuffer) {
  // A string value whose length is 2^64 - 1: pos + n wraps to a small number.
  std::vector<uint8_t> v(24, 'x');
  std::memset(v.data(), 0xff, 8);
  EXPECT_THROW(parse_bytes(gguf_bytes("k", static_cast<uint32_t>(GgufType::STRING), v)), std::runtime_error);
  // The committed fuzzer input.
  const std::string crash = std::string(STRATA_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/crash-string-length-wraps";
  ASSERT_TRUE(fs::exists(crash));
  EXPECT_THROW(parse(crash), std::runtime_error);
}

TEST(GgufReader, RefusesAnAlignmentThatIsZeroOrNotAPowerOfTwoOrNotUnsigned) {
  for (const uint32_t a : {0u, 3u, 48u}) {
    std::vector<uint8_t> v(4);
    std::memcpy(v.data(), &a, 4);
    EXPECT_THROW(parse_bytes(gguf_bytes("general.alignment", static_cast<uint32_t>(GgufType::U32), v)),
                 std::runtime_error)
        << a;
  }
  const int32_t neg = 32;
  std::vector<uint8_t> v(4);
  std::memcpy(v.data(), &neg, 4);
  EXPECT_THROW(parse_bytes(gguf_bytes("general.alignment", static_cast<uint32_t>(GgufType::I32), v)),
               std::runtime_error);
  const uint32_t ok = 64;
  std::memcpy(v.data(), &ok, 4);
  const ParsedFile f = parse_bytes(gguf_bytes("general.alignment", static_cast<uint32_t>(GgufType::U32), v));
  EXPECT_EQ(f.data_start % 64, 0u);
  EXPECT_GE(f.data_start, f.header_end);
}

}  // namespace
}  // namespace strata::gguf_writer_test
