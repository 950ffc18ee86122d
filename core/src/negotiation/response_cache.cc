#include "negotiation/response_cache.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "kolo/error.h"

namespace kolo {

ResponseCache::ResponseCache(int capacity)
    : capacity_(capacity), slots_(static_cast<size_t>(capacity > 0 ? capacity : 0)) {
  for (int bit = capacity_ - 1; bit >= 0; --bit) free_.push_back(bit);
}

bool ResponseCache::cacheable(OpType op) {
  return op == OpType::kAllreduce || op == OpType::kBroadcast ||
         op == OpType::kReducescatter;
}

bool matchesResponse(const Request& request, const Response& response) {
  return response.names.size() == 1 && response.names[0] == request.name &&
         response.op == request.op && response.dtype == request.dtype &&
         response.shapes[0] == request.shape && response.device == request.device &&
         response.reduceOp == request.reduceOp && response.prescale == request.prescale &&
         response.postscale == request.postscale &&
         (request.op != OpType::kBroadcast || response.root == request.root);
}

ResponseCache::Lookup ResponseCache::lookup(const Request& request, int* bit) const {
  auto it = byName_.find(request.name);
  if (it == byName_.end()) return Lookup::kMiss;
  *bit = it->second;
  return matchesResponse(request, slots_[it->second].response) ? Lookup::kHit
                                                               : Lookup::kChanged;
}

int ResponseCache::put(const Response& response, int* evicted) {
  KOLO_ENFORCE(enabled() && response.names.size() == 1, "bad cache put");
  *evicted = -1;
  const std::string& name = response.names[0];
  auto it = byName_.find(name);
  int bit = -1;
  if (it != byName_.end()) {
    bit = it->second;  // re-negotiated under the same name: replace in place
    unlink(bit);
  } else if (!free_.empty()) {
    bit = free_.back();
    free_.pop_back();
  } else {  // full: evict the least recently used
    bit = oldest_;
    unlink(bit);
    byName_.erase(slots_[bit].response.names[0]);
    *evicted = bit;
  }
  Slot& s = slots_[bit];
  s.response = response;
  s.used = true;
  linkAsNewest(bit);
  byName_[name] = bit;
  return bit;
}

void ResponseCache::touch(int bit) {
  if (!slots_.at(bit).used || bit == newest_) return;
  unlink(bit);
  linkAsNewest(bit);
}

void ResponseCache::erase(int bit) {
  Slot& s = slots_.at(bit);
  if (!s.used) return;
  byName_.erase(s.response.names[0]);
  unlink(bit);
  s = Slot{};
  // Keep "lowest free bit first", as every rank must pick the same one.
  free_.insert(std::upper_bound(free_.begin(), free_.end(), bit, std::greater<int>()), bit);
}

void ResponseCache::unlink(int bit) {
  Slot& s = slots_[bit];
  (s.prev >= 0 ? slots_[s.prev].next : oldest_) = s.next;
  (s.next >= 0 ? slots_[s.next].prev : newest_) = s.prev;
  s.prev = s.next = -1;
}

void ResponseCache::linkAsNewest(int bit) {
  Slot& s = slots_[bit];
  s.prev = newest_;
  s.next = -1;
  (newest_ >= 0 ? slots_[newest_].next : oldest_) = bit;
  newest_ = bit;
}

int ResponseCache::bitOf(const std::string& name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? -1 : it->second;
}

const Response& ResponseCache::at(int bit) const {
  const Slot& s = slots_.at(bit);
  KOLO_ENFORCE(s.used, "cache bit " + std::to_string(bit) + " is empty");
  return s.response;
}

bool ResponseCache::occupied(int bit) const {
  return bit >= 0 && bit < capacity_ && slots_[bit].used;
}

}  // namespace kolo
