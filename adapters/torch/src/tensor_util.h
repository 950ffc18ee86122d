// Checks and conversions shared by the adapter's operations.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kolo/tensor.h"
#include "kolo/torch.h"

namespace kolo::torch::detail {

// Everything a tensor operation keeps alive until it completes, beyond
// what the core's TensorOp holds (the input and output memory): wait()
// copies the result into `target` for in-place operations on
// non-contiguous tensors.
struct HandleBody {
  kolo::TensorOp op;
  kolo::Handle handle;  // op.handle()
  at::Tensor input;     // contiguous
  at::Tensor target;
  // output is allocated by the engine (on its comm stream): wait() marks
  // it used on the caller's stream.
  bool negotiated = false;
  std::mutex mu;
  bool finished = false;
  at::Tensor output;  // set by wait() (negotiated: from op.output())
};

// t as the core sees it (t contiguous); its keepAlive holds t (and ready,
// the CUDA event the engine's stream waits on, when given).
TensorRef toRef(const at::Tensor& t, std::shared_ptr<void> ready = nullptr);
// The tensor behind a TensorRef made by toRef or tensorAllocator.
at::Tensor tensorOf(const TensorRef& ref);
// Output memory for negotiated shapes, like options, allocated on the
// engine's stream (outputAllocationStream) for CUDA.
TensorAllocator tensorAllocator(const at::TensorOptions& options);

// Throws InvalidArgument naming `what` ("allreduce 'x'") unless tensor is a
// defined, dense CPU or CUDA tensor of a supported dtype.
void checkTensor(const at::Tensor& tensor, const std::string& what);

// Request fields that follow from the tensor: dtype, shape, device.
void describeTensor(const at::Tensor& tensor, const std::string& what, Request& request);

std::vector<int64_t> shapeOf(const at::Tensor& tensor);

// "allreduce 'name'" for messages.
std::string what(const char* op, const std::string& name);

// An optimizer's whole state (per-parameter state, param-group options,
// defaults) as bytes, and back (broadcast_state.cc). loadOptimizer throws
// InvalidArgument naming `root` when the bytes do not fit the optimizer.
std::string saveOptimizer(const ::torch::optim::Optimizer& optimizer);
void loadOptimizer(::torch::optim::Optimizer& optimizer, const std::string& bytes, int root);

}  // namespace kolo::torch::detail
