#include "number_flags.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>

#include "usage_error.h"

namespace kolo::launcher {
namespace {

[[noreturn]] void refuse(const std::string& flag, const std::string& accepted,
                         const std::string& text) {
  throw UsageError(flag + " must be " + accepted + ", got " + (text.empty() ? "''" : text));
}

bool startsLikeANumber(const std::string& text) {
  return !text.empty() && !std::isspace(static_cast<unsigned char>(text.front()));
}

}  // namespace

CLI::Validator wholeFlag(const std::string& flag, long long min, long long max) {
  auto check = [flag, min, max](std::string& text) -> std::string {
    errno = 0;
    char* end = nullptr;
    const long long value = std::strtoll(text.c_str(), &end, 10);
    if (!startsLikeANumber(text) || end != text.c_str() + text.size()) {
      refuse(flag, "a whole number", text);
    }
    const bool low = errno == ERANGE ? value < 0 : value < min;
    const bool high = errno == ERANGE ? value > 0 : value > max;
    if (low || high) {
      if (low && min == 0 && max == INT_MAX) refuse(flag, "zero or more", text);
      if (min == INT_MIN || max == INT_MAX) {
        refuse(flag, low ? "at least " + std::to_string(min) : "at most " + std::to_string(max),
               text);
      }
      refuse(flag, "from " + std::to_string(min) + " to " + std::to_string(max), text);
    }
    text = std::to_string(value);  // CLI11 reads "010" as octal
    return "";
  };
  // --help's words for the range, as CLI11's own checks put them.
  std::string help;
  if (max == INT_MAX && (min == 0 || min == 1)) {
    help = min == 0 ? "NONNEGATIVE" : "POSITIVE";
  } else if (min != INT_MIN || max != INT_MAX) {
    help = "INT in [" + std::to_string(min) + " - " + std::to_string(max) + "]";
  }
  return CLI::Validator(check, help);
}

CLI::Validator numberFlag(const std::string& flag, Floor floor) {
  auto check = [flag, floor](std::string& text) -> std::string {
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (!startsLikeANumber(text) || end != text.c_str() + text.size()) {
      refuse(flag, "a number", text);
    }
    if (floor == Floor::kAny) return "";
    if (!std::isfinite(value)) refuse(flag, "a finite number", text);
    if (value < 0 || (floor == Floor::kPositive && value == 0)) {
      refuse(flag, floor == Floor::kZero ? "zero or more" : "positive", text);
    }
    return "";
  };
  return CLI::Validator(check, floor == Floor::kAny    ? ""
                               : floor == Floor::kZero ? "NONNEGATIVE"
                                                       : "POSITIVE");
}

}  // namespace kolo::launcher
