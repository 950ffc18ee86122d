// kolo::elastic::ElasticSampler (kolo/elastic.h).
#include <algorithm>
#include <exception>
#include <random>
#include <sstream>
#include <utility>

#include "kolo/elastic.h"
#include "kolo/error.h"
#include "kolo/kolo.h"

namespace kolo::elastic {

ElasticSampler::ElasticSampler(int64_t dataset_size, bool shuffle, uint64_t seed)
    : size_(dataset_size), shuffle_(shuffle), seed_(seed) {
  KOLO_CHECK_ARG(dataset_size >= 0, "ElasticSampler: dataset_size must be >= 0, got " +
                                        std::to_string(dataset_size));
  reset();
}

std::vector<int64_t> ElasticSampler::order() const {
  std::vector<int64_t> all(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) all[static_cast<size_t>(i)] = i;
  if (!shuffle_) return all;
  // Fisher-Yates over mt19937_64, whose output the standard fixes, with an
  // unbiased draw: every rank and every host computes the same order.
  std::mt19937_64 rng(seed_ + static_cast<uint64_t>(epoch_));
  for (size_t i = all.size(); i > 1; --i) {
    const uint64_t bound = i;
    const uint64_t limit = std::mt19937_64::max() - std::mt19937_64::max() % bound;
    uint64_t draw;
    do {
      draw = rng();
    } while (draw >= limit);
    std::swap(all[i - 1], all[static_cast<size_t>(draw % bound)]);
  }
  return all;
}

void ElasticSampler::reset() {
  if (isInitialized()) {
    reset(kolo::rank(), kolo::size());
  } else {
    reset(0, 1);
  }
}

void ElasticSampler::reset(int rank, int num_replicas) {
  KOLO_CHECK_ARG(num_replicas >= 1 && rank >= 0 && rank < num_replicas,
                 "ElasticSampler::reset: rank " + std::to_string(rank) + " of " +
                     std::to_string(num_replicas) + " replicas");
  replicas_ = num_replicas;
  rank_ = rank;
  std::vector<int64_t> all = order();
  const size_t done = static_cast<size_t>(std::min(processed_, size_));
  std::vector<int64_t> rest(all.begin() + static_cast<std::ptrdiff_t>(done), all.end());
  indices_.clear();
  if (rest.empty()) return;
  const size_t n = static_cast<size_t>(replicas_);
  const size_t perRank = (rest.size() + n - 1) / n;
  // Pad with the rest's first indices (cyclically when the rest is shorter
  // than the padding) so that every rank gets perRank indices.
  for (size_t k = static_cast<size_t>(rank_); k < perRank * n; k += n) {
    indices_.push_back(rest[k % rest.size()]);
  }
}

std::vector<int64_t> ElasticSampler::get_indices(int64_t batch_idx, int64_t batch_size) const {
  KOLO_CHECK_ARG(batch_idx >= 0 && batch_size > 0,
                 "ElasticSampler::get_indices: batch_idx must be >= 0 and batch_size > 0");
  const int64_t begin = std::min(batch_idx * batch_size, num_samples());
  const int64_t end = std::min(begin + batch_size, num_samples());
  return {indices_.begin() + begin, indices_.begin() + end};
}

void ElasticSampler::record_batch(int64_t /*batch_idx*/, int64_t batch_size) {
  KOLO_CHECK_ARG(batch_size >= 0, "ElasticSampler::record_batch: batch_size must be >= 0");
  processed_ = std::min(size_, processed_ + batch_size * replicas_);
}

void ElasticSampler::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  processed_ = 0;
  reset();
}

std::vector<int64_t> ElasticSampler::processed_indices() const {
  std::vector<int64_t> all = order();
  all.resize(static_cast<size_t>(std::min(processed_, size_)));
  return all;
}

std::string ElasticSampler::state_dict() const {
  return "epoch=" + std::to_string(epoch_) + " processed=" + std::to_string(processed_);
}

void ElasticSampler::load_state_dict(const std::string& state) {
  std::istringstream in(state);
  std::string epoch, processed;
  in >> epoch >> processed;
  auto value = [&](const std::string& word, const char* key) -> int64_t {
    const std::string prefix = std::string(key) + "=";
    if (word.rfind(prefix, 0) != 0) {
      throw InvalidArgument("ElasticSampler::load_state_dict: expected '" + prefix +
                            "N' in '" + state + "'");
    }
    try {
      return std::stoll(word.substr(prefix.size()));
    } catch (const std::exception&) {
      throw InvalidArgument("ElasticSampler::load_state_dict: bad number in '" + state + "'");
    }
  };
  epoch_ = value(epoch, "epoch");
  processed_ = value(processed, "processed");
  reset();
}

}  // namespace kolo::elastic
