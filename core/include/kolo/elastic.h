/// \file
/// Elastic training: a job that survives the loss of ranks and takes in new
/// hosts without restarting, under `kolorun --min-np M --max-np X
/// --host-discovery-script S` (Horovod Elastic's model and names).
///
/// \code{.cpp}
///   kolo::init();                                  // waits for the first world
///   MyState state(...);                            // no collectives before run()
///   kolo::elastic::run(state, [&] {
///     for (; epoch < epochs; ++epoch) { ...; state.commit(); }
///   });
/// \endcode
///
/// run() calls the function; when a peer fails (PeerFailure, Timeout or a
/// peer's shutdown) it restores the last commit; when the driver changed the
/// hosts (HostsUpdatedInterrupt from commit()/check_host_updates()) it keeps
/// the current state. Either way it re-initialises kolo in a new world (new
/// rank and size), runs the reset callbacks, syncs the state from the new
/// rank 0 (a survivor) and calls the function again. Outside an elastic job
/// run() syncs once and calls the function; failures propagate.
///
/// Threading: State and run() are used from the training thread.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

/// Elastic training: State, run() and ElasticSampler (Horovod Elastic's
/// model), for jobs started by kolorun's elastic driver.
namespace kolo::elastic {

/// True when this process is a worker of kolorun's elastic driver and
/// kolo::init() was called.
bool enabled();

/// Raised on every rank together by State::commit() / check_host_updates()
/// when the driver changed the host set (hosts added or removed). Not a
/// failure: run() re-forms the world without rolling back.
class HostsUpdatedInterrupt : public std::runtime_error {
 public:
  /// what() says the host set changed and the world is re-forming.
  HostsUpdatedInterrupt()
      : std::runtime_error("the host set changed; re-forming the world (not a failure)") {}
};

/// Everything that must be equal on every rank and survive a reset.
/// Subclasses implement save (a copy in memory), restore (back to that copy)
/// and sync (rank 0's state onto every rank; collective).
class State {
 public:
  virtual ~State() = default;  ///< Subclasses are destroyed through State.

  /// Copies the state in memory (what restore() returns to). Local.
  virtual void save() = 0;
  /// Puts back the copy from the last save(). Local.
  virtual void restore() = 0;
  /// Makes every rank's state rank 0's. Collective: every rank calls it.
  virtual void sync() = 0;

  /// save(), then check_host_updates(). Collective in an elastic job.
  void commit();
  /// Rank 0 asks the driver whether the host set changed and tells every
  /// rank (one small broadcast); throws HostsUpdatedInterrupt on every rank
  /// when it did. Collective in an elastic job; a no-op otherwise.
  void check_host_updates();

  /// Called by run() after every re-initialisation, before sync(), in the
  /// order registered (rescale the learning rate with kolo::size(), ...).
  void register_reset_callbacks(std::vector<std::function<void()>> callbacks);
  /// Runs the registered callbacks in order (run() calls it).
  void on_reset();

 private:
  std::vector<std::function<void()>> callbacks_;
};

/// Internal: run()'s machinery, not for users.
namespace detail {
/// check_host_updates() as a value: true on every rank when the driver
/// changed the hosts since this world formed. Collective in an elastic job;
/// false otherwise.
bool hostsUpdated();
/// run()'s loop; see run().
void runLoop(State& state, const std::function<void()>& fn);
/// shutdown() and init() for the next world, after noting why this worker
/// leaves its world. The one re-initialisation path of run(): process sets
/// (when kolo has them) are rebuilt here.
void resetWorld(const std::string& reason);
}  // namespace detail

/// Runs fn until it returns, re-forming the world on failures and host
/// changes as described above; returns fn's result. Exceptions other than
/// peer failures, timeouts and HostsUpdatedInterrupt propagate.
template <class Fn>
auto run(State& state, Fn&& fn) -> decltype(fn()) {
  using Result = decltype(fn());
  if constexpr (std::is_void_v<Result>) {
    detail::runLoop(state, [&] { fn(); });
  } else {
    Result result{};
    detail::runLoop(state, [&] { result = fn(); });
    return result;
  }
}

/// The version of the world this process is in: 1, 2, ... as the driver
/// re-forms it; 0 outside an elastic job.
int64_t world_version();
/// The driver's id of this worker process (stable for the process's life,
/// unlike its rank); -1 outside an elastic job.
int64_t worker_id();

/// Partitions the indices [0, dataset_size) of an epoch over the ranks and
/// remembers how many were processed, so that after a reset the rest of the
/// epoch is re-partitioned over the new world size (horovod.torch.elastic's
/// ElasticSampler). Indices are a permutation of the epoch (seed + epoch)
/// when shuffle is set; rank r takes every size-th of the unprocessed rest,
/// starting at r, padded with the rest's first indices so every rank has
/// equally many (as DistributedSampler pads). Processed indices are always
/// a prefix of the epoch's order: record_batch() after every step (all ranks
/// step together) adds batch_size * num_replicas to it.
///
/// Keep it in the State (TorchState::track) so commits save its progress,
/// restores roll it back and sync() gives every rank rank 0's; call
/// set_epoch() at the end of an epoch (not the start: a reset mid-epoch
/// would otherwise repeat it).
class ElasticSampler {
 public:
  /// Indices [0, dataset_size), shuffled per epoch with seed + epoch when
  /// shuffle is set; partitioned for kolo::rank() of kolo::size() (0 of 1
  /// before init). Throws InvalidArgument for a negative dataset_size.
  explicit ElasticSampler(int64_t dataset_size, bool shuffle = true, uint64_t seed = 0);

  /// This rank's indices for the rest of the epoch (valid until the next
  /// reset(), set_epoch() or load_state_dict()).
  const std::vector<int64_t>& indices() const { return indices_; }
  /// indices().size().
  int64_t num_samples() const { return static_cast<int64_t>(indices_.size()); }
  /// The indices of this rank's batch batch_idx (counted from the last
  /// reset), batch_size long or shorter at the end.
  std::vector<int64_t> get_indices(int64_t batch_idx, int64_t batch_size) const;

  /// All ranks processed one more batch of batch_size each.
  void record_batch(int64_t batch_idx, int64_t batch_size);
  /// Starts epoch `epoch`: nothing processed yet, new order.
  void set_epoch(int64_t epoch);
  /// Re-reads rank and size (kolo::rank(), kolo::size(); 0 and 1 before
  /// init) and re-partitions what is left of the epoch.
  void reset();
  /// The same for an explicit rank of num_replicas; throws InvalidArgument
  /// unless 0 <= rank < num_replicas.
  void reset(int rank, int num_replicas);

  /// The current epoch (set_epoch()).
  int64_t epoch() const { return epoch_; }
  /// How many indices of this epoch all ranks together processed.
  int64_t processed_num() const { return processed_; }
  /// The indices processed this epoch (by all ranks), in epoch order.
  std::vector<int64_t> processed_indices() const;
  /// The world size the indices are partitioned for.
  int num_replicas() const { return replicas_; }
  /// The rank the indices are for.
  int rank() const { return rank_; }
  /// The dataset size given to the constructor.
  int64_t dataset_size() const { return size_; }

  /// epoch and processed count as text; load_state_dict() also reset()s.
  std::string state_dict() const;
  /// Restores what state_dict() returned; throws InvalidArgument for text
  /// that is not one.
  void load_state_dict(const std::string& state);

 private:
  std::vector<int64_t> order() const;  ///< the epoch's permutation

  int64_t size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t processed_ = 0;
  int replicas_ = 1;
  int rank_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace kolo::elastic
