/// \file
/// Tensor submission for every framework: a neutral tensor reference, the
/// request of each collective, and submit()/submitGroup(), which turn a
/// reference into an engine request and entry and keep its memory alive
/// until the engine is done with it. A framework adapter converts its own
/// tensors to TensorRef (and back) and calls these; nothing else about
/// submission is framework-specific. Also the object collectives
/// (broadcastObject, allgatherObject), which move bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kolo/engine.h"
#include "kolo/types.h"

namespace kolo {

/// A tensor as the engine sees it: dense, contiguous, row-major memory of
/// one dtype on one device. Copyable; copies share keepAlive.
struct TensorRef {
  DataType dtype = DataType::kFloat32;   ///< Element type.
  std::vector<int64_t> shape;            ///< Sizes, outermost first; {} is a scalar.
  DeviceKind device = DeviceKind::kCpu;  ///< Where data lives.
  int deviceIndex = -1;                  ///< CUDA ordinal; -1 on the CPU.
  void* data = nullptr;                  ///< First element (may be null when empty).
  /// CUDA: a cudaEvent_t recorded where data was produced (Entry::readyEvent);
  /// nullptr when data is ready now. Must stay valid until the operation ends.
  void* readyEvent = nullptr;
  /// Whatever owns data (and readyEvent): held until the engine is done with
  /// the memory, then dropped on the engine's thread. May be null when the
  /// caller keeps the memory alive itself.
  std::shared_ptr<void> keepAlive;

  /// Number of elements (1 for a scalar).
  int64_t numel() const { return numElements(shape); }
  /// Size of data in bytes.
  size_t bytes() const { return static_cast<size_t>(numel()) * elementSize(dtype); }
};

/// Makes output memory for a shape that negotiation decides (allgather,
/// alltoall, reducescatter), of the input's dtype and device. Runs on the
/// engine's thread; for CUDA, allocate on outputAllocationStream().
using TensorAllocator = std::function<TensorRef(const std::vector<int64_t>& shape)>;

/// A CPU TensorAllocator that allocates with new[] (aligned for every dtype).
TensorAllocator hostAllocator(DataType dtype);
/// A CPU tensor of shape, allocated as hostAllocator does, zero-filled.
TensorRef hostTensor(DataType dtype, const std::vector<int64_t>& shape);

/// Where an operation writes its result.
struct OutputSpec {
  /// Kinds of output.
  enum class Kind {
    kInPlace,     ///< Into the input (allreduce, broadcast).
    kInto,        ///< Into `into`, of the input's size (allreduce, broadcast).
    kNegotiated,  ///< Memory from `allocate` once the shape is known.
  };
  Kind kind = Kind::kInPlace;  ///< Which of the three.
  TensorRef into;              ///< kInto: the output.
  TensorAllocator allocate;    ///< kNegotiated: the allocator.

  /// The result overwrites the input.
  static OutputSpec inPlace() { return {}; }
  /// The result goes to out, which has the input's dtype, device and size.
  static OutputSpec intoTensor(TensorRef out);
  /// The result goes to memory from allocate, once negotiation knows its shape.
  static OutputSpec negotiated(TensorAllocator allocate);
};

/// What the caller hears about one operation (both optional; same threads
/// and rules as Entry's callbacks).
struct TensorCallbacks {
  std::function<void(void* doneEvent)> onEnqueued;  ///< Entry::onEnqueued.
  std::function<void(const Status&)> onDone;        ///< Entry::onDone.
};

/// One submitted operation: its engine handle and its output.
class TensorOp {
 public:
  /// An empty op (valid() false).
  TensorOp() = default;
  /// False for a default-constructed op.
  bool valid() const { return state_ != nullptr; }
  /// The engine's handle (wait, poll, status, splits).
  const Handle& handle() const;
  /// The output: the input (in place), the given tensor, or what the
  /// allocator made (empty until negotiation knew the shape). Its
  /// keepAlive owns the memory.
  TensorRef output() const;

  struct State;  ///< Internal.
  /// Internal: made by submit().
  explicit TensorOp(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

/// Requests of each collective, with the fields that follow from the tensor
/// (dtype, shape, device) filled in by submit(). Names must be unique in
/// flight per set (Engine::nameOrNext makes one for unnamed calls).
Request allreduceRequest(std::string name, ReduceOp op = ReduceOp::kAverage, double prescale = 1.0,
                         double postscale = 1.0, int processSet = 0);
/// allgather along the first dimension.
Request allgatherRequest(std::string name, int processSet = 0);
/// broadcast from root (a rank of the job that belongs to the set).
Request broadcastRequest(std::string name, int root, int processSet = 0);
/// alltoall; splits: rows to each rank of the set (empty: an even split).
Request alltoallRequest(std::string name, std::vector<int64_t> splits = {}, int processSet = 0);
/// reducescatter along the first dimension.
Request reducescatterRequest(std::string name, ReduceOp op = ReduceOp::kAverage,
                             double prescale = 1.0, double postscale = 1.0, int processSet = 0);

/// Fills request's dtype, shape and device from input. Throws InvalidArgument
/// naming the request for an input without data but with elements.
void describeInto(const TensorRef& input, Request& request);

/// Queues one operation on input; errors in the request throw here (as
/// Engine::enqueue). input's and the output's keepAlive are held until the
/// engine is done with their memory.
TensorOp submit(Engine& engine, Request request, TensorRef input,
                OutputSpec output = OutputSpec::inPlace(), TensorCallbacks callbacks = {});

/// Queues several operations of one kind and set, negotiated as a unit
/// (Engine::enqueueGroup): requests[i] on inputs[i] into outputs[i]
/// (outputs empty: all in place).
std::vector<TensorOp> submitGroup(Engine& engine, std::vector<Request> requests,
                                  std::vector<TensorRef> inputs,
                                  std::vector<OutputSpec> outputs = {});

/// Name of member i of a group named base: "<base>.<i>".
std::string groupMemberName(const std::string& base, size_t i);

/// root's bytes on every rank of the set (two broadcasts on the CPU:
/// "<name>.size" and "<name>.data"). Blocks. name is not empty.
std::string broadcastObject(Engine& engine, const std::string& bytes, int root,
                            const std::string& name, int processSet = 0);
/// Every rank's bytes, in the set's rank order (two allgathers on the CPU:
/// "<name>.size" and "<name>.data"). Blocks. name is not empty.
std::vector<std::string> allgatherObject(Engine& engine, const std::string& bytes,
                                         const std::string& name, int processSet = 0);

}  // namespace kolo
