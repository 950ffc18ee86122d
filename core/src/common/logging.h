// Rank-tagged logging through spdlog. One logger per Engine (no global
// registry), writing to stderr:
//   "[2026-11-22 12:00:00.123456] [kolo rank 1] [warning] ..."
// and, when Config::logSink is set, also to that callback (same line, same
// level filter). Loggers are thread-safe; any thread may log.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "kolo/config.h"

namespace kolo {

// The first call for a Config made by Config::fromEnv (or a copy of it) also
// logs its notices (unused or overridden HOROVOD_* variables) at info level.
std::shared_ptr<spdlog::logger> makeLogger(int rank, const Config& config);

}  // namespace kolo
