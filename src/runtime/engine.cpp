#include "runtime/engine.h"

#include <cstdio>
#include <thread>

#include "core/clock.h"

namespace strata {

namespace {

// The kernel path is checked (and announced) before anything loads.
const EngineOptions& checked(const EngineOptions& o) {
  const KernelPath path = o.compute.path.value_or(best_kernel_path());
  { Compute check(nullptr, o.compute); }
  if (o.verbose) std::fprintf(stderr, "strata: %s\n", kernel_description(path).c_str());
  return o;
}

std::shared_ptr<const Model> load(const EngineOptions& o) {
  LoadOptions lo;
  lo.load_mtp = o.load_mtp;
  return load_model(o.model, lo);
}

}  // namespace

Engine::Engine(const EngineOptions& o) : o_(checked(o)), model_(load(o)) { open(); }

Engine::Engine(std::shared_ptr<const Model> model, const EngineOptions& o) : o_(checked(o)), model_(std::move(model)) {
  open();
}

void Engine::open() {
  const EngineOptions& o = o_;
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(threads);
  if (model_->experts_on_disk) {
    store_ = open_disk_expert_store(model_->expert_files(), o.experts);
    if (o.verbose) std::fprintf(stderr, "strata: %s\n", store_->describe().c_str());
  } else {
    store_ = std::make_unique<ResidentExpertStore>(model_->weights.experts);
  }
  const ModelConfig& c = model_->config;
  std::vector<bool> moe(model_->weights.layers.size());
  for (size_t l = 0; l < moe.size(); ++l) moe[l] = c.is_moe(static_cast<int64_t>(l));
  heat_ = std::make_unique<CountingExpertStore>(*store_, moe, c.n_routed_experts);
  runner_ = std::make_unique<ModelRunner>(*model_, *heat_, *pool_, o.compute);
}

Engine::~Engine() = default;

void Engine::forward(std::span<const Row> rows, float* logits, float* hidden, int64_t prompt_rows) {
  const uint64_t t0 = now_ns();
  runner_->forward(rows, o_.forward, logits, hidden);
  const uint64_t dt = now_ns() - t0;
  const int64_t decode_rows = static_cast<int64_t>(rows.size()) - prompt_rows;
  counts_.prompt_tokens += static_cast<uint64_t>(prompt_rows);
  counts_.decode_tokens += static_cast<uint64_t>(decode_rows);
  (prompt_rows > 0 ? counts_.prompt_ns : counts_.decode_ns) += dt;
}

void Engine::forward_mtp(std::span<const Row> rows, const float* hidden, float* logits) {
  runner_->forward_mtp(rows, hidden, o_.forward, logits);
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.tokens = counts_;
  s.phases = runner_->stats();
  s.experts = heat_->stats();
  s.memory = heat_->memory();
  s.resident_bytes = model_->resident_bytes();
  s.peak_rss_bytes = peak_rss_bytes();
  return s;
}

bool Engine::save_usage() const { return heat_->save_usage(); }

}  // namespace strata
