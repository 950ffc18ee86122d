#include "negotiation/fusion.h"

#include "comm/layout.h"

#include <map>
#include <tuple>

namespace kolo {

namespace {

using FusionKey = std::tuple<uint8_t, uint8_t, uint8_t, double, double>;

FusionKey keyOf(const Response& r) {
  return {static_cast<uint8_t>(r.dtype), static_cast<uint8_t>(r.device),
          static_cast<uint8_t>(r.reduceOp), r.prescale, r.postscale};
}

bool fusible(const Response& r) {
  return r.kind == ResponseKind::kOk && r.op == OpType::kAllreduce;
}

// Which responses share a fused response: one list of indices per output
// response, in output order.
std::vector<std::vector<size_t>> planFusion(const std::vector<const Response*>& responses,
                                            int64_t thresholdBytes) {
  std::vector<std::vector<size_t>> plan;
  plan.reserve(responses.size());
  struct Open {
    size_t index;   // in plan
    int64_t bytes;  // fused so far
  };
  std::map<FusionKey, Open> open;  // per key, the output still accepting
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = *responses[i];
    if (thresholdBytes <= 0 || !fusible(r)) {
      plan.push_back({i});
      continue;
    }
    const bool gpu = r.device == DeviceKind::kCuda;
    // What the response takes in the fused buffer (its layout's padding
    // included, as fusionLayout lays it out).
    int64_t bytes = 0;
    for (const auto& shape : r.shapes) {
      bytes += static_cast<int64_t>(fusedBytes(static_cast<uint64_t>(numElements(shape)),
                                               elementSize(r.dtype), fusionAlignment(r.device)));
    }
    if (!gpu && bytes >= kUnfusedTensorBytes) {  // alone and in place; the open buffer stays open
      plan.push_back({i});
      continue;
    }
    FusionKey key = keyOf(r);
    auto it = open.find(key);
    if (it != open.end()) {
      if (it->second.bytes + bytes <= thresholdBytes) {
        plan[it->second.index].push_back(i);
        it->second.bytes += bytes;
        continue;
      }
      open.erase(it);
    }
    plan.push_back({i});
    if (bytes < thresholdBytes) open[key] = Open{plan.size() - 1, bytes};
  }
  return plan;
}

std::vector<const Response*> pointersTo(const std::vector<Response>& responses) {
  std::vector<const Response*> out;
  out.reserve(responses.size());
  for (const auto& r : responses) out.push_back(&r);
  return out;
}

}  // namespace

std::vector<Response> fuseResponses(std::vector<Response> responses,
                                    int64_t thresholdBytes) {
  if (thresholdBytes <= 0 || responses.size() < 2) return responses;
  std::vector<Response> out;
  for (const auto& members : planFusion(pointersTo(responses), thresholdBytes)) {
    out.push_back(std::move(responses[members[0]]));
    Response& f = out.back();
    for (size_t k = 1; k < members.size(); ++k) {
      Response& r = responses[members[k]];
      for (auto& n : r.names) f.names.push_back(std::move(n));
      for (auto& s : r.shapes) f.shapes.push_back(std::move(s));
    }
  }
  return out;
}

std::vector<Response> fuseResponses(const std::vector<const Response*>& responses,
                                    int64_t thresholdBytes) {
  std::vector<Response> out;
  for (const auto& members : planFusion(responses, thresholdBytes)) {
    if (members.size() == 1) {
      out.push_back(*responses[members[0]]);
      continue;
    }
    // A fused response holds only what fusion keeps equal (fusible), names
    // and shapes.
    Response f = responses[members[0]]->withoutTensors();
    f.names.reserve(members.size());
    f.shapes.reserve(members.size());
    for (size_t i : members) {
      const Response& r = *responses[i];
      f.names.insert(f.names.end(), r.names.begin(), r.names.end());
      f.shapes.insert(f.shapes.end(), r.shapes.begin(), r.shapes.end());
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace kolo
