#include "dist/placement.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/io.h"
#include "core/json.h"
#include "format/container.h"

namespace strata {

namespace {

void hash_text(XXH3_state_t* st, const std::string& s) {
  const uint64_t n = s.size();
  XXH3_64bits_update(st, &n, sizeof(n));
  XXH3_64bits_update(st, s.data(), s.size());
}

void hash_u64(XXH3_state_t* st, uint64_t v) { XXH3_64bits_update(st, &v, sizeof(v)); }

}  // namespace

ExpertPool expert_pool(const Model& m) {
  ExpertPool p;
  const size_t n = m.weights.layers.size();
  p.count.assign(n, 0);
  p.bytes.assign(n, 0);
  if (m.experts_on_disk) {
    for (const ExpertLayerRecord& rec : m.manifest->expert_layers) {
      if (rec.layer < 0 || static_cast<size_t>(rec.layer) >= n) continue;
      p.count[static_cast<size_t>(rec.layer)] = rec.count;
      p.bytes[static_cast<size_t>(rec.layer)] = (rec.blob_bytes + kExpertAlign - 1) / kExpertAlign * kExpertAlign;
    }
  } else {
    for (size_t L = 0; L < n && L < m.weights.experts.size(); ++L) {
      p.count[L] = static_cast<int64_t>(m.weights.experts[L].size());
      if (!m.weights.experts[L].empty()) p.bytes[L] = m.weights.experts[L][0].bytes();
    }
  }
  const std::string upath = m.dir + "/usage.json";
  if (!std::ifstream(upath).good()) return p;
  try {
    Json u = parse_json(read_small_file(upath, 64u << 20), upath);
    if (!u.is_object() || u.value("format", "") != "strata-usage" || !u.contains("layers") || !u["layers"].is_object())
      return p;
    std::vector<std::vector<uint64_t>> usage(n);
    bool any = false;
    for (size_t L = 0; L < n; ++L) usage[L].assign(static_cast<size_t>(p.count[L]), 0);
    for (auto it = u["layers"].begin(); it != u["layers"].end(); ++it) {
      const long long L = std::atoll(it.key().c_str());
      if (L < 0 || static_cast<size_t>(L) >= n || !it.value().is_array()) continue;
      std::vector<uint64_t>& ul = usage[static_cast<size_t>(L)];
      if (it.value().size() != ul.size()) continue;
      for (size_t e = 0; e < ul.size(); ++e)
        if (it.value()[e].is_number_unsigned()) {
          ul[e] = it.value()[e].get<uint64_t>();
          any |= ul[e] > 0;
        }
    }
    if (any) p.usage = std::move(usage);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: warning: ignoring %s for expert placement: %s\n", upath.c_str(), e.what());
  }
  return p;
}

Placement place_experts(const ExpertPool& pool, const std::vector<uint64_t>& budgets, int64_t replicate) {
  Placement pl;
  pl.ranks = static_cast<int>(budgets.size());
  if (pl.ranks < 1) fail("expert placement: no ranks");
  pl.by_usage = !pool.usage.empty();
  pl.owner.resize(pool.count.size());
  pl.experts.assign(static_cast<size_t>(pl.ranks), 0);
  pl.bytes.assign(static_cast<size_t>(pl.ranks), 0);
  pl.traffic.assign(static_cast<size_t>(pl.ranks), 0.0);
  if (replicate < 0) fail("expert placement: {} experts to replicate", replicate);
  struct Item {
    uint64_t weight;
    int64_t layer;
    int32_t expert;
  };
  std::vector<Item> items;
  pl.replicated.resize(pool.count.size());
  for (size_t L = 0; L < pool.count.size(); ++L) {
    pl.owner[L].assign(static_cast<size_t>(pool.count[L]), 0);
    pl.replicated[L].assign(static_cast<size_t>(pool.count[L]), 0);
    for (int32_t e = 0; e < pool.count[L]; ++e)
      items.push_back({pl.by_usage ? pool.usage[L][static_cast<size_t>(e)] + 1 : 1, static_cast<int64_t>(L), e});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.weight > b.weight; });
  // The hottest `replicate` experts: rank 0's, outside the balance.
  const size_t n_rep = static_cast<size_t>(std::min<int64_t>(replicate, static_cast<int64_t>(items.size())));
  double total = 0.0, rep_load = 0.0;
  for (size_t i = 0; i < n_rep; ++i) {
    const Item& it = items[i];
    pl.replicated[static_cast<size_t>(it.layer)][static_cast<size_t>(it.expert)] = 1;
    ++pl.replicated_experts;
    pl.replicated_bytes += pool.bytes[static_cast<size_t>(it.layer)];
    rep_load += static_cast<double>(it.weight);
  }
  total += rep_load;
  pl.experts[0] += pl.replicated_experts;
  pl.bytes[0] += pl.replicated_bytes;
  // Shares of the total budget; a rank with no budget (0) still counts as 1
  // byte. The replicated experts come on top of rank 0's share (they are not
  // taken out of its budget: with small budgets that left rank 0 less
  // traffic than without them; its --ram should cover them, the placement
  // line shows it).
  std::vector<double> share(static_cast<size_t>(pl.ranks));
  double total_budget = 0.0;
  for (int r = 0; r < pl.ranks; ++r) total_budget += static_cast<double>(std::max<uint64_t>(1, budgets[static_cast<size_t>(r)]));
  for (int r = 0; r < pl.ranks; ++r)
    share[static_cast<size_t>(r)] = static_cast<double>(std::max<uint64_t>(1, budgets[static_cast<size_t>(r)])) / total_budget;
  std::vector<double> load(static_cast<size_t>(pl.ranks), 0.0);
  for (size_t i = n_rep; i < items.size(); ++i) {
    const Item& it = items[i];
    int best = 0;
    for (int r = 1; r < pl.ranks; ++r)
      if (load[static_cast<size_t>(r)] / share[static_cast<size_t>(r)] <
          load[static_cast<size_t>(best)] / share[static_cast<size_t>(best)])
        best = r;
    pl.owner[static_cast<size_t>(it.layer)][static_cast<size_t>(it.expert)] = best;
    load[static_cast<size_t>(best)] += static_cast<double>(it.weight);
    total += static_cast<double>(it.weight);
    ++pl.experts[static_cast<size_t>(best)];
    pl.bytes[static_cast<size_t>(best)] += pool.bytes[static_cast<size_t>(it.layer)];
  }
  load[0] += rep_load;
  for (int r = 0; r < pl.ranks; ++r) pl.traffic[static_cast<size_t>(r)] = total > 0 ? load[static_cast<size_t>(r)] / total : 0.0;
  pl.replicated_traffic = total > 0 ? rep_load / total : 0.0;
  return pl;
}

std::vector<std::vector<uint8_t>> owned_by(const Placement& p, int rank) {
  std::vector<std::vector<uint8_t>> o(p.owner.size());
  for (size_t L = 0; L < p.owner.size(); ++L) {
    o[L].resize(p.owner[L].size());
    for (size_t e = 0; e < o[L].size(); ++e) o[L][e] = p.owner[L][e] == rank ? 1 : 0;
  }
  return o;
}

namespace {

// A container's manifest (config and file records), or a checkpoint
// directory's config.json and safetensors names and sizes.
uint64_t fingerprint_of(const Manifest* manifest, const std::string& dir) {
  XXH3_state_t* st = XXH3_createState();
  if (!st) throw std::bad_alloc();
  XXH3_64bits_reset(st);
  if (manifest) {
    hash_text(st, "container");
    hash_text(st, manifest->config.dump());
    for (const FileRecord& f : manifest->files) {
      hash_text(st, f.name);
      hash_u64(st, f.bytes);
      hash_u64(st, f.xxh);
    }
  } else {
    hash_text(st, "checkpoint");
    hash_text(st, read_small_file(dir + "/config.json", 16u << 20));
    std::vector<std::pair<std::string, uint64_t>> files;
    std::error_code ec;
    for (const auto& de : std::filesystem::directory_iterator(dir, ec))
      if (de.path().extension() == ".safetensors") files.emplace_back(de.path().filename().string(), de.file_size(ec));
    std::sort(files.begin(), files.end());
    for (const auto& [name, size] : files) {
      hash_text(st, name);
      hash_u64(st, size);
    }
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace

uint64_t model_fingerprint(const Model& m) { return fingerprint_of(m.manifest.get(), m.dir); }

uint64_t model_fingerprint(const std::string& dir) {
  if (is_container(dir)) {
    const Manifest manifest = read_manifest(dir);
    return fingerprint_of(&manifest, dir);
  }
  return fingerprint_of(nullptr, dir);
}

}  // namespace strata
