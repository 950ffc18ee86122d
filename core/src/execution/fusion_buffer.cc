#include "execution/fusion_buffer.h"

#include "kolo/shareable.h"

namespace kolo {

void* FusionBuffer::data(size_t bytes) {
  if (bytes > capacity_) {
    data_.reset();  // the old block goes back first
    data_ = allocateShareable(bytes);
    if (data_ == nullptr) data_ = std::shared_ptr<char[]>(new char[bytes]);
    capacity_ = bytes;
  }
  return data_.get();
}

}  // namespace kolo
