#include "engine/request_check.h"

#include <algorithm>

#include "engine/process_set.h"
#include "kolo/build_config.h"

namespace kolo {

void checkRequest(const Request& q, const Entry& e, const ProcessSetInfo& set,
                  const Config& config) {
  auto fail = [&](const std::string& what) {
    throw InvalidArgument("'" + q.name + "' (" + toString(q.op) + "): " + what);
  };
  if (q.name.empty()) throw InvalidArgument("every operation needs a non-empty name");
  if (q.name.rfind("kolo.", 0) == 0) fail("names starting with 'kolo.' are reserved");
  if (q.op == OpType::kJoin || q.op == OpType::kBarrier || q.op == OpType::kProcessSet) {
    fail("use Engine::join() / barrier() / addProcessSet() / removeProcessSet() instead of "
         "enqueue");
  }
  if (static_cast<int>(q.op) >= kNumOpTypes) fail("unknown operation");
  if (static_cast<int>(q.dtype) >= kNumDataTypes) fail("unknown dtype");
  for (int64_t d : q.shape) {
    if (d < 0) fail("negative dimension in shape " + describe(q.dtype, q.shape));
  }
  if (q.device != DeviceKind::kCpu && q.reduceOp == ReduceOp::kAdasum &&
      q.op == OpType::kAllreduce) {
    fail("Adasum of CUDA tensors is not supported yet (it runs on the CPU data plane); "
         "reduce a CPU copy of the tensor");
  }
  const bool reduces = q.op == OpType::kAllreduce || q.op == OpType::kReducescatter;
  if (q.device != DeviceKind::kCpu) {
    if (!KOLO_WITH_CUDA && !config.deviceRuntime) {
      fail("tensor is on a CUDA device but this build of kolo has no CUDA support; move it "
           "to the CPU first, or use a kolo built with KOLO_WITH_CUDA=ON");
    }
    if (reduces && q.dtype == DataType::kInt16 && config.gpuOperations == "nccl") {
      fail("NCCL has no 16-bit integer type, so int16 CUDA tensors cannot be reduced with "
           "KOLO_GPU_OPERATIONS=nccl; convert the tensor to int32, or set "
           "KOLO_GPU_OPERATIONS=gloo");
    }
  }
  if (reduces && q.dtype == DataType::kBool &&
      (q.reduceOp == ReduceOp::kAverage)) {
    fail("average is not defined for bool tensors; use sum (logical or), min or max");
  }
  if ((q.prescale != 1.0 || q.postscale != 1.0) && q.dtype == DataType::kBool) {
    fail("prescale/postscale factors are not defined for bool tensors");
  }
  if (q.reduceOp == ReduceOp::kAdasum && reduces) {
    if (q.op != OpType::kAllreduce) fail("Adasum is an allreduce operation only");
    if (!isFloatingPoint(q.dtype)) {
      fail(std::string("Adasum needs a floating-point tensor (float16, bfloat16, float32 or "
                       "float64), got ") + toString(q.dtype));
    }
  }
  if (static_cast<int>(q.reduceOp) >= kNumReduceOps) fail("unknown reduce op");
  const int64_t n = numElements(q.shape);
  if (n > 0 && e.input == nullptr) fail("input pointer is null");
  switch (q.op) {
    case OpType::kAllreduce:
    case OpType::kBroadcast:
      if (n > 0 && e.output == nullptr) fail("output pointer is null");
      if (q.op == OpType::kBroadcast && set.id == 0 &&
          (q.root < 0 || q.root >= set.size())) {
        fail("root rank " + std::to_string(q.root) + " is not a rank (size " +
             std::to_string(set.size()) + ")");
      }
      if (q.op == OpType::kBroadcast && set.id != 0 &&
          !std::binary_search(set.ranks.begin(), set.ranks.end(), q.root)) {
        fail("root rank " + std::to_string(q.root) + " is not a member of " +
             processSetLabel(set.id, set.ranks) +
             " (root_rank is a rank of the job, not of the set)");
      }
      break;
    case OpType::kAllgather:
    case OpType::kAlltoall:
    case OpType::kReducescatter:
      if (!e.allocate) fail("needs an output allocator (the output size is negotiated)");
      if (q.shape.empty()) fail("needs a tensor with at least one dimension");
      break;
    default:
      break;
  }
  if (q.op == OpType::kAlltoall && !q.splits.empty()) {
    if (q.splits.size() != static_cast<size_t>(set.size())) {
      fail("splits has " + std::to_string(q.splits.size()) + " entries; need one per rank" +
           std::string(set.id == 0 ? "" : " of the process set") + " (" +
           std::to_string(set.size()) + ")");
    }
    int64_t sum = 0;
    for (int64_t s : q.splits) {
      if (s < 0) fail("negative split");
      sum += s;
    }
    if (sum != q.shape[0]) {
      fail("splits add up to " + std::to_string(sum) + " rows but the tensor has " +
           std::to_string(q.shape[0]));
    }
  }
  if (!q.call.empty() && config.cacheCapacity > 0) {
    // The cache matches a request by name, dtype and shape, not by call: a
    // name reused with another call could take a stale response.
    fail("a request with a call (" + q.call +
         ") needs an engine without a response cache (Config::cacheCapacity = 0)");
  }
  if (!q.recvSplits.empty()) {
    if (q.op != OpType::kAlltoall) fail("receive splits are for alltoall only");
    if (q.recvSplits.size() != static_cast<size_t>(set.size())) {
      fail("receive splits have " + std::to_string(q.recvSplits.size()) +
           " entries; need one per rank" +
           std::string(set.id == 0 ? "" : " of the process set") + " (" +
           std::to_string(set.size()) + ")");
    }
    for (int64_t s : q.recvSplits) {
      if (s < 0) fail("negative receive split");
    }
  }
}

}  // namespace kolo
