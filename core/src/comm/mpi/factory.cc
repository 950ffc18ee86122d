#include "comm/mpi/factory.h"

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include "comm/mpi/collectives.h"
#include "comm/mpi/context.h"
#include "comm/mpi/control_channel.h"
#include "comm/mpi/runtime.h"

namespace kolo::comm::mpi {

std::unique_ptr<comm::ControlChannel> createControlChannel(const BackendArgs& args) {
  return std::make_unique<ControlChannel>(Context::create(args, "control"));
}

std::unique_ptr<comm::Collectives> createCollectives(const BackendArgs& args) {
  return std::make_unique<Collectives>(Context::create(args, "data"));
}

Identity worldIdentity() {
  RuntimeUse runtime;
  Identity id;
  MPI_Comm_rank(MPI_COMM_WORLD, &id.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &id.size);
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, id.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &id.localRank);
  MPI_Comm_size(local, &id.localSize);
  MPI_Comm cross = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, id.localRank, id.rank, &cross);
  MPI_Comm_rank(cross, &id.crossRank);
  MPI_Comm_size(cross, &id.crossSize);
  MPI_Comm_free(&cross);
  MPI_Comm_free(&local);
  return id;
}

bool cudaAware() {
  RuntimeUse runtime;
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

}  // namespace kolo::comm::mpi
