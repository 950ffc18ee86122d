// Error policy of the C++ layers: exceptions from a small typed hierarchy.
// Across threads (handles completed by the background loop) errors travel as
// a Status value and are re-thrown as the matching exception by wait().
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace kolo {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // caller's input is wrong (bad tensor, bad env value)
  kMismatch = 2,         // ranks disagree about a tensor
  kTimeout = 3,          // a bounded wait ran out
  kPeerFailure = 4,      // another rank died, stopped answering or failed
  kShutdown = 5,         // the engine was shut down
  kInternal = 6,         // a bug or an unexpected backend error
};

const char* toString(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

#define KOLO_DEFINE_ERROR(NAME, CODE) \
  class NAME : public Error {         \
   public:                            \
    explicit NAME(const std::string& message) : Error(CODE, message) {} \
  }

KOLO_DEFINE_ERROR(InvalidArgument, ErrorCode::kInvalidArgument);
KOLO_DEFINE_ERROR(Mismatch, ErrorCode::kMismatch);
KOLO_DEFINE_ERROR(Timeout, ErrorCode::kTimeout);
KOLO_DEFINE_ERROR(PeerFailure, ErrorCode::kPeerFailure);
KOLO_DEFINE_ERROR(ShutdownError, ErrorCode::kShutdown);
KOLO_DEFINE_ERROR(Internal, ErrorCode::kInternal);

#undef KOLO_DEFINE_ERROR

// Result of an asynchronous operation.
struct Status {
  ErrorCode code = ErrorCode::kOk;
  std::string message;

  bool ok() const { return code == ErrorCode::kOk; }
  static Status Ok() { return {}; }
  static Status fromCode(ErrorCode code, std::string message) {
    return Status{code, std::move(message)};
  }
  // Throws the exception type that matches code; no-op when ok().
  void throwIfError() const;
};

// Turns any exception into a Status (Error keeps its code).
Status statusFromException(const std::exception& e);

}  // namespace kolo

// Precondition check that throws InvalidArgument with file and line context.
#define KOLO_CHECK_ARG(cond, msg)                                 \
  do {                                                            \
    if (!(cond)) throw ::kolo::InvalidArgument(std::string(msg)); \
  } while (0)

// Invariant check: a failure is a bug in kolo.
#define KOLO_ENFORCE(cond, msg)                                            \
  do {                                                                     \
    if (!(cond))                                                           \
      throw ::kolo::Internal(std::string(__FILE__) + ":" +                 \
                             std::to_string(__LINE__) + ": " + (msg));     \
  } while (0)
