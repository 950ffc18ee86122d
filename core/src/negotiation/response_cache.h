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

#include "wire/message.h"

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
  // Slots form a doubly linked list in use order (head: least recently
  // used), so touch, put and eviction are O(1) with thousands of tensors.
  struct Slot {
    Response response;
    int prev = -1;
    int next = -1;
    bool used = false;
  };
  void unlink(int bit);
  void linkAsNewest(int bit);

  int capacity_;
  std::vector<Slot> slots_;
  std::vector<int> free_;  // unused bits; the lowest is taken first
  int oldest_ = -1;
  int newest_ = -1;
  std::unordered_map<std::string, int> byName_;
};

// True when the request asks for exactly what response describes.
bool matchesResponse(const Request& request, const Response& response);

}  // namespace kolo
