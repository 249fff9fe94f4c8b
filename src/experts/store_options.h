// What opening an expert store needs, for the layers above experts/ (the
// engine, the model loader): where a container's experts are and how the RAM
// cache should behave. The concrete stores stay inside experts/.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "experts/expert_store.h"
#include "experts/read_engine.h"
#include "format/container.h"

namespace strata {

// Where a container's routed experts are: its directory and manifest, for
// weight layers [0, n_layers) (an MTP layer that was not loaded is left out).
struct ExpertFiles {
  std::string dir;
  std::shared_ptr<const Manifest> manifest;
  int64_t n_layers = 0;
};

// How expert bytes reach memory (docs/streaming.md).
enum class IoMode {
  Uring,  // io_uring, several chunk reads in flight into the cache's slots (the pread pool where unavailable)
  Pread,  // a pool of threads doing pread(2): the same pipeline without io_uring
  Mmap,   // the expert files mapped: the page cache is the cache, read-ahead is madvise(WILLNEED)
};
const char* io_mode_name(IoMode m);

// Which cached expert a miss replaces (docs/streaming.md "Cache policies").
// Pinned experts never leave under either.
enum class CachePolicy {
  Lru,  // the least recently used of the layer
  Lfu,  // the least frequently used of the layer (counts decay by half every few slot turnovers), LRU among equals
};
const char* cache_policy_name(CachePolicy p);

// A test hook: every read of (layer, expert) fails like a broken disk would.
struct IoFault {
  enum class Kind { None, Eio, ShortRead };
  Kind kind = Kind::None;
  int64_t layer = -1;
  int32_t expert = -1;
};

// A fixed default (docs/streaming.md): 16 reads of 1 MiB in flight keep as
// many bytes in flight as 4 reads of 4 MiB, where fio measured this machine
// class at 3.4 GB/s (2.0 GB/s with one read in flight). A start-up probe was
// too noisy on these virtual disks (the host's cache answers some reads).
constexpr int kDefaultIoDepth = 16;
constexpr uint64_t kIoChunkBytes = 1u << 20;

constexpr int kLfuDecayTurnovers = 8;

struct ExpertCacheOptions {
  uint64_t ram_bytes = 0;  // budget for cached + pinned experts; 0 = from available memory
  bool pin_all = false;    // pin every expert that fits the budget
  uint64_t pin_bytes = 0;  // pin this much (clamped to the budget)
  bool autopin = true;     // without explicit pins, pin the hottest experts of earlier runs
  bool direct_io = true;
  bool prefetch = true;    // read predicted next-layer experts on an I/O thread
  // With prefetch: measure whether read-ahead pays (one-row steps, windows
  // with it on and off) and keep it off while it does not (docs/streaming.md
  // "Read-ahead auto"). Timing-dependent: the expert counters of two
  // identical runs may differ (the CLI's --prefetch on keeps them equal).
  bool prefetch_auto = false;
  // Experts over MPI (docs/distributed.md): owned[layer][expert] = 1 for the
  // experts this process serves; only those count towards the pool, are
  // pinned or cached. Empty: every expert.
  std::vector<std::vector<uint8_t>> owned;
  IoMode io = IoMode::Uring;
  bool registered_buffers = true;        // io_uring: register the cache's slots (pinned once, not per read)
  int io_depth = kDefaultIoDepth;        // reads in flight per reader (demand and read-ahead each; read-ahead yields to demand)
  uint64_t io_chunk = kIoChunkBytes;     // an expert is read in chunks of this size (a multiple of 4096)
  CachePolicy policy = CachePolicy::Lru;
  // Each expert's XXH3 is checked when it is first read into the cache in
  // this store's life; later reads of it land unchecked unless this is set
  // (--verify-experts every). The hash costs CPU at every read (~15 GB/s on
  // one core here: 14 ms per token for int4 experts streaming 0.21 GB), which
  // a fast disk makes a large part of a token on few cores.
  bool verify_every_read = false;
  // Lfu: request counts halve after this many times the layer's cache slots
  // in requests (docs/streaming.md: chosen by replaying the trained model's routing).
  int lfu_decay = kLfuDecayTurnovers;
  IoFault fault;                         // test hook
  // A test hook: wraps each reader's engine (`ahead`: the read-ahead
  // thread's) to watch the order of submissions or hold completions back.
  std::function<std::unique_ptr<ReadEngine>(std::unique_ptr<ReadEngine>, bool ahead)> wrap_engine;
};

// The store for a container's experts: read from disk through a RAM cache
// (experts/disk_expert_store.h).
std::unique_ptr<ExpertStore> open_disk_expert_store(const ExpertFiles& files, const ExpertCacheOptions& o);

}  // namespace strata
