#include "wire/message.h"

#include "common/ranks_text.h"

namespace kolo {

int64_t Response::totalElements() const {
  int64_t n = 0;
  for (const auto& s : shapes) n += numElements(s);
  return n;
}

Response Response::withoutTensors() const {
  Response r;
  r.kind = kind;
  r.op = op;
  r.dtype = dtype;
  r.device = device;
  r.reduceOp = reduceOp;
  r.prescale = prescale;
  r.postscale = postscale;
  r.root = root;
  return r;
}

std::string describeCall(const Request& q) {
  std::string s = q.call.empty() ? describe(q.dtype, q.shape)
                                 : q.call + " on " + describe(q.dtype, q.shape);
  if (q.device != DeviceKind::kCpu) s += std::string(" (") + toString(q.device) + ")";
  if (q.op == OpType::kAlltoall && !q.splits.empty()) s += " sending rows " + bracketed(q.splits);
  if (q.op == OpType::kAlltoall && !q.recvSplits.empty()) {
    s += " receiving rows " + bracketed(q.recvSplits);
  }
  return s;
}

}  // namespace kolo
