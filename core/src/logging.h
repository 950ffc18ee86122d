// Rank-tagged logging through spdlog. One Logger per Engine (no global
// registry), writing to stderr: "[2026-11-22 12:00:00.123] [kolo rank 1] [warning] ...".
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "kolo/config.h"

namespace kolo {

std::shared_ptr<spdlog::logger> makeLogger(int rank, LogLevel level);

}  // namespace kolo
