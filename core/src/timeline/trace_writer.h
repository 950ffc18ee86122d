// Chrome-trace (JSON array) file written by its own thread from a bounded
// queue, so the engine never waits on the disk.
//
// File layout: "[\n" then one event per line, each followed by ",\n". A
// process that dies mid-run leaves "[ ev, ev, ..., ev," which Chrome's
// trace viewer and Perfetto accept as is (a JSON array without its closing
// bracket is part of the trace format); close() appends a last event and
// "]" so strict JSON parsers read the file too.
//
// Threading: push() from one producer thread (the engine loop); close()
// from that thread or after it stopped. The writer thread owns the FILE.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kolo::timeline {

struct TraceEvent {
  const char* name = "";  // static string or owned by the Timeline
  int64_t ts = 0;         // microseconds
  int32_t tid = 0;
  char phase = 'i';    // 'B', 'E', 'X' (complete: ts .. ts+dur), 'i' (instant), 'M' (metadata)
  int64_t bytes = -1;  // "args": {"bytes": n} when >= 0
  int64_t dur = 0;     // 'X' events
  std::string label;   // 'M' events: the row or process name; others: "args": {"name": ...}
};

class TraceWriter {
 public:
  // Opens path for writing; throws InvalidArgument naming it on failure.
  TraceWriter(const std::string& path, int pid, size_t capacity);
  ~TraceWriter();  // close()

  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Never blocks on I/O: when capacity events are already waiting, the
  // event is dropped and counted.
  void push(TraceEvent event);

  // Writes what is queued, the closing event and "]", closes the file and
  // joins the writer thread. Idempotent.
  void close();

  uint64_t dropped() const;
  const std::string& path() const { return path_; }

 private:
  void runWriter();
  void write(const TraceEvent& e);

  const std::string path_;
  const int pid_;
  const size_t capacity_;
  FILE* file_ = nullptr;  // writer thread (and close() after the join)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TraceEvent> queue_;  // guarded by mu_
  bool closing_ = false;           // guarded by mu_
  uint64_t dropped_ = 0;           // guarded by mu_
  bool closed_ = false;            // close() caller only
  std::thread thread_;
};

// JSON string body with quotes, backslashes and control characters escaped.
std::string jsonEscape(const std::string& s);

}  // namespace kolo::timeline
