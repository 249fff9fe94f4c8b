// The built `strata` binary on hostile model directories: it must exit with
// status 1 and a one-line "strata: error: ..." on stderr that names the file
// (and the tensor or field), never crash or print a stack trace.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "kernels/cpu_features.h"
#include "test_util.h"

namespace strata::cli_errors_test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using test_util::read_file;
using test_util::safetensors_bytes;
using test_util::SafetensorsBuilder;
using test_util::TempDir;
using test_util::write_file;

struct RunResult {
  int exit_code = -1;  // 128 + signal if killed by a signal
  std::string out, err;
};

// Single-quoted for /bin/sh.
std::string quoted(const std::string& s) {
  std::string q;
  q.push_back('\'');
  for (char c : s) {
    if (c == '\'')
      q.append("'\\''");
    else
      q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

// Runs `strata <args>` with stdout and stderr captured in files under `tmp`.
RunResult run_strata(const std::string& args, const TempDir& tmp) {
  const std::string out = tmp.file("stdout.txt"), err = tmp.file("stderr.txt");
  std::string cmd = quoted(STRATA_BINARY);
  cmd.append(" ").append(args).append(" >").append(quoted(out)).append(" 2>").append(quoted(err)).append(" </dev/null");
  const int st = std::system(cmd.c_str());
  RunResult r;
  if (st != -1 && WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  else if (st != -1 && WIFSIGNALED(st)) r.exit_code = 128 + WTERMSIG(st);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

// A small but valid glm_moe_dsa config, so loading gets past config.json to
// the checkpoint.
Json tiny_config() {
  return Json{{"model_type", "glm_moe_dsa"},
              {"vocab_size", 32},
              {"hidden_size", 16},
              {"num_hidden_layers", 2},
              {"intermediate_size", 32},
              {"moe_intermediate_size", 8},
              {"n_routed_experts", 4},
              {"num_experts_per_tok", 2},
              {"n_shared_experts", 1},
              {"first_k_dense_replace", 1},
              {"num_attention_heads", 2},
              {"q_lora_rank", 8},
              {"kv_lora_rank", 8},
              {"qk_nope_head_dim", 4},
              {"qk_rope_head_dim", 4},
              {"v_head_dim", 4},
              {"index_n_heads", 2},
              {"index_head_dim", 8},
              {"index_topk", 4},
              {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-5},
              {"num_nextn_predict_layers", 0},
              {"eos_token_id", 1}};
}

class CliErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(STRATA_BINARY)) << "the strata binary is not built: " << STRATA_BINARY;
    std::filesystem::create_directory(model_dir());
    write_file(config_path(), tiny_config().dump(2));
  }
  std::string model_dir() const { return tmp.file("model"); }
  std::string config_path() const { return model_dir() + "/config.json"; }
  std::string st_path() const { return model_dir() + "/model.safetensors"; }
  RunResult score() { return run_strata("score --model " + quoted(model_dir()) + " --ids 1,2", tmp); }

  // The shared expectations: exit status 1, a strata error line, no output.
  void expect_clean_failure(const RunResult& r) {
    EXPECT_EQ(r.exit_code, 1) << "stderr: " << r.err;
    EXPECT_THAT(r.err, HasSubstr("error"));
    EXPECT_THAT(r.err, Not(HasSubstr("terminate called")));
    EXPECT_THAT(r.err, Not(HasSubstr("AddressSanitizer")));
    EXPECT_EQ(r.out, "");
  }

  TempDir tmp;
};

TEST_F(CliErrorsTest, CorruptedSafetensorsHeaderLength) {
  // The length prefix claims a terabyte of header.
  write_file(st_path(), safetensors_bytes("{}", std::string(64, '\0'), uint64_t{1} << 40));
  const RunResult r = score();
  expect_clean_failure(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr("strata: error:"), HasSubstr(st_path()), HasSubstr("exceeds the file size")));
}

TEST_F(CliErrorsTest, CorruptedSafetensorsTruncated) {
  std::string bytes = SafetensorsBuilder().add("model.embed_tokens.weight", "BF16", {32, 16}, std::string(1024, '\0')).bytes();
  bytes.resize(bytes.size() - 100);
  write_file(st_path(), bytes);
  const RunResult r = score();
  expect_clean_failure(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr("model.safetensors"), HasSubstr(st_path()), HasSubstr("model.embed_tokens.weight"),
                           HasSubstr("run past the data area")));
}

TEST_F(CliErrorsTest, UnknownDtypeNamesTensor) {
  write_file(st_path(), safetensors_bytes(R"({"model.norm.weight": {"dtype": "Q4_K", "shape": [16], "data_offsets": [0, 16]}})",
                                          std::string(16, '\0')));
  const RunResult r = score();
  expect_clean_failure(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr(st_path()), HasSubstr("model.norm.weight"), HasSubstr("unknown dtype")));
}

TEST_F(CliErrorsTest, DeeplyNestedHeaderDoesNotCrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write_file(st_path(), safetensors_bytes("{\"x\": {\"dtype\": \"F32\", \"shape\": " + deep + ", \"data_offsets\": [0, 4]}}", "abcd"));
  const RunResult r = score();
  expect_clean_failure(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr(st_path()), HasSubstr("nesting deeper")));
}

TEST_F(CliErrorsTest, WrongTensorShapeNamesTensorAndShapes) {
  SafetensorsBuilder().add("model.embed_tokens.weight", "BF16", {4, 16}, std::string(128, '\0')).write(st_path());
  const RunResult r = score();
  expect_clean_failure(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr(st_path()), HasSubstr("model.embed_tokens.weight"), HasSubstr("[4, 16]"),
                           HasSubstr("[32, 16]")));
}

TEST_F(CliErrorsTest, BadConfigFieldNamesFileAndField) {
  Json c = tiny_config();
  c["hidden_size"] = "16";
  write_file(config_path(), c.dump());
  SafetensorsBuilder().add("x", "U8", {1}, "x").write(st_path());
  const RunResult r = score();
  expect_clean_failure(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr(config_path()), HasSubstr("\"hidden_size\"")));
}

TEST_F(CliErrorsTest, ShardIndexPathTraversal) {
  write_file(model_dir() + "/model.safetensors.index.json",
             R"({"weight_map": {"model.embed_tokens.weight": "../outside.safetensors"}})");
  const RunResult r = score();
  expect_clean_failure(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("model.embed_tokens.weight"),
                           HasSubstr("not a plain file name")));
}

TEST_F(CliErrorsTest, MissingCheckpoint) {
  const RunResult r = score();
  expect_clean_failure(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr(model_dir()), HasSubstr("no model.safetensors")));
}

// --kernels: a path this CPU cannot run is refused before anything loads,
// naming the flag; an unknown name too; a path it can run is used and printed
// on the start-up line (which -q silences).
TEST_F(CliErrorsTest, KernelsFlagRefusesAPathTheCpuLacks) {
  const std::string fixture = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/glm5-tiny-bf16";
  std::string missing;
  for (const char* name : {"avx2", "avx512", "avx512-vnni", "neon", "neon-dotprod", "neon-i8mm"}) {
    const auto p = parse_kernel_path(name);
    if (p && !kernel_path_supported(*p)) {
      missing = name;
      break;
    }
  }
  if (!missing.empty()) {
    const RunResult r = run_strata("score --model " + quoted(fixture) + " --ids 1,2 --kernels " + missing, tmp);
    expect_clean_failure(r);
    EXPECT_THAT(r.err, AllOf(HasSubstr("--kernels " + missing), HasSubstr("cannot run")));
  }
  const RunResult bad = run_strata("score --model " + quoted(fixture) + " --ids 1,2 --kernels avx9000", tmp);
  expect_clean_failure(bad);
  EXPECT_THAT(bad.err, HasSubstr("--kernels avx9000"));

  const RunResult ok = run_strata("score --model " + quoted(fixture) + " --ids 1,2 --kernels scalar --json", tmp);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.err, HasSubstr("kernels: scalar ("));
  const RunResult quiet = run_strata("score --model " + quoted(fixture) + " --ids 1,2 -q --json", tmp);
  EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_THAT(quiet.err, Not(HasSubstr("kernels:")));
  EXPECT_EQ(quiet.out, ok.out);  // the path never changes a result
}

}  // namespace
}  // namespace strata::cli_errors_test
