// Experts over MPI (docs/distributed.md): this process's part in an MPI job
// where rank 0 runs the model (dense part, sessions, front end) and every
// rank serves its share of the routed experts. Joining calls MPI_Init; only
// `--experts-over mpi` joins one. Built only where CMake found MPI; without it
// join_mpi() refuses, naming the rebuild.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/expert_peers.h"
#include "model/forward.h"
#include "model/model.h"

namespace strata {

struct MpiOptions {
  double timeout_s = 120.0;  // rank 0 waits this long for a rank's outputs of one layer
  bool verbose = true;       // the placement lines on stderr (rank 0)
  int64_t replicate = 0;     // --mpi-replicate: the hottest experts served by rank 0 (dist/placement.h)
};

// What a serving rank did (its --stats line).
struct PeerServeStats {
  uint64_t layers = 0;      // layer messages served
  uint64_t experts = 0;     // expert computations
  uint64_t rows = 0;        // rows over them
  uint64_t bytes = 0;       // received + sent
  uint64_t compute_ns = 0;  // store + matmuls
  uint64_t idle_ns = 0;     // waiting for rank 0
};

class MpiJob {
 public:
  virtual ~MpiJob() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Collective: whether every rank managed `what` (ok = this rank did). On
  // any failure every rank throws: a failed rank its own `error`, the others
  // an error naming the ranks that failed. No rank is left waiting.
  virtual void all_ok(bool ok, const std::string& what, const std::string& error) = 0;

  // Collective start-up over a loaded model: every rank's fingerprint
  // (refused, naming the ranks, when they differ) and expert budget
  // (`ram_bytes`, 0 = this machine's available memory); rank 0 places the
  // experts (dist/placement.h) and prints the placement; returns this rank's
  // experts (ExpertCacheOptions::owned; empty with one rank).
  virtual std::vector<std::vector<uint8_t>> agree(const Model& m, uint64_t ram_bytes) = 0;

  // Rank 0 after agree(): the other ranks as the forward's ExpertPeers.
  virtual ExpertPeers* peers() = 0;

  // Ranks > 0 after agree(): compute the experts rank 0 sends, with `runner`
  // (its own store, the same kernels), until rank 0 ends the job.
  virtual PeerServeStats serve(ModelRunner& runner) = 0;
};

// Joins the job mpirun started (MPI_Init); throws in a build without MPI.
std::unique_ptr<MpiJob> join_mpi(const MpiOptions& o);

// Whether this build has MPI.
bool mpi_built();

}  // namespace strata
