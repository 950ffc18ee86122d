// Versioned, bounds-checked encoding of negotiation messages (FlatBuffers).
// decode* verify the buffer and every value's range and throw
// kolo::Internal("malformed ... message: why") on anything else; they never
// read out of bounds.
#pragma once

#include <vector>

#include "wire/message.h"

namespace kolo::wire {

constexpr uint32_t kVersion = 1;

std::vector<char> encode(const RequestList& list);
std::vector<char> encode(const ResponseList& list);

// worldSize bounds ranks, roots and per-rank vectors.
RequestList decodeRequestList(const std::vector<char>& bytes, int worldSize);
ResponseList decodeResponseList(const std::vector<char>& bytes, int worldSize);

}  // namespace kolo::wire
