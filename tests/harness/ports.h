// A TCP port for a test's server that another process binds later (a
// launcher's store, rank 0's store): free on every address, and below the
// kernel's ephemeral range (32768 up by default). A port the kernel picked
// for a probe (bind to 0) lies in that range, so another test's outgoing
// connection could be given it before the server binds it (CI once failed
// "port 34521 on 0.0.0.0 is already in use").
#pragma once

#include <cstdint>
#include <random>
#include <stdexcept>

#include "kolo/error.h"
#include "kolo/tcp_store.h"

namespace kolo::test {

// A port in [20000, 32000) nothing listens on now; with pair, its
// predecessor is free too (rank 0 serves on MASTER_PORT + 1).
inline uint16_t freeListenPort(bool pair = false) {
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = static_cast<uint16_t>(20001 + rng() % 11999);
    try {
      TcpStoreServer probe("0.0.0.0", port, "probe");
      if (pair) TcpStoreServer before("0.0.0.0", static_cast<uint16_t>(port - 1), "probe");
      return port;
    } catch (const InvalidArgument&) {
      // in use: another one
    }
  }
  throw std::runtime_error("test: no free TCP port in 20000-31999");
}

}  // namespace kolo::test
