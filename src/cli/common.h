// Pieces shared by the model-running subcommands.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experts/disk_expert_store.h"
#include "experts/expert_store.h"
#include "model/forward.h"
#include "model/model.h"
#include "runtime/thread_pool.h"

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
  bool stats = false, stats_json = false;
  std::string kernels = "auto";  // auto | scalar | avx2 | avx512 | avx512vnni
  bool quiet = false;            // no start-up lines (kernel path, expert cache)
  void add(CLI::App* cmd);
  ForwardOptions forward_options() const;
};

// A loaded model with its pool and expert store, ready for sessions.
struct Engine {
  std::unique_ptr<Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<ExpertStore> store;
  DiskExpertStore* disk = nullptr;  // store, when the model is a container
  std::unique_ptr<ModelRunner> runner;
  // Front-end timings for the stats line.
  uint64_t prompt_tokens = 0, prompt_ns = 0, decode_tokens = 0, decode_ns = 0;
};
Engine open_engine(const EngineFlags& f, bool load_mtp);
// Prints --stats / --stats-json (stderr) and saves the routing usage.
void finish_engine(Engine& e, const EngineFlags& f, bool save_usage = true);
// --kernels: forces the kernel path (fails naming the flag if the CPU lacks it).
void apply_kernels_flag(const std::string& name);
uint64_t now_ns();

// "1,2,3" -> ids, each checked against the vocabulary.
std::vector<int32_t> parse_ids(const std::string& s, int64_t vocab, const char* flag);
int32_t argmax(const float* x, int64_t n);

}  // namespace strata::cli
