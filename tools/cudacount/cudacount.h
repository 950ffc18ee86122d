// kolo_cudacount: counts every CUDA runtime call of a process, per thread
// and per function, whichever library makes it (PyTorch, kolo, NCCL's
// host side). Preload it:
//
//   LD_PRELOAD=build/.../tools/cudacount/libkolo_cudacount.so ./train
//
// Each cuda* function libcudart exports has a trampoline here that counts
// the call and jumps to the real function (x86-64). torch.profiler leaves
// out calls such as cudaGetDevice; this does not. With KOLO_CUDACOUNT set
// to a path ("-": stderr; "%p" in it becomes the process id) the counts
// since the last reset are written there at exit, "<thread> <function>
// <calls>" per line, by a process that made any call. A thread is known by
// its name at its first call: kolo's threads are "kolo-loop",
// "kolo-watch", ...
//
// A program reads the counts around the code it measures through these
// functions (C: dlsym(RTLD_DEFAULT, ...); Python: ctypes.CDLL(None)); they
// exist only while the library is preloaded.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Forgets every count so far, of every thread.
void kolo_cudacount_reset(void);

// Calls since the last reset: of the calling thread (which = 0), of every
// other thread (1), or of all threads (2).
uint64_t kolo_cudacount_total(int which);

// Calls since the last reset of the threads whose name (pthread_getname_np,
// as at their first call) starts with prefix.
uint64_t kolo_cudacount_total_named(const char* prefix);

// The counts as text, "<thread name> <function> <calls>" per line, busiest
// first; writes at most size bytes (NUL included) and returns the length
// of the whole text.
size_t kolo_cudacount_report(char* buf, size_t size);

#ifdef __cplusplus
}
#endif
