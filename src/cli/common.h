// Pieces shared by the model-running subcommands: the engine flags and the
// end-of-run report.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace strata::cli {

struct EngineFlags {
  std::string model;
  int threads = 0;  // 0: all cores
  std::string attn = "absorbed";
  bool dense_attention = false;
  // Containers: the expert cache.
  double ram_gb = 0.0;  // 0: from available memory
  std::string pin;      // "", "all" or GB
  bool no_autopin = false;
  bool no_direct_io = false;
  bool no_prefetch = false;
  std::string io = "uring";  // uring | pread | mmap
  int io_depth = 0;          // 0: the default (kDefaultIoDepth)
  bool stats = false, stats_json = false;
  std::string kernels = "auto";  // auto | scalar | avx2 | avx512 | avx512vnni
  bool quiet = false;            // no start-up lines (kernel path, expert cache)
  std::string spec = "off";      // speculative decoding: off | auto | mtp | ngram
  int spec_k = 4;                // most drafts per step
  void add(CLI::App* cmd);
  // The engine's options from these flags; throws naming the flag that is wrong.
  EngineOptions options(bool load_mtp) const;
};

// --model's value: a model's config.json or manifest.json stands for its
// directory; another regular file is a usage error (CLI::ValidationError).
std::string model_dir_of(std::string path);

// Prints --stats / --stats-json (stderr) and saves the routing usage.
void finish_engine(const Engine& e, const EngineFlags& f, bool save_usage = true);

// "1,2,3" -> ids, each checked against the vocabulary.
std::vector<int32_t> parse_ids(const std::string& s, int64_t vocab, const char* flag);
int32_t argmax(const float* x, int64_t n);

}  // namespace strata::cli
