#include "logging.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace kolo {

std::shared_ptr<spdlog::logger> makeLogger(int rank, LogLevel level) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("kolo rank " + std::to_string(rank), sink);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  static const spdlog::level::level_enum kLevels[] = {
      spdlog::level::trace, spdlog::level::debug, spdlog::level::info,
      spdlog::level::warn,  spdlog::level::err,   spdlog::level::off};
  logger->set_level(kLevels[static_cast<int>(level)]);
  return logger;
}

}  // namespace kolo
