// Bounded spinning for the engine's two hand-offs (caller -> loop thread,
// loop thread -> caller): a thread that expects its wake-up within
// microseconds polls for it instead of sleeping, which saves the sleeping
// thread's wake-up (a futex call and a scheduler round trip, often an
// inter-processor interrupt on a VM) on the critical path.
//
// The spin never outlasts its deadline and yields the core every few hundred
// nanoseconds, so a thread that needs the core (the loop thread, a peer rank
// on a machine with fewer cores than threads) gets it at once; the caller
// then sleeps as before.
#pragma once

#include <sched.h>

#include <chrono>

namespace kolo::detail {

// Tells the core a spin-wait is under way (x86 PAUSE, ARM YIELD).
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls ready() until it returns true (then returns true) or until the
// deadline passes (then returns false). Any thread.
template <class Ready>
bool spinUntil(std::chrono::steady_clock::time_point deadline, Ready&& ready) {
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
    cpuRelax();
    if (i % 32 == 0) {
      if (std::chrono::steady_clock::now() >= deadline) return ready();
      sched_yield();
    }
  }
}

}  // namespace kolo::detail
