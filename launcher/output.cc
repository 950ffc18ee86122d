#include "output.h"

#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <utility>

namespace kolo::launcher {

void LineSplitter::feed(std::string_view data,
                        const std::function<void(std::string_view)>& onLine) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(data);
      while (pending_.size() >= maxLine_) {
        onLine(std::string_view(pending_).substr(0, maxLine_));
        pending_.erase(0, maxLine_);
      }
      return;
    }
    if (pending_.empty()) {
      std::string_view line = data.substr(0, nl);
      while (line.size() > maxLine_) {
        onLine(line.substr(0, maxLine_));
        line.remove_prefix(maxLine_);
      }
      onLine(line);
    } else {
      pending_.append(data.substr(0, nl));
      std::string_view line = pending_;
      while (line.size() > maxLine_) {
        onLine(line.substr(0, maxLine_));
        line.remove_prefix(maxLine_);
      }
      onLine(line);
      pending_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LineSplitter::finish(const std::function<void(std::string_view)>& onLine) {
  if (!pending_.empty()) onLine(pending_);
  pending_.clear();
}

std::string linePrefix(int rank, StreamKind kind, bool timestamp) {
  std::string out;
  if (timestamp) {
    timeval tv{};
    gettimeofday(&tv, nullptr);
    struct tm tm {};
    localtime_r(&tv.tv_sec, &tm);
    char buf[64];
    size_t n = strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
    std::snprintf(buf + n, sizeof(buf) - n, ".%03d ", static_cast<int>(tv.tv_usec / 1000));
    out = buf;
  }
  out += "[" + std::to_string(rank) + "]";
  out += kind == StreamKind::kStdout ? "<stdout>:" : "<stderr>:";
  return out;
}

bool writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        usleep(1000);  // a non-blocking terminal or pipe is full; wait for it
        continue;
      }
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

OutputForwarder::OutputForwarder(int rank, StreamKind kind, int destFd, int fileFd,
                                 bool timestamp)
    : rank_(rank), kind_(kind), destFd_(destFd), fileFd_(fileFd), timestamp_(timestamp) {}

OutputForwarder::~OutputForwarder() {
  if (fileFd_ >= 0) close(fileFd_);
}

void OutputForwarder::interceptMarker(std::string marker, std::function<void()> onMarker) {
  marker_ = std::move(marker);
  onMarker_ = std::move(onMarker);
}

void OutputForwarder::emit(std::string_view line, bool terminated, std::string* out,
                           std::string* file) {
  if (!marker_.empty() && line == marker_ && terminated) {
    if (onMarker_) {
      auto call = std::move(onMarker_);
      onMarker_ = nullptr;
      call();
    }
    return;
  }
  lastLine_.assign(line.substr(0, 1000));
  if (fileFd_ >= 0) {
    file->append(line);
    if (terminated) *file += '\n';
  }
  *out += linePrefix(rank_, kind_, timestamp_);
  out->append(line);
  *out += '\n';
}

void OutputForwarder::flush(const std::string& out, const std::string& file) {
  if (!file.empty() && !writeAll(fileFd_, file)) {
    close(fileFd_);  // disk full or similar: keep forwarding to the terminal
    fileFd_ = -1;
  }
  if (!out.empty()) writeAll(destFd_, out);
}

void OutputForwarder::feed(std::string_view data) {
  std::string out, file;
  splitter_.feed(data, [&](std::string_view line) { emit(line, true, &out, &file); });
  flush(out, file);
}

void OutputForwarder::finish() {
  std::string out, file;
  splitter_.finish([&](std::string_view line) { emit(line, false, &out, &file); });
  flush(out, file);
}

}  // namespace kolo::launcher
