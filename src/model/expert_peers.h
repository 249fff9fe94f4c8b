// Routed experts computed by other processes (experts over MPI,
// docs/distributed.md). The forward asks which process owns each expert of
// the batch union; per MoE layer it hands the peers the rows routed to their
// experts in one exchange (start), computes its own experts meanwhile, and
// collects the peers' outputs (wait) before the fixed-order sum. The
// transport lives outside model/ (src/dist/); this is only the seam.
#pragma once
#include <cstdint>
#include <span>

namespace strata {

// One layer's work for the peers, packed in peer order: peer p (1..size-1)
// computes experts[expert_off[p] .. expert_off[p+1]); expert i has rows[i]
// input rows, laid out one after another in x ([sum rows, D]); its outputs go
// to the same place in y.
struct PeerWork {
  int64_t layer = 0;
  int64_t hidden = 0;                  // D
  std::span<const int32_t> experts;
  std::span<const int32_t> rows;
  std::span<const int64_t> expert_off; // size() + 1 entries
  const float* x = nullptr;
  float* y = nullptr;
};

class ExpertPeers {
 public:
  virtual ~ExpertPeers() = default;
  // Processes taking part, this one (number 0) included.
  virtual int size() const = 0;
  // The process that computes expert `e` of `layer`; 0 = this one.
  virtual int owner(int64_t layer, int32_t e) const = 0;
  // Starts the exchange (nonblocking); w's buffers stay untouched by the
  // caller until wait() returns.
  virtual void start(const PeerWork& w) = 0;
  // Waits for every peer's outputs of the started layer. A peer that does
  // not answer within the transport's timeout ends the process with an
  // error naming the peer and the layer.
  virtual void wait() = 0;
};

}  // namespace strata
