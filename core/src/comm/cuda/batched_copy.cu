// The batched copy kernel. Block b copies chunk b: it finds its tensor by a
// binary search over the descriptors' firstChunk, then moves up to
// chunkElements elements with 16-byte vector accesses where the source and
// destination alignments allow it (head and tail elements one by one).
#include "comm/cuda/batched_copy.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "comm/cuda/check.h"
#include "kolo/error.h"

namespace kolo::comm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread

struct CopyOp {
  template <typename T>
  __device__ T operator()(T x) const { return x; }
};

// Scaling does the arithmetic of kolo::scaleElements on the CPU, so GPU and
// CPU results agree bit for bit: float64 in double, float32 in float with the
// factor rounded to float, fp16/bf16 in float rounded once, integers in
// double truncated toward zero and cast back through int64.
template <typename T>
struct ScaleOp {
  double scale;
  __device__ T operator()(T x) const {
    const double v = trunc(static_cast<double>(x) * scale);
    long long w = 0;
    if (v >= 9223372036854775807.0) {
      w = 9223372036854775807LL;
    } else if (v <= -9223372036854775807.0) {
      w = -9223372036854775807LL - 1;
    } else if (v == v) {
      w = static_cast<long long>(v);
    }
    return static_cast<T>(w);
  }
};

template <>
struct ScaleOp<float> {
  double scale;
  __device__ float operator()(float x) const { return __fmul_rn(x, static_cast<float>(scale)); }
};

template <>
struct ScaleOp<double> {
  double scale;
  __device__ double operator()(double x) const { return __dmul_rn(x, scale); }
};

template <>
struct ScaleOp<__half> {
  double scale;
  __device__ __half operator()(__half x) const {
    return __float2half_rn(__fmul_rn(__half2float(x), static_cast<float>(scale)));
  }
};

template <>
struct ScaleOp<__nv_bfloat16> {
  double scale;
  __device__ __nv_bfloat16 operator()(__nv_bfloat16 x) const {
    return __float2bfloat16_rn(__fmul_rn(__bfloat162float(x), static_cast<float>(scale)));
  }
};

template <typename T>
struct DivideOp {
  int64_t divisor;
  __device__ T operator()(T x) const {
    return static_cast<T>(static_cast<int64_t>(x) / divisor);
  }
};

// The descriptor whose chunks include chunk: the last one with firstChunk <= chunk.
__device__ const DeviceCopyDesc& findDesc(const DeviceCopyDesc* descs, uint32_t n,
                                          uint64_t chunk) {
  uint32_t lo = 0, hi = n;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (descs[mid].firstChunk <= chunk) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return descs[lo];
}

template <typename T, typename Op>
__device__ void copyRange(const T* src, T* dst, uint64_t n, const Op& op) {
  constexpr int kVec = 16 / sizeof(T);
  const uintptr_t sa = reinterpret_cast<uintptr_t>(src);
  const uintptr_t da = reinterpret_cast<uintptr_t>(dst);
  uint64_t head = n;  // elements before the vector body (all of them when unaligned)
  uint64_t vectors = 0;
  if ((sa & 15) == (da & 15)) {
    head = ((16 - (da & 15)) & 15) / sizeof(T);
    if (head > n) head = n;
    vectors = (n - head) / kVec;
  }
  const uint64_t tail = head + vectors * kVec;
  for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = op(src[i]);
  const uint4* s4 = reinterpret_cast<const uint4*>(src + head);
  uint4* d4 = reinterpret_cast<uint4*>(dst + head);
  const uint64_t stride = static_cast<uint64_t>(blockDim.x) * kUnroll;
  uint64_t base = threadIdx.x;
  for (; base + (kUnroll - 1) * blockDim.x < vectors; base += stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = s4[base + u * blockDim.x];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      T* e = reinterpret_cast<T*>(&v[u]);
#pragma unroll
      for (int j = 0; j < kVec; ++j) e[j] = op(e[j]);
      d4[base + u * blockDim.x] = v[u];
    }
  }
  for (; base < vectors; base += blockDim.x) {
    uint4 v = s4[base];
    T* e = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) e[j] = op(e[j]);
    d4[base] = v;
  }
  for (uint64_t i = tail + threadIdx.x; i < n; i += blockDim.x) dst[i] = op(src[i]);
}

template <typename T>
__device__ void fillRange(T* dst, uint64_t n, uint64_t bits) {
  T value;
  memcpy(&value, &bits, sizeof(T));
  for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = value;
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads)
    batchedCopyKernel(const DeviceCopyDesc* descs, uint32_t numDescs, uint64_t chunkElements,
                      Op op, uint64_t fillBits) {
  const uint64_t chunk = blockIdx.x;
  const DeviceCopyDesc& d = findDesc(descs, numDescs, chunk);
  const uint64_t begin = (chunk - d.firstChunk) * chunkElements;
  const uint64_t n = min(chunkElements, d.count - begin);
  T* dst = static_cast<T*>(d.dst) + begin;
  if (d.src == nullptr) {
    fillRange(dst, n, fillBits);  // neutral values are not transformed
    return;
  }
  copyRange(static_cast<const T*>(d.src) + begin, dst, n, op);
}

template <typename T, typename Op>
void launch(const DeviceCopyDesc* descs, uint32_t numDescs, uint64_t chunks,
            uint64_t chunkElements, Op op, uint64_t fillBits, cudaStream_t stream) {
  batchedCopyKernel<T, Op><<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(
      descs, numDescs, chunkElements, op, fillBits);
  KOLO_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launchBatchedCopy(const DeviceCopyDesc* deviceDescs, uint32_t numDescs, uint64_t chunks,
                       uint64_t chunkElements, DataType dtype, const CopyTransform& t,
                       cudaStream_t stream) {
  if (chunks == 0) return;
  KOLO_ENFORCE(chunks <= 0x7fffffffULL, "batched copy: too many chunks in one launch");
  const auto* d = deviceDescs;
  const uint64_t f = t.fillBits;
  using Kind = CopyTransform::Kind;
  if (t.kind == Kind::kCopy) {
    switch (elementSize(dtype)) {
      case 1: return launch<uint8_t>(d, numDescs, chunks, chunkElements, CopyOp{}, f, stream);
      case 2: return launch<uint16_t>(d, numDescs, chunks, chunkElements, CopyOp{}, f, stream);
      case 4: return launch<uint32_t>(d, numDescs, chunks, chunkElements, CopyOp{}, f, stream);
      case 8: return launch<uint64_t>(d, numDescs, chunks, chunkElements, CopyOp{}, f, stream);
    }
  }
  const double s = t.scale;
  if (t.kind == Kind::kScale) {
    switch (dtype) {
      case DataType::kFloat32:
        return launch<float>(d, numDescs, chunks, chunkElements, ScaleOp<float>{s}, f, stream);
      case DataType::kFloat64:
        return launch<double>(d, numDescs, chunks, chunkElements, ScaleOp<double>{s}, f,
                              stream);
      case DataType::kFloat16:
        return launch<__half>(d, numDescs, chunks, chunkElements, ScaleOp<__half>{s}, f, stream);
      case DataType::kBFloat16:
        return launch<__nv_bfloat16>(d, numDescs, chunks, chunkElements,
                                     ScaleOp<__nv_bfloat16>{s}, f, stream);
      case DataType::kInt32:
        return launch<int32_t>(d, numDescs, chunks, chunkElements, ScaleOp<int32_t>{s}, f, stream);
      case DataType::kInt64:
        return launch<int64_t>(d, numDescs, chunks, chunkElements, ScaleOp<int64_t>{s}, f, stream);
      case DataType::kInt16:
        return launch<int16_t>(d, numDescs, chunks, chunkElements, ScaleOp<int16_t>{s}, f, stream);
      case DataType::kInt8:
        return launch<int8_t>(d, numDescs, chunks, chunkElements, ScaleOp<int8_t>{s}, f, stream);
      case DataType::kUInt8:
        return launch<uint8_t>(d, numDescs, chunks, chunkElements, ScaleOp<uint8_t>{s}, f, stream);
      default: break;
    }
  }
  if (t.kind == Kind::kDivide) {
    const int64_t q = t.divisor;
    switch (dtype) {
      case DataType::kInt32:
        return launch<int32_t>(d, numDescs, chunks, chunkElements, DivideOp<int32_t>{q}, f, stream);
      case DataType::kInt64:
        return launch<int64_t>(d, numDescs, chunks, chunkElements, DivideOp<int64_t>{q}, f, stream);
      case DataType::kInt16:
        return launch<int16_t>(d, numDescs, chunks, chunkElements, DivideOp<int16_t>{q}, f, stream);
      case DataType::kInt8:
        return launch<int8_t>(d, numDescs, chunks, chunkElements, DivideOp<int8_t>{q}, f, stream);
      case DataType::kUInt8:
        return launch<uint8_t>(d, numDescs, chunks, chunkElements, DivideOp<uint8_t>{q}, f, stream);
      default: break;
    }
  }
  throw InvalidArgument(std::string("batched copy: transform not supported for ") +
                        toString(dtype));
}

}  // namespace kolo::comm::cuda
