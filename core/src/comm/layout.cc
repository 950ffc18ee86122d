#include "comm/layout.h"

#include <string>

#include "kolo/error.h"

namespace kolo {

int64_t rowElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<size_t> evenSplit(int64_t rows, int size) {
  std::vector<size_t> out(size, static_cast<size_t>(rows / size));
  for (int i = 0; i < rows % size; ++i) ++out[i];
  return out;
}

GatherLayout gatherLayout(const Response& r, int size) {
  const int64_t row = rowElements(r.shapes[0]);
  GatherLayout g;
  g.counts.resize(size);
  int64_t rows = 0;
  for (int i = 0; i < size; ++i) {
    g.counts[i] = static_cast<size_t>(r.rankDims[i] * row);
    rows += r.rankDims[i];
  }
  g.shape = r.shapes[0];
  if (g.shape.empty()) g.shape.push_back(0);
  g.shape[0] = rows;
  return g;
}

AlltoallLayout alltoallLayout(const Response& r, int me, int size) {
  const int64_t row = rowElements(r.shapes[0]);
  AlltoallLayout a;
  a.send.resize(size);
  a.recv.resize(size);
  a.receivedRows.resize(size);
  for (int j = 0; j < size; ++j) {
    a.send[j] = static_cast<size_t>(r.rankDims[me * size + j] * row);
    a.receivedRows[j] = r.rankDims[j * size + me];
    a.recv[j] = static_cast<size_t>(a.receivedRows[j] * row);
    a.rows += a.receivedRows[j];
  }
  return a;
}

size_t fusionAlignment(DeviceKind device) {
  return device == DeviceKind::kCuda ? kGpuFusionAlignBytes : 1;
}

uint64_t fusedBytes(uint64_t count, size_t elementSize, size_t alignBytes) {
  const uint64_t bytes = count * elementSize;
  return (bytes + alignBytes - 1) / alignBytes * alignBytes;
}

FusionLayout fusionLayout(const std::vector<uint64_t>& counts, size_t elementSize,
                          size_t alignBytes) {
  KOLO_CHECK_ARG(elementSize > 0 && alignBytes > 0 &&
                     (alignBytes % elementSize == 0 || elementSize % alignBytes == 0),
                 "fusion layout: alignment " + std::to_string(alignBytes) +
                     " is neither a multiple nor a divisor of the element size " +
                     std::to_string(elementSize));
  // The alignment in elements; 1 (dense) when every element offset is aligned.
  const uint64_t step = alignBytes > elementSize ? alignBytes / elementSize : 1;
  FusionLayout layout;
  layout.offsets.resize(counts.size());
  uint64_t end = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const uint64_t start = (end + step - 1) / step * step;
    layout.offsets[i] = start;
    end = start + counts[i];
  }
  layout.total = end;
  return layout;
}

}  // namespace kolo
