#include "timeline/timeline.h"

#include <cctype>
#include <chrono>
#include <utility>

namespace kolo::timeline {

const char* opSpanName(OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return "ALLREDUCE";
    case OpType::kAllgather:
      return "ALLGATHER";
    case OpType::kBroadcast:
      return "BROADCAST";
    case OpType::kAlltoall:
      return "ALLTOALL";
    case OpType::kReducescatter:
      return "REDUCESCATTER";
    case OpType::kBarrier:
      return "BARRIER";
    case OpType::kJoin:
      return "JOIN";
    case OpType::kProcessSet:
      return "PROCESS_SET";
  }
  return "UNKNOWN";
}

Timeline::Timeline(const std::string& path, int rank, bool markCycles, size_t capacity)
    : writer_(pathForRank(path, rank), rank, capacity), markCycles_(markCycles) {
  TraceEvent process;
  process.name = "process_name";
  process.phase = 'M';
  process.label = "rank " + std::to_string(rank);
  writer_.push(process);
  if (markCycles_) {
    TraceEvent row;
    row.name = "thread_name";
    row.phase = 'M';
    row.tid = 0;
    row.label = "cycles";
    writer_.push(row);
  }
}

std::string Timeline::pathForRank(const std::string& path, int rank) {
  if (rank == 0) return path;
  const std::string suffix = ".rank" + std::to_string(rank);
  const std::string json = ".json";
  if (path.size() > json.size() &&
      path.compare(path.size() - json.size(), json.size(), json) == 0) {
    return path.substr(0, path.size() - json.size()) + suffix + json;
  }
  return path + suffix;
}

int64_t Timeline::now() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int Timeline::rowOf(const std::string& tensorName) {
  auto it = rows_.find(tensorName);
  if (it != rows_.end()) return it->second;
  const int row = static_cast<int>(rows_.size()) + 1;  // row 0: cycles
  rows_.emplace(tensorName, row);
  TraceEvent meta;
  meta.name = "thread_name";
  meta.phase = 'M';
  meta.tid = row;
  meta.label = tensorName;
  writer_.push(std::move(meta));
  return row;
}

const char* Timeline::intern(const std::string& name) {
  auto it = interned_.find(name);
  if (it != interned_.end()) return it->second;
  names_.push_back(jsonEscape(name));
  const char* p = names_.back().c_str();
  interned_.emplace(name, p);
  return p;
}

const char* Timeline::collectiveName(const std::string& backend, OpType op) {
  std::string name;
  for (char c : backend) name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return intern(name + "_" + opSpanName(op));
}

void Timeline::complete(int row, const char* name, int64_t ts, int64_t dur) {
  TraceEvent e;
  e.name = name;
  e.ts = ts;
  e.tid = row;
  e.phase = 'X';
  e.dur = dur;
  writer_.push(std::move(e));
}

void Timeline::beginNamed(int row, const char* name, int64_t ts, const std::string& label) {
  push(row, 'B', name, ts, -1, label);
}

void Timeline::push(int row, char phase, const char* name, int64_t ts, int64_t bytes,
                    std::string label) {
  TraceEvent e;
  e.name = name;
  e.ts = ts;
  e.tid = row;
  e.phase = phase;
  e.bytes = bytes;
  e.label = std::move(label);
  writer_.push(std::move(e));
}

}  // namespace kolo::timeline
