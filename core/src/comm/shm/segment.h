// Segment: one POSIX shared-memory mapping shared by the ranks of a host.
//
// Names are unguessable ("/kolo-" + 32 hex digits from getrandom) and the
// object is created exclusively with mode 0600, so only processes of the
// same user that learned the name can open it; kolo passes the name only
// through the job's authenticated rendezvous store. The name is removed as
// soon as every rank has the mapping (Group does that), so a crash later
// leaves nothing in /dev/shm; the memory lives as long as a mapping does.
//
// Threading: a Segment is owned by one object; the memory it maps is
// shared and synchronised by its users (group.h).
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace kolo::comm::shm {

class Segment {
 public:
  // Creates, sizes and maps a new segment of `bytes` (zero-filled). Throws
  // Internal naming the system call and errno text on failure (e.g. a full
  // /dev/shm).
  static Segment create(size_t bytes);

  // Maps the segment `name` created by a peer. Throws InvalidArgument when
  // the name does not have the form create() gives (it came from the store,
  // so it is not trusted), or when the object's size is not `bytes`;
  // Internal when it cannot be opened or mapped.
  static Segment open(const std::string& name, size_t bytes);

  // Removes `name` from /dev/shm; a missing name is not an error. Never
  // throws. Existing mappings stay valid.
  static void unlink(const std::string& name) noexcept;

  // True for names of the form create() gives.
  static bool validName(const std::string& name);

  Segment() = default;
  ~Segment();
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  Segment(char* data, size_t size, std::string name)
      : data_(data), size_(size), name_(std::move(name)) {}

  char* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
};

}  // namespace kolo::comm::shm
