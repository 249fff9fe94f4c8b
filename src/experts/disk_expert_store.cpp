#include "experts/disk_expert_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/aligned.h"
#include "core/config.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/io.h"
#include "core/json.h"

namespace strata {

namespace {

std::string gb(uint64_t b) {
  return b >= 1000000000ull ? fmt::format("{:.2f} GB", static_cast<double>(b) / 1e9)
                            : fmt::format("{:.1f} MB", static_cast<double>(b) / 1e6);
}

// Whether the kernel lets this process pin `bytes` more: io_uring charges
// registered buffers to RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.
bool may_pin(uint64_t bytes, std::string* why_not) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("CapEff:", 0) == 0 && (std::strtoull(line.c_str() + 7, nullptr, 16) >> 14 & 1)) return true;
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= bytes) return true;
  *why_not = fmt::format("RLIMIT_MEMLOCK is {} and the cache's slots need {}; raise `ulimit -l`",
                         gb(static_cast<uint64_t>(rl.rlim_cur)), gb(bytes));
  return false;
}

}  // namespace

const char* io_mode_name(IoMode m) {
  switch (m) {
    case IoMode::Uring: return "uring";
    case IoMode::Pread: return "pread";
    case IoMode::Mmap: return "mmap";
  }
  return "?";
}

const char* cache_policy_name(CachePolicy p) {
  switch (p) {
    case CachePolicy::Lru: return "lru";
    case CachePolicy::Lfu: return "lfu";
  }
  return "?";
}

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
    : manifest_(files.manifest), dir_(files.dir), io_mode_(o.io), policy_(o.policy), fault_(o.fault), chunk_(o.io_chunk) {
  const int64_t n_layers = files.n_layers;
  if (o.io_depth < 1 || o.io_depth > 4096) fail("--io-depth {}: expected 1 to 4096 reads in flight", o.io_depth);
  if (chunk_ < kExpertAlign || chunk_ % kExpertAlign != 0 || chunk_ > (1u << 30))
    fail("expert read chunk of {} bytes: expected a multiple of {} up to 1 GiB", chunk_, kExpertAlign);
  try {
  if (!manifest_) fail("{}: the expert store needs a strata container", dir_);
  if (io_mode_ == IoMode::Mmap) {
    open_mapped(files);
    prefetch_ = o.prefetch;
    return;
  }
  layers_.resize(static_cast<size_t>(n_layers));
  int64_t moe_layers = 0;
  // Layers from num_hidden_layers on (the MTP layer, loaded for --spec mtp
  // and auto) sit outside the budget (docs/streaming.md "The MTP layer").
  // The model loader parsed the same config before.
  const ModelConfig cfg = parse_model_config(manifest_->config, dir_ + "/manifest.json");
  const int64_t main_layers = cfg.num_hidden_layers, side_slots = std::max<int64_t>(1, cfg.num_experts_per_tok);
  top_k_ = cfg.num_experts_per_tok;
  for (const auto& rec : manifest_->expert_layers) {
    if (rec.layer >= n_layers) continue;  // e.g. the MTP layer when it is not loaded
    Layer& l = layers_[static_cast<size_t>(rec.layer)];
    l.rec = &rec;
    l.path = dir_ + "/" + rec.file;
    l.read_bytes = (rec.blob_bytes + kExpertAlign - 1) / kExpertAlign * kExpertAlign;
    l.slot_of.assign(static_cast<size_t>(rec.count), -1);
    l.verified.assign(static_cast<size_t>(rec.count), 0);
    l.usage.assign(static_cast<size_t>(rec.count), 0);
    l.prior.assign(static_cast<size_t>(rec.count), 0);
    l.freq.assign(static_cast<size_t>(rec.count), 0);
    l.side = rec.layer >= main_layers;
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
    if (l.side) {  // outside the budget
      side_total_bytes_ += l.read_bytes * static_cast<uint64_t>(l.n_owned);
      continue;
    }
    total_bytes_ += l.read_bytes * static_cast<uint64_t>(l.n_owned);
    if (first_moe_ < 0 || rec.layer < first_moe_) first_moe_ = rec.layer;
    n_owned_ += l.n_owned;
    n_experts_ += rec.count;
    ++moe_layers;
  }

  // The caller's reader, before the pins are read through it.
  int64_t max_lru = 1;  // sized below, once the slots are known; pins read one at a time
  open_reader(demand_, 1, o);

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
  // --pin all may pin the MTP layer too, after every main-layer expert.
  budget_ = std::min(budget_, total_bytes_ + (o.pin_all ? side_total_bytes_ : 0));

  // Pinned experts: explicit (--pin), or the hottest of earlier runs (half the
  // budget), hottest first, then in layer order.
  uint64_t pin_budget = 0;
  bool have_usage = false;
  for (const Layer& l : layers_)
    if (!l.side)
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
    if (l.rec && !l.side) min_lru += l.read_bytes;
  if (!o.pin_all) pin_budget = budget_ > min_lru ? std::min(pin_budget, budget_ - min_lru) : 0;
  struct Cand {
    uint64_t usage;
    int64_t layer;
    int32_t expert;
  };
  std::vector<Cand> cands;
  for (int side = 0; side < (o.pin_all ? 2 : 1); ++side) {  // the MTP layer only with --pin all, after the rest
    const size_t from = cands.size();
    for (int64_t L = 0; L < n_layers; ++L) {
      const Layer& l = layers_[static_cast<size_t>(L)];
      if (!l.rec || l.side != (side == 1)) continue;
      for (int32_t e = 0; e < l.rec->count; ++e)
        if (l.owned[static_cast<size_t>(e)]) cands.push_back({l.prior[static_cast<size_t>(e)], L, e});
    }
    std::stable_sort(cands.begin() + static_cast<std::ptrdiff_t>(from), cands.end(),
                     [](const Cand& a, const Cand& b) { return a.usage > b.usage; });
  }
  // Learned pins take only experts clearly hotter than their layer's mean
  // (kAutopinHot times it): on a load-balanced routing every expert is near
  // the mean, and the LRU with read-ahead keeps more of what is asked for
  // than pins barely hotter than the rest (docs/streaming.md, measured).
  const bool learned = o.autopin && !o.pin_all && o.pin_bytes == 0;
  std::vector<uint64_t> layer_sum(layers_.size(), 0), layer_n(layers_.size(), 0);
  if (learned)
    for (const Cand& cd : cands) {
      layer_sum[static_cast<size_t>(cd.layer)] += cd.usage;
      ++layer_n[static_cast<size_t>(cd.layer)];
    }
  for (const Cand& cd : cands) {
    if (pin_budget == 0) break;
    Layer& l = layers_[static_cast<size_t>(cd.layer)];
    if (learned && cd.usage == 0) break;  // never pin the unused
    if (learned && static_cast<double>(cd.usage) * static_cast<double>(layer_n[static_cast<size_t>(cd.layer)]) <
                       kAutopinHot * static_cast<double>(layer_sum[static_cast<size_t>(cd.layer)]))
      continue;
    if (pinned_bytes_ + l.read_bytes > pin_budget) continue;
    Slot& s = new_slot(l);
    s.pinned = true;
    load(l, cd.layer, cd.expert, s);
    pinned_bytes_ += l.read_bytes;
  }

  // The rest of the budget is cache: at least one slot per layer however
  // small the budget. Lru splits it evenly over the MoE layers. Lfu, with the
  // routing usage of earlier runs, splits it by what each slot would save:
  // slot by slot to the layer whose next most used unpinned expert was asked
  // for most (the misses an even split would leave), evenly without usage.
  const uint64_t rest = budget_ - std::min(budget_, pinned_bytes_);
  std::vector<int64_t> want(layers_.size(), 0);
  const bool by_usage = policy_ == CachePolicy::Lfu && have_usage;
  split_by_usage_ = by_usage;
  if (by_usage) {
    // Per layer, the unpinned owned experts' usage, most used first.
    std::vector<std::vector<uint64_t>> heat(layers_.size());
    uint64_t left = rest;
    for (size_t L = 0; L < layers_.size(); ++L) {
      const Layer& l = layers_[L];
      if (!l.rec || l.side) continue;
      for (int32_t e = 0; e < l.rec->count; ++e)
        if (l.owned[static_cast<size_t>(e)] && l.slot_of[static_cast<size_t>(e)] < 0) heat[L].push_back(l.prior[static_cast<size_t>(e)]);
      std::sort(heat[L].begin(), heat[L].end(), std::greater<>());
      want[L] = 1;
      left -= std::min(left, l.read_bytes);
    }
    for (;;) {
      size_t best = layers_.size();
      for (size_t L = 0; L < layers_.size(); ++L) {
        const Layer& l = layers_[L];
        if (!l.rec || l.side || want[L] >= static_cast<int64_t>(heat[L].size()) || l.read_bytes > left) continue;
        const uint64_t h = heat[L][static_cast<size_t>(want[L])];
        if (best == layers_.size() || h > heat[best][static_cast<size_t>(want[best])]) best = L;
      }
      if (best == layers_.size()) break;
      ++want[best];
      left -= layers_[best].read_bytes;
    }
  }
  for (size_t L = 0; L < layers_.size(); ++L) {
    Layer& l = layers_[L];
    if (!l.rec) continue;
    int64_t pinned_here = 0;
    for (const Slot& s : l.slots) pinned_here += s.pinned;
    const uint64_t share = moe_layers ? rest / static_cast<uint64_t>(moe_layers) : 0;
    int64_t n = l.side ? side_slots : by_usage ? want[L] : static_cast<int64_t>(share / l.read_bytes);
    n = std::clamp<int64_t>(n, 1, std::max<int64_t>(1, l.n_owned - pinned_here));
    l.lru_slots = n;
    for (int64_t i = 0; i < n; ++i) new_slot(l);
    (l.side ? side_cache_bytes_ : cache_bytes_) += static_cast<uint64_t>(n) * l.read_bytes;
    if (l.side) side_slots_ += n;
    // Frequencies halve every few turnovers of the layer's cache (docs/streaming.md).
    l.decay_every = static_cast<uint64_t>(std::max(1, o.lfu_decay)) * static_cast<uint64_t>(n);
  }
  budget_clamped_ = pinned_bytes_ + cache_bytes_ > budget_;
  for (const Layer& l : layers_) max_lru = std::max(max_lru, l.lru_slots);
  demand_.loads.resize(static_cast<size_t>(max_lru));
  demand_.landed.reserve(static_cast<size_t>(max_lru));
  pend_.reserve(static_cast<size_t>(max_lru));
  size_t slots = 0;
  for (const Layer& l : layers_) slots += l.slots.size();
  prefetch_ = o.prefetch;
  verify_every_ = o.verify_every_read;
  ahead_auto_ = o.prefetch && o.prefetch_auto;
  plan_registration(o, prefetch_ ? 2 : 1);
  open_registration(demand_);
  if (prefetch_) {
    open_reader(ahead_, std::max<size_t>(1, slots), o);
    open_registration(ahead_);
    jobs_.resize(std::max<size_t>(1, slots));
  }
  bool direct = false, buffered = false;
  for (const Layer& l : layers_)
    if (l.rec) (l.direct ? direct : buffered) = true;
  io_desc_ = fmt::format("reads: {}, {} MiB chunks, {}", demand_.engine->describe(),
                         static_cast<double>(chunk_) / (1u << 20),
                         direct && !buffered ? "O_DIRECT"
                         : direct            ? "O_DIRECT where the filesystem allows"
                         : o.direct_io       ? "buffered (the filesystem refuses O_DIRECT)"
                                             : "buffered");
  if (o.io == IoMode::Uring && io_desc_.find("io_uring") == std::string::npos)
    io_desc_ += fmt::format(" (io_uring unavailable: {})", uring_why_);
  else if (demand_.reg)
    io_desc_ += ", registered buffers";
  else if (io_desc_.find("io_uring") != std::string::npos && !reg_why_.empty())
    io_desc_ += fmt::format(", buffers not registered ({})", reg_why_);
  io_desc_ += verify_every_ ? ", checksum at every read" : ", checksum at each expert's first read";
  } catch (...) {
    release_files();  // the destructor does not run for a throwing constructor
    throw;
  }
  if (prefetch_) io_ = std::thread([this] { io_loop(); });
}

void DiskExpertStore::open_reader(Reader& r, size_t max_loads, const ExpertCacheOptions& o) {
  if (o.io == IoMode::Uring) {
    std::string why;
    r.engine = open_uring_engine(o.io_depth, &why);
    if (!r.engine) uring_why_ = why;
  }
  if (!r.engine) r.engine = open_pread_engine(o.io_depth);
  if (o.wrap_engine) r.engine = o.wrap_engine(std::move(r.engine), &r == &ahead_);
  const size_t d = static_cast<size_t>(o.io_depth);
  r.loads.resize(max_loads);
  r.chunks.resize(d);
  r.free.reserve(d);
  r.retry.reserve(d);
  r.ops.reserve(d);
  r.done.resize(d);
  r.landed.reserve(max_loads);
}

void DiskExpertStore::plan_registration(const ExpertCacheOptions& o, int readers) {
  if (!o.registered_buffers) {
    reg_why_ = "--no-registered-buffers";
    return;
  }
  // Pins are read once, at start: only the cache's slots are read again and again.
  uint64_t bytes = 0;
  for (Layer& l : layers_)
    for (Slot& s : l.slots)
      if (!s.pinned && n_reg_ < kMaxRegisteredBuffers) {
        s.reg = static_cast<int32_t>(n_reg_++);
        bytes += l.read_bytes;
      }
  std::string why;
  if (n_reg_ > 0 && !may_pin(bytes * static_cast<uint64_t>(readers), &why)) {
    for (Layer& l : layers_)
      for (Slot& s : l.slots) s.reg = -1;
    n_reg_ = 0;
    reg_why_ = why;
  }
}

void DiskExpertStore::open_registration(Reader& r) {
  if (n_reg_ == 0) return;
  std::string why;
  if (!r.engine->reserve_buffers(n_reg_, &why)) {
    if (reg_why_.empty()) reg_why_ = why;
    return;
  }
  r.reg = true;
  r.reg_state.assign(n_reg_, 0);
}

void DiskExpertStore::register_slot(Reader& r, const Slot& s, uint64_t bytes) {
  if (!r.reg || s.reg < 0 || r.reg_state[static_cast<size_t>(s.reg)] != 0) return;
  const int e = r.engine->register_buffer(static_cast<uint32_t>(s.reg), s.buf, bytes);
  r.reg_state[static_cast<size_t>(s.reg)] = e == 0 ? 1 : 2;
  // Over RLIMIT_MEMLOCK (other pinned memory took it): the rest would be refused too.
  if (e == -ENOMEM) std::replace(r.reg_state.begin(), r.reg_state.end(), uint8_t{0}, uint8_t{2});
}

void DiskExpertStore::open_mapped(const ExpertFiles& files) {
  layers_.resize(static_cast<size_t>(files.n_layers));
  size_t max_pages = 0;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (const auto& rec : manifest_->expert_layers) {
    if (rec.layer >= files.n_layers) continue;
    Layer& l = layers_[static_cast<size_t>(rec.layer)];
    l.rec = &rec;
    l.path = dir_ + "/" + rec.file;
    l.read_bytes = (rec.blob_bytes + kExpertAlign - 1) / kExpertAlign * kExpertAlign;
    l.usage.assign(static_cast<size_t>(rec.count), 0);
    l.prior.assign(static_cast<size_t>(rec.count), 0);
    l.verified.assign(static_cast<size_t>(rec.count), 0);
    l.predicted.assign(static_cast<size_t>(rec.count), 0);
    l.fd = open_file(l.path, O_RDONLY);
    struct stat st {};
    if (::fstat(l.fd.get(), &st) != 0) fail("{}: cannot stat: {}", l.path, std::strerror(errno));
    const uint64_t need = rec.count > 0 ? rec.stride * static_cast<uint64_t>(rec.count - 1) + rec.blob_bytes : 0;
    if (static_cast<uint64_t>(st.st_size) < need)
      fail("{}: {} bytes, but its {} experts of layer {} need {} (file truncated?)", l.path, st.st_size, rec.count,
           rec.layer, need);
    l.map_len = static_cast<size_t>(st.st_size);
    void* p = l.map_len ? ::mmap(nullptr, l.map_len, PROT_READ, MAP_SHARED, l.fd.get(), 0) : nullptr;
    if (p == MAP_FAILED) fail("{}: cannot map {} bytes: {}", l.path, l.map_len, std::strerror(errno));
    l.map = static_cast<uint8_t*>(p);
    for (int32_t e = 0; e < rec.count; ++e) {
      const uint8_t* base = l.map + rec.stride * static_cast<uint64_t>(e);
      MlpWeights w;
      w.gate = weight_view(rec.gate, base, "gate");
      w.up = weight_view(rec.up, base, "up");
      w.down = weight_view(rec.down, base, "down");
      l.mapped.push_back(std::move(w));
    }
    total_bytes_ += l.read_bytes * static_cast<uint64_t>(rec.count);
    max_pages = std::max<size_t>(max_pages, l.read_bytes / page + 2);
  }
  mincore_.resize(max_pages);
  int64_t most = 0;
  for (const Layer& l : layers_)
    if (l.rec) most = std::max<int64_t>(most, l.rec->count);
  pend_.reserve(static_cast<size_t>(most));
  io_desc_ = "reads: mmap (the page cache is the cache; the RAM budget and pins do not apply)";
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
  demand_.engine.reset();  // unregisters the slots' buffers before they are freed
  ahead_.engine.reset();
  for (Layer& l : layers_) {
    l.fd.reset();
    l.fd_direct.reset();
    if (l.map) ::munmap(l.map, l.map_len);
    l.map = nullptr;
    for (Slot& s : l.slots) {
      free_streamed(s.buf);
      s.buf = nullptr;
    }
  }
}

DiskExpertStore::Slot& DiskExpertStore::new_slot(Layer& l) {
  Slot s;
  s.buf = static_cast<uint8_t*>(alloc_streamed(l.read_bytes, kExpertAlign));  // huge pages from 2 MiB on
  if (!s.buf) fail("out of memory allocating an expert cache slot of {} bytes", l.read_bytes);
  s.w.gate = weight_view(l.rec->gate, s.buf, "gate");
  s.w.up = weight_view(l.rec->up, s.buf, "up");
  s.w.down = weight_view(l.rec->down, s.buf, "down");
  l.slots.push_back(std::move(s));
  return l.slots.back();
}

int64_t DiskExpertStore::injected(const Load& ld, const Chunk& c, int64_t res) const {
  if (fault_.kind == IoFault::Kind::None || fault_.layer != ld.layer || fault_.expert != ld.expert) return res;
  if (fault_.kind == IoFault::Kind::Eio) return -EIO;
  // ShortRead: the file seems to end half-way through the expert.
  const uint64_t half = ld.l->read_bytes / 2;
  if (c.pos >= half) return 0;
  return std::min<int64_t>(res, static_cast<int64_t>(half - c.pos));
}

void DiskExpertStore::read_batch(Reader& r) {
  start_batch(r);
  while (r.in_flight > 0) step_batch(r);
}

void DiskExpertStore::start_batch(Reader& r) {
  const size_t depth = static_cast<size_t>(r.engine->depth());
  r.free.clear();
  for (size_t t = depth; t-- > 0;) r.free.push_back(static_cast<uint32_t>(t));
  r.retry.clear();
  r.landed.clear();
  r.cur = 0;
  r.in_flight = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);  // both threads read; either may turn O_DIRECT off
    for (size_t i = 0; i < r.n_loads; ++i) {
      Load& ld = r.loads[i];
      ld.next = 0;
      ld.open = 0;
      ld.done = false;
      ld.error.clear();
      ld.direct = ld.l->direct;
    }
  }
  if (r.reg)
    for (size_t i = 0; i < r.n_loads; ++i) register_slot(r, *r.loads[i].slot, r.loads[i].l->read_bytes);
  issue(r);
}

// Fills the free queue slots: retries first, then the next chunks in load
// order, and submits them. The read-ahead reader yields to demand reads:
// while one is in flight it submits nothing (its chunks already in flight
// finish), and it skips read-aheads cancelled before their first chunk.
void DiskExpertStore::issue(Reader& r) {
  r.ops.clear();
  const bool ahead = &r == &ahead_;
  std::unique_lock<std::mutex> lk(mu_, std::defer_lock);
  if (ahead) {
    lk.lock();  // against note_demand() and release()'s cancelling
    if (demand_busy_) {
      if (!r.retry.empty() || r.cur < r.n_loads) ++yields_;
      return;
    }
  }
  auto put = [&](const Chunk& c) {
    Load& ld = r.loads[c.load];
    const uint32_t tag = r.free.back();
    r.free.pop_back();
    r.chunks[tag] = c;
    int32_t buf = -1;
    if (r.reg && ld.slot->reg >= 0 && r.reg_state[static_cast<size_t>(ld.slot->reg)] == 1) {
      buf = ld.slot->reg;
      r.reg_reads.fetch_add(1, std::memory_order_relaxed);
    }
    r.ops.push_back(ReadOp{ld.direct ? ld.l->fd_direct.get() : ld.l->fd.get(), ld.slot->buf + c.pos,
                           ld.l->rec->stride * static_cast<uint64_t>(ld.expert) + c.pos, c.len, tag, buf});
    ++r.in_flight;
  };
  while (!r.free.empty() && !r.retry.empty()) {
    const Chunk c = r.retry.back();
    r.retry.pop_back();
    put(c);
  }
  while (!r.free.empty() && r.cur < r.n_loads) {
    Load& ld = r.loads[r.cur];
    if (!ld.error.empty() || ld.next >= ld.l->read_bytes || ld.cancelled) {
      ++r.cur;
      continue;
    }
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(chunk_, ld.l->read_bytes - ld.next));
    put(Chunk{static_cast<uint32_t>(r.cur), ld.next, len});
    ld.next += len;
    ++ld.open;
  }
  if (ahead) lk.unlock();
  if (&r == &demand_) note_demand(r.in_flight > 0);  // before the reads start
  if (!r.ops.empty()) r.engine->submit(r.ops);
}

void DiskExpertStore::note_demand(bool busy) {
  if (busy == demand_busy_mine_ || !prefetch_) return;
  demand_busy_mine_ = busy;
  {
    std::lock_guard<std::mutex> lk(mu_);
    demand_busy_ = busy;
  }
  if (!busy) cv_.notify_all();
}

void DiskExpertStore::step_batch(Reader& r) {
  r.landed.clear();
  if (r.in_flight == 0) return;
  const size_t n = r.engine->wait(r.done);
  for (size_t i = 0; i < n; ++i) {
    const Chunk c = r.chunks[r.done[i].tag];
    r.free.push_back(r.done[i].tag);
    --r.in_flight;
    Load& ld = r.loads[c.load];
    const int64_t res = injected(ld, c, r.done[i].res);
    const uint64_t at = ld.l->rec->stride * static_cast<uint64_t>(ld.expert) + c.pos;
    bool again = false;
    if (res == -EINVAL && ld.direct) {  // the filesystem refuses O_DIRECT reads: buffered from now on
      {
        std::lock_guard<std::mutex> lk(mu_);
        ld.l->direct = false;
      }
      for (size_t j = 0; j < r.n_loads; ++j)
        if (r.loads[j].l == ld.l) r.loads[j].direct = false;
      r.retry.push_back(c);
      again = true;
    } else if (res <= 0) {
      if (ld.error.empty())
        ld.error = fmt::format("{}: reading expert {} of layer {} ({} bytes at offset {}) failed at offset {}: {}",
                               ld.l->path, ld.expert, ld.layer, ld.l->read_bytes,
                               ld.l->rec->stride * static_cast<uint64_t>(ld.expert), at,
                               res < 0 ? std::strerror(static_cast<int>(-res))
                                       : "unexpected end of file (short read; file truncated?)");
    } else if (static_cast<uint64_t>(res) < c.len) {  // a short read: continue where it stopped
      r.retry.push_back(Chunk{c.load, c.pos + static_cast<uint64_t>(res), c.len - static_cast<uint32_t>(res)});
      again = true;
    }
    if (again) continue;  // the chunk stays open
    if (--ld.open == 0 && (ld.next >= ld.l->read_bytes || !ld.error.empty())) {
      // The checksum: at an expert's first read in this store (or every read
      // with verify_every_read); the file does not change under a run.
      std::atomic_ref<uint8_t> verified(ld.l->verified[static_cast<size_t>(ld.expert)]);
      if (ld.error.empty() && (verify_every_ || verified.load(std::memory_order_relaxed) == 0)) {
        if (XXH3_64bits(ld.slot->buf, ld.l->rec->blob_bytes) != ld.l->rec->xxh[static_cast<size_t>(ld.expert)])
          ld.error = fmt::format("{}: expert {} of layer {} at offset {}: checksum mismatch (corrupt container)",
                                 ld.l->path, ld.expert, ld.layer, ld.l->rec->stride * static_cast<uint64_t>(ld.expert));
        else
          verified.store(1, std::memory_order_relaxed);
      }
      ld.done = true;
      r.landed.push_back(c.load);
    }
  }
  issue(r);
}

void DiskExpertStore::assign(Layer& l, int32_t expert, Slot& s) {
  const int32_t idx = static_cast<int32_t>(&s - l.slots.data());
  if (s.expert >= 0 && l.slot_of[static_cast<size_t>(s.expert)] == idx) l.slot_of[static_cast<size_t>(s.expert)] = -1;
  s.expert = expert;
  l.slot_of[static_cast<size_t>(expert)] = idx;
}

// One expert into `s` through the caller's reader (pins at start).
void DiskExpertStore::load(Layer& l, int64_t layer, int32_t expert, Slot& s) {
  const uint64_t t0 = now_ns();
  demand_.loads[0] = Load{&l, layer, expert, &s, 0, false, {}, 0, false, false};
  demand_.n_loads = 1;
  read_batch(demand_);
  if (!demand_.loads[0].error.empty()) {
    if (s.expert >= 0 && l.slot_of[static_cast<size_t>(s.expert)] == static_cast<int32_t>(&s - l.slots.data()))
      l.slot_of[static_cast<size_t>(s.expert)] = -1;
    s.expert = -1;
    fail("{}", demand_.loads[0].error);
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

DiskExpertStore::Slot* DiskExpertStore::victim(Layer& l, uint64_t tick, uint64_t keep_from) {
  std::unique_lock<std::mutex> lk(mu_);  // `loading` is cleared by the I/O thread
  // Chosen from the slots' logical state only (pins, ticks, frequencies),
  // never from whether a read-ahead has landed yet: the cache's contents must
  // not depend on the I/O thread's timing.
  Slot* v = nullptr;
  for (Slot& s : l.slots) {
    if (s.pinned || s.last_used == tick || (keep_from > 0 && s.last_used >= keep_from)) continue;
    if (!v) {
      v = &s;
      continue;
    }
    if (policy_ == CachePolicy::Lfu) {  // an empty slot first, then the least frequently used
      const int64_t fs = s.expert < 0 ? int64_t{-1} : int64_t{l.freq[static_cast<size_t>(s.expert)]};
      const int64_t fv = v->expert < 0 ? int64_t{-1} : int64_t{l.freq[static_cast<size_t>(v->expert)]};
      if (fs != fv) {
        if (fs < fv) v = &s;
        continue;
      }
    }
    if (s.last_used < v->last_used) v = &s;
  }
  if (!v || !v->loading) return v;
  // The victim still holds a read-ahead that has not landed (one its layer did
  // not ask for). It leaves as a landed one would: its bytes count as wasted
  // once, whether or not they were read.
  if (v->fresh) {
    v->fresh = false;
    l.wasted_bytes += l.read_bytes;
  }
  if (unqueue_ahead(*v)) {  // nothing of it submitted yet: not read at all
    cancel_ahead(l, *v);
    return v;
  }
  // Partly or wholly in flight: wait for it to land (no read may still write
  // into the slot). The read-ahead reader must not hold back for demand reads
  // meanwhile, or this would wait for itself.
  demand_busy_ = false;
  cv_.notify_all();
  cv_.wait(lk, [&] { return !v->loading; });
  demand_busy_ = demand_busy_mine_;
  return v;
}

void DiskExpertStore::prefetch(int64_t layer, std::span<const int32_t> experts) {
  if (!prefetch_ || !ahead_on_) return;
  Layer& l = layers_[static_cast<size_t>(layer)];
  if (!l.rec) return;
  if (l.map) {  // the kernel reads ahead into the page cache
    for (int32_t e : experts) {
      ::madvise(l.map + l.rec->stride * static_cast<uint64_t>(e), l.read_bytes, MADV_WILLNEED);
      if (!l.predicted[static_cast<size_t>(e)]) ++l.prefetched;
      l.predicted[static_cast<size_t>(e)] = 1;
    }
    return;
  }
  const uint64_t tick = ++tick_;
  for (int32_t e : experts) {
    if (l.slot_of[static_cast<size_t>(e)] >= 0) continue;  // resident or already on its way
    // Only a free or least recently used cache slot: read-ahead never goes
    // past the budget, and never evicts what this layer's last request used
    // (docs/streaming.md "Read-ahead keeps the last request's experts").
    Slot* v = victim(l, tick, l.last_request);
    if (!v) break;  // every slot is pinned or used by this step: the rest loads on demand
    drop_fresh(l, *v);
    v->last_used = tick;
    v->prefetched = true;
    v->fresh = true;
    assign(l, e, *v);
    {
      std::lock_guard<std::mutex> lk(mu_);
      v->loading = true;
      v->error.clear();
      jobs_[(jobs_head_ + jobs_count_++) % jobs_.size()] = Job{layer, e, v};
      // Counted when issued, not when done: the same run counts the same
      // read-aheads however fast the disk is (serve and run agree).
      ++io_count_;
      ++l.prefetched;
    }
    cv_.notify_one();
  }
}

// Takes every queued read-ahead at once and reads them together, each
// slot handed over as its expert lands. While demand reads are in flight
// issue() submits nothing: with nothing of its own in flight the thread
// waits for them to finish.
void DiskExpertStore::io_loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || jobs_count_ > 0; });
      if (stop_) return;
      ahead_.n_loads = 0;
      while (jobs_count_ > 0 && ahead_.n_loads < ahead_.loads.size()) {
        const Job job = jobs_[jobs_head_];
        jobs_head_ = (jobs_head_ + 1) % jobs_.size();
        --jobs_count_;
        Load& ld = ahead_.loads[ahead_.n_loads++];
        ld.l = &layers_[static_cast<size_t>(job.layer)];
        ld.layer = job.layer;
        ld.expert = job.expert;
        ld.slot = job.slot;
        ld.next = 0;  // nothing issued: release() may still cancel it
        ld.cancelled = false;
      }
    }
    const uint64_t t0 = now_ns();
    start_batch(ahead_);
    for (;;) {
      if (ahead_.in_flight > 0) {
        step_batch(ahead_);
        if (ahead_.landed.empty()) continue;
        {
          std::lock_guard<std::mutex> lk(mu_);
          for (uint32_t i : ahead_.landed) {
            Load& ld = ahead_.loads[i];
            ld.slot->loading = false;
            ld.slot->error = std::move(ld.error);
            ld.error.clear();
            io_bytes_ += ld.l->read_bytes;
          }
        }
        cv_.notify_all();
        continue;
      }
      if (ahead_.cur >= ahead_.n_loads && ahead_.retry.empty()) break;
      {  // held back for demand reads
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !demand_busy_; });
        if (stop_) return;
      }
      issue(ahead_);
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      io_ns_ += now_ns() - t0;
    }
  }
}

void DiskExpertStore::cancel_ahead(Layer& l, Slot& s) {
  s.last_used = 0;  // empty: the next victim under either policy
  s.loading = false;
  s.fresh = false;
  s.prefetched = false;
  s.error.clear();
  if (s.expert >= 0 && l.slot_of[static_cast<size_t>(s.expert)] == static_cast<int32_t>(&s - l.slots.data()))
    l.slot_of[static_cast<size_t>(s.expert)] = -1;
  s.expert = -1;
}

void DiskExpertStore::drop_fresh(Layer& l, Slot& s) {
  if (!s.fresh) return;
  s.fresh = false;
  std::lock_guard<std::mutex> lk(mu_);
  l.wasted_bytes += l.read_bytes;
}

bool DiskExpertStore::unqueue_ahead(Slot& s) {
  for (size_t i = 0; i < jobs_count_; ++i)
    if (jobs_[(jobs_head_ + i) % jobs_.size()].slot == &s) {
      for (size_t j = i; j + 1 < jobs_count_; ++j)
        jobs_[(jobs_head_ + j) % jobs_.size()] = jobs_[(jobs_head_ + j + 1) % jobs_.size()];
      --jobs_count_;
      return true;
    }
  for (size_t i = 0; i < ahead_.n_loads; ++i) {
    Load& ld = ahead_.loads[i];
    if (ld.slot == &s && !ld.cancelled && ld.next == 0 && s.loading) {
      ld.cancelled = true;
      return true;
    }
  }
  return false;
}

// The layer's request has been served: its read-aheads that it did not use
// are stale and their bytes count as wasted. They stay cached, queued ones are
// still read: dropping only those not yet submitted would make the cache's
// contents (and so hit rates) depend on how far the I/O thread got.
void DiskExpertStore::release(int64_t layer) {
  if (!prefetch_) return;
  Layer& l = layers_[static_cast<size_t>(layer)];
  if (!l.rec || l.map) return;
  for (Slot& s : l.slots) drop_fresh(l, s);
}

int64_t DiskExpertStore::max_batch(int64_t layer) const {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  return l.map ? INT64_MAX : l.lru_slots;
}

void DiskExpertStore::acquire_mapped(Layer& l, int64_t layer, std::span<const int32_t> experts,
                                     std::vector<const MlpWeights*>& out) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (int32_t e : experts) {
    const size_t ei = static_cast<size_t>(e);
    ++stats_.requests;
    ++l.requests;
    ++l.usage[ei];
    const uint64_t off = l.rec->stride * static_cast<uint64_t>(e);
    // A hit when every page of the expert is in the page cache.
    uint64_t absent = 0;
    const size_t pages = (l.read_bytes + page - 1) / page;
    if (pages <= mincore_.size() && ::mincore(l.map + off, l.read_bytes, mincore_.data()) == 0)
      for (size_t i = 0; i < pages; ++i) absent += (mincore_[i] & 1) ? 0 : page;
    if (absent == 0) {
      ++stats_.hits;
      if (l.predicted[ei]) {
        ++stats_.prefetch_hits;
        ++l.prefetch_hits;
      }
    } else {
      ++stats_.misses;
      ++l.misses;
      stats_.bytes_read += absent;
    }
    l.predicted[ei] = 0;
    if (!l.verified[ei]) {  // checked once, when first used (a page fault reads what is missing)
      const uint64_t t0 = now_ns();
      if (XXH3_64bits(l.map + off, l.rec->blob_bytes) != l.rec->xxh[ei])
        fail("{}: expert {} of layer {} at offset {}: checksum mismatch (corrupt container)", l.path, e, layer, off);
      l.verified[ei] = 1;
      stats_.read_ns += now_ns() - t0;
    }
    out.push_back(&l.mapped[ei]);
  }
}

void DiskExpertStore::acquire(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) {
  begin(layer, experts, out);
  for (size_t i = 0; i < experts.size(); ++i) next();
}

void DiskExpertStore::ahead_step(bool one_row) {
  const uint64_t now = now_ns();
  if (ahead_last_ns_ && ahead_last_one_row_ && !ahead_skip_ && ahead_phase_ < 2)
    (ahead_phase_ == 0 ? ahead_on_ns_ : ahead_off_ns_).push_back(now - ahead_last_ns_);
  ahead_last_ns_ = now;
  ahead_last_one_row_ = one_row;
  ahead_skip_ = false;
  if (!one_row || --ahead_left_ > 0) return;
  const auto median = [](std::vector<uint64_t>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return static_cast<double>(v[v.size() / 2]);
  };
  const bool was = ahead_on_;
  if (ahead_phase_ == 0) {  // timed with read-ahead on; now without
    ahead_phase_ = 1;
    ahead_on_ = false;
    ahead_left_ = kAheadWindow;
  } else if (ahead_phase_ == 1) {  // both timed: keep the faster
    const bool off_wins = !ahead_on_ns_.empty() && !ahead_off_ns_.empty() &&
                          median(ahead_off_ns_) < (1.0 - kAheadMargin) * median(ahead_on_ns_);
    ahead_on_ = !off_wins;
    ++(off_wins ? stats_.prefetch_auto_off : stats_.prefetch_auto_on);
    ahead_phase_ = 2;
    ahead_left_ = kAheadExploit;
  } else {  // time both again: the disk, the cache and the load change
    ahead_phase_ = 0;
    ahead_on_ = true;
    ahead_left_ = kAheadWindow;
    ahead_on_ns_.clear();
    ahead_off_ns_.clear();
  }
  ahead_skip_ = ahead_on_ != was;
}

void DiskExpertStore::begin(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) {
  if (ahead_auto_ && layer == first_moe_) {
    ahead_step(static_cast<int64_t>(experts.size()) <= top_k_);
    if (!ahead_on_) ++stats_.prefetch_off_steps;
  }
  Layer& l = layers_[static_cast<size_t>(layer)];
  out.clear();
  pend_.clear();
  pend_l_ = &l;
  pend_layer_ = layer;
  pend_left_ = experts.size();
  if (l.map) {  // mapped: every expert is "ready" (a page fault reads what is missing)
    acquire_mapped(l, layer, experts, out);
    for (int32_t e : experts) pend_.push_back(Pending{e, nullptr, From::Slot, 0, false});
    return;
  }
  const uint64_t tick = ++tick_;
  pend_tick_ = tick;
  l.last_request = tick;
  // 1. Hits keep their slots: mark them used before any victim is chosen.
  for (int32_t e : experts) {
    ++stats_.requests;
    ++l.requests;
    ++l.usage[static_cast<size_t>(e)];
    if (policy_ == CachePolicy::Lfu) {
      ++l.freq[static_cast<size_t>(e)];
      if (++l.freq_requests >= l.decay_every) {
        for (uint32_t& f : l.freq) f /= 2;
        l.freq_requests = 0;
      }
    }
    const int32_t si = l.slot_of[static_cast<size_t>(e)];
    if (si >= 0) {
      l.slots[static_cast<size_t>(si)].last_used = tick;
      l.slots[static_cast<size_t>(si)].fresh = false;
    }
  }
  // 2. Every miss gets a slot, and all of them are read together.
  demand_.n_loads = 0;
  for (int32_t e : experts) {
    const int32_t si = l.slot_of[static_cast<size_t>(e)];
    Slot* v = nullptr;
    if (si >= 0) {
      Slot& s = l.slots[static_cast<size_t>(si)];
      bool queued = false;
      if (prefetch_ && s.prefetched) {
        std::lock_guard<std::mutex> lk(mu_);
        // A read-ahead of it not submitted yet: read it with the demand
        // reads instead of after them (it still counts as a read-ahead hit).
        queued = s.loading && unqueue_ahead(s);
        if (queued) cancel_ahead(l, s);
      }
      if (!queued) {
        pend_.push_back(Pending{e, &s, From::Slot, 0, false});
        continue;
      }
      v = &s;
      ++stats_.hits;
      ++stats_.prefetch_hits;
      ++l.prefetch_hits;
    } else {
      v = victim(l, tick);
      if (!v) fail("expert store: layer {} asked for more experts than its {} cache slots", layer, l.lru_slots);
      drop_fresh(l, *v);
      ++stats_.misses;
      ++l.misses;
    }
    v->last_used = tick;
    if (v->expert >= 0 && l.slot_of[static_cast<size_t>(v->expert)] == static_cast<int32_t>(v - l.slots.data()))
      l.slot_of[static_cast<size_t>(v->expert)] = -1;
    v->expert = -1;
    v->prefetched = false;
    pend_.push_back(Pending{e, v, From::Read, static_cast<uint32_t>(demand_.n_loads), false});
    demand_.loads[demand_.n_loads++] = Load{&l, layer, e, v, 0, false, {}, 0, false, false};
  }
  for (const Pending& p : pend_) out.push_back(&p.slot->w);
  if (demand_.n_loads > 0) start_batch(demand_);
}

// A demand read that landed: the slot now holds the expert.
void DiskExpertStore::land(Pending& p) {
  Load& ld = demand_.loads[p.load];
  assign(*pend_l_, p.expert, *p.slot);
  p.slot->read_at = pend_tick_;
  {
    std::lock_guard<std::mutex> lk(mu_);
    p.slot->error.clear();
  }
  stats_.bytes_read += ld.l->read_bytes;
}

void DiskExpertStore::fail_pending(const std::string& error) {
  const std::string msg = error;  // the loads' strings may change below
  while (demand_.in_flight > 0) step_batch(demand_);  // no read may still write into a slot
  for (Pending& p : pend_)
    if (p.from == From::Read && !p.served && demand_.loads[p.load].done && demand_.loads[p.load].error.empty()) {
      land(p);
      p.served = true;
    }
  pend_left_ = 0;
  fail("{}", msg);
}

size_t DiskExpertStore::ready() const {
  if (pend_left_ == 0 || pend_l_->map) return pend_left_;
  size_t n = 0;
  std::lock_guard<std::mutex> lk(mu_);
  for (const Pending& p : pend_) {
    if (p.served) continue;
    if (p.from == From::Slot ? !p.slot->loading && p.slot->error.empty()
                             : demand_.loads[p.load].done && demand_.loads[p.load].error.empty())
      ++n;
  }
  return n;
}

size_t DiskExpertStore::next() {
  if (pend_left_ == 0) fail("expert store: next() called more often than experts were asked for");
  Layer& l = *pend_l_;
  if (l.map) {
    for (size_t i = 0; i < pend_.size(); ++i)
      if (!pend_[i].served) {
        pend_[i].served = true;
        --pend_left_;
        return i;
      }
  }
  const uint64_t t0 = now_ns();
  for (;;) {
    bool waiting_on_slot = false;
    // Resident experts and finished read-aheads first.
    for (size_t i = 0; i < pend_.size(); ++i) {
      Pending& p = pend_[i];
      if (p.served || p.from != From::Slot) continue;
      std::string err;
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (p.slot->loading) {
          waiting_on_slot = true;
          continue;
        }
        err.swap(p.slot->error);
      }
      if (!err.empty()) {
        // The read-ahead failed: read it again with the demand reads, which
        // reports the error (or succeeds if the disk recovered).
        l.slot_of[static_cast<size_t>(p.expert)] = -1;
        p.slot->expert = -1;
        p.slot->prefetched = false;
        ++stats_.misses;
        ++l.misses;
        if (demand_.n_loads >= demand_.loads.size())
          fail("expert store: layer {} asked for more experts than its {} cache slots", pend_layer_, l.lru_slots);
        Load& ld = demand_.loads[demand_.n_loads];
        ld = Load{&l, pend_layer_, p.expert, p.slot, 0, false, {}, 0, false, false};
        {
          std::lock_guard<std::mutex> lk(mu_);
          ld.direct = l.direct;
        }
        p.from = From::Read;
        p.load = static_cast<uint32_t>(demand_.n_loads++);
        if (demand_.n_loads == 1)
          start_batch(demand_);  // the first read of this call
        else
          issue(demand_);  // joins the reads of this call (the cursor has not passed it)
        continue;
      }
      ++stats_.hits;
      if (p.slot->prefetched) {
        ++stats_.prefetch_hits;
        ++l.prefetch_hits;
      }
      p.slot->prefetched = false;
      p.served = true;
      --pend_left_;
      return i;
    }
    // Demand reads that have landed.
    for (size_t i = 0; i < pend_.size(); ++i) {
      Pending& p = pend_[i];
      if (p.served || p.from != From::Read || !demand_.loads[p.load].done) continue;
      if (!demand_.loads[p.load].error.empty()) fail_pending(demand_.loads[p.load].error);
      land(p);
      p.served = true;
      --pend_left_;
      stats_.read_ns += now_ns() - t0;
      return i;
    }
    if (demand_.in_flight > 0) {
      step_batch(demand_);
      continue;
    }
    if (!waiting_on_slot) fail("expert store: nothing left to wait for in layer {}", pend_layer_);
    std::unique_lock<std::mutex> lk(mu_);
    const uint64_t tw = now_ns();
    cv_.wait(lk, [&] {
      for (const Pending& p : pend_)
        if (!p.served && p.from == From::Slot && !p.slot->loading) return true;
      return false;
    });
    stats_.prefetch_wait_ns += now_ns() - tw;
  }
}

ExpertStoreStats DiskExpertStore::stats() const {
  ExpertStoreStats s = stats_;
  std::lock_guard<std::mutex> lk(mu_);
  s.bytes_read += io_bytes_;
  s.read_ns += io_ns_;
  if (io_mode_ != IoMode::Mmap) s.prefetched = io_count_;
  s.prefetch_yields = yields_;
  s.registered_reads = demand_.reg_reads.load(std::memory_order_relaxed) + ahead_.reg_reads.load(std::memory_order_relaxed);
  for (size_t L = 0; L < layers_.size(); ++L) {
    const Layer& l = layers_[L];
    if (!l.rec) continue;
    s.layers.push_back(
        {static_cast<int64_t>(L), l.requests, l.misses, l.prefetched, l.prefetch_hits, l.wasted_bytes});
    if (io_mode_ == IoMode::Mmap) s.prefetched += l.prefetched;
    s.prefetch_wasted_bytes += l.wasted_bytes;
  }
  return s;
}

ExpertIo DiskExpertStore::io() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {stats_.bytes_read + io_bytes_, stats_.read_ns + io_ns_};
}

// On the caller's thread, like acquire(): slots change hands only there.
ExpertMemory DiskExpertStore::memory() const {
  uint64_t used = 0;
  for (const Layer& l : layers_)
    for (const Slot& s : l.slots)
      if (s.expert >= 0 && !s.pinned) used += l.read_bytes;
  return ExpertMemory{true, budget_, pinned_bytes_, cache_bytes_ + side_cache_bytes_, total_expert_bytes(),
                      io_mode_ == IoMode::Mmap ? "mmap" : cache_policy_name(policy_), used};
}

std::string DiskExpertStore::describe() const {
  const char* ahead = !prefetch_ ? "off" : ahead_auto_ ? "auto" : "on";
  if (io_mode_ == IoMode::Mmap)
    return fmt::format("expert cache: {} experts on disk; {}; read-ahead {}", gb(total_bytes_), io_desc_, ahead);
  std::string s = fmt::format("expert cache: budget {} of {} experts on disk; {} pinned, {} {}", gb(budget_),
                              gb(total_expert_bytes()), gb(pinned_bytes_), gb(cache_bytes_),
                              policy_ == CachePolicy::Lru ? "LRU"
                              : split_by_usage_             ? "LFU (split over layers by usage)"
                                                            : "LFU");
  if (budget_clamped_) s += " (raised to the minimum of one expert slot per layer)";
  if (!owned_all_) s += fmt::format(" (this rank serves {} of {} experts)", n_owned_, n_experts_);
  if (side_slots_)
    s += fmt::format("; MTP layer: {} slots ({}) beyond the budget", side_slots_, gb(side_cache_bytes_));
  return s + "; " + io_desc_ + "; read-ahead " + ahead;
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
