#include "experts/disk_expert_store.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/io.h"
#include "core/json.h"

namespace strata {

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}


std::string gb(uint64_t b) {
  return b >= 1000000000ull ? fmt::format("{:.2f} GB", static_cast<double>(b) / 1e9)
                            : fmt::format("{:.1f} MB", static_cast<double>(b) / 1e6);
}

}  // namespace

std::unique_ptr<ExpertStore> open_disk_expert_store(const ExpertFiles& files, const ExpertCacheOptions& o) {
  return std::make_unique<DiskExpertStore>(files, o);
}

uint64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

DiskExpertStore::DiskExpertStore(const ExpertFiles& files, const ExpertCacheOptions& o)
    : manifest_(files.manifest), dir_(files.dir) {
  const int64_t n_layers = files.n_layers;
  try {
  if (!manifest_) fail("{}: the expert store needs a strata container", dir_);
  layers_.resize(static_cast<size_t>(n_layers));
  int64_t moe_layers = 0;
  for (const auto& rec : manifest_->expert_layers) {
    if (rec.layer >= n_layers) continue;  // e.g. the MTP layer when it is not loaded
    Layer& l = layers_[static_cast<size_t>(rec.layer)];
    l.rec = &rec;
    l.path = dir_ + "/" + rec.file;
    l.read_bytes = (rec.blob_bytes + kExpertAlign - 1) / kExpertAlign * kExpertAlign;
    l.slot_of.assign(static_cast<size_t>(rec.count), -1);
    l.usage.assign(static_cast<size_t>(rec.count), 0);
    l.prior.assign(static_cast<size_t>(rec.count), 0);
    l.fd = open_file(l.path, O_RDONLY);
    if (o.direct_io) {
      l.fd_direct = try_open_file(l.path, O_RDONLY | O_DIRECT);  // not every filesystem allows it
      l.direct = l.fd_direct.valid();
    }
    if (!o.owned.empty()) {
      if (o.owned.size() != static_cast<size_t>(n_layers) || o.owned[static_cast<size_t>(rec.layer)].size() != l.prior.size())
        fail("expert store: the ownership table does not match layer {} of {}", rec.layer, dir_);
      l.owned = o.owned[static_cast<size_t>(rec.layer)];
    } else {
      l.owned.assign(static_cast<size_t>(rec.count), 1);
    }
    for (uint8_t w : l.owned) l.n_owned += w;
    owned_all_ &= l.n_owned == rec.count;
    total_bytes_ += l.read_bytes * static_cast<uint64_t>(l.n_owned);
    n_owned_ += l.n_owned;
    n_experts_ += rec.count;
    ++moe_layers;
  }

  // Routing usage of earlier runs.
  const std::string upath = dir_ + "/usage.json";
  if (std::ifstream(upath).good()) {
    try {
      Json u = parse_json(read_small_file(upath, 64u << 20), upath);
      if (u.is_object() && u.value("format", "") == "strata-usage" && u.contains("layers") && u["layers"].is_object())
        for (auto it = u["layers"].begin(); it != u["layers"].end(); ++it) {
          const long long L = std::atoll(it.key().c_str());
          if (L < 0 || L >= n_layers || !layers_[static_cast<size_t>(L)].rec || !it.value().is_array()) continue;
          Layer& l = layers_[static_cast<size_t>(L)];
          if (it.value().size() != l.prior.size()) continue;
          for (size_t e = 0; e < l.prior.size(); ++e)
            if (it.value()[e].is_number_unsigned()) l.prior[e] = it.value()[e].get<uint64_t>();
        }
    } catch (const std::exception& e) {  // strata::Error, or a JSON type error ({"format": 1})
      std::fprintf(stderr, "strata: warning: ignoring %s: %s\n", upath.c_str(), e.what());
    }
  }

  // The budget: asked for, or what the machine has available beyond the
  // resident part with 1 GiB of headroom; never more than all experts.
  budget_ = o.ram_bytes;
  if (budget_ == 0) {
    const uint64_t avail = available_memory_bytes(), headroom = 1ull << 30;
    budget_ = avail > headroom ? avail - headroom : 0;
  }
  budget_ = std::min(budget_, total_bytes_);

  // Pinned experts: explicit (--pin), or the hottest of earlier runs (half the
  // budget), hottest first, then in layer order.
  uint64_t pin_budget = 0;
  bool have_usage = false;
  for (const Layer& l : layers_)
    for (uint64_t p : l.prior) have_usage |= p > 0;
  if (o.pin_all)
    pin_budget = budget_;
  else if (o.pin_bytes > 0)
    pin_budget = std::min(o.pin_bytes, budget_);
  else if (o.autopin && have_usage)
    pin_budget = budget_ / 2;
  // Keep room for at least one LRU slot per layer.
  uint64_t min_lru = 0;
  for (const Layer& l : layers_)
    if (l.rec) min_lru += l.read_bytes;
  if (!o.pin_all) pin_budget = budget_ > min_lru ? std::min(pin_budget, budget_ - min_lru) : 0;
  struct Cand {
    uint64_t usage;
    int64_t layer;
    int32_t expert;
  };
  std::vector<Cand> cands;
  for (int64_t L = 0; L < n_layers; ++L) {
    const Layer& l = layers_[static_cast<size_t>(L)];
    if (!l.rec) continue;
    for (int32_t e = 0; e < l.rec->count; ++e)
      if (l.owned[static_cast<size_t>(e)]) cands.push_back({l.prior[static_cast<size_t>(e)], L, e});
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.usage > b.usage; });
  for (const Cand& cd : cands) {
    if (pin_budget == 0) break;
    Layer& l = layers_[static_cast<size_t>(cd.layer)];
    if (o.autopin && !o.pin_all && o.pin_bytes == 0 && cd.usage == 0) break;  // never pin the unused
    if (pinned_bytes_ + l.read_bytes > pin_budget) continue;
    Slot& s = new_slot(l);
    s.pinned = true;
    load(l, cd.layer, cd.expert, s);
    pinned_bytes_ += l.read_bytes;
  }

  // The rest of the budget is LRU cache, split evenly over the MoE layers;
  // at least one slot per layer however small the budget.
  const uint64_t rest = budget_ - std::min(budget_, pinned_bytes_);
  for (Layer& l : layers_) {
    if (!l.rec) continue;
    int64_t pinned_here = 0;
    for (const Slot& s : l.slots) pinned_here += s.pinned;
    const uint64_t share = moe_layers ? rest / static_cast<uint64_t>(moe_layers) : 0;
    int64_t n = static_cast<int64_t>(share / l.read_bytes);
    n = std::clamp<int64_t>(n, 1, std::max<int64_t>(1, l.n_owned - pinned_here));
    l.lru_slots = n;
    for (int64_t i = 0; i < n; ++i) new_slot(l);
    cache_bytes_ += static_cast<uint64_t>(n) * l.read_bytes;
  }
  budget_clamped_ = pinned_bytes_ + cache_bytes_ > budget_;
  } catch (...) {
    release_files();  // the destructor does not run for a throwing constructor
    throw;
  }
  prefetch_ = o.prefetch;
  if (prefetch_) {
    size_t slots = 0;
    for (const Layer& l : layers_) slots += l.slots.size();
    jobs_.resize(std::max<size_t>(1, slots));
    io_ = std::thread([this] { io_loop(); });
  }
}

DiskExpertStore::~DiskExpertStore() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (io_.joinable()) io_.join();
  release_files();
}

void DiskExpertStore::release_files() {
  for (Layer& l : layers_) {
    l.fd.reset();
    l.fd_direct.reset();
    for (Slot& s : l.slots) {
      std::free(s.buf);
      s.buf = nullptr;
    }
  }
}

DiskExpertStore::Slot& DiskExpertStore::new_slot(Layer& l) {
  Slot s;
  s.buf = static_cast<uint8_t*>(std::aligned_alloc(kExpertAlign, l.read_bytes));
  if (!s.buf) fail("out of memory allocating an expert cache slot of {} bytes", l.read_bytes);
  s.w.gate = weight_view(l.rec->gate, s.buf, "gate");
  s.w.up = weight_view(l.rec->up, s.buf, "up");
  s.w.down = weight_view(l.rec->down, s.buf, "down");
  l.slots.push_back(std::move(s));
  return l.slots.back();
}

std::string DiskExpertStore::read_expert(Layer& l, int64_t layer, int32_t expert, Slot& s) {
  const uint64_t off = l.rec->stride * static_cast<uint64_t>(expert);
  uint64_t done = 0;
  bool direct;
  {
    std::lock_guard<std::mutex> lk(mu_);  // both threads read; either may turn O_DIRECT off
    direct = l.direct;
  }
  while (done < l.read_bytes) {
    const IoResult r = try_pread_full(direct ? l.fd_direct.get() : l.fd.get(), s.buf + done, l.read_bytes - done,
                                      off + done);
    done += r.bytes;
    if (r.error == EINVAL && direct) {  // the filesystem refuses O_DIRECT reads
      std::lock_guard<std::mutex> lk(mu_);
      l.direct = direct = false;
      continue;
    }
    if (done < l.read_bytes)
      return fmt::format("{}: reading expert {} of layer {} ({} bytes at offset {}) failed: {}", l.path, expert, layer,
                         l.read_bytes, off + done, r.error ? std::strerror(r.error) : "unexpected end of file");
  }
  if (XXH3_64bits(s.buf, l.rec->blob_bytes) != l.rec->xxh[static_cast<size_t>(expert)])
    return fmt::format("{}: expert {} of layer {} at offset {}: checksum mismatch (corrupt container)", l.path, expert,
                       layer, off);
  return "";
}

void DiskExpertStore::assign(Layer& l, int32_t expert, Slot& s) {
  const int32_t idx = static_cast<int32_t>(&s - l.slots.data());
  if (s.expert >= 0 && l.slot_of[static_cast<size_t>(s.expert)] == idx) l.slot_of[static_cast<size_t>(s.expert)] = -1;
  s.expert = expert;
  l.slot_of[static_cast<size_t>(expert)] = idx;
}

void DiskExpertStore::load(Layer& l, int64_t layer, int32_t expert, Slot& s) {
  const uint64_t t0 = now_ns();
  const std::string err = read_expert(l, layer, expert, s);
  if (!err.empty()) {
    if (s.expert >= 0 && l.slot_of[static_cast<size_t>(s.expert)] == static_cast<int32_t>(&s - l.slots.data()))
      l.slot_of[static_cast<size_t>(s.expert)] = -1;
    s.expert = -1;
    fail("{}", err);
  }
  assign(l, expert, s);
  s.prefetched = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    s.error.clear();  // a failed read-ahead's error belongs to the expert it was for, not to the slot
  }
  stats_.bytes_read += l.read_bytes;
  stats_.read_ns += now_ns() - t0;
}

DiskExpertStore::Slot* DiskExpertStore::victim(Layer& l, uint64_t tick, bool wait) {
  std::unique_lock<std::mutex> lk(mu_);  // `loading` is cleared by the I/O thread
  for (;;) {
    Slot* v = nullptr;
    bool in_flight = false;
    for (Slot& s : l.slots) {
      if (s.pinned || s.last_used == tick) continue;
      if (s.loading) {
        in_flight = true;
        continue;
      }
      if (!v || s.last_used < v->last_used) v = &s;
    }
    // Every free slot is taken by a read-ahead still in flight: wait for one.
    if (v || !wait || !in_flight) return v;
    cv_.wait(lk);
  }
}

void DiskExpertStore::prefetch(int64_t layer, std::span<const int32_t> experts) {
  if (!prefetch_) return;
  Layer& l = layers_[static_cast<size_t>(layer)];
  if (!l.rec) return;
  const uint64_t tick = ++tick_;
  for (int32_t e : experts) {
    if (l.slot_of[static_cast<size_t>(e)] >= 0) continue;  // resident or already on its way
    Slot* v = victim(l, tick, false);
    if (!v) break;  // every slot is busy: the rest loads on demand
    v->last_used = tick;
    v->prefetched = true;
    assign(l, e, *v);
    {
      std::lock_guard<std::mutex> lk(mu_);
      v->loading = true;
      v->error.clear();
      jobs_[(jobs_head_ + jobs_count_++) % jobs_.size()] = Job{layer, e, v};
    }
    cv_.notify_one();
  }
}

void DiskExpertStore::io_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || jobs_count_ > 0; });
      if (stop_) return;
      job = jobs_[jobs_head_];
      jobs_head_ = (jobs_head_ + 1) % jobs_.size();
      --jobs_count_;
    }
    Layer& l = layers_[static_cast<size_t>(job.layer)];
    const uint64_t t0 = now_ns();
    std::string err = read_expert(l, job.layer, job.expert, *job.slot);
    {
      std::lock_guard<std::mutex> lk(mu_);
      job.slot->loading = false;
      job.slot->error = std::move(err);
      io_bytes_ += l.read_bytes;
      io_ns_ += now_ns() - t0;
      ++io_count_;
    }
    cv_.notify_all();
  }
}

int64_t DiskExpertStore::max_batch(int64_t layer) const { return layers_[static_cast<size_t>(layer)].lru_slots; }

void DiskExpertStore::acquire(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) {
  Layer& l = layers_[static_cast<size_t>(layer)];
  const uint64_t tick = ++tick_;
  out.clear();
  for (int32_t e : experts) {
    ++stats_.requests;
    ++l.usage[static_cast<size_t>(e)];
    int32_t si = l.slot_of[static_cast<size_t>(e)];
    if (si >= 0) {
      Slot& s = l.slots[static_cast<size_t>(si)];
      std::string err;
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (s.loading) {
          const uint64_t t0 = now_ns();
          cv_.wait(lk, [&] { return !s.loading; });
          stats_.prefetch_wait_ns += now_ns() - t0;
        }
        err.swap(s.error);
      }
      if (!err.empty()) {  // the read-ahead failed: read again here, which reports the error
        l.slot_of[static_cast<size_t>(e)] = -1;
        s.expert = -1;
        s.prefetched = false;
        si = -1;
      } else {
        ++stats_.hits;
        if (s.prefetched) ++stats_.prefetch_hits;
        s.prefetched = false;
      }
    }
    if (si < 0) {
      ++stats_.misses;
      // Least recently used unpinned slot not already handed out by this call.
      Slot* v = victim(l, tick, true);
      if (!v) fail("expert store: layer {} asked for more experts than its {} cache slots", layer, l.lru_slots);
      load(l, layer, e, *v);
      si = static_cast<int32_t>(v - l.slots.data());
    }
    Slot& s = l.slots[static_cast<size_t>(si)];
    s.last_used = tick;
    out.push_back(&s.w);
  }
}

ExpertStoreStats DiskExpertStore::stats() const {
  ExpertStoreStats s = stats_;
  std::lock_guard<std::mutex> lk(mu_);
  s.bytes_read += io_bytes_;
  s.read_ns += io_ns_;
  s.prefetched = io_count_;
  return s;
}

ExpertMemory DiskExpertStore::memory() const {
  return ExpertMemory{true, budget_, pinned_bytes_, cache_bytes_, total_bytes_};
}

std::string DiskExpertStore::describe() const {
  std::string s = fmt::format("expert cache: budget {} of {} experts on disk; {} pinned, {} LRU", gb(budget_),
                              gb(total_bytes_), gb(pinned_bytes_), gb(cache_bytes_));
  if (budget_clamped_) s += " (raised to the minimum of one expert slot per layer)";
  if (!owned_all_) s += fmt::format(" (this rank serves {} of {} experts)", n_owned_, n_experts_);
  return s;
}

bool DiskExpertStore::save_usage() const {
  Json j;
  j["format"] = "strata-usage";
  j["version"] = 1;
  j["layers"] = Json::object();
  for (size_t L = 0; L < layers_.size(); ++L) {
    const Layer& l = layers_[L];
    if (!l.rec) continue;
    std::vector<uint64_t> total(l.usage.size());
    for (size_t e = 0; e < total.size(); ++e) total[e] = l.usage[e] + l.prior[e];
    j["layers"][std::to_string(L)] = total;
  }
  try {
    write_file_atomic(dir_ + "/usage.json", j.dump() + "\n");
  } catch (const Error& e) {  // names the file and the reason
    std::fprintf(stderr, "strata: warning: %s; routing usage not saved\n", e.what());
    return false;
  }
  return true;
}

}  // namespace strata
