// A call that may never return (a library's abort stuck on a dead peer or
// driver), made without letting it hang the caller: shutdown and failure
// handling stay bounded whatever the library does. And what such a stuck
// party may still write into, kept alive for good instead of freed.
//
// Threading: any thread. fn runs on a detached thread of its own, so
// everything it uses must stay valid until it returns, not only until
// callWithin does: capture by value or by shared_ptr.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

namespace kolo {

// Runs fn on a new thread and waits up to limit for it. True when fn
// returned (or threw: fn is best-effort cleanup, its exception is dropped)
// within limit; false when it is still running, and then it is left
// behind, detached, to finish or not on its own.
bool callWithin(std::chrono::milliseconds limit, std::function<void()> fn);

// Keeps object alive until the process exits, never destroyed: memory a
// device that did not stop may still write into (the tensors of a wedged
// GPU's work), or objects whose destructor would wait for it. Reachable
// from a global, so leak checkers do not report it. Any thread.
void keepForever(std::shared_ptr<void> object) noexcept;

}  // namespace kolo
