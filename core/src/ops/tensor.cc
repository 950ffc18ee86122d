// Tensor submission (kolo/tensor.h): TensorRef -> Request + Entry, the
// output policies, and the object collectives.
#include "kolo/tensor.h"

#include <cstring>
#include <mutex>
#include <new>
#include <utility>

#include "kolo/error.h"

namespace kolo {

struct TensorOp::State {
  Handle handle;
  TensorRef input;  // held (keepAlive) until the engine is done
  std::mutex mu;
  TensorRef output;  // guarded by mu while the allocator may still run
};

const Handle& TensorOp::handle() const {
  KOLO_CHECK_ARG(state_ != nullptr, "kolo::TensorOp: empty op");
  return state_->handle;
}

TensorRef TensorOp::output() const {
  KOLO_CHECK_ARG(state_ != nullptr, "kolo::TensorOp: empty op");
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->output;
}

OutputSpec OutputSpec::intoTensor(TensorRef out) {
  OutputSpec spec;
  spec.kind = Kind::kInto;
  spec.into = std::move(out);
  return spec;
}

OutputSpec OutputSpec::negotiated(TensorAllocator allocate) {
  KOLO_CHECK_ARG(allocate != nullptr, "kolo::OutputSpec::negotiated: no allocator");
  OutputSpec spec;
  spec.kind = Kind::kNegotiated;
  spec.allocate = std::move(allocate);
  return spec;
}

namespace {

constexpr std::align_val_t kHostAlignment{64};

std::shared_ptr<void> hostBlock(size_t bytes) {
  void* p = ::operator new[](bytes == 0 ? 1 : bytes, kHostAlignment);
  return std::shared_ptr<void>(p, [](void* q) { ::operator delete[](q, kHostAlignment); });
}

Request request(OpType op, std::string name, int processSet) {
  Request r;
  r.name = std::move(name);
  r.op = op;
  r.processSet = processSet;
  return r;
}

Request reduction(OpType kind, std::string name, ReduceOp op, double prescale, double postscale,
                  int processSet) {
  Request r = request(kind, std::move(name), processSet);
  r.reduceOp = op;
  r.prescale = prescale;
  r.postscale = postscale;
  return r;
}

// The entry for input and output, with state's keep-alives in its callbacks.
Entry entryFor(const Request& request, const std::shared_ptr<TensorOp::State>& state,
               OutputSpec output, TensorCallbacks callbacks) {
  Entry entry;
  const TensorRef& input = state->input;
  entry.input = input.data;
  entry.readyEvent = input.readyEvent;
  switch (output.kind) {
    case OutputSpec::Kind::kInPlace:
      entry.output = input.data;
      state->output = input;
      break;
    case OutputSpec::Kind::kInto:
      KOLO_CHECK_ARG(output.into.dtype == input.dtype && output.into.numel() == input.numel() &&
                         output.into.device == input.device,
                     toString(request.op) + std::string(" '") + request.name +
                         "': the output must have the input's dtype, size and device (input " +
                         describe(input.dtype, input.shape) + ", output " +
                         describe(output.into.dtype, output.into.shape) + ")");
      entry.output = output.into.data;
      state->output = std::move(output.into);
      break;
    case OutputSpec::Kind::kNegotiated:
      entry.allocate = [state,
                        allocate = std::move(output.allocate)](const std::vector<int64_t>& shape) {
        TensorRef out = allocate(shape);
        std::lock_guard<std::mutex> lock(state->mu);
        state->output = std::move(out);
        return state->output.data;
      };
      break;
  }
  entry.onEnqueued = std::move(callbacks.onEnqueued);
  // Holds state (input and output memory) until the engine drops it, which
  // it does once the device stopped touching the memory.
  entry.onDone = [state, onDone = std::move(callbacks.onDone)](const Status& status) {
    if (onDone) onDone(status);
  };
  return entry;
}

}  // namespace

TensorAllocator hostAllocator(DataType dtype) {
  return [dtype](const std::vector<int64_t>& shape) {
    TensorRef t;
    t.dtype = dtype;
    t.shape = shape;
    t.keepAlive = hostBlock(t.bytes());
    t.data = t.keepAlive.get();
    return t;
  };
}

TensorRef hostTensor(DataType dtype, const std::vector<int64_t>& shape) {
  TensorRef t = hostAllocator(dtype)(shape);
  std::memset(t.data, 0, t.bytes());
  return t;
}

Request allreduceRequest(std::string name, ReduceOp op, double prescale, double postscale,
                         int processSet) {
  return reduction(OpType::kAllreduce, std::move(name), op, prescale, postscale, processSet);
}

Request allgatherRequest(std::string name, int processSet) {
  return request(OpType::kAllgather, std::move(name), processSet);
}

Request broadcastRequest(std::string name, int root, int processSet) {
  Request r = request(OpType::kBroadcast, std::move(name), processSet);
  r.root = root;
  return r;
}

Request alltoallRequest(std::string name, std::vector<int64_t> splits, int processSet) {
  Request r = request(OpType::kAlltoall, std::move(name), processSet);
  r.splits = std::move(splits);
  return r;
}

Request reducescatterRequest(std::string name, ReduceOp op, double prescale, double postscale,
                             int processSet) {
  return reduction(OpType::kReducescatter, std::move(name), op, prescale, postscale, processSet);
}

void describeInto(const TensorRef& input, Request& request) {
  KOLO_CHECK_ARG(input.data != nullptr || input.numel() == 0,
                 toString(request.op) + std::string(" '") + request.name +
                     "': the tensor has elements but no data");
  request.dtype = input.dtype;
  request.shape = input.shape;
  request.device = input.device;
  request.deviceIndex = input.deviceIndex;
}

TensorOp submit(Engine& engine, Request request, TensorRef input, OutputSpec output,
                TensorCallbacks callbacks) {
  describeInto(input, request);
  auto state = std::make_shared<TensorOp::State>();
  state->input = std::move(input);
  Entry entry = entryFor(request, state, std::move(output), std::move(callbacks));
  state->handle = engine.enqueue(std::move(request), std::move(entry));
  return TensorOp(std::move(state));
}

std::vector<TensorOp> submitGroup(Engine& engine, std::vector<Request> requests,
                                  std::vector<TensorRef> inputs, std::vector<OutputSpec> outputs) {
  KOLO_CHECK_ARG(requests.size() == inputs.size(),
                 "kolo::submitGroup: " + std::to_string(requests.size()) + " requests but " +
                     std::to_string(inputs.size()) + " inputs");
  KOLO_CHECK_ARG(outputs.empty() || outputs.size() == inputs.size(),
                 "kolo::submitGroup: " + std::to_string(inputs.size()) + " inputs but " +
                     std::to_string(outputs.size()) + " outputs");
  std::vector<std::shared_ptr<TensorOp::State>> states;
  std::vector<Entry> entries;
  for (size_t i = 0; i < inputs.size(); ++i) {
    describeInto(inputs[i], requests[i]);
    states.push_back(std::make_shared<TensorOp::State>());
    states.back()->input = std::move(inputs[i]);
    entries.push_back(entryFor(requests[i], states.back(),
                               outputs.empty() ? OutputSpec::inPlace() : std::move(outputs[i]),
                               {}));
  }
  std::vector<Handle> handles = engine.enqueueGroup(std::move(requests), std::move(entries));
  std::vector<TensorOp> ops;
  ops.reserve(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    states[i]->handle = handles[i];
    ops.emplace_back(std::move(states[i]));
  }
  return ops;
}

std::string groupMemberName(const std::string& base, size_t i) {
  return base + "." + std::to_string(i);
}

std::string broadcastObject(Engine& engine, const std::string& bytes, int root,
                            const std::string& name, int processSet) {
  KOLO_CHECK_ARG(!name.empty(), "kolo::broadcastObject: the name is empty");
  TensorRef length = hostTensor(DataType::kInt64, {1});
  auto* n = static_cast<int64_t*>(length.data);
  if (engine.rank() == root) *n = static_cast<int64_t>(bytes.size());
  submit(engine, broadcastRequest(name + ".size", root, processSet), length).handle().wait();
  if (*n == 0) return std::string();
  TensorRef data = hostTensor(DataType::kUInt8, {*n});
  if (engine.rank() == root) std::memcpy(data.data, bytes.data(), bytes.size());
  submit(engine, broadcastRequest(name + ".data", root, processSet), data).handle().wait();
  return std::string(static_cast<const char*>(data.data), static_cast<size_t>(*n));
}

std::vector<std::string> allgatherObject(Engine& engine, const std::string& bytes,
                                         const std::string& name, int processSet) {
  KOLO_CHECK_ARG(!name.empty(), "kolo::allgatherObject: the name is empty");
  TensorRef length = hostTensor(DataType::kInt64, {1});
  *static_cast<int64_t*>(length.data) = static_cast<int64_t>(bytes.size());
  TensorOp sizes = submit(engine, allgatherRequest(name + ".size", processSet), length,
                          OutputSpec::negotiated(hostAllocator(DataType::kInt64)));
  sizes.handle().wait();
  TensorRef data = hostAllocator(DataType::kUInt8)({static_cast<int64_t>(bytes.size())});
  if (!bytes.empty()) std::memcpy(data.data, bytes.data(), bytes.size());
  TensorOp all = submit(engine, allgatherRequest(name + ".data", processSet), data,
                        OutputSpec::negotiated(hostAllocator(DataType::kUInt8)));
  all.handle().wait();
  const TensorRef each = sizes.output();
  const TensorRef joined = all.output();
  const auto* counts = static_cast<const int64_t*>(each.data);
  const auto* at = static_cast<const char*>(joined.data);
  std::vector<std::string> out;
  for (int64_t i = 0; i < each.numel(); ++i) {
    out.emplace_back(at, static_cast<size_t>(counts[i]));
    at += counts[i];
  }
  return out;
}

}  // namespace kolo
