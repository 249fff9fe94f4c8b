// strata bench: prefill and decode speed of a model, where the time goes, how
// many weight bytes each decoded token touches, and how that compares with
// the machine's own memory and disk bandwidth measured in the same process
// (docs/cli.md, docs/benchmarks.md).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "format/container.h"
#include "kernels/cpu_features.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/io.h"
#include "core/json.h"
#include "core/system_info.h"

namespace strata::cli {

namespace {

struct BenchFlags {
  EngineFlags engine;
  int prompt_tokens = 512;
  int context = 0;  // --context N: prefill N tokens, decode after them, report the context line (0: off)
  int gen_tokens = 32;
  int reps = 3;
  int warmup = 1;
  int warmup_tokens = 0;  // prompt tokens of a warm-up repetition (0: the whole prompt)
  std::string ids;  // explicit prompt ids (overrides --prompt-tokens)
  uint64_t seed = 1;
  int membw_mib = 1024;  // 0: skip
  int disk_mib = 1024;   // 0: skip
  bool json = false;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Fixed pseudo-random prompt: ids[i] = 1 + (splitmix64(seed, i) mod (vocab - 1)).
std::vector<int32_t> fixed_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i + 1) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    out[static_cast<size_t>(i)] = static_cast<int32_t>(1 + z % static_cast<uint64_t>(vocab - 1));
  }
  return out;
}

struct DiskResult {
  double gb_s = 0.0;
  uint64_t bytes = 0;
  bool direct = false;
  std::string file;
};

// Sequential read of the container's largest expert file, 8 MiB requests,
// O_DIRECT where the filesystem allows (no page cache in the way).
DiskResult disk_read(const Model& m, uint64_t max_bytes) {
  DiskResult r;
  if (!m.manifest || m.manifest->expert_layers.empty()) return r;
  uint64_t best_size = 0;
  for (const auto& rec : m.manifest->expert_layers) {
    struct stat st {};
    const std::string p = m.dir + "/" + rec.file;
    if (::stat(p.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) > best_size) {
      best_size = static_cast<uint64_t>(st.st_size);
      r.file = p;
    }
  }
  if (r.file.empty()) return r;
  Fd fd = try_open_file(r.file, O_RDONLY | O_DIRECT);
  r.direct = fd.valid();
  if (!fd) fd = try_open_file(r.file, O_RDONLY);
  if (!fd) fail("bench: cannot open {}: {}", r.file, std::strerror(errno));
  constexpr size_t kReq = 8u << 20;
  void* buf = std::aligned_alloc(4096, kReq);
  const uint64_t want = std::min(best_size / 4096 * 4096, max_bytes);
  const uint64_t t0 = now_ns();
  uint64_t off = 0;
  while (off < want) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kReq, want - off));
    const IoResult got = try_pread_full(fd.get(), buf, n, off);
    off += got.bytes;
    if (got.bytes < n) break;
  }
  const uint64_t dt = now_ns() - t0;
  std::free(buf);
  r.bytes = off;
  r.gb_s = dt ? static_cast<double>(off) / static_cast<double>(dt) : 0.0;
  return r;
}

// Weight bytes one decoded token reads: every resident matrix on its path
// (attention, indexer where the layer has one, dense MLP or router + shared
// expert, lm_head; one embedding row) plus top-k routed experts per MoE layer.
struct TokenBytes {
  uint64_t dense = 0, experts = 0;
};
TokenBytes bytes_per_token(const Model& m) {
  const ModelConfig& c = m.config;
  TokenBytes t;
  t.dense = m.weights.lm_head.bytes() + m.weights.embed.bytes() / static_cast<uint64_t>(std::max<int64_t>(1, c.vocab_size));
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    const LayerWeights& l = m.weights.layers[static_cast<size_t>(L)];
    const AttentionWeights& a = l.attn;
    t.dense += a.q_a.bytes() + a.q_b.bytes() + a.kv_a.bytes() + a.kv_b.bytes() + a.o.bytes();
    if (a.has_indexer) t.dense += a.indexer.wq_b.bytes() + a.indexer.wk.bytes() + a.indexer.weights_proj.bytes();
    if (!l.is_moe) {
      t.dense += l.dense.bytes();
      continue;
    }
    t.dense += l.router.gate.bytes() + (l.has_shared ? l.shared.bytes() : 0);
    uint64_t one = 0;
    if (m.manifest)
      for (const auto& rec : m.manifest->expert_layers)
        if (rec.layer == L) one = rec.blob_bytes;
    if (!one && static_cast<size_t>(L) < m.weights.experts.size() && !m.weights.experts[static_cast<size_t>(L)].empty())
      one = m.weights.experts[static_cast<size_t>(L)][0].bytes();
    t.experts += one * static_cast<uint64_t>(c.num_experts_per_tok);
  }
  return t;
}

struct Phase {
  double total = 0, attention = 0, indexer = 0, router = 0, expert_wait = 0, expert_matmul = 0, other = 0;
  void add(const PhaseStats& a, const PhaseStats& b) {  // b - a, seconds
    auto s = [](uint64_t x, uint64_t y) { return static_cast<double>(y - x) / 1e9; };
    total += s(a.total_ns, b.total_ns);
    attention += s(a.attention_ns, b.attention_ns);
    indexer += s(a.indexer_ns, b.indexer_ns);
    router += s(a.router_ns, b.router_ns);
    expert_wait += s(a.expert_wait_ns, b.expert_wait_ns);
    expert_matmul += s(a.expert_ns, b.expert_ns);
    other += s(a.other_ns(), b.other_ns());
  }
  Json per_token_ms(double tokens) const {
    const double k = tokens > 0 ? 1e3 / tokens : 0.0;
    return Json{{"total", total * k},         {"attention", attention * k},         {"router", router * k},
                {"expert_wait", expert_wait * k}, {"expert_matmul", expert_matmul * k}, {"other", other * k}};
  }
  // The long-context split: attention (MLA with the DSA indexer),
  // experts (router, expert wait, expert matmuls) and everything else add up
  // to the total; indexer (its projections, key writes, scores and top-k
  // selection) is the part of attention the DSA indexer takes.
  struct Split {
    double attention, indexer, experts, other, total;
  };
  Split split() const {
    const double experts = router + expert_wait + expert_matmul;
    return {attention, indexer, experts, std::max(0.0, total - attention - experts), total};
  }
  Json split_ms(double tokens) const {
    const double k = tokens > 0 ? 1e3 / tokens : 0.0;
    const Split p = split();
    return Json{{"total", p.total * k},       {"attention", p.attention * k}, {"indexer", p.indexer * k},
                {"experts", p.experts * k}, {"other", p.other * k}};
  }
  std::string split_line(double tokens) const {
    const double k = tokens > 0 ? 1e3 / tokens : 0.0;
    const Split p = split();
    auto pct = [&](double x) { return p.total > 0 ? 100.0 * x / p.total : 0.0; };
    char b[240];
    std::snprintf(b, sizeof b,
                  "%.2f ms/tok = attention+indexer %.2f (%.0f%%; indexer %.2f, %.0f%%) + experts %.2f (%.0f%%) + other "
                  "%.2f (%.0f%%)",
                  p.total * k, p.attention * k, pct(p.attention), p.indexer * k, pct(p.indexer), p.experts * k,
                  pct(p.experts), p.other * k, pct(p.other));
    return b;
  }
  std::string line(double tokens) const {
    const double k = tokens > 0 ? 1e3 / tokens : 0.0;
    auto pct = [&](double x) { return total > 0 ? 100.0 * x / total : 0.0; };
    char b[320];
    std::snprintf(b, sizeof b,
                  "%.2f ms/tok = attention %.2f (%.0f%%) + router %.2f (%.0f%%) + expert wait %.2f (%.0f%%) + "
                  "expert matmul %.2f (%.0f%%) + other %.2f (%.0f%%)",
                  total * k, attention * k, pct(attention), router * k, pct(router), expert_wait * k,
                  pct(expert_wait), expert_matmul * k, pct(expert_matmul), other * k, pct(other));
    return b;
  }
};

// Key-cache bytes per context token, read off a session's allocation
// (model/session.h: f32 rows of every cache part, per decoder layer; with
// --kv-type f16 the MLA latent and roped key, or the GQA keys and values, in
// halves).
struct KvPerToken {
  int64_t layers = 0, index_layers = 0;          // decoder layers; those holding indexer keys
  uint64_t latent = 0, rope_key = 0, index_key = 0, gqa = 0;  // bytes per token, all layers
  // Bytes per token of one layer (the indexer key: of an indexer-full layer).
  uint64_t layer_latent = 0, layer_rope_key = 0, layer_index_key = 0;
  uint64_t total() const { return latent + rope_key + index_key + gqa; }
};
KvPerToken kv_per_token(const Session& s, int64_t layers) {
  KvPerToken k;
  k.layers = layers;
  const auto cap = static_cast<uint64_t>(s.capacity());
  auto per = [&](const auto& v) { return v.size() * sizeof(v[0]) / cap; };
  // The indexer key's row (its cache holds whole blocks of 16 positions).
  auto per_index = [](const LaneRows& v) { return static_cast<uint64_t>(v.width()) * sizeof(float); };
  for (int64_t l = 0; l < layers; ++l) {
    const LayerCache& c = s.layer(l);
    const uint64_t lat = per(c.latent) + per(c.latent16), rope = per(c.rope_key) + per(c.rope_key16);
    k.latent += lat;
    k.rope_key += rope;
    k.index_key += per_index(c.index_key);
    k.gqa += per(c.k) + per(c.v) + per(c.k16) + per(c.v16);
    k.index_layers += c.index_key.empty() ? 0 : 1;
    k.layer_latent = std::max<uint64_t>(k.layer_latent, lat);
    k.layer_rope_key = std::max<uint64_t>(k.layer_rope_key, rope);
    k.layer_index_key = std::max<uint64_t>(k.layer_index_key, per_index(c.index_key));
  }
  return k;
}

// llama.cpp's KV bytes per token for the same model, f16 K/V (its default):
// MLA (deepseek2, glm-dsa) keeps one K row of kv_lora_rank + qk_rope_head_dim
// per layer and no V, the DSA indexer one key row of index_head_dim per
// indexer-full layer; GQA models a K and a V row of kv_heads * head_dim --
// the same parts strata caches (ModelConfig::cache_widths), at 2 bytes per
// element. The context padding llama.cpp adds (a multiple of 256 cells) is
// not counted.
uint64_t llama_cpp_kv_per_token(const ModelConfig& c) {
  uint64_t elems = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) elems += static_cast<uint64_t>(c.cache_floats(l));
  return 2 * elems;
}

int run_bench(const BenchFlags& f) {
  OpenedEngine opened = open_engine(f.engine, false);
  if (!opened.engine) return opened.status;  // a rank > 0 of --experts-over mpi
  Engine& e = *opened.engine;
  const ModelConfig& c = e.config();
  const bool ctx_mode = f.context > 0;
  if (ctx_mode && f.context + int64_t{f.gen_tokens} > c.max_position_embeddings)
    fail("--context ({}) + --gen-tokens ({}) exceeds the model's max_position_embeddings {}", f.context, f.gen_tokens,
         c.max_position_embeddings);
  // --context: the same fixed pseudo-random ids as --prompt-tokens, N of them.
  const std::vector<int32_t> prompt = !f.ids.empty() ? parse_ids(f.ids, c.vocab_size, "--ids")
                                      : fixed_ids(ctx_mode ? f.context : f.prompt_tokens, c.vocab_size, f.seed);
  const int64_t P = static_cast<int64_t>(prompt.size()), G = f.gen_tokens, V = c.vocab_size;
  if (P < 1) fail("--prompt-tokens must be at least 1");
  if (P + G > c.max_position_embeddings)
    fail("--prompt-tokens ({}) + --gen-tokens ({}) exceeds max_position_embeddings {}", P, G, c.max_position_embeddings);
  const int threads = e.pool().size();
  const bool on_disk = e.experts().memory().on_disk;

  std::vector<double> prefill_rate, decode_rate;
  Phase prefill_phase, decode_phase;
  uint64_t decode_read = 0, decode_wait_ns = 0, decode_misses = 0, decode_requests = 0;
  // CPU seconds over the measured decode windows: strata's own, the whole
  // machine's busy time, and steal (cpu_times()).
  double decode_cpu_self = 0.0, decode_cpu_busy = 0.0, decode_cpu_steal = 0.0, decode_wall = 0.0;
  bool decode_cpu_known = true;
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<Row> rows;
  std::vector<double> prefill_seconds;
  KvPerToken kv;
  uint64_t kv_session_bytes = 0;
  std::vector<int32_t> generated;  // the last repetition's decoded ids (greedy: every repetition's)
  generated.reserve(static_cast<size_t>(std::max<int64_t>(0, G)));
  for (int rep = 0; rep < f.warmup + f.reps; ++rep) {
    const bool measured = rep >= f.warmup;
    const int64_t PP = measured || f.warmup_tokens <= 0 ? P : std::min<int64_t>(P, f.warmup_tokens);
    Session s(c, P + G, false, e.options().forward.kv);
    kv = kv_per_token(s, c.num_hidden_layers);
    kv_session_bytes = s.bytes();
    // Prefill in chunks of 512 rows (as the text front ends do).
    PhaseStats a = e.runner().stats();
    uint64_t t0 = now_ns();
    for (int64_t p = 0; p < PP; p += 512) {
      const int64_t end = std::min(PP, p + 512);
      rows.clear();
      for (int64_t i = p; i < end; ++i) rows.push_back({&s, static_cast<int32_t>(i), prompt[static_cast<size_t>(i)], i == PP - 1});
      e.forward(rows, logits.data(), nullptr, end - p);
    }
    uint64_t dt = now_ns() - t0;
    if (measured) {
      prefill_rate.push_back(static_cast<double>(P) * 1e9 / static_cast<double>(dt));
      prefill_seconds.push_back(static_cast<double>(dt) / 1e9);
      prefill_phase.add(a, e.runner().stats());
    }
    if (G < 1) continue;
    a = e.runner().stats();
    const ExpertStoreStats d0 = e.experts().stats();
    generated.clear();
    const CpuTimes c0 = cpu_times();
    t0 = now_ns();
    for (int64_t i = 0; i < G; ++i) {
      const Row r{&s, static_cast<int32_t>(PP + i), argmax(logits.data(), V), true};
      generated.push_back(r.token);
      e.forward({&r, 1}, logits.data());
    }
    dt = now_ns() - t0;
    const CpuTimes c1 = cpu_times();
    if (measured) {
      decode_cpu_self += c1.process_s - c0.process_s;
      decode_cpu_busy += c1.machine_busy_s - c0.machine_busy_s;
      decode_cpu_steal += c1.machine_steal_s - c0.machine_steal_s;
      decode_cpu_known = decode_cpu_known && c0.machine_known && c1.machine_known;
      decode_wall += static_cast<double>(dt) / 1e9;
      decode_rate.push_back(static_cast<double>(G) * 1e9 / static_cast<double>(dt));
      decode_phase.add(a, e.runner().stats());
      if (on_disk) {
        const ExpertStoreStats d1 = e.experts().stats();
        decode_read += d1.bytes_read - d0.bytes_read;
        decode_misses += d1.misses - d0.misses;
        decode_requests += d1.requests - d0.requests;
      }
    }
  }
  const double ptok = static_cast<double>(P) * f.reps, gtok = static_cast<double>(G) * f.reps;
  decode_wait_ns = static_cast<uint64_t>(decode_phase.expert_wait * 1e9);

  const TokenBytes tb = bytes_per_token(e.model());
  const double per_token = static_cast<double>(tb.dense + tb.experts);
  const double mem = f.membw_mib > 0 ? memory_read_gb_s(static_cast<size_t>(f.membw_mib) << 20, threads, 5) : 0.0;
  const DiskResult disk =
      (f.disk_mib > 0 && on_disk) ? disk_read(e.model(), static_cast<uint64_t>(f.disk_mib) << 20) : DiskResult{};
  const double dmed = median(decode_rate), pmed = median(prefill_rate);
  const double achieved = per_token * dmed / 1e9;
  const double read_per_tok = gtok > 0 ? static_cast<double>(decode_read) / gtok : 0.0;
  const double stream_gb_s = decode_wait_ns ? static_cast<double>(decode_read) / static_cast<double>(decode_wait_ns) : 0.0;
  const uint64_t llama_kv = llama_cpp_kv_per_token(c);
  const Json context_line{
      {"bench", "context"},
      {"context", P},
      {"gen_tokens", G},
      {"token_ids", "splitmix64 pseudo-random, --seed"},
      {"seed", f.seed},
      {"prefill_s", median(prefill_seconds)},
      {"prefill_tok_s", pmed},
      {"decode_tok_s", G > 0 ? dmed : 0.0},
      {"prefill_split_ms_per_token", prefill_phase.split_ms(ptok)},
      {"decode_split_ms_per_token", decode_phase.split_ms(gtok)},
      {"kv_layers", kv.layers},
      {"kv_index_key_layers", kv.index_layers},
      {"kv_layer_bytes_per_token",
       Json{{"latent", kv.layer_latent}, {"rope_key", kv.layer_rope_key}, {"index_key", kv.layer_index_key}}},
      {"kv_bytes_per_token", Json{{"latent", kv.latent}, {"rope_key", kv.rope_key}, {"index_key", kv.index_key},
                                  {"gqa_kv", kv.gqa}, {"total", kv.total()}}},
      {"kv_bytes_at_context", kv.total() * static_cast<uint64_t>(P)},
      {"kv_session_bytes", kv_session_bytes},
      {"llama_cpp_kv_bytes_per_token", llama_kv},
      {"llama_cpp_kv_bytes_at_context", llama_kv * static_cast<uint64_t>(P)}};

  if (f.json) {
    auto emit = [](Json j) {
      j["schema"] = 1;
      std::printf("%s\n", j.dump().c_str());
    };
    Json cfg{{"bench", "config"},
             {"model", f.engine.model},
             {"kernels", kernel_path_name(e.compute().path())},
             {"threads", threads},
             {"container", on_disk},
             {"attn", f.engine.attn},
             {"kv_type", f.engine.kv_type},
             {"resident_bytes", e.model().resident_bytes()},
             {"prompt_tokens", P},
             {"gen_tokens", G},
             {"reps", f.reps},
             {"warmup", f.warmup}};
    if (on_disk) {
      const ExpertMemory mem = e.experts().memory();
      cfg["ram_budget_bytes"] = mem.budget_bytes;
      cfg["pinned_bytes"] = mem.pinned_bytes;
      cfg["expert_pool_bytes"] = mem.on_disk_bytes;
    }
    emit(cfg);
    emit(Json{{"bench", "prefill"},
              {"tokens", P},
              {"tok_s", pmed},
              {"tok_s_reps", prefill_rate},
              {"ms_per_token", prefill_phase.per_token_ms(ptok)}});
    if (G > 0) {
      Json d{{"bench", "decode"},
             {"tokens", G},
             {"context", P},
             {"tok_s", dmed},
             {"tok_s_reps", decode_rate},
             {"ms_per_token", decode_phase.per_token_ms(gtok)},
             {"weight_bytes_per_token", per_token},
             {"dense_bytes_per_token", tb.dense},
             {"expert_bytes_per_token", tb.experts},
             {"weight_gb_s", achieved},
             {"mem_bw_fraction", mem > 0 ? achieved / mem : 0.0},
             {"disk_bytes_per_token", read_per_tok},
             {"expert_hit_rate", decode_requests ? 1.0 - static_cast<double>(decode_misses) / static_cast<double>(decode_requests) : 1.0},
             {"disk_gb_s_during_wait", stream_gb_s},
             {"prompt_ids", prompt},
             {"generated_ids", generated}};
      // Cores kept busy while decoding (CPU seconds per wall second):
      // strata's threads, everything else on the machine (kernel threads
      // included: a loop device's copies), and the hypervisor's steal.
      if (decode_cpu_known && decode_wall > 0)
        d["cores_busy"] = Json{{"strata", decode_cpu_self / decode_wall},
                               {"other", std::max(0.0, decode_cpu_busy - decode_cpu_self) / decode_wall},
                               {"steal", decode_cpu_steal / decode_wall}};
      emit(d);
    }
    if (ctx_mode) emit(context_line);
    if (mem > 0)
      emit(Json{{"bench", "memory_bandwidth"}, {"gb_s", mem}, {"threads", threads}, {"buffer_bytes", static_cast<uint64_t>(f.membw_mib) << 20}});
    if (disk.bytes > 0)
      emit(Json{{"bench", "disk_read"}, {"gb_s", disk.gb_s}, {"bytes", disk.bytes}, {"direct", disk.direct},
                {"request_bytes", 8u << 20}, {"file", disk.file}});
  } else {
    std::printf("model %s | %s | %d threads | resident %.2f GB\n", f.engine.model.c_str(),
                kernel_path_name(e.compute().path()), threads, static_cast<double>(e.model().resident_bytes()) / 1e9);
    std::printf("prefill %lld tok: %.1f tok/s (median of %d) | %s\n", static_cast<long long>(P), pmed, f.reps,
                prefill_phase.line(ptok).c_str());
    if (G > 0) {
      std::printf("decode %lld tok at context %lld: %.2f tok/s (median of %d) | %s\n", static_cast<long long>(G),
                  static_cast<long long>(P), dmed, f.reps, decode_phase.line(gtok).c_str());
      std::printf("weights per token %.3f GB (dense %.3f + experts %.3f) -> %.1f GB/s", per_token / 1e9,
                  static_cast<double>(tb.dense) / 1e9, static_cast<double>(tb.experts) / 1e9, achieved);
      if (mem > 0) std::printf(" = %.0f%% of the measured %.1f GB/s", 100.0 * achieved / mem, mem);
      std::printf("\n");
      if (on_disk)
        std::printf("experts from disk %.3f GB/token, %.2f GB per second of expert wait (read-ahead overlapped with "
                    "compute counts too)\n",
                    read_per_tok / 1e9, stream_gb_s);
      if (decode_cpu_known && decode_wall > 0)
        std::printf("cores busy while decoding: strata %.2f, everything else %.2f, hypervisor steal %.2f\n",
                    decode_cpu_self / decode_wall, std::max(0.0, decode_cpu_busy - decode_cpu_self) / decode_wall,
                    decode_cpu_steal / decode_wall);
    } else if (mem > 0) {
      std::printf("memory read bandwidth %.1f GB/s (%d threads)\n", mem, threads);
    }
    if (ctx_mode) {
      const double mib = 1.0 / (1 << 20);
      std::printf("context %lld: prefill %.2f s (%.1f tok/s) | %s\n", static_cast<long long>(P),
                  median(prefill_seconds), pmed, prefill_phase.split_line(ptok).c_str());
      if (G > 0)
        std::printf("context %lld: decode %.2f tok/s | %s\n", static_cast<long long>(P), dmed,
                    decode_phase.split_line(gtok).c_str());
      std::printf("KV per context token %llu B = %lld layers x (latent %llu + rope key %llu) + %lld layers x index key "
                  "%llu%s -> %.1f MiB at %lld (llama.cpp f16: %llu B/token, %.1f MiB)\n",
                  static_cast<unsigned long long>(kv.total()), static_cast<long long>(kv.layers),
                  static_cast<unsigned long long>(kv.layer_latent), static_cast<unsigned long long>(kv.layer_rope_key),
                  static_cast<long long>(kv.index_layers), static_cast<unsigned long long>(kv.layer_index_key),
                  kv.gqa ? " + GQA K/V" : "", static_cast<double>(kv.total() * static_cast<uint64_t>(P)) * mib,
                  static_cast<long long>(P), static_cast<unsigned long long>(llama_kv),
                  static_cast<double>(llama_kv * static_cast<uint64_t>(P)) * mib);
    }
    if (disk.bytes > 0)
      std::printf("disk: %s sequential read %.2f GB/s (%.0f MiB of %s)\n", disk.direct ? "O_DIRECT" : "buffered",
                  disk.gb_s, static_cast<double>(disk.bytes) / (1 << 20), disk.file.c_str());
  }
  std::fflush(stdout);
  finish_engine(e, f.engine, /*save_usage=*/false);
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Runner& run) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed, the time split and bandwidth use");
  f->engine.add(cmd);
  CLI::Option* prompt_opt =
      cmd->add_option("--prompt-tokens", f->prompt_tokens, "Prompt length for the prefill measurement (default 512)")
          ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--gen-tokens", f->gen_tokens, "Tokens decoded after the prompt (default 32; 0 skips decode)")
      ->check(CLI::Range(0, 1 << 20));
  CLI::Option* ids_opt =
      cmd->add_option("--ids", f->ids, "Explicit comma-separated prompt token ids (instead of --prompt-tokens)");
  cmd->add_option("--context", f->context,
                  "Long context: prefill N tokens (the --seed ids), decode --gen-tokens after them, and report the "
                  "context line: prefill time, decode speed at N, the attention/experts/other split, KV bytes per "
                  "token (N + gen tokens <= max_position_embeddings)")
      ->check(CLI::Range(1, 1 << 22))
      ->excludes(prompt_opt)
      ->excludes(ids_opt);
  cmd->add_option("--seed", f->seed, "Seed of the fixed pseudo-random prompt ids (default 1)");
  cmd->add_option("--reps", f->reps, "Measured repetitions; the median is reported (default 3)")->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", f->warmup, "Unmeasured repetitions first (default 1)")->check(CLI::Range(0, 1000));
  cmd->add_option("--warmup-tokens", f->warmup_tokens,
                  "Prompt tokens of each warm-up repetition (default 0: the whole prompt)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--membw-mib", f->membw_mib,
                  "Buffer for the memory read-bandwidth test in MiB (default 1024; 0 skips it)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--disk-mib", f->disk_mib,
                  "Containers: MiB of the largest expert file read sequentially with O_DIRECT (default 1024; 0 skips)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--json", f->json,
                "One JSON line per result (config, prefill, decode, context with --context, memory_bandwidth, disk_read)");
  cmd->callback([f, &run] { run = [f] { return run_bench(*f); }; });
}

}  // namespace strata::cli
