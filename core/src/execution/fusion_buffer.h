// The fusion buffer: where a fused response's tensors are packed for one
// collective (its layout: comm/layout.h).
#pragma once

#include <cstddef>
#include <memory>

namespace kolo {

// A host buffer allocated once and grown only when a larger fused response
// arrives (bounded by the fusion threshold), never per step. From the
// shared arena when there is one (kolo/shareable.h), so the shared-memory
// plane reduces fused responses in place too.
class FusionBuffer {
 public:
  void* data(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  std::shared_ptr<void> data_;
  size_t capacity_ = 0;
};

}  // namespace kolo
