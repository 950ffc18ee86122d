// Timeline: what the engine loop records about each tensor, as Chrome-trace
// spans on one row per tensor name. The loop holds a Timeline* that is null
// when no timeline runs, so the cost when off is that null check.
//
// Rows and spans (all times in microseconds of the steady clock):
//   <OP> (e.g. ALLREDUCE)            enqueue .. completion, containing
//     NEGOTIATE                      enqueue .. response known on this rank
//       READY (instant)              this rank announced the tensor
//     QUEUE                          response known .. its execution starts
//     MEMCPY_IN_FUSION_BUFFER        fused responses only
//     <BACKEND>_<OP> (GLOO_ALLREDUCE) the data-plane call, args.bytes
//     MEMCPY_OUT_FUSION_BUFFER       fused responses only
// CUDA responses end the <OP> span once their GPU work is enqueued; when
// that work has run, its phases follow on the same rows as complete spans
// with the device's times: WAIT_FOR_DATA (the inputs' ready events),
// MEMCPY_IN_FUSION_BUFFER (pack kernel), NCCL_ALLREDUCE (the collective),
// MEMCPY_OUT_FUSION_BUFFER (unpack kernel).
// plus, with markCycles, a CYCLE instant on row 0 for every cycle that had
// work. pid is the rank.
//
// Threading: loop thread only (construction and close() may happen on any
// thread while the loop does not use the object).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>

#include "kolo/types.h"
#include "timeline/trace_writer.h"

namespace kolo::timeline {

inline constexpr const char* kNegotiate = "NEGOTIATE";
inline constexpr const char* kReady = "READY";
inline constexpr const char* kQueue = "QUEUE";
inline constexpr const char* kWaitForData = "WAIT_FOR_DATA";
inline constexpr const char* kMemcpyIn = "MEMCPY_IN_FUSION_BUFFER";
inline constexpr const char* kMemcpyOut = "MEMCPY_OUT_FUSION_BUFFER";
inline constexpr const char* kCycle = "CYCLE";

// "ALLREDUCE", "ALLGATHER", ...
const char* opSpanName(OpType op);

class Timeline {
 public:
  // Throws InvalidArgument when the file cannot be created.
  Timeline(const std::string& path, int rank, bool markCycles, size_t capacity = 1 << 16);

  // The file rank writes for a user-given path: rank 0 writes path itself,
  // rank r > 0 "x.rank<r>.json" for "x.json", else "path.rank<r>".
  static std::string pathForRank(const std::string& path, int rank);

  // Microseconds on the steady clock (the ts of every event).
  static int64_t now();

  // The row of a tensor; announces its name on first use.
  int rowOf(const std::string& tensorName);

  void begin(int row, const char* name, int64_t ts, int64_t bytes = -1) {
    push(row, 'B', name, ts, bytes);
  }
  // begin() with "args": {"name": label} (a row of several operations, such
  // as the c10d calls of one kind: each span names its call).
  void beginNamed(int row, const char* name, int64_t ts, const std::string& label);
  void end(int row, const char* name, int64_t ts) { push(row, 'E', name, ts, -1); }
  void instant(int row, const char* name, int64_t ts) { push(row, 'i', name, ts, -1); }
  // A span whose end is known already (GPU phases, written once they ran).
  void complete(int row, const char* name, int64_t ts, int64_t dur);
  void markCycle(int64_t ts) {
    if (markCycles_) push(0, 'i', kCycle, ts, -1);
  }

  // A name that lives as long as this Timeline ("GLOO_ALLREDUCE").
  const char* intern(const std::string& name);

  // "<BACKEND>_<OP>" for a backend name such as "gloo".
  const char* collectiveName(const std::string& backend, OpType op);

  void close() { writer_.close(); }
  uint64_t dropped() const { return writer_.dropped(); }
  const std::string& path() const { return writer_.path(); }

 private:
  void push(int row, char phase, const char* name, int64_t ts, int64_t bytes,
            std::string label = {});

  TraceWriter writer_;
  const bool markCycles_;
  std::unordered_map<std::string, int> rows_;
  std::deque<std::string> names_;  // stable storage behind intern()
  std::unordered_map<std::string, const char*> interned_;
};

}  // namespace kolo::timeline
