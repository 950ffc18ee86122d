// One c10d call as the engine operations it is made of, and the tensor
// helpers every call uses (c10d.cc, c10d_collectives.cc, c10d_peers.cc).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compat.h"
#include "kolo/engine.h"
#include "kolo/torch/c10d.h"

namespace kolo::torch::detail {

struct C10dCall {
  ::c10d::OpType type = ::c10d::OpType::UNKNOWN;
  std::string call;  // Request::call: "all_reduce(op=SUM)"
  std::vector<kolo::Request> requests;
  std::vector<kolo::Entry> entries;
  std::vector<at::Tensor> keep;  // alive until the work is done
  std::vector<std::shared_ptr<void>> ready;  // the entries' ready events
  std::vector<at::Tensor> outputs;  // Work::result(), the future's value
  std::function<void()> finish;  // after the operations (copies into outputs)
  at::Device device = at::kCPU;
  bool grouped = false;  // negotiate the requests as a unit (coalesced calls)

  // Adds one operation on input (the tensor the engine reads; contiguous),
  // writing output (in place when they are equal; may be undefined for
  // operations that negotiate their output, see land()). Records input's
  // ready event for CUDA tensors.
  kolo::Request& add(kolo::OpType op, const at::Tensor& input, const at::Tensor& output,
                     const std::string& what);
  // For the last operation added: its negotiated output lands in target's
  // memory when target is contiguous (checked against the negotiated
  // number of elements), else in a buffer finish copies into target.
  void land(const at::Tensor& target);
  // Appends a step to finish.
  void then(std::function<void()> step);
  // Appends a step that copies row r of rows (a [outs.size(), ...] tensor
  // the operations fill) into outs[r].
  void thenCopyRows(const at::Tensor& rows, std::vector<at::Tensor> outs);
};

// The tensor the engine moves: complex tensors as their real view (a last
// dimension of 2), others as they are.
at::Tensor realView(const at::Tensor& t);

// "SUM", "AVG", ... as torch names the op; "UNKNOWN" for others.
const char* reduceOpName(const ::c10d::ReduceOp& op);

// PREMUL_SUM's factor (a number, or a one-element tensor's value);
// InvalidArgument naming what when op carries none.
double premulFactor(const ::c10d::ReduceOp& op, const std::string& what);

// target, or a contiguous copy of it whose contents finish copies back into
// target (for in-place calls on non-contiguous tensors).
at::Tensor inPlace(C10dCall& call, const at::Tensor& target);

// The one tensor of a list (c10d passes lists; kolo runs one device per
// process). InvalidArgument naming what otherwise.
const at::Tensor& single(const std::vector<at::Tensor>& tensors, const std::string& what);

// Throws InvalidArgument unless tensor is defined, dense, on the CPU or a
// CUDA device and of a dtype kolo moves; NotImplementedError for sparse
// tensors.
void checkCallTensor(const at::Tensor& tensor, const std::string& what);

// Throws InvalidArgument unless every tensor has shape.
void checkShapes(const std::vector<at::Tensor>& tensors, at::IntArrayRef shape,
                 const std::string& what, const char* role);

// c10::NotImplementedError with message.
[[noreturn]] void notImplemented(const std::string& message);

}  // namespace kolo::torch::detail
