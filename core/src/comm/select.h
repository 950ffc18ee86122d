// Picks a backend by name ("gloo", "mpi", ...) through its factory. The only
// place that knows which backends this build has.
#pragma once

#include <memory>
#include <string>

#include "comm/backend_args.h"
#include "comm/collectives.h"
#include "comm/control_channel.h"
#include "comm/gpu_route.h"

namespace kolo::comm {

namespace cuda {
class DeviceSet;  // comm/cuda/device_set.h
class GpuOps;     // comm/cuda/gpu_ops.h (CUDA-free interface, every build)
}  // namespace cuda

// Throw InvalidArgument naming the backend and the variable that chose it
// when this build lacks it.
std::unique_ptr<ControlChannel> createControlChannel(const std::string& backend,
                                                     const BackendArgs& args);
std::unique_ptr<Collectives> createCollectives(const std::string& backend,
                                               const BackendArgs& args);

// The CPU data plane of a group, chosen from args.config and where the
// group's ranks run (learned through args.store, so any group works; the
// job's local rank/size are not used):
//   - every rank on one host, KOLO_SHM on: shared memory (comm/shm);
//   - several hosts with the same number (> 1) of ranks each, KOLO_SHM on and
//     hierarchical allreduce or allgather not switched off: two levels
//     (comm/hierarchical), shared memory within hosts and
//     KOLO_CPU_OPERATIONS across them and for the ops that stay flat;
//   - otherwise KOLO_CPU_OPERATIONS over the whole group (also where a
//     hierarchical op was asked for but the hosts differ in rank count).
// Collective over the group. When choice is not null it receives one line
// saying what was chosen and why (for the engine's log); *fellBack is set
// when KOLO_HIERARCHICAL_* asked for two levels that cannot apply, or when
// shared memory could not be set up on one host (e.g. /dev/shm full): every
// rank then uses the network backend.
std::unique_ptr<Collectives> createCpuDataPlane(const BackendArgs& args,
                                                std::string* choice = nullptr,
                                                bool* fellBack = nullptr);

// The control channel of a group: shared memory when every rank is on one
// host and KOLO_SHM is on (and it can be set up), else KOLO_CONTROLLER.
// Collective over the group.
std::unique_ptr<ControlChannel> createControlPlane(const BackendArgs& args);

// The data plane for CUDA tensors (KOLO_GPU_OPERATIONS): "nccl", or "mpi" /
// "gloo" over pinned host staging (comm/cuda/staged_collectives.h). Buffers
// passed to it are device pointers; its work is ordered on the comm streams
// of devices, which the engine shares with its cuda::GpuExecutor. Over the
// host device runtime (devices->runtime() is device::host::HostRuntime)
// "nccl" is that runtime's device collectives (comm/host/collectives.h).
// Keys go under "gpu/" in args.store, apart from the CPU backend's. Throws
// InvalidArgument naming KOLO_GPU_OPERATIONS when this build lacks the
// backend or CUDA.
// The data plane KOLO_GPU_OPERATIONS=backend gives CUDA tensors in this
// build (comm/gpu_route.h); "mpi" asks the MPI library whether it is
// CUDA-aware. Throws InvalidArgument as createGpuCollectives.
GpuRoute gpuRoute(const std::string& backend);

std::unique_ptr<Collectives> createGpuCollectives(const std::string& backend,
                                                  const BackendArgs& args,
                                                  std::shared_ptr<cuda::DeviceSet> devices);

// What the engine's executor uses for CUDA responses: a cuda::GpuExecutor
// over createGpuCollectives(backend, ...) on devices, the engine's DeviceSet
// shared by all of its process sets (nullptr: a new one over CUDA). With
// "mpi"/"gloo" this connects a mesh, so every rank must call it at the same
// point (e.g. when the first CUDA response is executed). Throws
// InvalidArgument naming KOLO_GPU_OPERATIONS when this build lacks CUDA or
// the backend.
std::unique_ptr<cuda::GpuOps> createGpuOps(const std::string& backend, const BackendArgs& args,
                                           std::shared_ptr<cuda::DeviceSet> devices = nullptr);

}  // namespace kolo::comm
