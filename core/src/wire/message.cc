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

namespace wire {

namespace {
constexpr char kMessagePrefix[] = "kolo.p2p.";
}  // namespace

std::string messageName(int tag, int sender, uint64_t n) {
  return kMessagePrefix + std::to_string(tag) + "." + std::to_string(sender) + "." +
         std::to_string(n);
}

std::string messageName(int tag, uint64_t n) {
  return kMessagePrefix + std::to_string(tag) + "." + std::to_string(n);
}

bool isMessageName(const std::string& name) { return name.rfind(kMessagePrefix, 0) == 0; }

int messageTag(const std::string& name) {
  const size_t start = sizeof(kMessagePrefix) - 1;
  return std::stoi(name.substr(start, name.find('.', start) - start));
}

uint64_t messageSeq(const std::string& name) {
  return std::stoull(name.substr(name.rfind('.') + 1));
}

}  // namespace wire

}  // namespace kolo
