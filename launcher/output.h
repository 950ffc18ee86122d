// Forwarding worker output: split each stream into lines, prefix them
// "[RANK]<stdout>:" and write whole lines, so lines of different ranks never
// mix mid-line. Single-threaded: the job loop owns every forwarder.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace kolo::launcher {

// Splits a byte stream into lines. A line longer than maxLine is emitted in
// maxLine pieces (each a line of its own) so memory stays bounded.
class LineSplitter {
 public:
  explicit LineSplitter(size_t maxLine = 1 << 20) : maxLine_(maxLine) {}

  // Calls onLine for every complete line in data (without its '\n').
  void feed(std::string_view data, const std::function<void(std::string_view)>& onLine);
  // Emits the unterminated last line, if any.
  void finish(const std::function<void(std::string_view)>& onLine);

 private:
  std::string pending_;
  size_t maxLine_;
};

enum class StreamKind { kStdout, kStderr };

// "[3]<stdout>:" (or with a leading timestamp).
std::string linePrefix(int rank, StreamKind kind, bool timestamp);

// Writes all of data to fd, retrying short writes and EINTR; on a broken
// destination (EPIPE) the output is dropped and false returned.
bool writeAll(int fd, std::string_view data);

// One stream of one rank: its lines into the optional per-rank file as they
// were, prefixed lines to dest. Each feed() ends in a single write of whole lines.
class OutputForwarder {
 public:
  OutputForwarder(int rank, StreamKind kind, int destFd, int fileFd, bool timestamp);
  ~OutputForwarder();
  OutputForwarder(const OutputForwarder&) = delete;
  OutputForwarder& operator=(const OutputForwarder&) = delete;

  // Lines equal to `marker` are not printed; the first one calls onMarker.
  // (Remote ranks announce that their program is starting this way.)
  void interceptMarker(std::string marker, std::function<void()> onMarker);

  void feed(std::string_view data);
  void finish();  // end of stream: flush the partial last line with a '\n'
  // The last line seen (for messages about ranks that could not start).
  const std::string& lastLine() const { return lastLine_; }

 private:
  // terminated: the line ended in '\n' (false only for a last partial line).
  void emit(std::string_view line, bool terminated, std::string* out, std::string* file);
  void flush(const std::string& out, const std::string& file);

  int rank_;
  StreamKind kind_;
  int destFd_;
  int fileFd_;
  bool timestamp_;
  LineSplitter splitter_;
  std::string marker_;
  std::function<void()> onMarker_;
  std::string lastLine_;
};

}  // namespace kolo::launcher
