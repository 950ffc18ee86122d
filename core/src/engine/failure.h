// The error pending operations fail with after the ranks agreed to stop.
#pragma once

#include "kolo/error.h"
#include "wire/control.h"

namespace kolo {

// The status pending operations fail with after a coordinated stop.
Status stopStatus(const StopInfo& info, int myRank);

}  // namespace kolo
