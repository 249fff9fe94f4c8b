// Pieces shared by the model-running subcommands: the engine flags and the
// end-of-run report.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/mpi_job.h"
#include "runtime/engine.h"

namespace strata::cli {

// --help's option groups (CLI11 groups), in the order a subcommand shows them.
inline constexpr const char* kGroupInput = "Input";
inline constexpr const char* kGroupModel = "Model";
inline constexpr const char* kGroupCache = "Cache and streaming (containers)";
inline constexpr const char* kGroupGeneration = "Generation";
inline constexpr const char* kGroupSampling = "Sampling";
inline constexpr const char* kGroupTemplate = "Chat template";
inline constexpr const char* kGroupSpec = "Speculative decoding";
inline constexpr const char* kGroupServer = "Server";
inline constexpr const char* kGroupAttach = "Attach to a server";
inline constexpr const char* kGroupOutput = "Output";

// --spec's default in the generating commands (run, chat, generate, serve):
// auto drafts only while it pays and changes no output (docs/speculative.md).
// The others (score, bench, eval, trace, atlas) keep off: they measure or
// record one-row forwards.
inline constexpr const char* kSpecGenerating = "auto";

struct EngineFlags {
  std::string model;
  int threads = 0;  // 0: all cores
  std::string attn = "absorbed";
  std::string kv_type = "f32";
  bool dense_attention = false;
  // Containers: the expert cache.
  double ram_gb = 0.0;  // 0: from available memory
  std::string pin;      // "", "all" or GB
  bool no_autopin = false;
  bool no_direct_io = false;
  bool no_prefetch = false;
  std::string prefetch = "auto";  // auto | on | off
  bool no_registered_buffers = false;
  std::string io = "uring";  // uring | pread | mmap
  int io_depth = 0;          // 0: the default (kDefaultIoDepth)
  std::string cache = "lru";  // the cache policy: lru | lfu
  std::string verify_experts = "first";  // first | every (ExpertCacheOptions::verify_every_read)
  bool stats = false, stats_json = false;
  std::string kernels = "auto";  // auto | scalar | avx2 | avx512 | avx512vnni
  bool packed_gemm = true;       // int8 prefill on the packed kernel (--no-packed-gemm: the multi-row one; docs/kernels.md)
  bool quiet = false;            // no start-up lines (kernel path, expert cache)
  std::string spec = "off";      // speculative decoding: off | auto | mtp | ngram (kSpecGenerating: run, chat, generate, serve)
  int spec_k = 4;                // most drafts per step
  int64_t draft_vocab = 0;       // MTP drafts among the first N ids (0: all)
  // Experts over MPI (docs/distributed.md).
  std::string experts_over = "local";  // local | mpi
  double mpi_timeout = 120.0;          // seconds rank 0 waits for a rank's outputs of one layer
  int64_t mpi_replicate = 0;           // the hottest experts served by rank 0 (docs/distributed.md)
  void add(CLI::App* cmd);
  // The engine's options from these flags; throws naming the flag that is wrong.
  EngineOptions options(bool load_mtp) const;
  // The same, for a front end that loads more after the engine (a tokenizer,
  // a chat template): the engine stays silent, and announce() prints its
  // start-up lines once all of it loaded (never before a failure).
  EngineOptions options_deferred(bool load_mtp) const {
    EngineOptions o = options(load_mtp);
    o.verbose = false;
    return o;
  }
  void announce(const Engine& e) const;
};

// The engine of a model-running subcommand. With --experts-over mpi the
// process joins the MPI job (dist/mpi_job.h): on rank 0 `engine` is the
// engine, whose forward has the other ranks compute their experts; on every
// other rank this serves experts until rank 0 ends, and returns no engine
// (the subcommand returns `status`). `mpi` outlives the engine.
struct OpenedEngine {
  std::unique_ptr<MpiJob> mpi;
  std::unique_ptr<Engine> engine;
  int status = 0;
};
OpenedEngine open_engine(const EngineFlags& f, bool load_mtp, bool deferred = false);

// --model's value: a model's config.json or manifest.json stands for its
// directory; another regular file is a usage error (CLI::ValidationError).
std::string model_dir_of(std::string path);

// Prints --stats / --stats-json (stderr) and saves the routing usage.
void finish_engine(const Engine& e, const EngineFlags& f, bool save_usage = true);

// "1,2,3" -> ids, each checked against the vocabulary.
std::vector<int32_t> parse_ids(const std::string& s, int64_t vocab, const char* flag);
int32_t argmax(const float* x, int64_t n);
// Token ids from a file (comma/whitespace separated, or a JSON array), each
// checked against the vocabulary; at least 2.
std::vector<int32_t> read_ids_file(const std::string& path, int64_t vocab);

}  // namespace strata::cli
