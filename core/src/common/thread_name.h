// Names the calling thread as `top`, ps -L, gdb and tools/cudacount show it
// ("kolo-loop", ...; at most 15 characters, longer ones are cut). kolo's
// own threads name themselves first thing, so that a profile tells their
// work from the training threads'.
#pragma once

#include <pthread.h>

#include <string>

namespace kolo {

inline void nameThisThread(const char* name) {
  const std::string cut = std::string(name).substr(0, 15);
  (void)pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace kolo
