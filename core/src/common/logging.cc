#include "common/logging.h"

#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace kolo {
namespace {

constexpr const char* kPattern = "[%Y-%m-%d %H:%M:%S.%f] [%n] [%l] %v";
constexpr const char* kPatternWithoutTime = "[%n] [%l] %v";  // KOLO_LOG_HIDE_TIME

spdlog::level::level_enum toSpdlog(LogLevel level) {
  static const spdlog::level::level_enum kLevels[] = {
      spdlog::level::trace, spdlog::level::debug, spdlog::level::info,
      spdlog::level::warn,  spdlog::level::err,   spdlog::level::off};
  return kLevels[static_cast<int>(level)];
}

LogLevel fromSpdlog(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return LogLevel::kTrace;
    case spdlog::level::debug: return LogLevel::kDebug;
    case spdlog::level::info: return LogLevel::kInfo;
    case spdlog::level::warn: return LogLevel::kWarning;
    case spdlog::level::err:
    case spdlog::level::critical: return LogLevel::kError;
    default: return LogLevel::kOff;
  }
}

// Forwards formatted lines (without the trailing newline) to a callback.
class CallbackSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit CallbackSink(std::function<void(LogLevel, const std::string&)> fn)
      : fn_(std::move(fn)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    std::string line(buf.data(), buf.size());
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    fn_(fromSpdlog(msg.level), line);
  }
  void flush_() override {}

 private:
  std::function<void(LogLevel, const std::string&)> fn_;
};

}  // namespace

std::shared_ptr<spdlog::logger> makeLogger(int rank, const Config& config) {
  std::vector<spdlog::sink_ptr> sinks{std::make_shared<spdlog::sinks::stderr_sink_mt>()};
  if (config.logSink) sinks.push_back(std::make_shared<CallbackSink>(config.logSink));
  auto logger = std::make_shared<spdlog::logger>("kolo rank " + std::to_string(rank),
                                                 sinks.begin(), sinks.end());
  logger->set_pattern(config.logHideTime ? kPatternWithoutTime : kPattern);
  logger->set_level(toSpdlog(config.logLevel));
  logger->flush_on(spdlog::level::warn);
  if (config.notices) {
    // Once per Config::fromEnv, however many engines are made from it
    // (elastic worlds, several engines in one process).
    std::call_once(config.notices->logged, [&] {
      for (const auto& line : config.notices->lines) logger->info("{}", line);
    });
  }
  return logger;
}

}  // namespace kolo
