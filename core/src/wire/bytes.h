// Length-prefixed little-endian fields for the small messages of wire/
// (control, stall, tuning, start). ByteReader checks every bound and throws
// kolo::Internal("malformed <what> message: ...") instead of reading past
// the end, so a corrupt or hostile message is an error, never a crash.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kolo/error.h"

namespace kolo::wire {

class ByteWriter {
 public:
  void u8(uint8_t v) { raw(&v, sizeof v); }
  void u32(uint32_t v) { raw(&v, sizeof v); }
  void i64(int64_t v) { raw(&v, sizeof v); }
  void f64(double v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  std::vector<char> take() { return std::move(out_); }

 private:
  void raw(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    out_.insert(out_.end(), c, c + n);
  }
  std::vector<char> out_;
};

class ByteReader {
 public:
  // what names the message in errors ("stall check").
  ByteReader(const std::vector<char>& in, const char* what) : in_(in), what_(what) {}
  uint8_t u8() { return fixed<uint8_t>(); }
  uint32_t u32() { return fixed<uint32_t>(); }
  int64_t i64() { return fixed<int64_t>(); }
  double f64() { return fixed<double>(); }
  std::string str() {
    const uint32_t n = u32();
    need(n);
    std::string s(in_.data() + pos_, n);
    pos_ += n;
    return s;
  }
  // A count of items that each take at least one byte: bounded by what is left.
  uint32_t count() {
    const uint32_t n = u32();
    if (n > in_.size() - pos_) fail("bad count");
    return n;
  }
  // Throws unless every byte was read.
  void done() const {
    if (pos_ != in_.size()) fail("trailing bytes");
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw Internal("malformed " + std::string(what_) + " message: " + why);
  }

 private:
  template <typename T>
  T fixed() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  void need(size_t n) const {
    if (in_.size() - pos_ < n) fail("truncated");
  }
  const std::vector<char>& in_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace kolo::wire
