// A strict, minimal JSON reader for the observability tests: enough to
// check that timeline files parse and to walk their events. Throws
// std::runtime_error on anything that is not JSON.
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kolo::test::json {

struct Value {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double number = 0;
  std::string str;
  std::vector<Value> array;
  std::map<std::string, Value> object;

  const Value& operator[](const std::string& key) const {
    auto it = object.find(key);
    if (kind != kObject || it == object.end()) throw std::runtime_error("no key " + key);
    return it->second;
  }
  bool has(const std::string& key) const { return kind == kObject && object.count(key); }
};

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  Value parseDocument() {
    Value v = value();
    ws();
    if (pos_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw std::runtime_error("invalid JSON at offset " + std::to_string(pos_) + ": " + why);
  }
  void ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  char peek() {
    ws();
    if (pos_ >= s_.size()) fail("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }
  Value value() {
    Value v;
    char c = peek();
    if (c == '{') {
      v.kind = Value::kObject;
      ++pos_;
      if (peek() == '}') return ++pos_, v;
      while (true) {
        if (peek() != '"') fail("expected key");
        std::string key = string();
        expect(':');
        v.object[key] = value();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::kArray;
      ++pos_;
      if (peek() == ']') return ++pos_, v;
      while (true) {
        v.array.push_back(value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Value::kString;
      v.str = string();
      return v;
    }
    if (literal("true")) {
      v.kind = Value::kBool;
      v.b = true;
      return v;
    }
    if (literal("false")) {
      v.kind = Value::kBool;
      return v;
    }
    if (literal("null")) return v;
    const char* begin = s_.c_str() + pos_;
    char* end = nullptr;
    v.number = std::strtod(begin, &end);
    if (end == begin || !(c == '-' || std::isdigit(static_cast<unsigned char>(c))))
      fail("bad value");
    pos_ += end - begin;
    v.kind = Value::kNumber;
    return v;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("bad escape");
      char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u':
          if (pos_ + 4 > s_.size()) fail("bad \\u escape");
          out += static_cast<char>(std::strtol(s_.substr(pos_, 4).c_str(), nullptr, 16));
          pos_ += 4;
          break;
        default:
          fail("bad escape");
      }
    }
  }

  const std::string& s_;
  size_t pos_ = 0;
};

inline Value parse(const std::string& text) { return Parser(text).parseDocument(); }

}  // namespace kolo::test::json
