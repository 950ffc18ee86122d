#include "comm/select.h"

#include <utility>

#include "comm/cuda/device_set.h"
#include "comm/cuda/gpu_executor.h"
#include "comm/cuda/gpu_ops.h"
#include "comm/cuda/staged_collectives.h"
#include "comm/gpu_route.h"
#include "comm/gloo/factory.h"
#include "comm/hierarchical/collectives.h"
#include "comm/shm/factory.h"
#include "comm/shm/host.h"
#include "comm/host/collectives.h"
#include "kolo/build_config.h"
#include "kolo/error.h"
#if KOLO_WITH_MPI
#include "comm/mpi/factory.h"
#endif
#if KOLO_WITH_NCCL
#include <nccl.h>

#include "comm/nccl/factory.h"
#endif
#include "kolo/kolo.h"

namespace kolo::comm {
namespace {

[[noreturn]] void notBuilt(const std::string& backend, const char* variable) {
  throw InvalidArgument(std::string(variable) + "=" + backend + " but this build of kolo has no '" +
                        backend + "' backend; use " + variable + "=gloo or rebuild kolo with it");
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

namespace {

// A group of some of args' ranks (identity: this rank's place in it) under
// its own store prefix. Only a group of all of them keeps args.worldRanks.
BackendArgs subgroup(const BackendArgs& args, const Identity& identity, const std::string& prefix) {
  const bool whole = identity.size == args.identity.size;
  return BackendArgs{args.config, identity, std::make_shared<PrefixStore>(prefix, args.store),
                     args.localAddress, whole ? args.worldRanks : std::vector<int>{}};
}

bool shmOn(const Config& config) {
  return config.shm.value_or(!(config.controller == "mpi" && config.cpuOperations == "mpi"));
}

std::string plural(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

}  // namespace

std::unique_ptr<Collectives> createCpuDataPlane(const BackendArgs& args, std::string* choice,
                                                bool* fellBack) {
  const Config& config = args.config;
  auto say = [&](const std::string& line) {
    if (choice != nullptr) *choice = line;
  };
  if (fellBack != nullptr) *fellBack = false;
  const int size = args.identity.size;
  if (!shmOn(config) || size == 1) {
    say(config.cpuOperations + (shmOn(config) ? "" : " (shared memory off)"));
    return createCollectives(config.cpuOperations, args);
  }
  const shm::HostLayout layout = shm::exchangeLayout(subgroup(args, args.identity, "layout/"));
  if (layout.hostCount() == 1) {
    try {
      auto plane = shm::createCollectives(args);
      say("shm (" + plural(size, "rank") + " on one host)");
      return plane;
    } catch (const Internal& e) {
      // Every rank got this error (the setup reports it to all), so every
      // rank falls back alike.
      if (fellBack != nullptr) *fellBack = true;
      say(config.cpuOperations + " (shared memory unavailable: " + e.what() + ")");
      return createCollectives(config.cpuOperations, args);
    }
  }
  const bool allreduce = config.hierarchicalAllreduce.value_or(true);
  const bool allgather = config.hierarchicalAllgather.value_or(true);
  const bool asked =
      config.hierarchicalAllreduce.value_or(false) || config.hierarchicalAllgather.value_or(false);
  const int rank = args.identity.rank;
  std::string why;
  if (!allreduce && !allgather) {
    why = "hierarchical collectives switched off";
  } else if (!layout.uniform()) {
    why = "hierarchical collectives need the same number of ranks on every host";
  } else if (layout.localSize(rank) == 1) {
    why = "one rank per host";
  } else if (config.cpuOperations != "gloo") {
    why = "the cross-host stage of hierarchical collectives runs over gloo only";
  }
  if (!why.empty()) {
    const bool ignored = asked && (allreduce || allgather);
    if (fellBack != nullptr) *fellBack = ignored;
    say(config.cpuOperations + " (" + layout.describe() + ": " + why +
        (ignored ? "; KOLO_HIERARCHICAL_*=1 cannot apply" : "") + ")");
    return createCollectives(config.cpuOperations, args);
  }
  // Every rank builds the flat plane first, then its host's, then its
  // local rank's across hosts: each step is collective within its group.
  const int host = layout.hostOf[rank];
  const int localRank = layout.localRank(rank);
  Identity local;
  local.rank = localRank;
  local.size = layout.localSize(rank);
  local.localRank = local.rank;
  local.localSize = local.size;
  Identity cross;
  cross.rank = host;
  cross.size = layout.hostCount();
  cross.crossRank = cross.rank;
  cross.crossSize = cross.size;
  hierarchical::Planes planes;
  planes.flat = createCollectives(config.cpuOperations, subgroup(args, args.identity, "flat/"));
  // One host failing to set up shared memory fails only its own ranks; they
  // cannot fall back alone, so this is an error for the job.
  planes.local = shm::createCollectivesWithin(
      subgroup(args, local, "local/" + std::to_string(host) + "/"), layout.hosts[host]);
  planes.cross = createCollectives(
      config.cpuOperations, subgroup(args, cross, "cross/" + std::to_string(localRank) + "/"));
  say(std::string("hierarchical (") + layout.describe() + ": shm within hosts, " +
      config.cpuOperations + " across them; allreduce " + (allreduce ? "two-level" : "flat") +
      ", allgather/broadcast " + (allgather ? "two-level" : "flat") + ")");
  return std::make_unique<hierarchical::Collectives>(layout, rank, std::move(planes), allreduce,
                                                     allgather);
}

std::unique_ptr<ControlChannel> createControlPlane(const BackendArgs& args) {
  const Config& config = args.config;
  if (shmOn(config) && args.identity.size > 1 &&
      shm::exchangeLayout(subgroup(args, args.identity, "layout/")).hostCount() == 1) {
    try {
      return shm::createControlChannel(args);
    } catch (const Internal&) {
      // Reported to every rank: all fall back alike (the data plane, built
      // next, says why in the engine's log).
    }
  }
  return createControlChannel(config.controller, args);
}

namespace {

GpuRoute routeFor(const std::string& backend, bool hostRuntime) {
  GpuBuild build;
  // The host device runtime stands in for CUDA and its collectives for NCCL.
  build.cuda = KOLO_WITH_CUDA || hostRuntime;
  build.nccl = KOLO_WITH_NCCL || hostRuntime;
  build.mpi = KOLO_WITH_MPI;
  return routeGpuOperations(backend, build, [] {
#if KOLO_WITH_MPI
    return mpi::cudaAware();
#else
    return false;
#endif
  });
}

}  // namespace

GpuRoute gpuRoute(const std::string& backend) { return routeFor(backend, false); }

std::unique_ptr<Collectives> createGpuCollectives(const std::string& backend,
                                                  const BackendArgs& args,
                                                  std::shared_ptr<cuda::DeviceSet> devices) {
  auto host = devices ? std::dynamic_pointer_cast<device::host::HostRuntime>(
                            devices->runtimePtr())
                      : nullptr;
  const GpuRoute route = routeFor(backend, host != nullptr);  // throws for what is missing
  KOLO_CHECK_ARG(devices != nullptr, "GPU data plane: no device set");
  BackendArgs gpuArgs{args.config, args.identity, std::make_shared<PrefixStore>("gpu/", args.store),
                      args.localAddress, args.worldRanks};
  gpuArgs.broadcast = args.broadcast;
  if (route.backend == "nccl") {
    if (host) return std::make_unique<comm::host::Collectives>(gpuArgs, std::move(devices), host);
#if KOLO_WITH_NCCL
    return nccl::createCollectives(gpuArgs, std::move(devices));
#endif
  }
  // A CUDA-aware MPI takes device buffers itself (staged == false); the
  // staging wrapper then only stages what MPI reduces on the host.
  return std::make_unique<cuda::StagedCollectives>(
      createCollectives(route.backend, gpuArgs), std::move(devices), args.identity.rank,
      args.identity.size, !route.staged);
}

std::unique_ptr<cuda::GpuOps> createGpuOps(const std::string& backend, const BackendArgs& args,
                                           std::shared_ptr<cuda::DeviceSet> devices) {
  if (!devices) {
    gpuRoute(backend);  // throws InvalidArgument in a build without CUDA
    devices = std::make_shared<cuda::DeviceSet>();
  }
  auto collectives = createGpuCollectives(backend, args, devices);
  return std::make_unique<cuda::GpuExecutor>(std::move(devices), std::move(collectives),
                                             args.identity.rank, args.identity.size,
                                             args.config.timeout);
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
