// The build without MPI (CMake found none, or -DSTRATA_MPI=OFF): joining a
// job is refused with what to do about it.
#include "core/error.h"
#include "dist/mpi_job.h"

namespace strata {

std::unique_ptr<MpiJob> join_mpi(const MpiOptions&) {
  fail("--experts-over mpi: this strata was built without MPI; install an MPI library (Debian: libopenmpi-dev "
       "openmpi-bin) and rebuild (cmake -DSTRATA_MPI=ON), see docs/distributed.md");
}

bool mpi_built() { return false; }

}  // namespace strata
