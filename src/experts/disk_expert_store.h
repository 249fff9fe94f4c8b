// Routed experts read from a container on demand, through a RAM cache: a
// per-layer LRU whose size follows a RAM budget, plus pinned experts that
// never leave (chosen explicitly or from the routing usage of earlier runs).
// Each expert is one aligned read (O_DIRECT where the filesystem allows),
// checked against its XXH3-64 before use.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/io.h"
#include "experts/expert_store.h"
#include "experts/store_options.h"
#include "format/container.h"

namespace strata {




class DiskExpertStore final : public ExpertStore {
 public:
  DiskExpertStore(const ExpertFiles& files, const ExpertCacheOptions& o);
  ~DiskExpertStore() override;
  DiskExpertStore(const DiskExpertStore&) = delete;
  DiskExpertStore& operator=(const DiskExpertStore&) = delete;

  void acquire(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) override;
  void release(int64_t layer) override {}
  int64_t max_batch(int64_t layer) const override;
  bool wants_prefetch() const override { return prefetch_; }
  void prefetch(int64_t layer, std::span<const int32_t> experts) override;

  ExpertStoreStats stats() const override;
  ExpertMemory memory() const override;
  uint64_t budget_bytes() const { return budget_; }
  uint64_t pinned_bytes() const { return pinned_bytes_; }
  uint64_t total_expert_bytes() const { return total_bytes_; }
  uint64_t cache_capacity_bytes() const { return cache_bytes_; }
  // One line for start-up: budget, pinned, cache capacity.
  std::string describe() const override;
  // Adds this run's routing usage to DIR/usage.json (temp file + rename).
  // Returns false (with a warning on stderr) if it cannot be written.
  bool save_usage() const override;

 private:
  struct Slot {
    uint8_t* buf = nullptr;
    int32_t expert = -1;
    uint64_t last_used = 0;
    bool pinned = false;
    // A read-ahead in flight: set by the caller's thread, cleared by the I/O
    // thread under mu_ (with `error` if the read failed).
    bool loading = false;
    bool prefetched = false;  // filled by a read-ahead not yet asked for
    std::string error;
    MlpWeights w;  // views into buf
  };
  struct Layer {
    const ExpertLayerRecord* rec = nullptr;
    std::string path;
    Fd fd;
    Fd fd_direct;  // O_DIRECT; kept open (and closed with the store) if reads fall back to fd
    bool direct = false;
    uint64_t read_bytes = 0;  // blob rounded up to 4096
    std::vector<Slot> slots;
    std::vector<int32_t> slot_of;   // expert -> slot, -1 when not resident
    std::vector<uint64_t> usage;    // this run
    std::vector<uint64_t> prior;    // from usage.json
    int64_t lru_slots = 0;
    std::vector<uint8_t> owned;     // 1: this process serves the expert (experts over MPI)
    int64_t n_owned = 0;
  };

  // Reads expert `expert` into s.buf and verifies it; returns "" or an error.
  std::string read_expert(Layer& l, int64_t layer, int32_t expert, Slot& s);
  void load(Layer& l, int64_t layer, int32_t expert, Slot& s);
  void assign(Layer& l, int32_t expert, Slot& s);
  // Least recently used unpinned slot not used at `tick`; with `wait`, waits
  // for a read-ahead to finish rather than give up while one is in flight.
  Slot* victim(Layer& l, uint64_t tick, bool wait);
  Slot& new_slot(Layer& l);
  void io_loop();
  void release_files();  // closes files, frees slot buffers

  std::shared_ptr<const Manifest> manifest_;
  std::string dir_;
  std::vector<Layer> layers_;  // indexed by layer; rec == nullptr for dense layers
  ExpertStoreStats stats_;
  uint64_t tick_ = 0;
  uint64_t budget_ = 0, pinned_bytes_ = 0, total_bytes_ = 0, cache_bytes_ = 0;
  bool budget_clamped_ = false;
  bool owned_all_ = true;
  int64_t n_owned_ = 0, n_experts_ = 0;

  // The I/O thread and its queue of read-aheads (layer, expert, slot).
  bool prefetch_ = false;
  std::thread io_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Job {
    int64_t layer;
    int32_t expert;
    Slot* slot;
  };
  // Queued read-aheads, a ring sized to every cache slot once (a slot is
  // in at most one read-ahead): queueing one never allocates.
  std::vector<Job> jobs_;
  size_t jobs_head_ = 0, jobs_count_ = 0;
  bool stop_ = false;
  uint64_t io_bytes_ = 0, io_ns_ = 0, io_count_ = 0;  // under mu_
};

// MemAvailable from /proc/meminfo, 0 if unknown.
uint64_t available_memory_bytes();

}  // namespace strata
