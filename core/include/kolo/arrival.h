/// \file
/// Telling kolorun that a rank reached rendezvous. kolorun stops a job whose
/// ranks do not arrive within --start-timeout; an Engine tells it by itself,
/// a program that meets its peers another way (the c10d backend, through
/// torch's store, which kolorun does not watch) calls announceArrival.
#pragma once

#include <chrono>
#include <string>

#include "kolo/config.h"

namespace kolo {

/// The store key that says rank arrived ("kolo/arrived/<rank>").
std::string arrivalKey(int rank);

/// When env is kolorun's (launchInfoFromEnv: launcher "kolo" with a
/// rendezvous store), sets this rank's arrivalKey in kolorun's store,
/// connecting within timeout, and returns true; returns false (and does
/// nothing) in any other environment. Throws what connecting throws
/// (Timeout, PeerFailure). Any thread; each call connects anew, so a caller
/// that may call it often remembers that it did.
bool announceArrival(std::chrono::milliseconds timeout, const EnvLookup& env = processEnv());

}  // namespace kolo
