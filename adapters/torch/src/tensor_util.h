// Checks and conversions shared by the adapter's operations.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kolo/torch.h"

namespace kolo::torch::detail {

// Everything a tensor operation keeps alive until it completes. The engine
// writes `output` (or the tensor `allocate` created) on its background
// thread; wait() copies the result into `target` for in-place operations
// on non-contiguous tensors.
struct HandleBody {
  kolo::Handle handle;
  at::Tensor input;
  at::Tensor output;
  at::Tensor target;
  // CUDA: the event the engine's comm stream waits on before reading
  // input (Entry::readyEvent).
  std::shared_ptr<void> ready;
  // output was allocated by the engine (on its comm stream): wait() marks
  // it used on the caller's stream.
  bool negotiated = false;
  std::mutex mu;
  bool finished = false;
};

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
