// kolo's Store over torch's c10d::Store: how a kolo process group meets the
// other ranks through the store init_process_group hands it (env://,
// tcp://, file://, torchrun's), with no rendezvous of its own.
#pragma once

#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "kolo/store.h"

namespace kolo::torch::detail {

// A kolo::Store whose keys and values live in store. Thread-safe as the
// c10d store is (TCPStore, FileStore, HashStore, PrefixStore are). A wait
// that runs out throws kolo::Timeout; any other failure of the c10d store
// throws kolo::PeerFailure with its message. localAddress(): the address of
// this host's interface that routes to MASTER_ADDR, when that is set and
// not a loopback address; else that of the host's name; else empty.
std::shared_ptr<kolo::Store> adaptStore(c10::intrusive_ptr<::c10d::Store> store);

}  // namespace kolo::torch::detail
