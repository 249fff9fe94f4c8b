#include "runtime/engine.h"

#include <cstdio>
#include <thread>

#include "core/clock.h"
#include "core/error.h"

namespace strata {

namespace {

// The kernel path is checked before anything loads (announced once all loaded).
const EngineOptions& checked(const EngineOptions& o) {
  { Compute check(nullptr, o.compute); }
  return o;
}

}  // namespace

std::shared_ptr<const Model> load_engine_model(const EngineOptions& o) {
  LoadOptions lo;
  lo.load_mtp = o.load_mtp || o.spec.mode == SpecMode::Mtp || o.spec.mode == SpecMode::Auto;
  return load_model(o.model, lo);
}

Engine::Engine(const EngineOptions& o) : o_(checked(o)), model_(load_engine_model(o)) { open(); }

Engine::Engine(std::shared_ptr<const Model> model, const EngineOptions& o) : o_(checked(o)), model_(std::move(model)) {
  open();
}

void Engine::open() {
  const EngineOptions& o = o_;
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(threads);
  if (model_->experts_on_disk) {
    store_ = open_disk_expert_store(model_->expert_files(), o.experts);
  } else {
    store_ = std::make_unique<ResidentExpertStore>(model_->weights.experts);
  }
  const ModelConfig& c = model_->config;
  std::vector<bool> moe(model_->weights.layers.size());
  for (size_t l = 0; l < moe.size(); ++l) moe[l] = c.is_moe(static_cast<int64_t>(l));
  heat_ = std::make_unique<CountingExpertStore>(*store_, moe, c.n_routed_experts);
  runner_ = std::make_unique<ModelRunner>(*model_, *heat_, *pool_, o.compute, o.peers);
  if (o.spec.mode == SpecMode::Mtp && !has_mtp())
    fail("--spec mtp: {} has no MTP layer loaded (num_nextn_predict_layers = {})", o.model.empty() ? "the model" : o.model,
         c.num_nextn_predict_layers);
  if (o.spec.k < 1 || o.spec.k > kSpecMaxDraft) fail("--spec-k {}: expected 1..{}", o.spec.k, kSpecMaxDraft);
  // An MTP row costs about one layer of the main model's.
  spec_ = std::make_unique<Speculator>(o.spec, has_mtp(), 1.0 / static_cast<double>(std::max<int64_t>(1, c.num_hidden_layers)));
  startup_ = "strata: " + kernel_description(o.compute.path.value_or(best_kernel_path())) + "\n";
  if (model_->experts_on_disk) startup_ += "strata: " + store_->describe() + "\n";
  if (o.forward.kv == KvType::F16)
    startup_ += fmt::format("strata: key cache in f16 (--kv-type f16): {} as halves, half their bytes per context "
                            "token; logits within the bound docs/kernels.md states, not bit-identical to f32\n",
                            c.attention == AttentionKind::Mla ? "latent and roped key" : "keys and values");
  if (o.spec.mode != SpecMode::Off)
    startup_ += fmt::format("strata: speculative decoding {}, up to {} drafts per step{}{}\n", spec_mode_name(o.spec.mode),
                            spec_->options().k,
                            spec_->uses_mtp()                  ? " (n-gram, forced, MTP)"
                            : o.spec.mode == SpecMode::Auto ? " (n-gram, forced; no MTP layer)"
                                                              : "",
                            spec_->uses_mtp() && mtp_draft_vocab() < model_->config.vocab_size
                                ? fmt::format(", MTP drafts among the first {} ids", mtp_draft_vocab())
                                : std::string());
  if (o.verbose) std::fputs(startup_.c_str(), stderr);
}

bool Engine::has_mtp() const {
  return model_->config.num_nextn_predict_layers > 0 &&
         static_cast<int64_t>(model_->weights.layers.size()) > model_->config.num_hidden_layers;
}

Engine::~Engine() = default;

void Engine::forward(std::span<const Row> rows, float* logits, float* hidden, int64_t prompt_rows) {
  // Decode forwards feed the speculation controller their time and the
  // expert bytes they read (streamed experts: a forward over more rows reads
  // the union of their experts).
  const ExpertIo io0 = prompt_rows == 0 ? heat_->io() : ExpertIo{};
  const uint64_t t0 = now_ns();
  runner_->forward(rows, o_.forward, logits, hidden);
  const uint64_t dt = now_ns() - t0;
  const int64_t decode_rows = static_cast<int64_t>(rows.size()) - prompt_rows;
  counts_.prompt_tokens += static_cast<uint64_t>(prompt_rows);
  counts_.decode_tokens += static_cast<uint64_t>(decode_rows);
  (prompt_rows > 0 ? counts_.prompt_ns : counts_.decode_ns) += dt;
  if (prompt_rows == 0) {
    const ExpertIo io1 = heat_->io();
    spec_->record_forward(static_cast<int64_t>(rows.size()), dt, io1.bytes_read - io0.bytes_read,
                          io1.read_ns - io0.read_ns);
  }
}

int64_t Engine::mtp_draft_vocab() const {
  const int64_t V = model_->config.vocab_size, d = o_.spec.draft_vocab;
  return d > 0 && d < V ? d : V;
}

void Engine::forward_mtp(std::span<const Row> rows, const float* hidden, float* logits, float* hidden_out,
                         bool draft) {
  const uint64_t t0 = now_ns();
  runner_->forward_mtp(rows, hidden, o_.forward, logits, hidden_out, draft ? mtp_draft_vocab() : 0);
  const uint64_t dt = now_ns() - t0;
  // Decode time: a generation's MTP forwards run after the prompt's last
  // forward (its first token is out before the layer syncs the prompt's
  // rows), and a draft's cost is part of what a speculative token costs.
  if (draft) counts_.decode_ns += dt;
  int64_t whole = 0;  // rows that ran the whole layer (not Row::keys_only)
  for (const Row& r : rows) whole += !r.keys_only || r.want_logits;
  spec_->record_mtp(static_cast<int64_t>(rows.size()), dt, whole);
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.tokens = counts_;
  s.spec = spec_->stats();
  // Decode tokens are the rows kept: drafts the verification rejected do not count.
  const uint64_t rejected = s.spec.drafted() - s.spec.accepted();
  s.tokens.decode_tokens -= std::min(rejected, s.tokens.decode_tokens);
  s.phases = runner_->stats();
  s.experts = heat_->stats();
  s.memory = heat_->memory();
  s.resident_bytes = model_->resident_bytes();
  s.peak_rss_bytes = peak_rss_bytes();
  return s;
}

bool Engine::save_usage() const { return heat_->save_usage(); }

}  // namespace strata
