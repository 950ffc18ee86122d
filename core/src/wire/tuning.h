// What the autotuner's rank 0 broadcasts when the tunables change
// (autotune/autotuner.h): every rank applies it at the same cycle.
#pragma once

#include <vector>

#include "kolo/engine.h"

namespace kolo::wire {

struct TuningDecision {
  Tunables tunables;
  bool final = false;  // the tuner converged; no further changes
};

std::vector<char> encode(const TuningDecision& d);
// Throws Internal on a malformed message.
TuningDecision decodeDecision(const std::vector<char>& bytes);

}  // namespace kolo::wire
