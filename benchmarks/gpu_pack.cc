// Batched pack/unpack kernel throughput vs cudaMemcpy device-to-device.
//
//   bench_gpu_pack [--tensors N] [--total-mib M] [--iters K] [--csv FILE]
//   bench_gpu_pack --resnet50 [--iters K] [--csv FILE]
//   bench_gpu_pack --small [--iters K] [--csv FILE]
//
// The three shape sets scripts/gpu-check runs: the default (128 tensors,
// 256 MiB), --resnet50: the 161 parameter tensors of ResNet-50 (53
// convolutions, 53 batch norms' weight and bias, the classifier's weight
// and bias; 25.6 M floats), the gradients DistributedOptimizer fuses each
// step, and --small: many small tensors (512 tensors, 64 MiB: the same as
// --tensors 512 --total-mib 64).
//
// Packs N tensors of log-uniform mixed sizes (1 KiB .. 8 MiB, scaled to
// M MiB in total) into one fusion buffer at the 16-byte aligned offsets of
// kolo::fusionLayout, with one kernel launch per 1000 tensors, descriptors
// passed as kernel parameters (as the engine does for a fused response), unpacks
// them again, and times both against one cudaMemcpyAsync D2D of the same
// bytes. Bandwidth counts read + write (2 x bytes / time), like a memcpy
// benchmark. Goal: pack and unpack >= 90% of the memcpy rate for 100+
// tensors. Prints a table and a `summary:` line (the shape set, both ratios,
// the goal); --csv also writes the table as CSV. Exits 0 whether or not the
// goal is met (1 on bad flags or CUDA errors).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "device/cuda/check.h"
#include "comm/cuda/device_set.h"
#include "device/cuda/memory.h"
#include "comm/layout.h"

using kolo::DataType;
using kolo::device::CopyDesc;
using kolo::device::CopyTransform;

namespace {

struct Row {
  std::string what;
  double ms;
  double gbps;
  double ratio;
};

template <typename Fn>
double timeMs(cudaStream_t stream, int iters, Fn&& fn) {
  cudaEvent_t start, stop;
  KOLO_CUDA_CHECK(cudaEventCreate(&start));
  KOLO_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) fn();  // warm-up
  KOLO_CUDA_CHECK(cudaStreamSynchronize(stream));
  KOLO_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) fn();
  KOLO_CUDA_CHECK(cudaEventRecord(stop, stream));
  KOLO_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  KOLO_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  KOLO_CUDA_CHECK(cudaEventDestroy(start));
  KOLO_CUDA_CHECK(cudaEventDestroy(stop));
  return ms / iters;
}

// Element counts of ResNet-50's parameters, in model order.
std::vector<uint64_t> resnet50Counts() {
  std::vector<uint64_t> c;
  auto conv = [&](uint64_t out, uint64_t in, uint64_t k) { c.push_back(out * in * k * k); };
  auto bn = [&](uint64_t n) {
    c.push_back(n);
    c.push_back(n);
  };
  conv(64, 3, 7);
  bn(64);
  uint64_t cin = 64;
  const uint64_t widths[] = {64, 128, 256, 512};
  const int blocks[] = {3, 4, 6, 3};
  for (int s = 0; s < 4; ++s) {
    for (int b = 0; b < blocks[s]; ++b) {
      const uint64_t w = widths[s], out = 4 * w;
      conv(w, cin, 1);
      bn(w);
      conv(w, w, 3);
      bn(w);
      conv(out, w, 1);
      bn(out);
      if (b == 0) {
        conv(out, cin, 1);  // shortcut
        bn(out);
      }
      cin = out;
    }
  }
  c.push_back(1000 * cin);
  c.push_back(1000);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int tensors = 128;
  double totalMiB = 256;
  int iters = 20;
  std::string csv;
  bool resnet50 = false;
  std::string shapeSet;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--resnet50") {
      resnet50 = true;
      --i;  // takes no value
      continue;
    }
    if (flag == "--small") {
      tensors = 512;
      totalMiB = 64;
      shapeSet = "512 small tensors 64 MiB";
      --i;  // takes no value
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", flag.c_str());
      return 2;
    }
    if (flag == "--tensors") tensors = std::atoi(argv[i + 1]);
    else if (flag == "--total-mib") totalMiB = std::atof(argv[i + 1]);
    else if (flag == "--iters") iters = std::atoi(argv[i + 1]);
    else if (flag == "--csv") csv = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::string why;
  if (kolo::device::cuda::deviceCount(&why) == 0) {
    std::fprintf(stderr, "bench_gpu_pack: no CUDA device (%s); run it on a GPU machine "
                         "(scripts/gpu-check)\n", why.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  KOLO_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));

  // Log-uniform sizes in floats, then scaled to the requested total.
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> logSize(std::log(256.0), std::log(2.0 * 1024 * 1024));
  std::vector<double> raw(tensors);
  double rawTotal = 0;
  for (double& r : raw) rawTotal += (r = std::exp(logSize(rng)));
  const double want = totalMiB * 1024 * 1024 / sizeof(float);
  std::vector<uint64_t> counts(tensors);
  uint64_t total = 0;
  for (int t = 0; t < tensors; ++t) {
    counts[t] = std::max<uint64_t>(1, static_cast<uint64_t>(raw[t] / rawTotal * want));
    // Odd sizes on purpose: each tensor's end is then padded to 16 bytes.
    counts[t] |= 1;
    total += counts[t];
  }
  if (resnet50) {
    counts = resnet50Counts();
    tensors = static_cast<int>(counts.size());
    total = 0;
    for (uint64_t c : counts) total += c;
    shapeSet = "ResNet-50 161 tensors";
  }
  const size_t bytes = total * sizeof(float);

  kolo::comm::cuda::DeviceSet devices;
  auto& ctx = devices.at(0);
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(ctx.stream());
  std::vector<void*> bufs(tensors);
  for (int t = 0; t < tensors; ++t) {
    KOLO_CUDA_CHECK(cudaMalloc(&bufs[t], counts[t] * sizeof(float)));
    KOLO_CUDA_CHECK(cudaMemset(bufs[t], 0, counts[t] * sizeof(float)));
  }
  const kolo::FusionLayout layout =
      kolo::fusionLayout(counts, sizeof(float), kolo::kGpuFusionAlignBytes);
  void* fused = ctx.fusion(layout.total * sizeof(float));
  void* other = nullptr;
  KOLO_CUDA_CHECK(cudaMalloc(&other, bytes));
  std::vector<CopyDesc> pack(tensors), unpack(tensors);
  for (int t = 0; t < tensors; ++t) {
    char* slot = static_cast<char*>(fused) + layout.offsets[t] * sizeof(float);
    pack[t] = CopyDesc{bufs[t], slot, counts[t]};
    unpack[t] = CopyDesc{slot, bufs[t], counts[t]};
  }

  const double memcpyMs = timeMs(stream, iters, [&] {
    KOLO_CUDA_CHECK(cudaMemcpyAsync(other, fused, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const CopyTransform copy;
  const CopyTransform scale = kolo::device::makeTransform(DataType::kFloat32, 0.5);
  const CopyTransform unscale = kolo::device::makeTransform(DataType::kFloat32, 2.0);
  const double packMs = timeMs(stream, iters, [&] { ctx.batchedCopy(pack, DataType::kFloat32, copy); });
  const double unpackMs =
      timeMs(stream, iters, [&] { ctx.batchedCopy(unpack, DataType::kFloat32, copy); });
  const double packScaleMs =
      timeMs(stream, iters, [&] { ctx.batchedCopy(pack, DataType::kFloat32, scale); });
  const double unpackScaleMs =
      timeMs(stream, iters, [&] { ctx.batchedCopy(unpack, DataType::kFloat32, unscale); });

  auto gbps = [&](double ms) { return 2.0 * bytes / (ms * 1e-3) / 1e9; };
  std::vector<Row> rows = {
      {"memcpy D2D (one call)", memcpyMs, gbps(memcpyMs), 1.0},
      {"pack (copy)", packMs, gbps(packMs), memcpyMs / packMs},
      {"unpack (copy)", unpackMs, gbps(unpackMs), memcpyMs / unpackMs},
      {"pack (x0.5 prescale)", packScaleMs, gbps(packScaleMs), memcpyMs / packScaleMs},
      {"unpack (x2 postscale)", unpackScaleMs, gbps(unpackScaleMs), memcpyMs / unpackScaleMs},
  };
  std::printf("bench_gpu_pack on %s: %d float32 tensors, %.1f MiB total, %d iterations\n",
              prop.name, tensors, bytes / 1048576.0, iters);
  std::printf("%-24s %10s %12s %10s\n", "what", "ms", "GB/s (r+w)", "vs memcpy");
  for (const Row& r : rows) {
    std::printf("%-24s %10.3f %12.1f %9.1f%%\n", r.what.c_str(), r.ms, r.gbps, 100 * r.ratio);
  }
  const double worst = std::min({memcpyMs / packMs, memcpyMs / unpackMs});
  const double kGoal = 0.9;
  std::printf("goal >= 90%% of memcpy for pack and unpack: %s (worst %.1f%%, %.2f of the goal)\n",
              worst >= kGoal ? "MET" : "NOT MET", 100 * worst, worst / kGoal);
  if (shapeSet.empty()) {
    shapeSet = std::to_string(tensors) + " tensors " + std::to_string(static_cast<int>(totalMiB)) +
               " MiB";
  }
  std::printf("summary: pack/unpack %-26s pack %5.1f%%, unpack %5.1f%% of memcpy D2D "
              "(%.0f GB/s) (goal >= 90%%: %s)\n",
              (shapeSet + ":").c_str(), 100 * memcpyMs / packMs, 100 * memcpyMs / unpackMs,
              gbps(memcpyMs), worst >= kGoal ? "MET" : "NOT MET");
  if (!csv.empty()) {
    std::ofstream out(csv);
    out << "what,tensors,bytes,ms,gbps_rw,ratio_vs_memcpy\n";
    for (const Row& r : rows) {
      out << '"' << r.what << "\"," << tensors << ',' << bytes << ',' << r.ms << ',' << r.gbps
          << ',' << r.ratio << '\n';
    }
  }
  for (void* b : bufs) (void)cudaFree(b);
  (void)cudaFree(other);
  return 0;
}
