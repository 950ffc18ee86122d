/// \file
/// Error policy of the C++ layers: exceptions from a small typed hierarchy.
/// Across threads (handles completed by the background loop) errors travel as
/// a Status value and are re-thrown as the matching exception by wait().
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace kolo {

/// What kind of failure an Error or Status carries; each code but kOk has
/// its exception class below.
enum class ErrorCode : int {
  kOk = 0,               ///< No error.
  kInvalidArgument = 1,  ///< caller's input is wrong (bad tensor, bad env value)
  kMismatch = 2,         ///< ranks disagree about a tensor
  kTimeout = 3,          ///< a bounded wait ran out
  kPeerFailure = 4,      ///< another rank died, stopped answering or failed
  kShutdown = 5,         ///< the engine was shut down
  kInternal = 6,         ///< a bug or an unexpected backend error
};

/// Lower-case name of code ("invalid argument", "peer failure", ...);
/// static storage.
const char* toString(ErrorCode code);

/// Base of every exception kolo throws on purpose. what() is the message,
/// which names what went wrong and, where there is one, how to fix it.
class Error : public std::runtime_error {
 public:
  /// An error of kind code; prefer throwing the subclass for that code.
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  /// The kind of failure (never kOk).
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

/// Defines one exception class of the hierarchy (undefined again below).
#define KOLO_DEFINE_ERROR(NAME, CODE) \
  class NAME : public Error {         \
   public:                            \
    explicit NAME(const std::string& message) : Error(CODE, message) {} \
  }

/// The caller's input is wrong: a bad tensor, argument or KOLO_* value, or
/// a call in the wrong state (before init()). Retrying the same call fails
/// the same way.
KOLO_DEFINE_ERROR(InvalidArgument, ErrorCode::kInvalidArgument);
/// Ranks submitted incompatible requests under one name (dtype, shape,
/// operation, root, ...); the message names the ranks and what differs.
KOLO_DEFINE_ERROR(Mismatch, ErrorCode::kMismatch);
/// A bounded wait ran out (rendezvous, a store get, a silent peer).
KOLO_DEFINE_ERROR(Timeout, ErrorCode::kTimeout);
/// Another rank died, stopped answering, aborted or failed; the message names
/// the rank and, when known, why. The engine cannot go on after it.
KOLO_DEFINE_ERROR(PeerFailure, ErrorCode::kPeerFailure);
/// The engine was shut down (on this rank, or another rank called shutdown)
/// while the operation was pending, or an operation was submitted after
/// this rank's shutdown.
KOLO_DEFINE_ERROR(ShutdownError, ErrorCode::kShutdown);
/// A bug in kolo or an unexpected backend error (the message says which).
KOLO_DEFINE_ERROR(Internal, ErrorCode::kInternal);

#undef KOLO_DEFINE_ERROR

/// \fn kolo::InvalidArgument::InvalidArgument(const std::string& message)
/// An InvalidArgument whose what() is message.
/// \fn kolo::Mismatch::Mismatch(const std::string& message)
/// A Mismatch whose what() is message.
/// \fn kolo::Timeout::Timeout(const std::string& message)
/// A Timeout whose what() is message.
/// \fn kolo::PeerFailure::PeerFailure(const std::string& message)
/// A PeerFailure whose what() is message.
/// \fn kolo::ShutdownError::ShutdownError(const std::string& message)
/// A ShutdownError whose what() is message.
/// \fn kolo::Internal::Internal(const std::string& message)
/// An Internal error whose what() is message.

/// Result of an asynchronous operation: how errors cross threads (from the
/// engine's background thread to a Handle's waiter). A plain value.
struct Status {
  ErrorCode code = ErrorCode::kOk;  ///< kOk, or the kind of failure.
  std::string message;              ///< The error's message; empty when ok.

  /// True when code is kOk.
  bool ok() const { return code == ErrorCode::kOk; }
  /// A successful status.
  static Status Ok() { return {}; }
  /// A status of kind code with message.
  static Status fromCode(ErrorCode code, std::string message) {
    return Status{code, std::move(message)};
  }
  /// Throws the exception type that matches code; no-op when ok().
  void throwIfError() const;
};

/// Turns any exception into a Status (Error keeps its code; any other
/// exception becomes kInternal with its what()).
Status statusFromException(const std::exception& e);

}  // namespace kolo

/// Precondition check: throws kolo::InvalidArgument(msg) when cond is false.
/// The message is the caller's (no file and line: it is meant for users).
#define KOLO_CHECK_ARG(cond, msg)                                 \
  do {                                                            \
    if (!(cond)) throw ::kolo::InvalidArgument(std::string(msg)); \
  } while (0)

/// Invariant check: throws kolo::Internal("file:line: msg") when cond is
/// false; a failure is a bug in kolo.
#define KOLO_ENFORCE(cond, msg)                                            \
  do {                                                                     \
    if (!(cond))                                                           \
      throw ::kolo::Internal(std::string(__FILE__) + ":" +                 \
                             std::to_string(__LINE__) + ": " + (msg));     \
  } while (0)
