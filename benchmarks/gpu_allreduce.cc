// NCCL allreduce of one CUDA tensor through kolo's engine (size 1,
// KOLO_GPU_OPERATIONS=nccl: negotiation, the GPU path, completion) against
// a raw ncclAllReduce + stream synchronize on the same GPU, side by side in
// one run, at 4 B and 64 MiB (or the sizes given).
//
//   bench_gpu_allreduce [--iters N] [--bytes B ...]
//
// Prints the median latency per call of each and the ratio, and one
// `summary:` line per size: at 4 B the goal is kolo within 10 us of raw
// NCCL (what the engine adds per call: enqueue, negotiation, completion);
// at larger sizes the ratio. Needs a GPU; exits 0 whether or not the goal
// is met.
#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "device/cuda/check.h"
#include "device/cuda/memory.h"
#include "kolo/engine.h"
#include "kolo/store.h"

namespace {

using Clock = std::chrono::steady_clock;

double medianUs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string formatted(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string formatted(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

#define NCCL_OK(call)                                                               \
  do {                                                                              \
    ncclResult_t r_ = (call);                                                       \
    if (r_ != ncclSuccess) {                                                        \
      std::fprintf(stderr, "%s failed: %s\n", #call, ncclGetErrorString(r_));      \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  int iters = 200;
  std::vector<size_t> sizes;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--iters") iters = std::atoi(argv[i + 1]);
    else if (flag == "--bytes") sizes.push_back(std::strtoull(argv[i + 1], nullptr, 10));
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (sizes.empty()) sizes = {4, 64u << 20};
  std::string why;
  if (kolo::device::cuda::deviceCount(&why) == 0) {
    std::fprintf(stderr, "bench_gpu_allreduce: no CUDA device (%s); run it on a GPU machine "
                         "(scripts/gpu-check)\n", why.c_str());
    return 77;
  }
  KOLO_CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  KOLO_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));

  kolo::Config config;
  config.gpuOperations = "nccl";
  config.cycleTime = std::chrono::microseconds(100);
  kolo::Identity id;
  kolo::Engine engine(config, id, kolo::makeHashStore());

  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitAll(&comm, 1, nullptr));
  cudaStream_t stream = nullptr;
  KOLO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  std::printf("bench_gpu_allreduce on %s: NCCL %d, size 1, float32 sum, median of %d calls\n",
              prop.name, NCCL_VERSION_CODE, iters);
  std::printf("%12s %14s %14s %10s\n", "bytes", "raw NCCL us", "kolo us", "kolo/raw");
  std::vector<std::string> summaries;
  for (size_t bytes : sizes) {
    const size_t count = std::max<size_t>(1, bytes / 4);
    void* buf = nullptr;
    KOLO_CUDA_CHECK(cudaMalloc(&buf, count * 4));
    KOLO_CUDA_CHECK(cudaMemset(buf, 0, count * 4));
    kolo::Request q;
    q.name = "bench." + std::to_string(bytes);
    q.dtype = kolo::DataType::kFloat32;
    q.shape = {static_cast<int64_t>(count)};
    q.device = kolo::DeviceKind::kCuda;
    q.deviceIndex = 0;
    std::vector<double> raw, viaKolo;
    for (int i = 0; i < iters + 10; ++i) {  // interleaved; the first 10 are warm-up
      auto t0 = Clock::now();
      NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream));
      KOLO_CUDA_CHECK(cudaStreamSynchronize(stream));
      auto t1 = Clock::now();
      engine.enqueue(q, kolo::Entry{buf, buf, {}, {}}).wait();
      auto t2 = Clock::now();
      if (i < 10) continue;
      raw.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      viaKolo.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    }
    const double r = medianUs(raw), k = medianUs(viaKolo);
    std::printf("%12zu %14.1f %14.1f %9.2fx\n", count * 4, r, k, k / r);
    if (count * 4 <= 1024) {
      const double kGoalUs = 10;
      summaries.push_back(formatted("allreduce %zu B size 1: raw NCCL %.1f us, kolo %.1f us: +%.1f us, "
                              "%.2f of the goal (goal kolo - raw <= %.0f us: %s)",
                              count * 4, r, k, k - r, (k - r) / kGoalUs, kGoalUs,
                              k - r <= kGoalUs ? "MET" : "NOT MET"));
    } else {
      summaries.push_back(formatted("allreduce %.0f MiB size 1: raw NCCL %.1f us, kolo %.1f us: %.3fx "
                              "(%.0f GB/s algbw via kolo)",
                              count * 4 / 1048576.0, r, k, k / r, count * 4 / (k * 1e3)));
    }
    KOLO_CUDA_CHECK(cudaFree(buf));
  }
  for (const std::string& line : summaries) std::printf("summary: %s\n", line.c_str());
  engine.shutdown();
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
  return 0;
}
