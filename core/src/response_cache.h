// Response cache: after a tensor has been negotiated once, its response is
// kept under a bit position that is identical on every rank, so steady state
// needs only a bitwise-AND allreduce of "which cached tensors are ready".
//
// Identical on all ranks because every rank applies the same put/touch/erase
// calls in the same order (the executed response order). Loop thread only.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "message.h"

namespace kolo {

class ResponseCache {
 public:
  enum class Lookup { kMiss, kHit, kChanged };

  explicit ResponseCache(int capacity);

  int capacity() const { return capacity_; }
  bool enabled() const { return capacity_ > 0; }

  // Whether request matches the cached response under its name. On kHit and
  // kChanged, *bit is the entry's position.
  Lookup lookup(const Request& request, int* bit) const;

  // Caches a single-tensor response (ok kind, cacheable op). Returns the
  // bit it got; if that evicted another entry, *evicted is its bit (else -1).
  int put(const Response& response, int* evicted);

  // Marks bit as used now (LRU order).
  void touch(int bit);

  void erase(int bit);

  // Bit of the entry cached under name, or -1.
  int bitOf(const std::string& name) const;

  // The cached response at bit (must be occupied).
  const Response& at(int bit) const;
  bool occupied(int bit) const;

  static bool cacheable(OpType op);

 private:
  struct Slot {
    Response response;
    uint64_t lastUse = 0;
    bool used = false;
  };

  int capacity_;
  uint64_t clock_ = 0;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, int> byName_;
};

// True when the request asks for exactly what response describes.
bool matchesResponse(const Request& request, const Response& response);

}  // namespace kolo
