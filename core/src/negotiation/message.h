// Negotiation messages as plain structs; wire/wire.h turns them into bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kolo/engine.h"

namespace kolo {

// A request as sent to the coordinator.
struct RequestMsg {
  Request request;
  std::string group;  // non-empty: member of a group negotiated as a unit
  int groupSize = 0;
};

struct RequestList {
  int rank = 0;
  std::vector<RequestMsg> requests;
};

enum class ResponseKind : uint8_t { kOk = 0, kError = 1, kJoinAck = 2, kJoinDone = 3 };

// What every rank executes, in the same order. A response covers one or
// more tensors (fused) sharing op, dtype, device, reduce op and scales.
struct Response {
  ResponseKind kind = ResponseKind::kOk;
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  DeviceKind device = DeviceKind::kCpu;
  ReduceOp reduceOp = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;  // one per name
  // allgather: first dimension of each rank's tensor, names.size() x size
  // (row-major); alltoall: rows sent from rank i to rank j, size x size.
  std::vector<int64_t> rankDims;
  std::string error;  // kError
  int rankArg = -1;   // kJoinAck: the rank that joined; kJoinDone: last to join

  int64_t totalElements() const;
  // The same kind, op, dtype, device, reduce op, scales and root, with no
  // tensors (names, shapes, rankDims) and no error.
  Response withoutTensors() const;
};

struct ResponseList {
  std::vector<Response> responses;
};

}  // namespace kolo
