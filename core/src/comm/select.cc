#include "comm/select.h"

#include <utility>

#include "comm/cuda/gpu_ops.h"
#include "comm/gpu_route.h"
#include "comm/gloo/factory.h"
#include "kolo/build_config.h"
#include "kolo/error.h"
#if KOLO_WITH_MPI
#include "comm/mpi/factory.h"
#endif
#if KOLO_WITH_CUDA
#include "comm/cuda/device_set.h"
#include "comm/cuda/gpu_executor.h"
#include "comm/cuda/staged_collectives.h"
#endif
#if KOLO_WITH_NCCL
#include <nccl.h>

#include "comm/nccl/factory.h"
#endif
#include "kolo/kolo.h"

namespace kolo::comm {
namespace {

[[noreturn]] void notBuilt(const std::string& backend, const char* variable) {
  throw InvalidArgument(std::string(variable) + "=" + backend +
                        " but this build of kolo has no '" + backend +
                        "' backend; use " + variable + "=gloo or rebuild kolo with it");
}

}  // namespace

std::unique_ptr<ControlChannel> createControlChannel(const std::string& backend,
                                                     const BackendArgs& args) {
  if (backend == "gloo") return gloo::createControlChannel(args);
#if KOLO_WITH_MPI
  if (backend == "mpi") return mpi::createControlChannel(args);
#endif
  notBuilt(backend, "KOLO_CONTROLLER");
}

std::unique_ptr<Collectives> createCollectives(const std::string& backend,
                                               const BackendArgs& args) {
  if (backend == "gloo") return gloo::createCollectives(args);
#if KOLO_WITH_MPI
  if (backend == "mpi") return mpi::createCollectives(args);
#endif
  notBuilt(backend, "KOLO_CPU_OPERATIONS");
}

GpuRoute gpuRoute(const std::string& backend) {
  GpuBuild build;
  build.cuda = KOLO_WITH_CUDA;
  build.nccl = KOLO_WITH_NCCL;
  build.mpi = KOLO_WITH_MPI;
  return routeGpuOperations(backend, build, [] {
#if KOLO_WITH_MPI
    return mpi::cudaAware();
#else
    return false;
#endif
  });
}

std::unique_ptr<Collectives> createGpuCollectives(const std::string& backend,
                                                  const BackendArgs& args,
                                                  std::shared_ptr<cuda::DeviceSet> devices) {
  const GpuRoute route = gpuRoute(backend);  // throws for what this build lacks
#if KOLO_WITH_CUDA
  const BackendArgs gpuArgs{args.config, args.identity,
                            std::make_shared<PrefixStore>("gpu/", args.store),
                            args.localAddress, args.worldRanks};
#if KOLO_WITH_NCCL
  if (route.backend == "nccl") return nccl::createCollectives(gpuArgs, std::move(devices));
#endif
  // A CUDA-aware MPI takes device buffers itself (staged == false); the
  // staging wrapper then only stages what MPI reduces on the host.
  return std::make_unique<cuda::StagedCollectives>(
      createCollectives(route.backend, gpuArgs), std::move(devices), args.identity.rank,
      args.identity.size, !route.staged);
#else
  (void)args;
  (void)devices;
  throw Internal("gpu route '" + route.name() + "' in a build without CUDA");
#endif
}

std::unique_ptr<cuda::GpuOps> createGpuOps(const std::string& backend, const BackendArgs& args) {
#if KOLO_WITH_CUDA
  auto devices = std::make_shared<cuda::DeviceSet>();
  auto collectives = createGpuCollectives(backend, args, devices);
  return std::make_unique<cuda::GpuExecutor>(std::move(devices), std::move(collectives),
                                             args.identity.rank, args.identity.size,
                                             args.config.timeout);
#else
  createGpuCollectives(backend, args, nullptr);  // throws: no CUDA in this build
  return nullptr;
#endif
}

}  // namespace kolo::comm

namespace kolo {

int ncclVersion() {
#if KOLO_WITH_NCCL
  return NCCL_VERSION_CODE;
#else
  return 0;
#endif
}

}  // namespace kolo
