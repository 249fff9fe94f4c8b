// Routed experts read from a container on demand, through a RAM cache: a
// per-layer LRU whose size follows a RAM budget, plus pinned experts that
// never leave (chosen explicitly, or the clearly hot experts of earlier runs'
// routing usage).
// Reads go through a ReadEngine (io_uring, or a pread pool): each expert is
// read in chunks with several reads in flight (O_DIRECT where the filesystem
// allows), all the misses of one acquire() together, and checked against its
// XXH3-64 before use. Read-ahead runs on its own thread with its own engine
// and yields to demand reads: while any demand read is in flight it submits
// nothing new; read-aheads a layer's request did not use are counted as
// wasted bytes at release() and stay cached (never dropped: whether one was
// still queued depends on timing, and the cache's contents must not).
// The MTP layer (layers from the config's num_hidden_layers on, loaded for
// --spec mtp and auto) takes no share of the budget and no autopin or
// --pin GB: it gets top-k (num_experts_per_tok) cache slots on top of the
// budget, so loading it leaves the main layers' pins and slots exactly as
// without it; --pin all pins it too, after every main-layer expert.
// With IoMode::Mmap the files are mapped instead: the page cache is the cache
// and read-ahead is madvise(WILLNEED) (docs/streaming.md).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/io.h"
#include "experts/read_engine.h"
#include "experts/expert_store.h"
#include "experts/store_options.h"
#include "format/container.h"

namespace strata {
class DiskExpertStore final : public ExpertStore {
 public:
  DiskExpertStore(const ExpertFiles& files, const ExpertCacheOptions& o);
  ~DiskExpertStore() override;
  // Learned pins (autopin from usage.json) take an expert only when earlier
  // runs asked for it at least this many times as often as the mean expert
  // of its layer.
  static constexpr double kAutopinHot = 2.0;
  DiskExpertStore(const DiskExpertStore&) = delete;
  DiskExpertStore& operator=(const DiskExpertStore&) = delete;

  void acquire(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) override;
  void begin(int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out) override;
  size_t next() override;
  size_t ready() const override;
  void release(int64_t layer) override;
  int64_t max_batch(int64_t layer) const override;
  bool wants_prefetch() const override { return prefetch_ && ahead_on_; }
  void prefetch(int64_t layer, std::span<const int32_t> experts) override;

  ExpertStoreStats stats() const override;
  ExpertIo io() const override;
  ExpertMemory memory() const override;
  uint64_t budget_bytes() const { return budget_; }
  uint64_t pinned_bytes() const { return pinned_bytes_; }
  uint64_t total_expert_bytes() const { return total_bytes_ + side_total_bytes_; }  // every loaded layer's
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
    int32_t reg = -1;  // its registered-buffer index in each reader's engine; -1: none (pins, past the limit)
    uint64_t last_used = 0;
    uint64_t read_at = 0;  // the acquire() tick that read it on demand
    bool pinned = false;
    // A read-ahead in flight: set by the caller's thread, cleared by the I/O
    // thread under mu_ (with `error` if the read failed).
    bool loading = false;
    bool prefetched = false;  // filled by a read-ahead not yet asked for
    // A read-ahead that the request of its layer has not asked for yet: at
    // that layer's release() its bytes count as wasted.
    bool fresh = false;
    std::string error;
    MlpWeights w;  // views into buf
  };
  struct Layer {
    const ExpertLayerRecord* rec = nullptr;
    std::string path;
    Fd fd;
    Fd fd_direct;  // O_DIRECT; kept open (and closed with the store) if reads fall back to fd
    bool direct = false;      // under mu_: the I/O thread may turn it off
    uint64_t read_bytes = 0;  // blob rounded up to 4096
    std::vector<Slot> slots;
    std::vector<int32_t> slot_of;   // expert -> slot, -1 when not resident
    std::vector<uint64_t> usage;    // this run
    std::vector<uint64_t> prior;    // from usage.json
    // CachePolicy::Lfu: requests per expert, halved every decay_every requests of the layer.
    std::vector<uint32_t> freq;
    uint64_t freq_requests = 0, decay_every = 0;
    int64_t lru_slots = 0;
    uint64_t last_request = 0;  // the tick of the layer's last begin()
    bool side = false;  // the MTP layer: outside the budget and the pins
    std::vector<uint8_t> owned;     // 1: this process serves the expert (experts over MPI)
    int64_t n_owned = 0;
    // Counters for the per-layer read-ahead report (prefetched under mu_).
    uint64_t requests = 0, misses = 0, prefetch_hits = 0, prefetched = 0;
    uint64_t wasted_bytes = 0;  // under mu_
    // IoMode::Mmap: the mapped file, each expert's views into it, which
    // experts were checked and which a read-ahead asked for.
    uint8_t* map = nullptr;
    size_t map_len = 0;
    std::vector<MlpWeights> mapped;
    // verified: the expert's checksum matched once (every I/O mode; set by
    // the reader that landed it, read through std::atomic_ref).
    std::vector<uint8_t> verified, predicted;
  };
  // One expert read: chunks of it go through a reader's engine.
  struct Load {
    Layer* l = nullptr;
    int64_t layer = 0;
    int32_t expert = 0;
    Slot* slot = nullptr;
    uint64_t next = 0;  // bytes of it issued so far
    bool direct = false;
    std::string error;
    uint32_t open = 0;  // chunks in flight or queued for a retry
    bool done = false;  // every byte landed (and was checked) or it failed
    bool cancelled = false;  // a read-ahead dropped before any chunk was issued (under mu_)
  };
  // One chunk in flight (the engine's tag is its index).
  struct Chunk {
    uint32_t load = 0;
    uint64_t pos = 0;  // within the expert
    uint32_t len = 0;
  };
  // A thread's engine and its scratch, sized at start (no allocation per read).
  struct Reader {
    std::unique_ptr<ReadEngine> engine;
    std::vector<Load> loads;
    size_t n_loads = 0;
    std::vector<Chunk> chunks;     // indexed by tag
    std::vector<uint32_t> free;    // free tags
    std::vector<Chunk> retry;      // continuations of short reads, EINVAL retries
    std::vector<ReadOp> ops;
    std::vector<ReadDone> done;
    size_t cur = 0, in_flight = 0;  // the next load to issue chunks of; chunks in the engine
    std::vector<uint32_t> landed;   // loads finished by the last step()
    // Registered buffers: per Slot::reg, 0 not yet, 1 registered, 2 refused.
    // A slot is registered by its first read through this reader.
    bool reg = false;
    std::vector<uint8_t> reg_state;
    std::atomic<uint64_t> reg_reads{0};  // chunks read into registered buffers (stats() reads it)
  };

  void open_reader(Reader& r, size_t max_loads, const ExpertCacheOptions& o);
  // Numbers the unpinned slots for registration and decides whether the
  // engines may register them (RLIMIT_MEMLOCK); reasons go to reg_why_.
  void plan_registration(const ExpertCacheOptions& o, int readers);
  void open_registration(Reader& r);
  // Registers the slot's buffer with r's engine at its first read (outside mu_).
  void register_slot(Reader& r, const Slot& s, uint64_t bytes);
  // Reads r.loads[0, r.n_loads) with up to depth() chunks in flight and
  // verifies each; a failed load keeps its message in `error`.
  void read_batch(Reader& r);
  // The same in steps: start() issues the first chunks; each step() waits
  // for some completions, issues more, and lists in r.landed the loads that
  // finished (checked, or failed). Done when r.in_flight == 0 after a step.
  void start_batch(Reader& r);
  void step_batch(Reader& r);
  void issue(Reader& r);
  // Applies the test hook to one completion.
  int64_t injected(const Load& ld, const Chunk& c, int64_t res) const;
  void load(Layer& l, int64_t layer, int32_t expert, Slot& s);
  void assign(Layer& l, int32_t expert, Slot& s);
  // The policy's victim: the least recently (Lru) or least frequently (Lfu,
  // then least recently) used unpinned slot not used at `tick`, chosen from
  // logical state only; a read-ahead still in it is dequeued or waited for.
  // keep_from > 0 (read-ahead): slots used at or after that tick stay too.
  Slot* victim(Layer& l, uint64_t tick, uint64_t keep_from = 0);
  Slot& new_slot(Layer& l);
  void io_loop();
  // Under mu_: the read-ahead in `s` is dropped before any of it was read.
  void cancel_ahead(Layer& l, Slot& s);
  // A read-ahead slot leaves without its layer's request having used it.
  void drop_fresh(Layer& l, Slot& s);
  // The read-ahead for `s` if no chunk of it was submitted yet: takes it off
  // the queue (under mu_) and returns true.
  bool unqueue_ahead(Slot& s);
  void release_files();  // closes files, frees slot buffers, unmaps
  void open_mapped(const ExpertFiles& files);
  void acquire_mapped(Layer& l, int64_t layer, std::span<const int32_t> experts, std::vector<const MlpWeights*>& out);

  std::shared_ptr<const Manifest> manifest_;
  std::string dir_;
  std::vector<Layer> layers_;  // indexed by layer; rec == nullptr for dense layers
  ExpertStoreStats stats_;
  uint64_t tick_ = 0;
  uint64_t budget_ = 0, pinned_bytes_ = 0, total_bytes_ = 0, cache_bytes_ = 0;  // main layers
  uint64_t side_total_bytes_ = 0, side_cache_bytes_ = 0;  // the MTP layer
  int64_t side_slots_ = 0;
  bool budget_clamped_ = false;
  bool owned_all_ = true;
  int64_t n_owned_ = 0, n_experts_ = 0;
  IoMode io_mode_ = IoMode::Uring;
  CachePolicy policy_ = CachePolicy::Lru;
  bool split_by_usage_ = false;  // Lfu: the cache split over layers by earlier runs' usage
  IoFault fault_;
  uint64_t chunk_ = kIoChunkBytes;
  std::string io_desc_;  // for describe()
  std::string uring_why_;  // why io_uring could not be used, if it could not
  uint32_t n_reg_ = 0;     // slots numbered for registration
  std::string reg_why_;    // why buffers are not registered, if they are not
  std::vector<unsigned char> mincore_;  // Mmap: one byte per page of an expert

  // The streaming acquire in progress (begin .. next): per expert asked for,
  // where its bytes come from and whether next() has handed it out.
  enum class From : uint8_t { Slot, Read };  // Slot: resident or a read-ahead; Read: demand_.loads[load]
  struct Pending {
    int32_t expert = 0;
    Slot* slot = nullptr;
    From from = From::Slot;
    uint32_t load = 0;
    bool served = false;
  };
  std::vector<Pending> pend_;
  Layer* pend_l_ = nullptr;
  int64_t pend_layer_ = 0;
  uint64_t pend_tick_ = 0;
  size_t pend_left_ = 0;
  // After a failed demand read: lets the rest land, keeps what arrived, throws.
  [[noreturn]] void fail_pending(const std::string& error);
  void land(Pending& p);

  Reader demand_;  // the caller's reads (acquire, pins)
  Reader ahead_;   // the I/O thread's

  // Read-ahead auto (ExpertCacheOptions::prefetch_auto): a step starts at
  // each begin() of the first main MoE layer; one-row steps (at most top-k
  // experts asked for there) are timed in a window with read-ahead on, then
  // one with it off; the faster wins for the next kAheadExploit one-row steps.
  static constexpr int kAheadWindow = 5;     // steps per window; the first after a switch is not timed
  static constexpr int kAheadExploit = 64;
  static constexpr double kAheadMargin = 0.03;  // off must be this much faster
  bool ahead_auto_ = false;
  bool ahead_on_ = true;  // the caller's thread only
  int ahead_phase_ = 0;   // 0: timing on, 1: timing off, 2: exploiting the choice
  int ahead_left_ = kAheadWindow;
  bool ahead_skip_ = true, ahead_last_one_row_ = false;
  uint64_t ahead_last_ns_ = 0;
  std::vector<uint64_t> ahead_on_ns_, ahead_off_ns_;
  int64_t first_moe_ = -1, top_k_ = 0;
  void ahead_step(bool one_row);

  // The I/O thread and its queue of read-aheads (layer, expert, slot).
  bool prefetch_ = false;
  bool verify_every_ = false;  // ExpertCacheOptions::verify_every_read
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
  // Demand reads in flight (set and cleared by the caller's thread): the I/O
  // thread submits no read-ahead chunk meanwhile (docs/streaming.md).
  bool demand_busy_ = false;
  bool demand_busy_mine_ = false;  // the caller's copy, to lock only on a change
  void note_demand(bool busy);
  uint64_t yields_ = 0;  // under mu_
  uint64_t io_bytes_ = 0, io_ns_ = 0, io_count_ = 0;  // under mu_
};

// MemAvailable from /proc/meminfo, 0 if unknown.
uint64_t available_memory_bytes();

}  // namespace strata
