// copyShared: the byte copy for data crossing the shared segment (a rank's
// own memory to its slot, a peer's slot to the rank's memory).
//
// Not memcpy: glibc 2.36 (Debian bookworm) copies 2 KiB and up with
// `rep movsb`, which on AMD Zen runs at about a fifth of the speed of plain
// vector moves when the source lines were just written by another core,
// the normal case here (bench_shm_planes --ranks 2, allreduce at 64 KiB:
// 26 us with memcpy, 5.8 us with vector moves). Newer glibc stops using
// `rep movsb` on AMD above the L2 size for the same reason.
//
// dst and src must not overlap. Thread-safe (no state).
#pragma once

#include <cstddef>

namespace kolo::comm::shm {

void copyShared(void* dst, const void* src, size_t bytes);

// The same with streaming (non-temporal) stores: dst's lines are not read
// first and do not stay in cache. For destinations larger than the cache.
void copySharedStreaming(void* dst, const void* src, size_t bytes);

}  // namespace kolo::comm::shm
