#include "common.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace kolo::bench {

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

std::string bytesLabel(size_t bytes) {
  if (bytes >= (size_t(1) << 20) && bytes % (size_t(1) << 20) == 0) {
    return std::to_string(bytes >> 20) + " MiB";
  }
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

kolo::Config engineConfig(const std::string& backend) {
  kolo::Config config = kolo::Config::fromEnv();
  // "shm": kolo's default on one host (shared memory; Gloo across hosts).
  config.controller = backend == "shm" ? "gloo" : backend;
  config.cpuOperations = config.controller;
  config.shm = backend == "shm";
  config.logLevel = kolo::LogLevel::kError;
  return config;
}

OutputFile openForWriting(const std::string& path) {
  OutputFile f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  return f;
}

void sumFloats(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<float*>(out);
  auto* x = static_cast<const float*>(a);
  auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

std::vector<Shape> readShapeFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read shape file " + path);
  std::vector<Shape> shapes;
  std::string line;
  std::getline(in, line);  // header: name,shape,numel
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream row(line);
    Shape s;
    std::string dims;
    std::getline(row, s.name, ',');
    std::getline(row, dims, ',');
    s.numel = 1;
    std::istringstream d(dims);
    for (std::string dim; std::getline(d, dim, 'x');) {
      s.dims.push_back(std::stoll(dim));
      s.numel *= static_cast<size_t>(s.dims.back());
    }
    shapes.push_back(std::move(s));
  }
  if (shapes.empty()) throw std::runtime_error("no shapes in " + path);
  return shapes;
}

}  // namespace kolo::bench
