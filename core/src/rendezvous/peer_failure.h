// What a failing rank leaves in the rendezvous store, and how the survivors
// read it to name the rank that failed (the keys live under the engine
// generation's prefix).
#pragma once

#include <chrono>
#include <exception>
#include <string>

#include "kolo/config.h"
#include "kolo/error.h"
#include "kolo/store.h"

namespace kolo {

// Leaves this rank's abort message in the store so peers can name it even
// if the abort exchange itself cannot complete. Best effort, never throws.
void publishAbort(Store& store, int rank, const std::string& message);
// The first of ranks 0..size-1 that published an abort (publishAbort), as
// a PeerFailure naming it and its message; ok when none did. One store
// read while none did.
Status publishedAbort(Store& store, int size);

// Marks this rank as reachable through store (every engine does this once
// its backends are up), so diagnoseFailure knows which peers share the store:
// under plain mpirun each process has a private store and no peer can be
// named through it.
void publishPresence(Store& store, int rank);

// After the backend threw: finds out through the store which ranks are
// still alive and which left a message, and builds a PeerFailure naming
// them. A survivor waits for the others to say they are alive for up to
// min(timeout, 2 s) after a closed connection (a peer that is alive notices
// our failure within a cycle) and min(timeout, 5 s) after a timeout. Peers
// that never shared the store are not named. A failure of this rank's own
// (Internal: e.g. a device fault; InvalidArgument: e.g. a tensor on a
// second GPU) is returned as it is, at once, after leaving its message in
// the store for the peers (publishAbort). Never throws.
Status diagnoseFailure(const std::exception& error, Store& store, const Identity& identity,
                       std::chrono::milliseconds timeout);

}  // namespace kolo
