#include "timeline/trace_writer.h"

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/thread_name.h"
#include "kolo/error.h"

namespace kolo::timeline {

std::string jsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

TraceWriter::TraceWriter(const std::string& path, int pid, size_t capacity)
    : path_(path), pid_(pid), capacity_(capacity) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    throw InvalidArgument("cannot create timeline file '" + path + "': " + std::strerror(errno));
  }
  std::fputs("[\n", file_);
  queue_.reserve(capacity_);
  thread_ = std::thread([this] {
    nameThisThread("kolo-timeline");
    runWriter();
  });
}

TraceWriter::~TraceWriter() { close(); }

void TraceWriter::push(TraceEvent event) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= capacity_) {
      ++dropped_;
      return;
    }
    queue_.push_back(std::move(event));
    // The writer also wakes on its own every few milliseconds; waking it per
    // event would cost a futex call on the engine's thread.
    wake = queue_.size() == capacity_ / 2;
  }
  if (wake) cv_.notify_one();
}

uint64_t TraceWriter::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void TraceWriter::runWriter() {
  std::vector<TraceEvent> batch;
  batch.reserve(capacity_);
  while (true) {
    bool closing;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(20),
                   [&] { return closing_ || queue_.size() >= capacity_ / 2; });
      batch.swap(queue_);
      closing = closing_;
    }
    for (const auto& e : batch) write(e);
    batch.clear();
    std::fflush(file_);
    if (closing) return;
  }
}

void TraceWriter::write(const TraceEvent& e) {
  const char* end = ",\n";
  if (e.phase == 'M') {
    std::fprintf(file_,
                 "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                 "\"args\":{\"name\":\"%s\"}}%s",
                 e.name, pid_, e.tid, jsonEscape(e.label).c_str(), end);
    return;
  }
  std::fprintf(file_, "{\"name\":\"%s\",\"ph\":\"%c\",\"ts\":%lld,\"pid\":%d,\"tid\":%d", e.name,
               e.phase, static_cast<long long>(e.ts), pid_, e.tid);
  if (e.phase == 'i') std::fputs(",\"s\":\"t\"", file_);
  if (e.phase == 'X') std::fprintf(file_, ",\"dur\":%lld", static_cast<long long>(e.dur));
  if (e.bytes >= 0 && !e.label.empty()) {
    std::fprintf(file_, ",\"args\":{\"bytes\":%lld,\"name\":\"%s\"}",
                 static_cast<long long>(e.bytes), jsonEscape(e.label).c_str());
  } else if (e.bytes >= 0) {
    std::fprintf(file_, ",\"args\":{\"bytes\":%lld}", static_cast<long long>(e.bytes));
  } else if (!e.label.empty()) {
    std::fprintf(file_, ",\"args\":{\"name\":\"%s\"}", jsonEscape(e.label).c_str());
  }
  std::fprintf(file_, "}%s", end);
}

void TraceWriter::close() {
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_one();
  thread_.join();
  // The writer thread is gone: file_ and queue_ are ours now.
  TraceEvent end;
  end.name = "TIMELINE_END";
  end.phase = 'i';
  end.ts = std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
               .count();
  end.bytes = -1;
  uint64_t dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : queue_) write(e);
    queue_.clear();
    dropped = dropped_;
  }
  write(end);
  std::fprintf(file_,
               "{\"name\":\"timeline_dropped_events\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"dropped\":%llu}}\n]\n",
               pid_, static_cast<unsigned long long>(dropped));
  std::fclose(file_);
  file_ = nullptr;
}

}  // namespace kolo::timeline
