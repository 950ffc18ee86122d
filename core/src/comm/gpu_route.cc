#include "comm/gpu_route.h"

#include "kolo/error.h"

namespace kolo::comm {

GpuRoute routeGpuOperations(const std::string& choice, const GpuBuild& build,
                            const std::function<bool()>& mpiCudaAware) {
  const std::string what = "KOLO_GPU_OPERATIONS=" + choice;
  if (!build.cuda) {
    throw InvalidArgument(what +
                          ": this build of kolo has no CUDA support, so CUDA tensors cannot "
                          "be reduced; rebuild kolo with KOLO_WITH_CUDA=ON and the CUDA "
                          "toolkit, or move the tensors to the CPU");
  }
  if (choice == "nccl") {
    if (!build.nccl) {
      throw InvalidArgument(what +
                            " but this build of kolo has no NCCL; set "
                            "KOLO_GPU_OPERATIONS=gloo (or mpi), or rebuild with "
                            "KOLO_WITH_NCCL=ON");
    }
    return {"nccl", false};
  }
  if (choice == "mpi") {
    if (!build.mpi) {
      throw InvalidArgument(what +
                            " but this build of kolo has no MPI; set "
                            "KOLO_GPU_OPERATIONS=nccl or gloo, or rebuild with MPI");
    }
    return {"mpi", !(mpiCudaAware && mpiCudaAware())};
  }
  if (choice == "gloo") return {"gloo", true};
  throw InvalidArgument(what + ": unknown data plane; use nccl, mpi or gloo");
}

}  // namespace kolo::comm
