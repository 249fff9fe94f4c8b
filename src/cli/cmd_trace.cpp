// strata trace record / replay: a model's routing as JSON lines, and that
// routing driven through a container's real expert store (docs/streaming.md
// "Routing traces").
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/json.h"
#include "dist/placement.h"
#include "experts/store_options.h"
#include "format/container.h"
#include "runtime/routing_trace.h"
#include "runtime/trace_replay.h"

namespace strata::cli {

void add_trace_command(CLI::App& app, Runner& run) {
  CLI::App* cmd = app.add_subcommand("trace", "Record a model's expert routing; replay it through an expert store");
  cmd->require_subcommand(1);

  struct RecordFlags {
    EngineFlags engine;
    std::string ids_file, out;
    int chunk = 256;
    int64_t max_tokens = 0, window = 0;
  };
  auto rf = std::make_shared<RecordFlags>();
  CLI::App* rec = cmd->add_subcommand("record", "Teacher-force token ids and write each token's routing (JSON lines)");
  rf->engine.add(rec);
  rec->add_option("--ids-file", rf->ids_file, "Token ids (comma/whitespace separated, or a JSON array)")
      ->required()
      ->group(kGroupInput);
  rec->add_option("--out", rf->out, "The trace to write (JSON lines; temp file + rename)")->required()->group(kGroupOutput);
  rec->add_option("--chunk", rf->chunk, "Tokens per forward")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  rec->add_option("--max-tokens", rf->max_tokens, "Record only the first N tokens (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  rec->add_option("--window", rf->window,
                  "Independent sequences of N tokens each, from position 0 (a model's trained context; 0 = one sequence)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  rec->callback([rf, &run] {
    run = [rf]() -> int {
      OpenedEngine opened = open_engine(rf->engine, false);
      if (!opened.engine) return opened.status;
      Engine& e = *opened.engine;
      std::vector<int32_t> ids = read_ids_file(rf->ids_file, e.config().vocab_size);
      if (rf->max_tokens > 0 && static_cast<int64_t>(ids.size()) > rf->max_tokens)
        ids.resize(static_cast<size_t>(rf->max_tokens));
      const RecordedTrace t =
          record_routing(e, ids, rf->chunk, rf->window, rf->engine.model, fmt::format("{:016x}", model_fingerprint(e.model())));
      write_routing_trace(rf->out, t);
      if (!rf->engine.quiet)
        std::fprintf(stderr, "strata: trace: %lld tokens x %zu MoE layers (top-%lld of %lld) -> %s\n",
                     static_cast<long long>(t.tokens), t.layers.size(), static_cast<long long>(t.top_k),
                     static_cast<long long>(t.experts), rf->out.c_str());
      finish_engine(e, rf->engine, false);
      return 0;
    };
  });

  struct ReplayFlags {
    EngineFlags engine;
    std::string trace;
    double budget_frac = 0;
    int64_t max_tokens = 0;
    bool json = false, save_usage = false;
    int lfu_decay = kLfuDecayTurnovers;
  };
  auto pf = std::make_shared<ReplayFlags>();
  CLI::App* rep = cmd->add_subcommand(
      "replay", "Drive a container's expert store (real reads, its expert sizes) with a trace's routing");
  pf->engine.add(rep);
  rep->add_option("--trace", pf->trace, "A trace from strata trace record")->required()->group(kGroupInput);
  rep->add_option("--budget-frac", pf->budget_frac,
                  "RAM budget as a fraction of the container's expert pool (instead of --ram)")
      ->check(CLI::Range(0.0, 1.0))
      ->group(kGroupCache);
  rep->add_option("--max-tokens", pf->max_tokens, "Replay only the first N tokens (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  rep->add_flag("--save-usage", pf->save_usage,
                "Add the replayed routing to the container's usage.json (what learned pins are chosen from)");
  rep->add_option("--lfu-decay", pf->lfu_decay,
                  "--cache lfu: request counts halve after this many times a layer's cache slots in requests")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str()
      ->group(kGroupCache);
  rep->add_flag("--json", pf->json, "Print the result as one JSON object (stdout)")->group(kGroupOutput);
  rep->callback([pf, &run] {
    run = [pf]() -> int {
      const EngineFlags& ef = pf->engine;
      if (!is_container(ef.model)) fail("--model {}: trace replay needs a strata container (strata convert)", ef.model);
      const RecordedTrace t = read_routing_trace(pf->trace);
      ExpertFiles files;
      files.dir = ef.model;
      files.manifest = std::make_shared<const Manifest>(read_manifest(ef.model));
      files.n_layers = files.manifest->config.value("num_hidden_layers", int64_t{0});
      std::vector<int64_t> layers;
      int64_t experts = 0;
      for (const ExpertLayerRecord& r : files.manifest->expert_layers)
        if (r.layer < files.n_layers) {
          layers.push_back(r.layer);
          if (experts != 0 && r.count != experts) fail("{}: MoE layers with different expert counts", ef.model);
          experts = r.count;
        }
      const TraceMapping m = map_trace(t, layers, experts);
      ExpertCacheOptions o = ef.options(false).experts;
      o.lfu_decay = pf->lfu_decay;
      // A replay has no compute to hide reads under: --prefetch auto would
      // time reads alone. It replays what a decode with read-ahead on does.
      o.prefetch_auto = false;
      if (pf->budget_frac > 0) {
        if (ef.ram_gb > 0) fail("--budget-frac and --ram: give one");
        uint64_t pool = 0;
        for (const ExpertLayerRecord& r : files.manifest->expert_layers)
          if (r.layer < files.n_layers)
            pool += (r.blob_bytes + kExpertAlign - 1) / kExpertAlign * kExpertAlign * static_cast<uint64_t>(r.count);
        o.ram_bytes = std::max<uint64_t>(1, static_cast<uint64_t>(pf->budget_frac * static_cast<double>(pool)));
      }
      std::unique_ptr<ExpertStore> store = open_disk_expert_store(files, o);
      if (!ef.quiet) {
        std::fprintf(stderr, "strata: %s\n", store->describe().c_str());
        std::fprintf(stderr, "strata: trace mapping: %s\n", m.describe.c_str());
      }
      const ReplayResult r = replay_trace(t, m, *store, o.prefetch, pf->max_tokens);
      const ExpertStoreStats& s = r.stats;
      const ExpertMemory mem = store->memory();
      Json j;
      j["trace"] = pf->trace;
      j["model"] = ef.model;
      j["mapping"] = m.describe;
      j["cache"] = store->describe();
      j["policy"] = ef.cache;
      j["io"] = ef.io;
      j["prefetch"] = o.prefetch;
      j["tokens"] = r.tokens;
      j["budget_bytes"] = mem.budget_bytes;
      j["pinned_bytes"] = mem.pinned_bytes;
      j["pool_bytes"] = mem.on_disk_bytes;
      j["budget_frac"] = mem.on_disk_bytes ? static_cast<double>(mem.budget_bytes) / static_cast<double>(mem.on_disk_bytes) : 0.0;
      j["requests"] = s.requests;
      j["hits"] = s.hits;
      j["misses"] = s.misses;
      j["hit_rate"] = s.hit_rate();
      j["bytes_read"] = s.bytes_read;
      j["bytes_read_per_token"] = r.tokens ? static_cast<double>(s.bytes_read) / static_cast<double>(r.tokens) : 0.0;
      j["read_gbps"] = r.wall_s > 0 ? static_cast<double>(s.bytes_read) / r.wall_s / 1e9 : 0.0;
      j["wall_s"] = r.wall_s;
      j["wait_s"] = r.wait_s;
      j["prefetched"] = s.prefetched;
      j["prefetch_hits"] = s.prefetch_hits;
      j["prefetch_precision"] = s.prefetched ? static_cast<double>(s.prefetch_hits) / static_cast<double>(s.prefetched) : 0.0;
      const uint64_t needed = s.prefetch_hits + s.misses;
      j["prefetch_recall"] = needed ? static_cast<double>(s.prefetch_hits) / static_cast<double>(needed) : 0.0;
      j["prefetch_wasted_bytes"] = s.prefetch_wasted_bytes;
      j["prefetch_yields"] = s.prefetch_yields;
      j["registered_reads"] = s.registered_reads;
      if (pf->json) {
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%lld tokens: hit rate %.2f%% (%llu of %llu), %.1f MB read (%.2f GB/s), waited %.3f s; read-ahead "
                    "precision %.2f recall %.2f\n",
                    static_cast<long long>(r.tokens), 100.0 * s.hit_rate(), static_cast<unsigned long long>(s.hits),
                    static_cast<unsigned long long>(s.requests), static_cast<double>(s.bytes_read) / 1e6,
                    j["read_gbps"].get<double>(), r.wait_s, j["prefetch_precision"].get<double>(),
                    j["prefetch_recall"].get<double>());
      }
      if (pf->save_usage) store->save_usage();
      return 0;
    };
  });
}

}  // namespace strata::cli
