#include "execution/executor.h"

#include <cstring>
#include <limits>

#include "comm/layout.h"
#include "kernels/reduce.h"

namespace kolo {
namespace {

ReduceOp backendOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

template <typename T>
void fillTyped(void* buf, size_t count, T value) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = value;
}

template <typename T>
void fillLimits(void* buf, size_t count, ReduceOp op) {
  T v = op == ReduceOp::kMin ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest();
  if (std::numeric_limits<T>::has_infinity) {
    v = op == ReduceOp::kMin ? std::numeric_limits<T>::infinity()
                             : -std::numeric_limits<T>::infinity();
  }
  fillTyped<T>(buf, count, v);
}

}  // namespace

void fillNeutral(void* buf, size_t count, DataType dtype, ReduceOp op) {
  const size_t bytes = count * elementSize(dtype);
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kAdasum) {
    std::memset(buf, 0, bytes);
    return;
  }
  if (op == ReduceOp::kProduct) {
    switch (dtype) {
      case DataType::kFloat32: return fillTyped<float>(buf, count, 1.0f);
      case DataType::kFloat64: return fillTyped<double>(buf, count, 1.0);
      case DataType::kFloat16: return fillTyped<uint16_t>(buf, count, 0x3c00);
      case DataType::kBFloat16: return fillTyped<uint16_t>(buf, count, 0x3f80);
      case DataType::kInt32: return fillTyped<int32_t>(buf, count, 1);
      case DataType::kInt64: return fillTyped<int64_t>(buf, count, 1);
      case DataType::kInt16: return fillTyped<int16_t>(buf, count, 1);
      case DataType::kInt8: return fillTyped<int8_t>(buf, count, 1);
      case DataType::kUInt8:
      case DataType::kBool: return fillTyped<uint8_t>(buf, count, 1);
    }
  }
  switch (dtype) {  // min / max
    case DataType::kFloat32: return fillLimits<float>(buf, count, op);
    case DataType::kFloat64: return fillLimits<double>(buf, count, op);
    case DataType::kFloat16:
      return fillTyped<uint16_t>(buf, count, op == ReduceOp::kMin ? 0x7c00 : 0xfc00);
    case DataType::kBFloat16:
      return fillTyped<uint16_t>(buf, count, op == ReduceOp::kMin ? 0x7f80 : 0xff80);
    case DataType::kInt32: return fillLimits<int32_t>(buf, count, op);
    case DataType::kInt64: return fillLimits<int64_t>(buf, count, op);
    case DataType::kInt16: return fillLimits<int16_t>(buf, count, op);
    case DataType::kInt8: return fillLimits<int8_t>(buf, count, op);
    case DataType::kUInt8: return fillLimits<uint8_t>(buf, count, op);
    case DataType::kBool: return fillTyped<uint8_t>(buf, count, op == ReduceOp::kMin ? 1 : 0);
  }
}

Executor::Executor(const Identity& identity, std::unique_ptr<comm::Collectives> collectives,
                   EngineStats& stats, GpuPath::Factory gpu, int gpuDevice)
    : identity_(identity),
      collectives_(std::move(collectives)),
      stats_(stats),
      gpu_(identity, std::move(gpu), stats, gpuDevice) {}

comm::cuda::GpuFence Executor::execute(const Response& response,
                                       const std::vector<PendingOp*>& ops) {
  rows_.clear();
  collectiveSpan_ = nullptr;
  if (timeline_ != nullptr) {
    for (const PendingOp* op : ops) {
      if (op != nullptr && op->traced) rows_.push_back(op->row);
    }
    if (!rows_.empty()) {
      // CUDA responses: the GPU data plane's name ("NCCL_ALLREDUCE"), known
      // once it exists (it is created by the first CUDA response).
      const bool cuda = response.device == DeviceKind::kCuda;
      const char*& name = (cuda ? gpuSpanNames_ : spanNames_).at(static_cast<size_t>(response.op));
      if (name == nullptr) {
        const std::string plane = cuda ? gpu_.name() : collectives_->name();
        if (!plane.empty()) name = timeline_->collectiveName(plane, response.op);
      }
      collectiveSpan_ = name != nullptr ? name : timeline_->collectiveName("gpu", response.op);
    }
  }
  // CUDA: the GPU phases are traced when they have run (the engine writes
  // them from whenGpuDone's GpuPhases).
  if (response.device == DeviceKind::kCuda) return gpu_.execute(response, ops, !rows_.empty());
  switch (response.op) {
    case OpType::kAllreduce: allreduce(response, ops); break;
    case OpType::kBroadcast: broadcast(response, ops[0]); break;
    case OpType::kAllgather: allgather(response, ops[0]); break;
    case OpType::kAlltoall: alltoall(response, ops[0]); break;
    case OpType::kReducescatter: reducescatter(response, ops[0]); break;
    case OpType::kBarrier:
    case OpType::kJoin:
    case OpType::kProcessSet: break;  // negotiation itself was the synchronisation
  }
  return {};
}

void Executor::traceBegin(const char* name, int64_t bytes) {
  if (rows_.empty()) return;
  const int64_t ts = timeline::Timeline::now();
  for (int row : rows_) timeline_->begin(row, name, ts, bytes);
}

void Executor::traceEnd(const char* name) {
  if (rows_.empty()) return;
  const int64_t ts = timeline::Timeline::now();
  for (int row : rows_) timeline_->end(row, name, ts);
}

double Executor::scaleFactor(const Response& r) const {
  return r.reduceOp == ReduceOp::kAverage ? r.postscale / identity_.size : r.postscale;
}

void Executor::finishReduction(void* buf, size_t count, const Response& r) {
  // Integer average without a postscale is an exact truncating division;
  // otherwise one multiply by postscale / size (integers in float64, as
  // Horovod does).
  if (r.reduceOp == ReduceOp::kAverage && !isFloatingPoint(r.dtype) && r.postscale == 1.0) {
    divideElements(buf, count, r.dtype, identity_.size);
  } else {
    scaleElements(buf, count, r.dtype, scaleFactor(r));
  }
}

void Executor::allreduce(const Response& r, const std::vector<PendingOp*>& ops) {
  const size_t esize = elementSize(r.dtype);
  const size_t total = static_cast<size_t>(r.totalElements());
  ++stats_.responses;
  stats_.bytesReduced += total * esize;
  void* buf;
  const bool inPlace = ops.size() == 1 && ops[0] != nullptr;
  if (inPlace) {
    // One tensor: reduce in place in its output, no fusion-buffer copy.
    const Entry& e = ops[0]->entry;
    if (e.input != e.output && total > 0) std::memcpy(e.output, e.input, total * esize);
    buf = e.output;
  } else {
    stats_.fusedTensors += ops.size() > 1 ? ops.size() : 0;
    buf = fusion_.data(total * esize);
    traceBegin(timeline::kMemcpyIn);
    size_t offset = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const size_t n = static_cast<size_t>(numElements(r.shapes[i]));
      char* dst = static_cast<char*>(buf) + offset * esize;
      if (ops[i] != nullptr) {
        if (n > 0) std::memcpy(dst, ops[i]->entry.input, n * esize);
      } else {
        fillNeutral(dst, n, r.dtype, r.reduceOp);
      }
      offset += n;
    }
    traceEnd(timeline::kMemcpyIn);
  }
  scaleElements(buf, total, r.dtype, r.prescale);
  ++stats_.backendCalls;
  traceBegin(collectiveSpan_, static_cast<int64_t>(total * esize));
  if (r.reduceOp == ReduceOp::kAdasum) {
    std::vector<size_t> counts(r.shapes.size());
    for (size_t i = 0; i < counts.size(); ++i) {
      counts[i] = static_cast<size_t>(numElements(r.shapes[i]));
    }
    adasum_.allreduce(*collectives_, buf, counts, r.dtype, identity_.rank, identity_.size);
    finishReduction(buf, total, r);
  } else if (isFloatingPoint(r.dtype)) {
    // The average's (and postscale's) multiply goes to the plane, which may
    // fold it into its own last pass over the buffer.
    collectives_->allreduceScaled(buf, total, r.dtype, backendOp(r.reduceOp),
                                  scaleFactor(r));
  } else {
    collectives_->allreduce(buf, total, r.dtype, backendOp(r.reduceOp));
    finishReduction(buf, total, r);
  }
  traceEnd(collectiveSpan_);
  if (!inPlace) {
    traceBegin(timeline::kMemcpyOut);
    size_t offset = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const size_t n = static_cast<size_t>(numElements(r.shapes[i]));
      if (ops[i] != nullptr && n > 0) {
        std::memcpy(ops[i]->entry.output, static_cast<char*>(buf) + offset * esize, n * esize);
      }
      offset += n;
    }
    traceEnd(timeline::kMemcpyOut);
  }
}

void Executor::broadcast(const Response& r, PendingOp* op) {
  const size_t count = static_cast<size_t>(numElements(r.shapes[0]));
  const size_t bytes = count * elementSize(r.dtype);
  ++stats_.responses;
  void* buf;
  if (op != nullptr) {
    const Entry& e = op->entry;
    if (identity_.rank == r.root && e.input != e.output && bytes > 0) {
      std::memcpy(e.output, e.input, bytes);
    }
    buf = e.output;
  } else {
    buf = scratch_.data(bytes);
  }
  ++stats_.backendCalls;
  traceBegin(collectiveSpan_, static_cast<int64_t>(bytes));
  collectives_->broadcast(buf, count, r.dtype, r.root);
  traceEnd(collectiveSpan_);
}

void Executor::allgather(const Response& r, PendingOp* op) {
  const int64_t row = rowElements(r.shapes[0]);
  auto [counts, shape] = gatherLayout(r, identity_.size);
  const int64_t rows = shape[0];
  ++stats_.responses;
  const size_t esize = elementSize(r.dtype);
  void* out;
  const void* in;
  if (op != nullptr) {
    out = op->entry.allocate(shape);
    in = op->entry.input;
    std::lock_guard<std::mutex> lock(op->handle->mu);
    op->handle->outputShape = shape;
    op->handle->receivedSplits.assign(r.rankDims.begin(), r.rankDims.end());
  } else {
    out = scratch_.data(static_cast<size_t>(rows * row) * esize);
    in = nullptr;
  }
  ++stats_.backendCalls;
  traceBegin(collectiveSpan_, rows * row * static_cast<int64_t>(esize));
  collectives_->allgatherv(in, out, counts, r.dtype);
  traceEnd(collectiveSpan_);
}

void Executor::alltoall(const Response& r, PendingOp* op) {
  const int64_t row = rowElements(r.shapes[0]);
  auto [send, recv, received, rows] = alltoallLayout(r, identity_.rank, identity_.size);
  const size_t esize = elementSize(r.dtype);
  void* out;
  const void* in = nullptr;  // joined: sends nothing (its row of rankDims is zeros)
  if (op != nullptr) {
    std::vector<int64_t> shape = op->msg.request.shape;
    shape[0] = rows;
    out = op->entry.allocate(shape);
    in = op->entry.input;
    std::lock_guard<std::mutex> lock(op->handle->mu);
    op->handle->outputShape = shape;
    op->handle->receivedSplits = received;
  } else {
    out = scratch_.data(static_cast<size_t>(rows * row) * esize);
  }
  ++stats_.responses;
  ++stats_.backendCalls;
  traceBegin(collectiveSpan_);
  collectives_->alltoallv(in, send, out, recv, r.dtype);
  traceEnd(collectiveSpan_);
}

void Executor::reducescatter(const Response& r, PendingOp* op) {
  const int64_t row = rowElements(r.shapes[0]);
  const int64_t rows = r.shapes[0].empty() ? 1 : r.shapes[0][0];
  std::vector<size_t> counts = evenSplit(rows, identity_.size);
  for (auto& c : counts) c *= static_cast<size_t>(row);
  const size_t total = static_cast<size_t>(rows * row);
  const size_t esize = elementSize(r.dtype);
  void* out;
  const void* in;
  if (op != nullptr) {
    std::vector<int64_t> shape = r.shapes[0];
    if (shape.empty()) shape.push_back(1);
    shape[0] = static_cast<int64_t>(evenSplit(rows, identity_.size)[identity_.rank]);
    out = op->entry.allocate(shape);
    {
      std::lock_guard<std::mutex> lock(op->handle->mu);
      op->handle->outputShape = shape;
    }
    in = op->entry.input;
    if (r.prescale != 1.0) {
      void* tmp = fusion_.data(total * esize);
      std::memcpy(tmp, in, total * esize);
      scaleElements(tmp, total, r.dtype, r.prescale);
      in = tmp;
    }
  } else {
    // Joined: the identity of the reduce op in, this rank's share dropped.
    char* buf = static_cast<char*>(fusion_.data((total + counts[identity_.rank]) * esize));
    fillNeutral(buf, total, r.dtype, r.reduceOp);
    in = buf;
    out = buf + total * esize;
  }
  ++stats_.responses;
  ++stats_.backendCalls;
  traceBegin(collectiveSpan_, static_cast<int64_t>(total * esize));
  collectives_->reducescatter(in, out, counts, r.dtype, backendOp(r.reduceOp));
  finishReduction(out, counts[identity_.rank], r);
  traceEnd(collectiveSpan_);
}

}  // namespace kolo
