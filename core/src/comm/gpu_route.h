// Which data plane carries CUDA tensors (KOLO_GPU_OPERATIONS), decided from
// the user's choice and what this build and the MPI library can do. Pure:
// no CUDA, no MPI calls of its own (the caller passes how to ask MPI), so
// it is unit-tested in every build.
#pragma once

#include <functional>
#include <string>

namespace kolo::comm {

// What this build of kolo has (kolo/build_config.h).
struct GpuBuild {
  bool cuda = false;
  bool nccl = false;
  bool mpi = false;
};

struct GpuRoute {
  std::string backend;  // "nccl", "mpi" or "gloo"
  // Device buffers are copied through pinned host memory around each host
  // collective (gloo always; mpi when the library is not CUDA-aware).
  bool staged = false;
  // "nccl", "mpi" (CUDA-aware), "mpi+staging", "gloo+staging".
  std::string name() const { return staged ? backend + "+staging" : backend; }
};

// choice: Config::gpuOperations ("nccl" | "mpi" | "gloo"). mpiCudaAware is
// called only for "mpi" in a build with MPI (it may initialise MPI).
// Throws InvalidArgument naming KOLO_GPU_OPERATIONS, the value and the fix
// when the build lacks CUDA or the chosen backend.
GpuRoute routeGpuOperations(const std::string& choice, const GpuBuild& build,
                            const std::function<bool()>& mpiCudaAware);

}  // namespace kolo::comm
