// Turning a stop or a backend failure into the error every rank reports.
#pragma once

#include <chrono>
#include <exception>
#include <string>

#include "controller.h"
#include "kolo/config.h"
#include "kolo/error.h"
#include "kolo/store.h"

namespace kolo {

// Leaves this rank's abort message in the store so peers can name it even
// if the abort exchange itself cannot complete. Best effort, never throws.
void publishAbort(Store& store, int rank, const std::string& message);

// The status pending operations fail with after a coordinated stop.
Status stopStatus(const StopInfo& info, int myRank);

// After the backend threw: finds out through the store which ranks are
// still alive (bounded by min(timeout, 5 s)) and which left a message, and
// builds a PeerFailure naming them. Never throws.
Status diagnoseFailure(const std::exception& error, Store& store, const Identity& identity,
                       std::chrono::milliseconds timeout);

}  // namespace kolo
