#include "fusion.h"

#include <map>
#include <tuple>

namespace kolo {

int64_t Response::totalElements() const {
  int64_t n = 0;
  for (const auto& s : shapes) n += numElements(s);
  return n;
}

namespace {

using FusionKey = std::tuple<uint8_t, uint8_t, uint8_t, double, double>;

FusionKey keyOf(const Response& r) {
  return {static_cast<uint8_t>(r.dtype), static_cast<uint8_t>(r.device),
          static_cast<uint8_t>(r.reduceOp), r.prescale, r.postscale};
}

bool fusible(const Response& r) {
  return r.kind == ResponseKind::kOk && r.op == OpType::kAllreduce;
}

}  // namespace

std::vector<Response> fuseResponses(std::vector<Response> responses,
                                    int64_t thresholdBytes) {
  if (thresholdBytes <= 0 || responses.size() < 2) return responses;
  std::vector<Response> out;
  out.reserve(responses.size());
  struct Open {
    size_t index;   // in out
    int64_t bytes;  // fused so far
  };
  std::map<FusionKey, Open> open;  // per key, the response still accepting
  for (auto& r : responses) {
    if (!fusible(r)) {
      out.push_back(std::move(r));
      continue;
    }
    const int64_t bytes = r.totalElements() * static_cast<int64_t>(elementSize(r.dtype));
    if (bytes >= kUnfusedTensorBytes) {  // alone and in place; the open buffer stays open
      out.push_back(std::move(r));
      continue;
    }
    FusionKey key = keyOf(r);
    auto it = open.find(key);
    if (it != open.end()) {
      if (it->second.bytes + bytes <= thresholdBytes) {
        Response& f = out[it->second.index];
        for (auto& n : r.names) f.names.push_back(std::move(n));
        for (auto& s : r.shapes) f.shapes.push_back(std::move(s));
        it->second.bytes += bytes;
        continue;
      }
      open.erase(it);
    }
    out.push_back(std::move(r));
    if (bytes < thresholdBytes) open[key] = Open{out.size() - 1, bytes};
  }
  return out;
}

void* FusionBuffer::data(size_t bytes) {
  if (bytes > capacity_) {
    data_.reset(new char[bytes]);
    capacity_ = bytes;
  }
  return data_.get();
}

}  // namespace kolo
