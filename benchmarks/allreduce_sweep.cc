// Allreduce bus bandwidth and latency, 4 KiB .. 128 MiB of float32 sum,
// through raw MPI_Allreduce (one call, and in 4 MiB pieces as kolo's mpi
// backend does), kolo on MPI (KOLO_CONTROLLER/CPU_OPERATIONS=mpi) and kolo
// on Gloo, measured in one run. Run under mpirun:
//
//   mpirun --allow-run-as-root --bind-to none -np 2 \
//       build/mpi/benchmarks/bench_allreduce_sweep [--csv out.csv] [--max-mb 128]
//
// busbw = bytes / time * 2(n-1)/n (the traffic per rank of a ring
// allreduce, so numbers compare across world sizes). Latency is the mean
// time per call on rank 0 after warm-up. The kolo-on-Gloo engine rendezvous
// through a TCP store that rank 0 serves; its port and a random secret are
// broadcast over MPI (never on a command line).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kolo/engine.h"
#include "kolo/tcp_store.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kChunkBytes = size_t(4) << 20;

struct Column {
  std::string name;
  std::vector<double> seconds;  // per size: mean seconds per allreduce
};

int iterationsFor(size_t bytes) {
  // About 256 MiB of traffic per size, between 5 and 200 calls.
  return static_cast<int>(std::clamp<size_t>((size_t(256) << 20) / bytes, 5, 200));
}

// Times fn (one allreduce) after warm-up; barrier(): all ranks line up.
double timeIt(size_t bytes, const std::function<void()>& fn,
              const std::function<void()>& barrier) {
  for (int i = 0; i < 2; ++i) fn();
  const int iters = iterationsFor(bytes);
  barrier();
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  barrier();
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

void rawMpi(const std::vector<size_t>& sizes, std::vector<float>& buf, bool chunked,
            Column& col) {
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    col.seconds.push_back(timeIt(
        bytes,
        [&] {
          const size_t piece = chunked ? kChunkBytes / sizeof(float) : count;
          for (size_t done = 0; done < count; done += piece) {
            MPI_Allreduce(MPI_IN_PLACE, buf.data() + done,
                          static_cast<int>(std::min(piece, count - done)), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
          }
        },
        [] { MPI_Barrier(MPI_COMM_WORLD); }));
  }
}

void koloEngine(const std::vector<size_t>& sizes, std::vector<float>& buf, kolo::Engine& engine,
                Column& col) {
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    kolo::Request q;
    q.name = "sweep." + std::to_string(bytes);
    q.dtype = kolo::DataType::kFloat32;
    q.shape = {static_cast<int64_t>(count)};
    col.seconds.push_back(timeIt(
        bytes, [&] { engine.enqueue(q, kolo::Entry{buf.data(), buf.data(), {}, {}}).wait(); },
        [&] { engine.barrier().wait(); }));
  }
}

kolo::Config engineConfig(const std::string& backend) {
  kolo::Config config;
  config.controller = backend;
  config.cpuOperations = backend;
  return config;
}

std::string randomSecret() {
  std::random_device rd;
  char text[33];
  for (int i = 0; i < 32; ++i) text[i] = "0123456789abcdef"[rd() % 16];
  text[32] = 0;
  return text;
}

std::string sizeLabel(size_t bytes) {
  if (bytes >= (size_t(1) << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  std::string csvPath;
  size_t maxMb = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--csv") == 0) csvPath = argv[i + 1];
    if (std::strcmp(argv[i], "--max-mb") == 0) maxMb = std::strtoul(argv[i + 1], nullptr, 10);
  }
  kolo::Identity id;
  MPI_Comm_rank(MPI_COMM_WORLD, &id.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &id.size);
  id.localRank = id.rank;
  id.localSize = id.size;

  std::vector<size_t> sizes;
  for (size_t b = 4096; b <= (maxMb << 20); b *= 4) sizes.push_back(b);
  if (sizes.back() != (maxMb << 20)) sizes.push_back(maxMb << 20);
  std::vector<float> buf(sizes.back() / sizeof(float), 1.0f);

  std::vector<Column> cols{{"mpi", {}}, {"mpi-4MiB-pieces", {}}, {"kolo-mpi", {}},
                           {"kolo-gloo", {}}};
  rawMpi(sizes, buf, false, cols[0]);
  rawMpi(sizes, buf, true, cols[1]);
  {
    // Each process keeps its own bookkeeping keys: everything is MPI.
    kolo::Engine engine(engineConfig("mpi"), id, kolo::makeHashStore());
    koloEngine(sizes, buf, engine, cols[2]);
  }
  {
    std::unique_ptr<kolo::TcpStoreServer> server;
    std::string secret = id.rank == 0 ? randomSecret() : std::string(32, ' ');
    int port = 0;
    char host[256] = "127.0.0.1";
    if (id.rank == 0) {
      server = std::make_unique<kolo::TcpStoreServer>("", 0, secret);
      port = server->port();
      gethostname(host, sizeof(host));
    }
    MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(secret.data(), 32, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(host, sizeof(host), MPI_CHAR, 0, MPI_COMM_WORLD);
    auto store = kolo::makeTcpStore(host, static_cast<uint16_t>(port), secret);
    kolo::Engine engine(engineConfig("gloo"), id, store);
    koloEngine(sizes, buf, engine, cols[3]);
    engine.shutdown();
    MPI_Barrier(MPI_COMM_WORLD);  // nobody drops the store while others use it
  }

  if (id.rank == 0) {
    const double factor = 2.0 * (id.size - 1) / id.size;
    std::printf("allreduce float32 sum, %d ranks; busbw GB/s (latency us)\n", id.size);
    std::printf("%-9s", "size");
    for (const auto& c : cols) std::printf(" %24s", c.name.c_str());
    std::printf("\n");
    std::FILE* csv = csvPath.empty() ? nullptr : std::fopen(csvPath.c_str(), "w");
    if (csv) std::fprintf(csv, "bytes,ranks,variant,seconds,busbw_gbps\n");
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::printf("%-9s", sizeLabel(sizes[s]).c_str());
      for (const auto& c : cols) {
        const double t = c.seconds[s];
        const double busbw = sizes[s] / t * factor / 1e9;
        char cell[64];
        std::snprintf(cell, sizeof(cell), "%.3f (%.0f)", busbw, t * 1e6);
        std::printf(" %24s", cell);
        if (csv) {
          std::fprintf(csv, "%zu,%d,%s,%.9f,%.6f\n", sizes[s], id.size, c.name.c_str(), t, busbw);
        }
      }
      std::printf("\n");
    }
    if (csv) std::fclose(csv);
  }
  MPI_Finalize();
  return 0;
}
