// GpuOps: the engine's entry point to the GPU path, free of CUDA types so
// executor.cc can hold one in every build (no #if in engine code). Built by
// comm::createGpuOps (select.h), which throws InvalidArgument naming
// KOLO_GPU_OPERATIONS in a build without CUDA. The implementation is
// cuda::GpuExecutor (gpu_executor.h): read its header for the stream
// contract. cudaEvent_t values travel as void*.
//
// Threading: loop thread only, every rank in the same response order.
#pragma once

#include <cstdint>
#include <vector>

#include "kolo/types.h"

namespace kolo::comm::cuda {

// One tensor of a GPU response on this rank. input == nullptr: this rank has
// joined and contributes the reduce op's neutral value (output unused).
struct DeviceTensor {
  const void* input = nullptr;
  void* output = nullptr;
  uint64_t count = 0;
};

class GpuOps {
 public:
  virtual ~GpuOps() = default;

  // The data plane's name for timelines: "nccl", "gloo+staging", ...
  virtual const char* name() const = 0;

  // The comm stream of device waits for cudaEvent (a cudaEvent_t recorded
  // by the tensor's producer); the host does not block.
  virtual void waitReady(int device, void* cudaEvent) = 0;

  // Fused allreduce of tensors; op may be kAverage.
  virtual void allreduce(int device, const std::vector<DeviceTensor>& tensors, DataType dtype,
                         ReduceOp op, double prescale, double postscale) = 0;
  virtual void broadcast(int device, const DeviceTensor& tensor, DataType dtype, int root) = 0;
  virtual void allgatherv(int device, const void* in, void* out,
                          const std::vector<size_t>& counts, DataType dtype) = 0;
  virtual void alltoallv(int device, const void* in, const std::vector<size_t>& sendCounts,
                         void* out, const std::vector<size_t>& recvCounts, DataType dtype) = 0;
  // Joined ranks pass in == nullptr (reducescatter) or out == nullptr
  // (allgatherv, alltoallv): neutral values / scratch are used.
  virtual void reducescatter(int device, const void* in, void* out,
                             const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                             double prescale, double postscale) = 0;

  // The comm stream (a cudaStream_t) of device: outputs are written there.
  virtual void* stream(int device) = 0;
  // A cudaEvent_t after everything enqueued on device's comm stream so far
  // (valid until the next call): outputs are ready once it completes.
  virtual void* recordDone(int device) = 0;
  // Blocks until device's comm stream is idle.
  virtual void synchronize(int device) = 0;
  // Records a done event after everything enqueued on device's comm stream
  // and waits for it, polling (no cudaStreamSynchronize), at most the
  // executor's timeout (KOLO_TIMEOUT): Timeout naming the device after
  // that, Internal for a CUDA error (e.g. a faulting kernel).
  virtual void waitDone(int device) = 0;
};

}  // namespace kolo::comm::cuda
