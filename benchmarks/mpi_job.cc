#include "mpi_job.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <random>
#include <stdexcept>

namespace kolo::bench {
namespace {

constexpr int kSecretLength = 32;

std::string randomSecret() {
  std::random_device rd;
  std::string text(kSecretLength, '0');
  for (char& c : text) c = "0123456789abcdef"[rd() % 16];
  return text;
}

}  // namespace

MpiJob::MpiJob(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    throw std::runtime_error("MPI does not provide MPI_THREAD_SERIALIZED");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &id_.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &id_.size);
  // One host: every rank is local.
  id_.localRank = id_.rank;
  id_.localSize = id_.size;
}

MpiJob::~MpiJob() {
  MPI_Barrier(MPI_COMM_WORLD);  // nobody drops the store while others use it
  store_.reset();
  server_.reset();
  MPI_Finalize();
}

void MpiJob::barrier() const { MPI_Barrier(MPI_COMM_WORLD); }

std::shared_ptr<kolo::Store> MpiJob::freshStore() {
  if (!store_) {
    std::string secret = id_.rank == 0 ? randomSecret() : std::string(kSecretLength, ' ');
    int port = 0;
    char host[256] = "127.0.0.1";
    if (id_.rank == 0) {
      server_ = std::make_unique<kolo::TcpStoreServer>("", 0, secret);
      port = server_->port();
      gethostname(host, sizeof(host));
    }
    MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(secret.data(), kSecretLength, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(host, sizeof(host), MPI_CHAR, 0, MPI_COMM_WORLD);
    store_ = kolo::makeTcpStore(host, static_cast<uint16_t>(port), secret);
  }
  return std::make_shared<kolo::PrefixStore>("g" + std::to_string(generation_++) + "/", store_);
}

int runMpiMain(int argc, char** argv, int (*body)(MpiJob& job, int argc, char** argv)) {
  MpiJob job(&argc, &argv);
  try {
    return body(job, argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", job.rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}

}  // namespace kolo::bench
