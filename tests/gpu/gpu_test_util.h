// Helpers for tests that need a CUDA device. A missing GPU is the only
// reason to skip, and the skip says so.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device/cuda/memory.h"

namespace kolo::test {

// Empty when a CUDA device is usable; else why not.
std::string noGpuReason();

#define KOLO_REQUIRE_GPU()                                                     \
  do {                                                                         \
    const std::string kolo_why_ = ::kolo::test::noGpuReason();                 \
    if (!kolo_why_.empty()) {                                                  \
      GTEST_SKIP() << "no CUDA device: GPU tests run on a GPU machine via "    \
                      "scripts/gpu-check ("                                    \
                   << kolo_why_ << ")";                                        \
    }                                                                          \
  } while (0)

// Device memory holding a copy of host bytes; freed on destruction.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes);
  DeviceBytes(const void* host, size_t bytes);
  ~DeviceBytes();
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  void* get() const { return ptr_; }
  std::vector<char> download() const;
  void download(void* host) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kolo::test
