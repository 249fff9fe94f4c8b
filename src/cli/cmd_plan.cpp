// strata plan: before downloading or converting, how big a model's container
// is and how fast it would decode here at a range of RAM budgets
// (docs/plan.md). Sizes come from the converter's own layout
// (format/convert_plan.h) computed from config.json alone; speed from a
// routing trace replayed through a model of the expert cache
// (experts/cache_model.h), the memory bandwidth and the disk throughput.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/io.h"
#include "core/json.h"
#include "core/system_info.h"
#include "experts/cache_model.h"
#include "experts/disk_probe.h"
#include "experts/store_options.h"
#include "format/container.h"
#include "kernels/compute_probe.h"
#include "kernels/matmul_pool.h"
#include "format/convert_plan.h"
#include "model/session.h"
#include "runtime/engine.h"
#include "runtime/routing_trace.h"
#include "runtime/trace_replay.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

struct PlanFlags {
  std::string model;
  double ram_gb = 0.0;  // memory this machine can give strata (0: available memory / cgroup limit)
  std::string disk_dir;
  double disk_gbps = 0.0;       // queue depth 1 (alone: the rate at every depth)
  double disk_qd4_gbps = 0.0;   // with --disk-gbps: the rates at queue depths 4 and 16
  double disk_qd16_gbps = 0.0;
  double disk_read_kib = 0.0;   // the reads those rates were measured with (0: one expert)
  double mem_gbps = 0.0;
  double headroom_gb = 1.0;  // memory beyond weights: KV cache, activations, the OS
  std::string experts;  // "", int4 or int8: the recommendation considers both when empty
  std::string scales;   // "", f32 or bf16: the group scales sized (default: the container's, else f32)
  std::string usage;    // routing popularity (usage.json or an eval routing file)
  int trace_tokens = 512;
  std::string trace;         // a recorded routing trace (strata trace record) instead of independent draws
  int64_t trace_warmup = -1;  // its tokens that only warm the cache (-1: the first quarter)
  uint64_t seed = 1;
  bool json = false;
  int threads = 0;             // the compute probe's threads (0: the cores this process may use)
  int64_t context = 512;       // keys in the KV cache while decoding: attention's term
  double matmul_call_us = -1;  // given instead of measured (ComputeProbe); -1: measure
  double matmul_madd_ns = -1;
  double region_us = -1;
  double dot_gmadds = -1;
  double checksum_gbps = -1;  // the store's XXH3 of a landed expert (-1: measured; 0: not counted)
  double compute_ms = -1;  // given compute per token, every row (-1: modelled, or --calibrate)
  int calibrate = 0;  // decode tokens that measure the compute per token (containers only; 0: model it)
};

// One precision's sizes, from the converter's layout.
struct Sizes {
  int bits = 4;
  uint64_t dense_file = 0, expert_pool = 0, container = 0;
  uint64_t dense_per_token = 0;  // resident bytes one decoded token reads
  uint64_t expert_blob = 0, expert_read = 0;
  int64_t moe_layers = 0, n_experts = 0, k = 0;
  int64_t dense_matmuls = 0;  // projections of the resident part one token runs
  int64_t dense_on_pool = 0;  // of them, those the pool runs (kernels/matmul.h)
  double dense_caller_madds = 0, dense_caller_bytes = 0;  // the projections the calling thread runs
  bool experts_on_pool = false;
  double expert_madds = 0;  // one routed expert's 3 matrices
  ModelConfig cfg;
};

// `base`: the conversion's other options (a container's own, or convert's
// defaults with --scales); the routed experts at `bits`.
Sizes sizes_for(const std::string& dir, const ConvertOptions& base, int bits) {
  ConvertOptions o = base;
  o.in_dir = dir;
  o.expert_bits = bits;
  const conversion::Plan p = conversion::make_plan_from_config(o);
  const ModelConfig& c = p.cfg;
  Sizes s;
  s.bits = bits;
  s.cfg = c;
  s.n_experts = c.n_routed_experts;
  s.k = c.num_experts_per_tok;
  for (const conversion::FileItem& f : p.files) {
    s.container += f.bytes;
    if (f.kind == conversion::FileKind::Dense) s.dense_file += f.bytes;
    if (f.kind == conversion::FileKind::Experts) s.expert_pool += f.bytes;
  }
  const std::string mtp_prefix = "model.layers." + std::to_string(c.num_hidden_layers) + ".";
  for (const conversion::DenseItem& d : p.dense) {
    if (d.name.rfind(mtp_prefix, 0) == 0) continue;  // the MTP layer runs only while --spec mtp/auto drafts with it
    const uint64_t b = d.rec.bytes + d.rec.scales_bytes;
    // A projection: every matrix but the embedding (a row is looked up) and
    // MLA's kv_b (attention applies it per head, in its own regions).
    if (!d.vector && d.name != "model.embed_tokens.weight" && d.name.find("kv_b_proj") == std::string::npos) {
      ++s.dense_matmuls;
      if (matmul_on_pool(d.rows, d.cols, 1)) {
        ++s.dense_on_pool;
      } else {
        s.dense_caller_madds += static_cast<double>(d.rows * d.cols);
        s.dense_caller_bytes += static_cast<double>(b);
      }
    }
    s.dense_per_token += d.name == "model.embed_tokens.weight" ? b / static_cast<uint64_t>(std::max<int64_t>(1, c.vocab_size)) : b;
  }
  for (const conversion::ExpertItem& e : p.experts) {
    if (e.rec.layer >= c.num_hidden_layers) continue;
    ++s.moe_layers;
    s.expert_blob = e.rec.blob_bytes;
    s.expert_read = e.rec.stride;  // blob rounded up to 4096: one read
    s.experts_on_pool = e.rec.gate.shape.size() == 2 && matmul_on_pool(e.rec.gate.shape[0], e.rec.gate.shape[1], 1);
    s.expert_madds = 0;
    for (const TensorRecord* t : {&e.rec.gate, &e.rec.up, &e.rec.down})
      if (t->shape.size() == 2) s.expert_madds += static_cast<double>(t->shape[0] * t->shape[1]);
  }
  return s;
}

// Per-layer popularity from a container's usage.json ({"format":
// "strata-usage", "layers": {"L": [counts]}}) or an eval routing file
// ({"layers": {"L": {"usage_fraction": [...]}}}).
std::vector<std::vector<double>> read_popularity(const std::string& path) {
  const Json j = parse_json(read_small_file(path, 64u << 20), path);
  if (!j.is_object() || !j.contains("layers") || !j["layers"].is_object())
    fail("{}: expected an object with \"layers\" (a container's usage.json or an eval routing file)", path);
  std::map<long long, std::vector<double>> by_layer;
  for (auto it = j["layers"].begin(); it != j["layers"].end(); ++it) {
    const Json& v = it.value().is_object() && it.value().contains("usage_fraction") ? it.value()["usage_fraction"] : it.value();
    if (!v.is_array() || v.empty()) fail("{}: layers.{}: expected an array of usage numbers", path, it.key());
    std::vector<double> p;
    for (const Json& x : v) {
      if (!x.is_number() || !(x.get<double>() >= 0)) fail("{}: layers.{}: usage values must be numbers >= 0", path, it.key());
      p.push_back(x.get<double>());
    }
    by_layer[std::atoll(it.key().c_str())] = std::move(p);
  }
  std::vector<std::vector<double>> out;
  for (auto& [L, p] : by_layer) out.push_back(std::move(p));
  return out;
}

double gb(double b) { return b / 1e9; }

// --calibrate N: this machine's compute per token for this container,
// measured instead of modelled. Greedy decode of N tokens after a 32-token
// prompt (2 more first, unmeasured), with the expert cache as this machine's
// memory allows and read-ahead as by default (auto); the time spent waiting for expert reads is
// taken out (the cache and disk model predicts that part). Returns seconds per
// token.
struct Calibration {
  double compute_s = 0.0;
  double wait_s = 0.0;  // per token, taken out
  int64_t context = 0;
};

Calibration calibrate_compute(const std::string& dir, int threads, int tokens) {
  EngineFlags ef;
  ef.model = dir;
  ef.threads = threads;
  ef.no_autopin = true;
  ef.quiet = true;
  OpenedEngine opened = open_engine(ef, false);
  if (!opened.engine) fail("--calibrate: the engine did not open {}", dir);
  Engine& e = *opened.engine;
  const ModelConfig& c = e.config();
  const int64_t prompt = 32, warm = 2;
  if (prompt + warm + tokens > c.max_position_embeddings)
    fail("--calibrate {}: {} prompt tokens + {} exceed the model's max_position_embeddings {}", tokens, prompt,
         warm + tokens, c.max_position_embeddings);
  Session s(c, prompt + warm + tokens, false);
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  std::vector<Row> rows;
  for (int64_t i = 0; i < prompt; ++i)  // fixed ids spread over the vocabulary
    rows.push_back({&s, static_cast<int32_t>(i), static_cast<int32_t>((i * 7919 + 13) % c.vocab_size), i == prompt - 1});
  e.forward(rows, logits.data(), nullptr, prompt);
  auto greedy = [&] {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  int64_t pos = prompt;
  for (int64_t i = 0; i < warm; ++i, ++pos) {
    const Row r{&s, static_cast<int32_t>(pos), greedy(), true};
    e.forward({&r, 1}, logits.data());
  }
  const PhaseStats a = e.runner().stats();
  const uint64_t t0 = now_ns();
  for (int i = 0; i < tokens; ++i, ++pos) {
    const Row r{&s, static_cast<int32_t>(pos), greedy(), true};
    e.forward({&r, 1}, logits.data());
  }
  const double wall = static_cast<double>(now_ns() - t0) / 1e9;
  const PhaseStats b = e.runner().stats();
  Calibration cal;
  cal.wait_s = static_cast<double>(b.expert_wait_ns - a.expert_wait_ns) / 1e9 / tokens;
  cal.compute_s = std::max(0.0, wall / tokens - cal.wait_s);
  cal.context = pos;
  return cal;
}

int run_plan(const PlanFlags& f) {
  const std::string dir = f.model;
  if (!fs::is_regular_file(fs::path(dir) / "config.json"))
    fail("--model {}: no config.json there (give a checkpoint or container directory, or its config.json)", dir);
  const bool container = is_container(dir);
  uint64_t container_actual = 0;
  int container_bits = 0;
  // The conversion sized: a container's own options (its precisions, group
  // size and scales; the routed experts at each precision planned), else
  // convert's defaults; --scales overrides either.
  ConvertOptions base;
  if (container) {
    const Manifest m = read_manifest(dir);
    for (const FileRecord& r : m.files) container_actual += r.bytes;
    base = ConvertOptions::from_json(m.options);
    container_bits = base.expert_bits;
  }
  if (!f.scales.empty()) base.scales = f.scales;
  std::vector<int> precisions;
  if (f.experts == "int4" || f.experts == "int8") precisions = {f.experts == "int8" ? 8 : 4};
  else precisions = {4, 8};
  std::vector<Sizes> sizes;
  for (int b : {4, 8}) sizes.push_back(sizes_for(dir, base, b));

  // The machine: given, or measured here.
  const MemoryInfo mi = memory_info();
  double ram = f.ram_gb > 0 ? f.ram_gb * 1e9 : static_cast<double>(mi.cgroup_limit_bytes ? std::min(mi.cgroup_limit_bytes, mi.available_bytes) : mi.available_bytes);
  const double mem_gbps = f.mem_gbps > 0 ? f.mem_gbps : memory_read_gb_s(512u << 20, usable_cores(), 3);
  // The disk: random-read rates at queue depths 1/4/16 (given, or measured
  // as strata doctor does, with reads of one expert), read at the bytes the
  // store keeps in flight for a request's misses (DiskRates).
  DiskRates rates;
  rates.io_depth = kDefaultIoDepth;
  rates.io_chunk = kIoChunkBytes;
  std::string disk_source;
  if (f.disk_gbps > 0) {
    rates.qd_gb_s = {{1.0, f.disk_gbps}};
    if (f.disk_qd4_gbps > 0) rates.qd_gb_s.push_back({4.0, f.disk_qd4_gbps});
    if (f.disk_qd16_gbps > 0) rates.qd_gb_s.push_back({16.0, f.disk_qd16_gbps});
    rates.read_bytes = static_cast<uint64_t>(f.disk_read_kib * 1024.0);
    disk_source = rates.qd_gb_s.size() == 1 ? "--disk-gbps, at every queue depth" : "--disk-gbps/--disk-qd*-gbps";
    if (rates.qd_gb_s.size() > 1)
      disk_source += rates.read_bytes ? fmt::format(", {} KiB reads", rates.read_bytes >> 10) : ", reads of one expert";
  } else {
    DiskProbeOptions po;
    po.dir = f.disk_dir.empty() ? "." : f.disk_dir;
    po.read_bytes = std::max<uint64_t>(4096, sizes[0].expert_read / 4096 * 4096);
    po.depths = {1, 4, 16};
    const DiskProbe d = probe_disk(po);
    if (d.reads.empty()) fail("--disk {}: could not measure reads ({}); pass --disk-gbps", po.dir, d.error);
    for (const DiskReadRate& r : d.reads) rates.qd_gb_s.push_back({static_cast<double>(r.depth), r.gb_s});
    rates.read_bytes = po.read_bytes;
    disk_source = fmt::format("measured under {} (queue depth {}, {} KiB reads{})", d.dir,
                              d.reads.size() == 3 ? std::string("1/4/16") : std::to_string(d.reads[0].depth),
                              po.read_bytes >> 10, d.reads_direct ? ", O_DIRECT" : ", buffered: may include page-cache hits");
  }
  std::sort(rates.qd_gb_s.begin(), rates.qd_gb_s.end());
  const double disk_gbps = rates.qd_gb_s.front().second;  // queue depth 1
  // Per miss besides the read: the store's checksum of the expert as it
  // lands, from memory (experts/disk_probe.h, probe_checksum); given, or
  // measured here with blocks of one expert of the first precision.
  ChecksumProbe ck;
  std::string checksum_source = "given";
  if (f.checksum_gbps < 0) {
    ck = probe_checksum(std::max<uint64_t>(4096, sizes[0].expert_read), 0.2);
    checksum_source = fmt::format("measured here, {} KiB blocks of a {} MiB buffer", ck.expert_bytes >> 10,
                                  ck.working_set_bytes >> 20);
  } else {
    ck.gb_s = f.checksum_gbps;
  }
  rates.checksum_gb_s = ck.gb_s;

  // The fixed costs per token (kernels/compute_probe.h): given, or measured
  // here with the engine's kernels and pool at the run's thread count.
  const int threads = f.threads > 0 ? f.threads : usable_cores();
  ComputeProbe cp;
  std::string compute_source = "given";
  if (f.matmul_call_us < 0 || f.matmul_madd_ns < 0 || f.region_us < 0 || f.dot_gmadds < 0) {
    // The projections' weights fetched from a working set of what one token
    // reads (the first precision's), as a decode walks through them.
    const Sizes& s = sizes[precisions[0] == 8 ? 1 : 0];
    cp = probe_compute(threads, 0.4, s.dense_per_token + s.expert_blob * static_cast<uint64_t>(s.k * s.moe_layers));
    compute_source = fmt::format("measured here, {} threads, {:.3g} MB working set", threads, cp.working_set_bytes / 1e6);
  }
  if (f.matmul_call_us >= 0) cp.matmul_call_s = f.matmul_call_us * 1e-6;
  if (f.matmul_madd_ns >= 0) cp.matmul_madd_s = f.matmul_madd_ns * 1e-9;
  if (f.region_us >= 0) cp.region_s = f.region_us * 1e-6;
  if (f.dot_gmadds >= 0) cp.dot_gmadd_s = f.dot_gmadds;
  const DecodeWork work = decode_work(sizes[0].cfg, f.context);
  Calibration cal;
  if (f.calibrate > 0) {
    if (!container) fail("--calibrate: {} is not a strata container (convert it first; a checkpoint runs other kernels)", dir);
    std::fprintf(stderr, "strata plan: calibrating: %d decode tokens of %s\n", f.calibrate, dir.c_str());
    cal = calibrate_compute(dir, threads, f.calibrate);
  }

  // The routing trace: a recorded one mapped onto the target's MoE layers
  // (layer l replays trace layer l mod its layers; hit rates read at the
  // same cached fraction of a layer's experts), or independent draws from
  // the learned popularity.
  const Sizes& s0 = sizes[0];
  if (s0.moe_layers < 1) fail("{}: the config has no MoE layers", dir);
  RoutingTrace trace;
  int64_t warmup = 0;
  std::string trace_desc;
  if (!f.trace.empty()) {
    const RecordedTrace rt = read_routing_trace(f.trace);
    warmup = f.trace_warmup >= 0 ? f.trace_warmup : rt.tokens / 4;
    if (warmup >= rt.tokens)
      fail("{}: \"tokens\" is {}: nothing is counted after {} warm-up tokens (--trace-warmup)", f.trace, rt.tokens,
           warmup);
    trace = repeat_layers(cache_model_trace(rt, f.trace), s0.moe_layers);
    const bool same = rt.experts == s0.n_experts && rt.top_k == s0.k;
    trace_desc = fmt::format(
        "{} tokens recorded from {} ({} MoE layers, top-{} of {}; first {} warm the cache), {}", rt.tokens, rt.model,
        rt.layers.size(), rt.top_k, rt.experts, warmup,
        same ? fmt::format("replayed as recorded over {} MoE layers (layer l <- trace layer l mod {})", s0.moe_layers,
                           rt.layers.size())
             : fmt::format("mapped onto {} MoE layers x top-{} of {} by the cached fraction of a layer's experts "
                           "(S slots here <- S x {}/{} trace slots)",
                           s0.moe_layers, s0.k, s0.n_experts, rt.experts, s0.n_experts));
  } else {
    const std::vector<std::vector<double>> pop =
        f.usage.empty() ? std::vector<std::vector<double>>{} : read_popularity(f.usage);
    trace = independent_trace(pop, s0.moe_layers, s0.n_experts, s0.k, f.trace_tokens, f.seed);
    warmup = f.trace_tokens / 4;
    trace_desc = fmt::format(
        "{} tokens drawn independently from {} (first {} warm the cache), top-{} of {} per layer", f.trace_tokens,
        f.usage.empty() ? std::string("uniform expert popularity") : "the popularity in " + f.usage, warmup, s0.k,
        s0.n_experts);
  }

  // Rows: the total memory strata may use, from the dense part plus a
  // fraction of each precision's expert pool (and round sizes in GB between),
  // plus this machine's.
  const uint64_t headroom = static_cast<uint64_t>(f.headroom_gb * 1e9);  // KV cache, activations, the OS
  const double lo = static_cast<double>(sizes[0].dense_file + headroom);
  const double hi = static_cast<double>(sizes.back().dense_file + sizes.back().expert_pool + headroom);
  std::vector<double> rams{ram};
  for (int b : precisions) {
    const Sizes& s = sizes[b == 8 ? 1 : 0];
    for (double fr : {0.0, 1.0 / 32, 1.0 / 16, 1.0 / 8, 1.0 / 4, 3.0 / 8, 1.0 / 2, 5.0 / 8, 3.0 / 4, 7.0 / 8, 1.0})
      rams.push_back(static_cast<double>(s.dense_file + headroom) + fr * static_cast<double>(s.expert_pool));
  }
  for (double g : {8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0})
    if (g * 1e9 > lo && g * 1e9 < hi) rams.push_back(g * 1e9);
  std::sort(rams.begin(), rams.end());
  rams.erase(std::unique(rams.begin(), rams.end(), [](double a, double b) { return std::fabs(a - b) <= 1e-9 * b; }),
             rams.end());
  auto is_here = [ram](double r) { return std::fabs(r - ram) <= 1e-9 * ram; };

  struct Row {
    double ram;
    int bits;
    uint64_t budget;
    int64_t slots;
    DecodePrediction p;
    bool fits;
  };
  std::vector<Row> rows;
  StoreModel store(trace, warmup);
  for (double r : rams)
    for (int b : precisions) {
      const Sizes& s = sizes[b == 8 ? 1 : 0];
      const double left = r - static_cast<double>(s.dense_file) - static_cast<double>(headroom);
      const bool fits = left >= 0;
      const uint64_t budget = fits ? std::min<uint64_t>(static_cast<uint64_t>(left), s.expert_pool) : 0;
      const int64_t slots = lru_slots_for_budget(budget, s.moe_layers, s.expert_read, s.n_experts);
      DecodeCost c;
      c.dense_bytes = s.dense_per_token;
      c.expert_bytes = s.expert_blob;
      c.expert_read_bytes = s.expert_read;
      c.moe_layers = s.moe_layers;
      c.k = s.k;
      c.mem_gb_s = mem_gbps;
      c.disk_gb_s = disk_gbps;
      c.dense_matmuls = s.dense_matmuls;
      c.dense_on_pool = s.dense_on_pool;
      c.dense_caller_madds = s.dense_caller_madds;
      c.dense_caller_bytes = s.dense_caller_bytes;
      c.experts_on_pool = s.experts_on_pool;
      c.expert_madds = s.expert_madds;
      c.regions = work.regions;
      c.attention_madds = work.attention_madds;
      c.matmul_call_s = cp.matmul_call_s;
      c.matmul_madd_s = cp.matmul_madd_s;
      c.region_s = cp.region_s;
      c.dot_gmadd_s = cp.dot_gmadd_s;
      if (cal.compute_s > 0 && b == container_bits) c.calibrated_compute_s = cal.compute_s;
      if (f.compute_ms > 0) c.calibrated_compute_s = f.compute_ms / 1e3;
      const StoreModel::Reading at = store.at(slots, s.n_experts, s.k, rates, s.expert_read);
      rows.push_back({r, b, budget, slots, predict_decode(c, at.hit_rate, at.disk_s), fits});
    }
  // Recommendation at `ram`: the precision with the higher predicted speed
  // that fits (int8 is the more accurate; prefer it on a tie within 5%).
  const Row* best = nullptr;
  for (const Row& row : rows)
    if (is_here(row.ram) && row.fits)
      if (!best || row.p.tok_s > best->p.tok_s * (row.bits == 8 ? 0.95 : 1.05)) best = &row;

  if (f.json) {
    Json js = Json::object();
    for (const Sizes& s : sizes)
      js[s.bits == 8 ? "int8" : "int4"] = {{"dense_bytes", s.dense_file},
                                           {"expert_pool_bytes", s.expert_pool},
                                           {"container_bytes", s.container},
                                           {"expert_blob_bytes", s.expert_blob},
                                           {"expert_read_bytes", s.expert_read},
                                           {"dense_bytes_per_token", s.dense_per_token},
                                           {"expert_bytes_per_token", s.expert_blob * static_cast<uint64_t>(s.k * s.moe_layers)}};
    Json jr = Json::array();
    Json disk_rates = Json::array();
    for (const auto& [q, g] : rates.qd_gb_s) disk_rates.push_back({{"queue_depth", q}, {"gb_s", g}});
    for (const Row& row : rows)
      jr.push_back({{"ram_bytes", static_cast<uint64_t>(row.ram)},
                    {"experts", row.bits == 8 ? "int8" : "int4"},
                    {"fits", row.fits},
                    {"expert_budget_bytes", row.budget},
                    {"lru_slots_per_layer", row.slots},
                    {"hit_rate", row.p.hit_rate},
                    {"disk_bytes_per_token", row.p.disk_bytes_per_token},
                    {"compute_ms", row.p.compute_s * 1e3},
                    {"weights_ms", row.p.weights_s * 1e3},
                    {"fixed_ms", row.p.fixed_s * 1e3},
                    {"attention_ms", row.p.attention_s * 1e3},
                    {"disk_ms", row.p.disk_s * 1e3},
                    {"checksum_ms", ck.gb_s > 0 ? row.p.disk_bytes_per_token / ck.gb_s / 1e6 : 0.0},
                    {"disk_gb_s", row.p.disk_s > 0 ? row.p.disk_bytes_per_token / row.p.disk_s / 1e9 : 0.0},
                    {"tok_s", row.fits ? row.p.tok_s : 0.0}});
    Json out{{"schema", 1},
             {"model", dir},
             {"container", container},
             {"model_shape", {{"moe_layers", s0.moe_layers}, {"experts", s0.n_experts}, {"top_k", s0.k}}},
             {"sizes", js},
             {"sizes_options", base.to_json()},
             {"machine", {{"ram_bytes", static_cast<uint64_t>(ram)},
                          {"mem_gb_s", mem_gbps},
                          {"disk_gb_s", disk_gbps},
                          {"disk_rates", disk_rates},
                          {"disk_read_bytes", rates.read_bytes},
                          {"store_io_depth", rates.io_depth},
                          {"store_io_chunk_bytes", rates.io_chunk},
                          {"checksum", {{"gb_s", ck.gb_s},
                                        {"us_per_expert", ck.us_per_expert},
                                        {"expert_bytes", ck.expert_bytes},
                                        {"working_set_bytes", ck.working_set_bytes},
                                        {"source", checksum_source}}},
                          {"disk_source", disk_source},
                          {"compute", {{"threads", threads},
                                       {"matmul_call_us", cp.matmul_call_s * 1e6},
                                       {"matmul_madd_ns", cp.matmul_madd_s * 1e9},
                                       {"working_set_bytes", cp.working_set_bytes},
                                       {"region_us", cp.region_s * 1e6},
                                       {"dot_gmadd_s", cp.dot_gmadd_s},
                                       {"source", compute_source}}},
                          {"calibration", f.calibrate > 0 ? Json{{"tokens", f.calibrate},
                                                                 {"context", cal.context},
                                                                 {"experts", container_bits == 8 ? "int8" : "int4"},
                                                                 {"compute_ms", cal.compute_s * 1e3},
                                                                 {"expert_wait_ms", cal.wait_s * 1e3}}
                                                          : Json()}}},
             {"context", f.context},
             {"work_per_token", {{"dense_matmuls", s0.dense_matmuls},
                                 {"dense_matmuls_on_pool", s0.dense_on_pool},
                                 {"dense_caller_madds", s0.dense_caller_madds},
                                 {"expert_matmuls", 3 * s0.k * s0.moe_layers},
                                 {"expert_matmuls_on_pool", s0.experts_on_pool ? 3 * s0.k * s0.moe_layers : 0},
                                 {"regions", work.regions},
                                 {"attention_madds", work.attention_madds}}},
             {"trace", trace_desc},
             {"trace_kind", f.trace.empty() ? "independent" : "recorded"},
             {"rows", jr}};
    if (container) out["container_bytes_actual"] = container_actual;
    if (best)
      out["recommendation"] = {{"experts", best->bits == 8 ? "int8" : "int4"},
                               {"ram_flag_gb", static_cast<double>(best->budget) / 1e9},
                               {"tok_s", best->p.tok_s},
                               {"hit_rate", best->p.hit_rate}};
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  std::printf("model %s: %lld MoE layers x %lld experts, top-%lld\n", dir.c_str(), static_cast<long long>(s0.moe_layers),
              static_cast<long long>(s0.n_experts), static_cast<long long>(s0.k));
  std::printf("sizes: %s, group size %lld, %s scales\n",
              container ? "this container's conversion options" : "strata convert's default options",
              static_cast<long long>(base.group_size), base.scales.c_str());
  std::printf("%-6s %12s %14s %14s %12s %14s %14s\n", "", "dense (GB)", "expert pool", "container", "one expert",
              "dense B/token", "expert B/token");
  for (const Sizes& s : sizes)
    std::printf("%-6s %12.4g %14.4g %14.4g %9.4g MiB %14.3g %14.3g\n", s.bits == 8 ? "int8" : "int4", gb(s.dense_file),
                gb(s.expert_pool), gb(s.container), static_cast<double>(s.expert_read) / (1 << 20),
                static_cast<double>(s.dense_per_token), static_cast<double>(s.expert_blob * static_cast<uint64_t>(s.k * s.moe_layers)));
  if (container)
    std::printf("this container: %.3f GB on disk (experts %s)\n", gb(static_cast<double>(container_actual)),
                container_bits == 8 ? "int8" : "int4");
  std::string disk_desc;
  for (const auto& [q, g] : rates.qd_gb_s) disk_desc += fmt::format("{}{:.3g} GB/s at QD{:g}", disk_desc.empty() ? "" : ", ", g, q);
  std::printf("machine: memory %.1f GB/s, disk %s (%s), RAM for strata %.1f GB\n", mem_gbps, disk_desc.c_str(),
              disk_source.c_str(), gb(ram));
  const int64_t projections = s0.dense_matmuls + 3 * s0.k * s0.moe_layers;
  const int64_t regions = s0.dense_on_pool + (s0.experts_on_pool ? 3 * s0.k * s0.moe_layers : 0) + work.regions;
  std::printf("compute per token: %lld projections x %.3g us (+ %.3g ns per multiply-add on the calling thread) + %lld "
              "regions x %.3g us, attention %.3g G multiply-adds at %lld keys / %.3g G/s (%s)\n",
              static_cast<long long>(projections), cp.matmul_call_s * 1e6, cp.matmul_madd_s * 1e9,
              static_cast<long long>(regions), cp.region_s * 1e6, work.attention_madds / 1e9,
              static_cast<long long>(f.context), cp.dot_gmadd_s, compute_source.c_str());
  if (ck.gb_s > 0)
    std::printf("per expert read: + its checksum at %.3g GB/s from memory (%s)\n", ck.gb_s, checksum_source.c_str());
  if (f.compute_ms > 0) std::printf("compute per token, every row: %.3g ms (--compute-ms)\n", f.compute_ms);
  if (cal.compute_s > 0)
    std::printf("compute per token, %s rows: %.3g ms measured (--calibrate: %d decode tokens at %lld keys, %.3g ms/token "
                "of expert-read wait taken out)\n",
                container_bits == 8 ? "int8" : "int4", cal.compute_s * 1e3, f.calibrate, static_cast<long long>(cal.context),
                cal.wait_s * 1e3);
  std::printf("trace: %s\n\n", trace_desc.c_str());
  std::printf("%9s %6s %12s %6s %7s %12s %10s %9s %9s\n", "RAM (GB)", "prec", "--ram (GB)", "slots", "hit", "disk MB/tok",
              "compute ms", "disk ms", "tok/s");
  for (const Row& row : rows) {
    if (!row.fits) {
      std::printf("%9.4g %6s %12s  dense part does not fit\n", gb(row.ram), row.bits == 8 ? "int8" : "int4", "-");
      continue;
    }
    std::printf("%9.4g %6s %12.4g %6lld %6.1f%% %12.4g %10.4g %9.4g %9.4g%s\n", gb(row.ram), row.bits == 8 ? "int8" : "int4",
                gb(static_cast<double>(row.budget)), static_cast<long long>(row.slots), 100.0 * row.p.hit_rate,
                row.p.disk_bytes_per_token / 1e6, row.p.compute_s * 1e3, row.p.disk_s * 1e3, row.p.tok_s,
                is_here(row.ram) ? "  <- this machine" : "");
  }
  if (best)
    std::printf("\nrecommended here: convert with --experts %s, run with --ram %.1f: about %.3g tok/s (%.0f%% hits)\n",
                best->bits == 8 ? "int8" : "int4", static_cast<double>(best->budget) / 1e9, best->p.tok_s,
                100.0 * best->p.hit_rate);
  else
    std::printf("\nthe dense part does not fit in %.1f GB at any precision\n", gb(ram));
  std::printf("(a model, not a measurement: docs/plan.md states its assumptions)\n");
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, Runner& run) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "Predict a model's sizes and decode speed here at a range of RAM budgets");
  cmd->add_option("--model", f->model, "A checkpoint or container directory, or just its config.json (no weights needed)")
      ->required()
      ->transform(model_dir_of, "", "");
  cmd->add_option("--ram", f->ram_gb, "Memory strata may use here in GB (default: available memory, or the cgroup limit)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--disk", f->disk_dir, "Directory whose disk would hold the container (measured; default: .)");
  CLI::Option* disk_gbps =
      cmd->add_option("--disk-gbps", f->disk_gbps,
                      "Random-read throughput in GB/s at queue depth 1 instead of measuring --disk (alone: at every depth)")
          ->check(CLI::Range(1e-6, 1e4));
  cmd->add_option("--disk-qd4-gbps", f->disk_qd4_gbps, "With --disk-gbps: the throughput at queue depth 4 (strata doctor's)")
      ->check(CLI::Range(1e-6, 1e4))
      ->needs(disk_gbps);
  cmd->add_option("--disk-qd16-gbps", f->disk_qd16_gbps, "With --disk-gbps: the throughput at queue depth 16")
      ->check(CLI::Range(1e-6, 1e4))
      ->needs(disk_gbps);
  cmd->add_option("--disk-read-kib", f->disk_read_kib,
                  "With --disk-gbps: the read size those rates were measured with in KiB (default: one expert)")
      ->check(CLI::Range(4.0, 1e7))
      ->needs(disk_gbps);
  cmd->add_option("--mem-gbps", f->mem_gbps, "Memory read bandwidth in GB/s instead of measuring it")->check(CLI::Range(1e-6, 1e5));
  cmd->add_option("--headroom", f->headroom_gb,
                  "GB of memory kept beyond the weights (KV cache, activations, the OS; default 1)")
      ->check(CLI::Range(0.0, 1e4));
  cmd->add_option("--scales", f->scales,
                  "Group scales of the int8/int4 tensors to size: bf16 or f32 (strata convert --scales; default: the "
                  "container's, else convert's: bf16)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--experts", f->experts, "Only this precision of routed experts: int4 or int8 (default: both)")
      ->check(CLI::IsMember({"int4", "int8"}));
  CLI::Option* usage = cmd->add_option(
      "--usage", f->usage, "Routing popularity: a container's usage.json or an eval routing file (default: uniform)");
  CLI::Option* tokens = cmd->add_option("--trace-tokens", f->trace_tokens, "Tokens of the synthetic routing trace (default 512)")
                            ->check(CLI::Range(8, 1 << 16));
  CLI::Option* seed = cmd->add_option("--seed", f->seed, "Seed of the synthetic routing trace (default 1)");
  CLI::Option* trace =
      cmd->add_option("--trace", f->trace,
                      "A recorded routing trace (strata trace record) to replay instead of independent draws")
          ->excludes(usage)
          ->excludes(tokens)
          ->excludes(seed);
  cmd->add_option("--trace-warmup", f->trace_warmup,
                  "Tokens at the start of --trace that only warm the cache, e.g. the prompt (default: a quarter)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->needs(trace);
  cmd->add_option("--threads", f->threads, "Threads the run would use, for the compute probe (default: the usable cores)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--context", f->context, "Keys in the KV cache while decoding, for attention's cost (default 512)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("--matmul-call-us", f->matmul_call_us,
                  "Fixed cost of one projection in microseconds instead of measuring it (strata doctor's)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--matmul-madd-ns", f->matmul_madd_ns,
                  "Cost of one multiply-add of a projection run on the calling thread in ns instead of measuring it")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--region-us", f->region_us, "Cost of one empty parallel region in microseconds instead of measuring it")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--dot-gmadds", f->dot_gmadds,
                  "Attention's f32 dot-product rate in 1e9 multiply-adds/s instead of measuring it (0: no attention term)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--checksum-gbps", f->checksum_gbps,
                  "The expert store's checksum rate of a landed expert in GB/s, added per miss, instead of measuring "
                  "it (strata doctor's; 0: not counted)")
      ->check(CLI::Range(0.0, 1e6));
  CLI::Option* given = cmd->add_option("--compute-ms", f->compute_ms,
                  "Compute per token in ms for every row instead of modelling it (e.g. a calibration's)")
      ->check(CLI::Range(1e-6, 1e9));
  cmd->add_option("--calibrate", f->calibrate,
                  "Containers: measure the compute per token with N decode tokens (expert-read waits taken out) "
                  "instead of modelling it; the container's precision only (docs/plan.md)")
      ->check(CLI::Range(1, 100000))
      ->excludes(given);
  cmd->add_flag("--json", f->json, "One JSON object (schema 1, docs/plan.md)");
  cmd->callback([f, &run] { run = [f] { return run_plan(*f); }; });
}

}  // namespace strata::cli
