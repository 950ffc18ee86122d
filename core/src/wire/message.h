// Negotiation messages as plain structs; wire/wire.h turns them into bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kolo/engine.h"

namespace kolo {

// kProcessSet: the change every rank applies at this point of set 0's
// response order. A local change (localKey set) is submitted by the set's
// members alone and ready once all of them did; the members apply it at
// this point, every other rank ignores it.
struct ProcessSetChange {
  std::vector<int32_t> ranks;  // add a set of these ranks (ascending); empty: remove
  int32_t removeId = -1;       // remove this set
  std::string localKey;        // a local set's key (Engine::addLocalProcessSet)
  bool localRemove = false;    // with localKey: remove that set (ranks: its members)
  // With localKey: the submitting rank asks the other of ranks (a pair) to
  // connect their set for point-to-point messages; ready once it submitted.
  bool pairRequest = false;

  // A change of a local set (its members alone submit it).
  bool local() const { return !localKey.empty(); }
  bool operator==(const ProcessSetChange& o) const {
    return ranks == o.ranks && removeId == o.removeId && localKey == o.localKey &&
           localRemove == o.localRemove && pairRequest == o.pairRequest;
  }
  bool operator!=(const ProcessSetChange& o) const { return !(*this == o); }
};

// A request as sent to the coordinator.
struct RequestMsg {
  Request request;
  std::string group;  // non-empty: member of a group negotiated as a unit
  int groupSize = 0;
  ProcessSetChange setChange;  // kProcessSet only
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
  ProcessSetChange setChange;  // kProcessSet

  int64_t totalElements() const;
  // The same kind, op, dtype, device, reduce op, scales and root, with no
  // tensors (names, shapes, rankDims) and no error.
  Response withoutTensors() const;
};

struct ResponseList {
  std::vector<Response> responses;
};

// Point-to-point messages (Engine::send) are broadcasts from the sender in
// the pair's set, named "kolo.p2p.<tag>.<sender>.<n>" (sender: its rank of
// the job, so the two directions of a pair never share a name; n: the
// sender's count of messages to that peer with that tag); such a name is
// ready as soon as the sender submitted it, the receiver taking part
// without submitting.
namespace wire {
std::string messageName(int tag, int sender, uint64_t n);
// "kolo.p2p.<tag>.<n>", without the sender.
std::string messageName(int tag, uint64_t n);
bool isMessageName(const std::string& name);
// The tag and the place (n) of a message name (isMessageName).
int messageTag(const std::string& name);
uint64_t messageSeq(const std::string& name);
}  // namespace wire

// A request made through another API's call (Request::call) as messages
// describe it: "all_reduce(op=SUM) on float32[4]", with the device and the
// alltoall splits where they matter; the tensor alone ("float32[4]") for a
// request without a call.
std::string describeCall(const Request& q);

}  // namespace kolo
