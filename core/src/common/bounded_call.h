// A call that may never return (a library's abort stuck on a dead peer or
// driver), made without letting it hang the caller: shutdown and failure
// handling stay bounded whatever the library does.
//
// Threading: any thread. fn runs on a detached thread of its own, so
// everything it uses must stay valid until it returns, not only until
// callWithin does: capture by value or by shared_ptr.
#pragma once

#include <chrono>
#include <functional>

namespace kolo {

// Runs fn on a new thread and waits up to limit for it. True when fn
// returned (or threw: fn is best-effort cleanup, its exception is dropped)
// within limit; false when it is still running, and then it is left
// behind, detached, to finish or not on its own.
bool callWithin(std::chrono::milliseconds limit, std::function<void()> fn);

}  // namespace kolo
