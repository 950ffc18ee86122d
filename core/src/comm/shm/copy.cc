#include "comm/shm/copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kolo::comm::shm {
namespace {

// One cache line per iteration, four loads before four stores, with
// ordinary (Stream false) or streaming stores. Streaming copies reach dst's
// first line boundary with memcpy first (streaming stores need aligned
// lines) and end with a fence that orders them before whatever publishes
// them. The empty asm keeps the compiler from turning the loop back into a
// memcpy call. The tail (under a line, below memcpy's `rep movsb`
// threshold), or every byte where there is no SSE2, goes through memcpy.
template <bool Stream>
void copyLines(void* dst, const void* src, size_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  size_t i = 0;
#if defined(__SSE2__)
  if constexpr (Stream) {
    i = std::min(bytes, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
    std::memcpy(d, s, i);
  }
  auto load = [&](size_t at) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + at)); };
  auto store = [&](size_t at, __m128i v) {
    if constexpr (Stream) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + at), v);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + at), v);
    }
  };
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = load(i), b = load(i + 16), c = load(i + 32), e = load(i + 48);
    store(i, a);
    store(i + 16, b);
    store(i + 32, c);
    store(i + 48, e);
    asm volatile("" ::: "memory");
  }
  if constexpr (Stream) _mm_sfence();
#endif
  if (i < bytes) std::memcpy(d + i, s + i, bytes - i);
}

}  // namespace

void copyShared(void* dst, const void* src, size_t bytes) { copyLines<false>(dst, src, bytes); }

void copySharedStreaming(void* dst, const void* src, size_t bytes) {
  copyLines<true>(dst, src, bytes);
}

}  // namespace kolo::comm::shm
