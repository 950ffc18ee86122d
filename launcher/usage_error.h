// The one error kolorun reports before (or instead of) running a job: bad
// flags, hosts, files or programs. main() prints it as one line and exits 2.
#pragma once

#include <stdexcept>
#include <string>

namespace kolo::launcher {

// Exit status for every error caught before the job runs.
constexpr int kUsageExitCode = 2;

// what() is one line that names the problem and, where there is one, the fix.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace kolo::launcher
