#include "execution/gpu_path.h"

#include <string>

#include "comm/layout.h"
#include "kolo/error.h"

namespace kolo {
namespace {

thread_local void* tAllocationStream = nullptr;

// Sets tAllocationStream for the life of the scope.
class AllocationStreamScope {
 public:
  explicit AllocationStreamScope(void* stream) : saved_(tAllocationStream) {
    tAllocationStream = stream;
  }
  ~AllocationStreamScope() { tAllocationStream = saved_; }
  AllocationStreamScope(const AllocationStreamScope&) = delete;
  AllocationStreamScope& operator=(const AllocationStreamScope&) = delete;

 private:
  void* saved_;
};

}  // namespace

void* outputAllocationStream() { return tAllocationStream; }

GpuPath::GpuPath(const Identity& identity, Factory factory, EngineStats& stats, int defaultDevice)
    : identity_(identity),
      factory_(std::move(factory)),
      stats_(stats),
      lastDevice_(defaultDevice < 0 ? 0 : defaultDevice) {}

GpuPath::~GpuPath() = default;

const char* GpuPath::name() const { return gpu_ ? gpu_->name() : ""; }

comm::cuda::GpuOps& GpuPath::gpu() {
  if (!gpu_) {
    if (!factory_) {
      throw InvalidArgument("a CUDA tensor reached the engine, but this build of kolo has no "
                            "GPU data plane; move the tensor to the CPU");
    }
    gpu_ = factory_();
    KOLO_ENFORCE(gpu_ != nullptr, "GPU data plane factory returned nothing");
  }
  return *gpu_;
}

int GpuPath::deviceOf(const Response& r, const std::vector<PendingOp*>& ops) {
  comm::cuda::GpuOps& g = gpu();
  int device = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i] == nullptr) continue;
    const int d = ops[i]->msg.request.deviceIndex;
    if (d < 0) {
      throw InvalidArgument("'" + r.names[i] + "': CUDA tensor without a device index");
    }
    // One device per rank for the engine's life, whatever the response or
    // process set: the comm stream and the communicator live on it.
    g.pin(d, "'" + r.names[i] + "'");
    device = d;
  }
  if (device >= 0) return device;
  // Joined: take part on the rank's device; before it has one, on its
  // local rank's among the devices it sees (one, under a launcher that
  // gives each rank its own GPU through CUDA_VISIBLE_DEVICES).
  if (g.pinned() >= 0) return g.pinned();
  const int visible = g.deviceCount();
  return visible > 0 ? lastDevice_ % visible : lastDevice_;
}

void* GpuPath::allocate(PendingOp& op, int device, const std::vector<int64_t>& shape) {
  AllocationStreamScope scope(gpu().stream(device));
  return op.entry.allocate(shape);
}

comm::cuda::GpuFence GpuPath::execute(const Response& r, const std::vector<PendingOp*>& ops,
                                      bool timed) {
  switch (r.op) {
    case OpType::kAllreduce:
    case OpType::kBroadcast:
    case OpType::kAllgather:
    case OpType::kAlltoall:
    case OpType::kReducescatter: break;
    default: return {};  // no GPU work
  }
  const int device = deviceOf(r, ops);
  comm::cuda::GpuOps& g = gpu();
  for (size_t i = 0; i < ops.size(); ++i) {
    PendingOp* op = ops[i];
    if (op != nullptr && op->entry.readyEvent != nullptr &&
        g.captured(device, op->entry.readyEvent)) {
      throw InvalidArgument(
          "'" + r.names[i] +
          "': its ready event was recorded while the stream was being captured into a CUDA "
          "graph; kolo's collectives cannot be captured (they wait on other ranks). Run the "
          "kolo operation outside the graph capture (e.g. outside torch.cuda.graph(...))");
    }
  }
  try {
    return enqueue(r, ops, device, timed);
  } catch (const std::exception& e) {
    // Some of the response's work may be queued already: stop it and wait
    // until the device no longer touches the tensors before they are
    // released by the failure that follows (the engine's failAllOnLoop,
    // which keeps them instead when the device did not stop).
    g.abort(statusFromException(e));
    throw;
  }
}

comm::cuda::GpuFence GpuPath::enqueue(const Response& r, const std::vector<PendingOp*>& ops,
                                      int device, bool timed) {
  comm::cuda::GpuOps& g = gpu();
  g.beginResponse(device, timed);
  // The comm stream waits for the producers of the inputs; the host does not.
  for (PendingOp* op : ops) {
    if (op != nullptr && op->entry.readyEvent != nullptr) g.waitReady(device, op->entry.readyEvent);
  }
  g.markReady(device);
  switch (r.op) {
    case OpType::kAllreduce: allreduce(r, ops, device); break;
    case OpType::kBroadcast: broadcast(r, ops[0], device); break;
    case OpType::kAllgather: allgather(r, ops[0], device); break;
    case OpType::kAlltoall: alltoall(r, ops[0], device); break;
    case OpType::kReducescatter: reducescatter(r, ops[0], device); break;
    default: break;
  }
  return g.endResponse(device);
}

void GpuPath::whenDone(const comm::cuda::GpuFence& fence, comm::cuda::GpuOps::Done done) {
  gpu().whenDone(fence, std::move(done));
}

void GpuPath::allreduce(const Response& r, const std::vector<PendingOp*>& ops, int device) {
  const size_t total = static_cast<size_t>(r.totalElements());
  ++stats_.responses;
  ++stats_.backendCalls;
  stats_.bytesReduced += total * elementSize(r.dtype);
  if (ops.size() > 1) stats_.fusedTensors += ops.size();
  std::vector<comm::cuda::DeviceTensor> tensors(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    tensors[i].count = static_cast<uint64_t>(numElements(r.shapes[i]));
    if (ops[i] != nullptr) {
      tensors[i].input = ops[i]->entry.input;
      tensors[i].output = ops[i]->entry.output;
    }
  }
  gpu().allreduce(device, tensors, r.dtype, r.reduceOp, r.prescale, r.postscale);
}

void GpuPath::broadcast(const Response& r, PendingOp* op, int device) {
  ++stats_.responses;
  ++stats_.backendCalls;
  comm::cuda::DeviceTensor t;
  t.count = static_cast<uint64_t>(numElements(r.shapes[0]));
  if (op != nullptr) {
    t.input = op->entry.input;
    t.output = op->entry.output;
  }
  gpu().broadcast(device, t, r.dtype, r.root);
}

void GpuPath::allgather(const Response& r, PendingOp* op, int device) {
  auto [counts, shape] = gatherLayout(r, identity_.size);
  ++stats_.responses;
  ++stats_.backendCalls;
  void* out = nullptr;
  const void* in = nullptr;
  if (op != nullptr) {
    out = allocate(*op, device, shape);
    in = op->entry.input;
    std::lock_guard<std::mutex> lock(op->handle->mu);
    op->handle->outputShape = shape;
    op->handle->receivedSplits.assign(r.rankDims.begin(), r.rankDims.end());
  }
  gpu().allgatherv(device, in, out, counts, r.dtype);
}

void GpuPath::alltoall(const Response& r, PendingOp* op, int device) {
  auto [send, recv, received, rows] = alltoallLayout(r, identity_.rank, identity_.size);
  ++stats_.responses;
  ++stats_.backendCalls;
  void* out = nullptr;
  const void* in = nullptr;  // joined: sends nothing (its row of rankDims is zeros)
  if (op != nullptr) {
    std::vector<int64_t> shape = op->msg.request.shape;
    shape[0] = rows;
    out = allocate(*op, device, shape);
    in = op->entry.input;
    std::lock_guard<std::mutex> lock(op->handle->mu);
    op->handle->outputShape = shape;
    op->handle->receivedSplits = received;
  }
  gpu().alltoallv(device, in, send, out, recv, r.dtype);
}

void GpuPath::reducescatter(const Response& r, PendingOp* op, int device) {
  const int64_t row = rowElements(r.shapes[0]);
  const int64_t rows = r.shapes[0].empty() ? 1 : r.shapes[0][0];
  std::vector<size_t> split = evenSplit(rows, identity_.size);
  std::vector<size_t> counts = split;
  for (auto& c : counts) c *= static_cast<size_t>(row);
  ++stats_.responses;
  ++stats_.backendCalls;
  stats_.bytesReduced += static_cast<uint64_t>(rows * row) * elementSize(r.dtype);
  void* out = nullptr;
  const void* in = nullptr;  // joined: the identity of the reduce op goes in
  if (op != nullptr) {
    std::vector<int64_t> shape = r.shapes[0];
    if (shape.empty()) shape.push_back(1);
    shape[0] = static_cast<int64_t>(split[identity_.rank]);
    out = allocate(*op, device, shape);
    in = op->entry.input;
    std::lock_guard<std::mutex> lock(op->handle->mu);
    op->handle->outputShape = shape;
  }
  gpu().reducescatter(device, in, out, counts, r.dtype, r.reduceOp, r.prescale, r.postscale);
}

}  // namespace kolo
