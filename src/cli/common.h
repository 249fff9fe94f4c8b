// Pieces shared by the model-running subcommands.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
  void add(CLI::App* cmd);
  ForwardOptions forward_options() const;
};

// A loaded model with its pool and expert store, ready for sessions.
struct Engine {
  std::unique_ptr<Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<ExpertStore> store;
  std::unique_ptr<ModelRunner> runner;
};
Engine open_engine(const EngineFlags& f, bool load_mtp);

// "1,2,3" -> ids, each checked against the vocabulary.
std::vector<int32_t> parse_ids(const std::string& s, int64_t vocab, const char* flag);
int32_t argmax(const float* x, int64_t n);

}  // namespace strata::cli
