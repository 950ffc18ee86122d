// The batched copy kernel. A launch's descriptors are its kernel parameter
// (__grid_constant__: read in place from the parameter space, never copied
// to local memory). Blocks stride over the launch's chunks; for each chunk
// a block finds its tensor by a binary search over the descriptors'
// firstChunk, starting from the previous chunk's tensor, then moves up to
// chunkElements elements with 16-byte vector accesses where the source and
// destination alignments allow it (head and tail elements one by one).
#include "device/cuda/batched_copy.h"

#include <cstring>
#include <string>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/cuda/check.h"
#include "kolo/error.h"

// Up to 32764 bytes of kernel parameters need CUDA 12.1 and sm_70 (Volta).
#if CUDART_VERSION < 12010
#error "kolo's batched copy passes up to 32 KB of kernel parameters: it needs CUDA 12.1+"
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "kolo's batched copy needs sm_70 (Volta) or newer: set CMAKE_CUDA_ARCHITECTURES >= 70"
#endif

namespace kolo::device::cuda {
namespace {

constexpr int kThreads = static_cast<int>(kCopyThreadsPerBlock);
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

// src and dst are __restrict__ although an in-place transform passes
// src == dst: every element is loaded once, by the thread that then stores
// it from that load, and no element is loaded after any store to it, so no
// load can be reordered past a store it depends on, nor read a stale line
// through the read-only cache. Partly overlapping ranges are not allowed.
template <typename T, typename Op>
__device__ void copyRange(const T* __restrict__ src, T* __restrict__ dst, uint64_t n,
                          const Op& op) {
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
  const uint4* __restrict__ s4 = reinterpret_cast<const uint4*>(src + head);
  uint4* __restrict__ d4 = reinterpret_cast<uint4*>(dst + head);
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
__device__ void fillRange(T* __restrict__ dst, uint64_t n, uint64_t bits) {
  T value;
  memcpy(&value, &bits, sizeof(T));
  for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = value;
}

// Everything a launch passes, as one kernel parameter. Descs is the tier:
// how many descriptors the parameter has room for.
template <uint32_t Descs, typename Op>
struct KernelArgs {
  DeviceCopyDesc descs[Descs];  // the first numDescs are the launch's
  uint64_t chunks;              // over all descriptors
  uint64_t chunkElements;
  uint64_t fillBits;
  uint32_t numDescs;
  Op op;
};

template <typename T, uint32_t Descs, typename Op>
__global__ void __launch_bounds__(kThreads)
    batchedCopyKernel(const __grid_constant__ KernelArgs<Descs, Op> args) {
  uint32_t i = 0;  // the descriptor of the block's previous chunk: chunks only grow
  for (uint64_t chunk = blockIdx.x; chunk < args.chunks; chunk += gridDim.x) {
    i = descOfChunk(args.descs, i, args.numDescs, chunk);
    const DeviceCopyDesc& d = args.descs[i];
    const uint64_t begin = (chunk - d.firstChunk) * args.chunkElements;
    const uint64_t n = min(args.chunkElements, d.count - begin);
    T* dst = static_cast<T*>(d.dst) + begin;
    if (d.src == nullptr) {
      fillRange(dst, n, args.fillBits);  // neutral values are not transformed
    } else {
      copyRange(static_cast<const T*>(d.src) + begin, dst, n, args.op);
    }
  }
}

template <typename T, uint32_t Descs, typename Op>
void launchTier(const LaunchShape& shape, Op op, uint64_t fillBits, cudaStream_t stream) {
  static_assert(sizeof(KernelArgs<Descs, Op>) <= kMaxKernelParamBytes,
                "kernel parameters over CUDA's 32764-byte limit");
  static_assert(sizeof(KernelArgs<Descs, Op>) - sizeof(DeviceCopyDesc) * Descs <=
                    kKernelParamOverheadBytes,
                "copy_plan.h's kKernelParamOverheadBytes is too small");
  KernelArgs<Descs, Op> args;  // descriptors past numDescs stay unset: never read
  std::memcpy(args.descs, shape.descs, sizeof(DeviceCopyDesc) * shape.numDescs);
  args.chunks = shape.chunks;
  args.chunkElements = shape.chunkElements;
  args.fillBits = fillBits;
  args.numDescs = shape.numDescs;
  args.op = op;
  batchedCopyKernel<T, Descs, Op><<<shape.grid, kThreads, 0, stream>>>(args);
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return;
  if (sizeof(args) > 4096) {
    // Parameters over 4 KiB also need a driver of CUDA 12.1 or newer.
    throw Internal("batched copy: launch with " + std::to_string(sizeof(args)) +
                   " bytes of kernel parameters failed: " + describe(err) +
                   " (kolo needs an NVIDIA driver for CUDA 12.1 or newer, R530+)");
  }
  throwCudaError(err, "batched copy kernel launch");
}

// The launch in the tier its descriptor count needs: 2 kernels per (T, Op).
template <typename T, typename Op>
void launch(const LaunchShape& shape, Op op, uint64_t fillBits, cudaStream_t stream) {
  if (descTier(shape.numDescs) == kSmallDescsPerLaunch) {
    launchTier<T, kSmallDescsPerLaunch>(shape, op, fillBits, stream);
  } else {
    launchTier<T, kMaxDescsPerLaunch>(shape, op, fillBits, stream);
  }
}

}  // namespace

void launchBatchedCopy(const LaunchShape& shape, DataType dtype, const CopyTransform& t,
                       cudaStream_t stream) {
  if (shape.chunks == 0) return;
  KOLO_ENFORCE(shape.numDescs >= 1 && shape.numDescs <= kMaxDescsPerLaunch && shape.grid >= 1,
               "batched copy: launch of " + std::to_string(shape.numDescs) +
                   " descriptors over " + std::to_string(shape.grid) + " blocks");
  const uint64_t f = t.fillBits;
  using Kind = CopyTransform::Kind;
  if (t.kind == Kind::kCopy) {
    switch (elementSize(dtype)) {
      case 1: return launch<uint8_t>(shape, CopyOp{}, f, stream);
      case 2: return launch<uint16_t>(shape, CopyOp{}, f, stream);
      case 4: return launch<uint32_t>(shape, CopyOp{}, f, stream);
      case 8: return launch<uint64_t>(shape, CopyOp{}, f, stream);
    }
  }
  const double s = t.scale;
  if (t.kind == Kind::kScale) {
    switch (dtype) {
      case DataType::kFloat32: return launch<float>(shape, ScaleOp<float>{s}, f, stream);
      case DataType::kFloat64: return launch<double>(shape, ScaleOp<double>{s}, f, stream);
      case DataType::kFloat16: return launch<__half>(shape, ScaleOp<__half>{s}, f, stream);
      case DataType::kBFloat16:
        return launch<__nv_bfloat16>(shape, ScaleOp<__nv_bfloat16>{s}, f, stream);
      case DataType::kInt32: return launch<int32_t>(shape, ScaleOp<int32_t>{s}, f, stream);
      case DataType::kInt64: return launch<int64_t>(shape, ScaleOp<int64_t>{s}, f, stream);
      case DataType::kInt16: return launch<int16_t>(shape, ScaleOp<int16_t>{s}, f, stream);
      case DataType::kInt8: return launch<int8_t>(shape, ScaleOp<int8_t>{s}, f, stream);
      case DataType::kUInt8: return launch<uint8_t>(shape, ScaleOp<uint8_t>{s}, f, stream);
      default: break;
    }
  }
  if (t.kind == Kind::kDivide) {
    const int64_t q = t.divisor;
    switch (dtype) {
      case DataType::kInt32: return launch<int32_t>(shape, DivideOp<int32_t>{q}, f, stream);
      case DataType::kInt64: return launch<int64_t>(shape, DivideOp<int64_t>{q}, f, stream);
      case DataType::kInt16: return launch<int16_t>(shape, DivideOp<int16_t>{q}, f, stream);
      case DataType::kInt8: return launch<int8_t>(shape, DivideOp<int8_t>{q}, f, stream);
      case DataType::kUInt8: return launch<uint8_t>(shape, DivideOp<uint8_t>{q}, f, stream);
      default: break;
    }
  }
  throw InvalidArgument(std::string("batched copy: transform not supported for ") +
                        toString(dtype));
}

}  // namespace kolo::device::cuda
