// Tensor fusion: which responses share one buffer, and the buffer itself.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "message.h"

namespace kolo {

// Merges compatible allreduce responses (same dtype, device, reduce op and
// scales) into fused responses of at most thresholdBytes each, keeping the
// first-seen order of each fusion key. Deterministic: every rank computing
// this on the same input gets the same output. thresholdBytes 0 disables.
std::vector<Response> fuseResponses(std::vector<Response> responses,
                                    int64_t thresholdBytes);

// A host buffer allocated once and grown only when a larger fused response
// arrives (bounded by the fusion threshold), never per step.
class FusionBuffer {
 public:
  void* data(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0;
};

}  // namespace kolo
