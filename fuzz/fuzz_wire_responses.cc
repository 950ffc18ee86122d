// libFuzzer target: ResponseList decoding. Contract (wire/wire.h): any bytes
// either decode or throw kolo::Internal; anything that decodes re-encodes to
// bytes that decode again. Any other exception, crash or sanitizer report is
// a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kolo/error.h"
#include "wire/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<char> bytes(reinterpret_cast<const char*>(data),
                          reinterpret_cast<const char*>(data) + size);
  for (int worldSize : {1, 4, 64}) {
    try {
      kolo::ResponseList list = kolo::wire::decodeResponseList(bytes, worldSize);
      kolo::wire::decodeResponseList(kolo::wire::encode(list), worldSize);
    } catch (const kolo::Internal&) {
    }
  }
  return 0;
}
