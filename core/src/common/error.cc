#include "kolo/error.h"

namespace kolo {

const char* toString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kMismatch: return "mismatch";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kPeerFailure: return "peer failure";
    case ErrorCode::kShutdown: return "shut down";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

void Status::throwIfError() const {
  switch (code) {
    case ErrorCode::kOk: return;
    case ErrorCode::kInvalidArgument: throw InvalidArgument(message);
    case ErrorCode::kMismatch: throw Mismatch(message);
    case ErrorCode::kTimeout: throw Timeout(message);
    case ErrorCode::kPeerFailure: throw PeerFailure(message);
    case ErrorCode::kShutdown: throw ShutdownError(message);
    case ErrorCode::kInternal: throw Internal(message);
  }
  throw Internal(message);
}

Status statusFromException(const std::exception& e) {
  if (const auto* err = dynamic_cast<const Error*>(&e)) {
    return Status{err->code(), err->what()};
  }
  return Status{ErrorCode::kInternal, e.what()};
}

}  // namespace kolo
