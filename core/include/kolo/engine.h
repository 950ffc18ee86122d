/// \file
/// kolo::Engine: one per rank. Owns the configuration, the tensor queue, the
/// controller, the backends, the fusion buffers and one background thread.
///
/// Threading: enqueue*, shutdown, abort and the accessors may be called from
/// any thread. Completion callbacks and output allocators run on the
/// background thread, never under an engine lock, and must not block on other
/// kolo operations.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kolo/config.h"
#include "kolo/error.h"
#include "kolo/store.h"
#include "kolo/types.h"

namespace kolo {

/// What the ranks negotiate about a tensor.
struct Request {
  /// The key ranks match requests by: the same operation has the same name
  /// on every rank of the set; one name may be in flight only once per set.
  /// Not empty; names starting with "kolo." are reserved.
  std::string name;
  OpType op = OpType::kAllreduce;        ///< Which collective.
  DataType dtype = DataType::kFloat32;   ///< Element type of input (and output).
  std::vector<int64_t> shape;            ///< Shape of input on this rank.
  DeviceKind device = DeviceKind::kCpu;  ///< Where input and output live.
  int deviceIndex = -1;                  ///< CUDA device ordinal; -1 for the CPU.
  ReduceOp reduceOp = ReduceOp::kSum;  ///< allreduce, reducescatter
  double prescale = 1.0;               ///< multiplied in before the reduction
  double postscale = 1.0;              ///< multiplied in after it
  int root = 0;                        ///< broadcast: the sending rank (of the job)
  /// alltoall: number of first-dimension rows sent to each rank of the
  /// process set (size() == the set's size); empty means an even split.
  std::vector<int64_t> splits;
  /// alltoall: rows this rank expects from each rank of the set (size() ==
  /// the set's size); empty: whatever the others send. Negotiation compares
  /// it with what each rank sends here and fails the operation on every
  /// rank with a Mismatch naming both sides when they differ.
  std::vector<int64_t> recvSplits;
  /// What the program called to make this request, in its own words, e.g.
  /// "all_reduce(op=SUM)" (torch.distributed); empty for kolo's own API.
  /// When set, ranks must agree on it as they agree on op, and negotiation
  /// errors, stall reports and the timeline describe the request by it
  /// ("rank 1 called broadcast(src=0) on float32[4]") rather than by its
  /// name alone. Such requests are named by their place in the program's
  /// sequence of calls, a new name each time, so they need an engine
  /// without a response cache (Config::cacheCapacity = 0; InvalidArgument
  /// otherwise).
  std::string call;
  /// The process set the operation runs in (Engine::addProcessSet); 0 is the
  /// set of all ranks. Names are per set. root is a rank of the job (not of
  /// the set) and must be a member; allgather and alltoall order their
  /// blocks by the set's rank order.
  int processSet = 0;
};

/// Shape of an output whose size is known only after negotiation (allgather,
/// alltoall, reducescatter).
using OutputAllocator = std::function<void*(const std::vector<int64_t>& shape)>;

/// Where a tensor's bytes live on this rank. The memory must stay valid until
/// the handle completes.
struct Entry {
  const void* input = nullptr;  ///< may equal output (in place)
  void* output = nullptr;       ///< allreduce/broadcast: same size as input
  OutputAllocator allocate;     ///< allgather/alltoall/reducescatter
  /// Called when the operation ends, before waiters wake, on the thread that
  /// runs the engine's cycle: the background thread, or a thread waiting in
  /// Handle::wait()/waitEnqueued() that runs the cycle itself while the
  /// background thread is idle (CPU operations; see Handle::wait()). It
  /// must not wait on another handle of the same engine, nor shut it down
  /// (the cycle it runs in would wait for itself); Engine::abort() is fine.
  std::function<void(const Status&)> onDone;
  /// CUDA tensors: a cudaEvent_t recorded on the stream that produced input
  /// (the caller's current stream), or nullptr when input is ready already.
  /// The engine's communication stream waits on it before reading input; the
  /// host never does. Owned by the caller; must stay valid until onDone.
  void* readyEvent = nullptr;
  /// CUDA operations: called once their GPU work is queued on the engine's
  /// comm stream, with the cudaEvent_t (as void*) recorded after that work,
  /// before the GPU ran it; onDone follows once the GPU finished. Not called
  /// for operations without GPU work (CPU tensors) nor for one that fails
  /// before its work is queued: then onDone is the only notice. An adapter
  /// whose framework wants its kernel released as soon as the GPU work is
  /// queued (TensorFlow's async kernels; Horovod does so) releases it on
  /// whichever of the two comes first; a stream that reads the outputs waits
  /// on the event. Same thread and rules as onDone.
  std::function<void(void* doneEvent)> onEnqueued;
};

/// While an OutputAllocator runs for a CUDA tensor on the background thread:
/// the cudaStream_t (as void*) the engine writes that output on. Allocate
/// under it so a stream-ordered caching allocator ties the memory to it.
/// nullptr at any other time.
void* outputAllocationStream();

struct HandleState;

/// A local process set's own limits (Engine::addLocalProcessSet), where
/// they differ from the engine's Config; a field left unset takes the
/// engine's. Every member gives the same limits: the set's rank 0 decides
/// when its stalls are reported and ended.
struct ProcessSetLimits {
  /// How long the set's members wait for each other: to connect, and in
  /// its transports (Config::timeout).
  std::optional<std::chrono::milliseconds> timeout;
  /// When a stall in the set is reported (Config::stallCheckTime; 0: never).
  std::optional<std::chrono::milliseconds> stallCheckTime;
  /// When a stall ends the set's operations (Config::stallShutdownTime; 0:
  /// never).
  std::optional<std::chrono::milliseconds> stallShutdownTime;
  /// The setting that error names (Config::stallShutdownSetting); empty:
  /// the engine's.
  std::string stallShutdownSetting;
};

/// A process set as this rank sees it: which ranks belong to it and where
/// this rank sits in it.
struct ProcessSetInfo {
  int id = 0;  ///< The set's id (0: all ranks).
  std::vector<int> ranks;  ///< ranks of the job, ascending
  int rank = -1;           ///< this rank's place in ranks; -1: not a member
  /// A local set's key (Engine::addLocalProcessSet); empty for the others.
  std::string key;
  /// Number of ranks in the set.
  int size() const { return static_cast<int>(ranks.size()); }
  /// True when this rank is a member.
  bool included() const { return rank >= 0; }
};

/// Completion of one enqueued operation. Copyable; all copies share state.
class Handle {
 public:
  /// An empty handle (valid() is false); the other members must not be called.
  Handle() = default;
  /// Internal: made by Engine::enqueue and friends.
  explicit Handle(std::shared_ptr<HandleState> state) : state_(std::move(state)) {}

  /// False for a default-constructed handle.
  bool valid() const { return state_ != nullptr; }
  /// True once the operation finished (successfully or not). For a CUDA
  /// operation past the enqueued stage this asks the device (a query of
  /// its done event, as wait() does).
  bool poll() const;
  /// Blocks until done or timeout; returns false on timeout.
  bool waitFor(std::chrono::milliseconds timeout) const;
  /// Blocks until done and throws the operation's error, if any.
  ///
  /// While the engine's background thread is idle, the waiting thread runs
  /// the engine's cycles itself until the operation is done (negotiation,
  /// the collective, the completion callbacks of whatever completes), as
  /// an MPI call drives its own progress: a synchronous small operation
  /// then crosses no thread hand-off. Not once this rank queued a CUDA
  /// operation, nor while it has joined a process set: then the background
  /// thread runs every cycle. waitEnqueued() does the same; poll() and
  /// waitFor() never run cycles.
  ///
  /// CUDA operations: once the work is enqueued, the waiter itself polls
  /// the work's done event while it spins (Config::spinTime; once even
  /// without a spin time), and returns as soon as the GPU reached it and
  /// the collectives report no error: the outputs are valid then. It does
  /// not wait for the engine's completion thread to learn of it (past a
  /// spin, it sleeps until that thread wakes it). A handle found done this
  /// way is done for every reader at once: poll() true, status() Ok. The
  /// completion callback (Entry::onDone) may still run a little later, on
  /// the engine's thread. A device fault is never reported as success (a
  /// faulted device never reaches the event): it surfaces as the error of
  /// this or the next operation. The polling thread queries a CUDA event
  /// of the operation's device: make that device current on it (as for
  /// waitEnqueued()'s stream wait).
  void wait() const;

  /// Operations on CUDA tensors complete in two stages: "enqueued" (the GPU
  /// work is queued on the engine's comm stream behind the inputs' ready
  /// events) and then done (the GPU finished it). waitEnqueued() blocks until
  /// the first of the two and returns the cudaEvent_t (as void*) recorded
  /// after the work: a stream that reads the outputs waits on it
  /// (cudaStreamWaitEvent) instead of the host waiting. nullptr when the
  /// operation is done already (CPU operations, or the GPU got there first);
  /// throws the operation's error when it failed before. The event stays
  /// valid while any copy of this Handle lives. The entry's memory must stay
  /// valid until done (Entry::onDone runs then). An error the GPU work meets
  /// after the enqueued stage fails the engine: the next operation throws it.
  void* waitEnqueued() const;
  /// True once waitEnqueued() would not block.
  bool enqueued() const;

  /// A done event to wait on, from lastDoneEvents().
  struct DoneEvent {
    void* event = nullptr;  ///< The cudaEvent_t, as waitEnqueued() returns it.
    int device = -1;        ///< The CUDA device whose work recorded it.
  };
  /// For a consumer of several CUDA operations: the done events a stream
  /// must wait on (cudaStreamWaitEvent) to be ordered after the GPU work of
  /// every one of handles. One per comm stream (an engine has one per
  /// device, shared by all its process sets), the event of the operation
  /// enqueued there last: a comm stream completes its work in the order it
  /// was enqueued, so that event covers every earlier one. Handles that
  /// are done, not enqueued yet (call waitEnqueued() first), without GPU
  /// work, or empty (nullptr) contribute nothing. The events stay valid
  /// while the handles live. Any thread; never blocks.
  static std::vector<DoneEvent> lastDoneEvents(const std::vector<const Handle*>& handles);

  /// Valid once done. For a CUDA operation past the enqueued stage it asks
  /// the device first, as poll() does, so both always agree.
  Status status() const;
  /// Output shape decided by negotiation (allgather/alltoall/reducescatter).
  std::vector<int64_t> outputShape() const;
  /// alltoall: rows received from each rank of the set; allgather: rows
  /// each rank of the set contributed (0 for a joined rank).
  std::vector<int64_t> receivedSplits() const;
  /// join: the last rank to join.
  int joinResult() const;
  /// Engine::recv: the rank (of the job) whose message it received, once
  /// done (-1 before, and for a receive that failed before a message).
  int source() const;

 private:
  std::shared_ptr<HandleState> state_;
};

/// Counters for tests and benchmarks. Read with Engine::stats() (the whole
/// engine) or Engine::stats(id) (one process set).
struct EngineStats {
  uint64_t cycles = 0;  ///< negotiation cycles (Engine::stats(): of the global set)
  uint64_t coordinatorRounds = 0;  ///< cycles that gathered requests to rank 0
  uint64_t cachedResponses = 0;    ///< responses taken from the cache
  uint64_t responses = 0;          ///< executed responses (after fusion)
  uint64_t fusedTensors = 0;       ///< tensors executed inside multi-tensor responses
  uint64_t backendCalls = 0;       ///< data-plane collective calls
  uint64_t bytesReduced = 0;       ///< bytes of allreduce input reduced (CPU and GPU)
  uint64_t stallChecks = 0;  ///< stall check rounds (gather + broadcast) run
};

/// Parameters the autotuner may change while the job runs. Every rank
/// applies a change at the same cycle, so all ranks always agree on them.
struct Tunables {
  int64_t fusionThresholdBytes = 0;        ///< Config::fusionThresholdBytes in force.
  std::chrono::microseconds cycleTime{0};  ///< Config::cycleTime in force.
  bool cacheEnabled = true;                ///< Whether the response cache is used.
  /// Allreduce in two levels across hosts (only where the data plane is
  /// hierarchical: KOLO_HIERARCHICAL_ALLREDUCE).
  bool hierarchicalAllreduce = false;

  /// Every field equal.
  bool operator==(const Tunables& o) const {
    return fusionThresholdBytes == o.fusionThresholdBytes && cycleTime == o.cycleTime &&
           cacheEnabled == o.cacheEnabled && hierarchicalAllreduce == o.hierarchicalAllreduce;
  }
  /// Some field differs.
  bool operator!=(const Tunables& o) const { return !(*this == o); }
};

/// The tunables in force and every change applied so far. cycle is the
/// engine's cycle counter (EngineStats::cycles) at which the change took
/// effect; it counts the same on every rank.
struct TuningState {
  /// One change the autotuner applied.
  struct Change {
    uint64_t cycle = 0;  ///< EngineStats::cycles when it took effect.
    Tunables tunables;   ///< The tunables from then on.
  };
  Tunables current;             ///< In force now.
  std::vector<Change> history;  ///< Every change, oldest first.
  bool converged = false;  ///< the autotuner stopped exploring
};

/// Process sets: subsets of the ranks that negotiate and run operations
/// among themselves. Set 0 holds every rank. Each set has its own
/// negotiation (cache, fusion, stall inspector, join) over its own
/// connections; one background thread runs every set this rank belongs to,
/// one cycle each per loop iteration in increasing id, so the sets progress
/// independently, a rank outside a set never waits on it, and the order of
/// operations within each set stays the same on all of its ranks.
///
/// Adding or removing a set is a collective of all ranks (negotiated on set
/// 0): every rank calls addProcessSet/removeProcessSet with the same
/// arguments in the same order. Ids are assigned in that order (1, 2, ...)
/// and never reused.
///
/// Local sets (addLocalProcessSet) are made and removed by their members
/// alone, each member on its own time; ranks outside one never hear of it.
/// The members agree on a key instead of an id: each rank numbers its local
/// sets itself, from kFirstLocalProcessSetId up, so one set's id may differ
/// between its members. A local set is installed at one point of set 0's
/// order on all its members (negotiated among them alone), and runs its
/// cycles in install order among the others: every set a rank belongs to,
/// local or not, still runs in one order that all its members share.
class Engine {
 public:
  /// Rendezvous with the other ranks through store (bounded by
  /// config.timeout), then starts the background thread. The store is
  /// prefixed internally; several engines may share one store if each gets
  /// its own PrefixStore. processSets: static sets created before any
  /// operation (ids 1, 2, ... in this order); every rank passes the same
  /// list (InvalidArgument otherwise, naming the ranks that disagree).
  Engine(Config config, Identity identity, std::shared_ptr<Store> store,
         std::vector<std::vector<int>> processSets = {});
  ~Engine();  ///< shutdown(), errors swallowed; joins the background thread.

  /// Not copyable (nor movable).
  Engine(const Engine&) = delete;
  /// Not copy-assignable.
  Engine& operator=(const Engine&) = delete;

  /// Queues one operation. Errors in the request itself (duplicate name in
  /// flight, bad shape, unsupported dtype for the op, engine stopped) throw
  /// here; errors found in negotiation or execution complete the handle.
  Handle enqueue(Request request, Entry entry);

  /// Queues several operations of one kind (allreduce, allgather or
  /// reducescatter) and one process set, negotiated as a unit: none runs
  /// until every member is ready on every rank of the set.
  std::vector<Handle> enqueueGroup(std::vector<Request> requests,
                                   std::vector<Entry> entries);

  /// This rank ran out of data: from now on, until every rank of the set has
  /// joined, it takes part in the set's operations without submitting them,
  /// with a neutral contribution: allreduce and reducescatter the identity
  /// of the reduce op (zeros for sum and average), allgather and alltoall no
  /// rows (rows sent to it are dropped), broadcast receives (it cannot be
  /// the root). Completes when every rank of the set has joined; the
  /// handle's joinResult() is the last rank (of the job) to join.
  Handle join(int processSet = 0);

  /// Completes when every rank of the set reached the barrier.
  Handle barrier(int processSet = 0);

  /// The name of an operation: name itself when not empty, else the next
  /// generated one for op in the set, "noname.<op>.<n>" in set 0 and
  /// "noname.<op>.ps<id>.<n>" in set id, n counting from 0 per (set, op).
  /// Every caller of this engine (the C++ adapters and the Python bindings)
  /// draws from the same counters, so ranks that make the same unnamed
  /// calls in the same order agree on their names. A new engine (every
  /// elastic reset makes one) starts at 0 again. Any thread.
  std::string nameOrNext(const std::string& name, const std::string& op, int processSet = 0);
  /// Generated names start again at 0 in every set (for a program that
  /// keeps its engine across a point where the ranks' counts may differ).
  void resetNames();

  /// Creates a process set of ranks (any order, no duplicates) and returns
  /// its id. Collective over all ranks (see above); blocks until the set's
  /// members are connected. Throws InvalidArgument for bad or duplicate
  /// ranks and for a set with the same ranks as an existing one, Mismatch
  /// when ranks called it differently.
  int addProcessSet(std::vector<int> ranks);
  /// Removes a process set; its pending operations fail. Collective over all
  /// ranks. Throws InvalidArgument for set 0, for unknown ids and for local
  /// sets (removeLocalProcessSet).
  void removeProcessSet(int id);
  /// The first id a rank gives its local sets; ids of sets that every rank
  /// adds stay below it.
  static constexpr int kFirstLocalProcessSetId = 1 << 24;
  /// Creates a process set that only its members call this for (each once,
  /// with the same key and ranks, in any order relative to their other
  /// local sets and to other ranks' calls); ranks outside it do nothing.
  /// Returns this rank's id for it (kFirstLocalProcessSetId and up, never
  /// reused). key names the set for the whole job: not empty, and never
  /// given before on this rank (the store keeps each key's connections). Several local sets may
  /// have the same ranks. Blocks until every member called it: the members connect among themselves
  /// on the calling thread (through the engine's store, under key), then the set is installed on
  /// every member at one point of the engine's order. Throws InvalidArgument for bad ranks, a rank
  /// that is not among them or a key given before, Timeout (naming the set and its members) when a
  /// member does not come within Config::timeout, and Mismatch when members passed different ranks
  /// for one key. A stall that Config::stallShutdownTime ends (an operation some members never
  /// submit) fails that set's operations and removes the set on every
  /// member, with an error naming its members; the engine and its other
  /// sets go on. limits: the set's own timeout and stall times, where they
  /// differ from the engine's (a torch.distributed group's timeout). Any
  /// thread but the engine's own (not from a callback).
  int addLocalProcessSet(const std::string& key, std::vector<int> ranks,
                         const ProcessSetLimits& limits = {});
  /// Removes a local set (id from addLocalProcessSet); its pending
  /// operations fail. Called by every member of the set, each with its own
  /// id for it; blocks until all of them did. Throws InvalidArgument for an
  /// id that is not a local set of this rank (sets every rank added go
  /// through removeProcessSet).
  void removeLocalProcessSet(int id);
  /// Any thread. Throws InvalidArgument for unknown ids.
  ProcessSetInfo processSet(int id) const;

  /// recv's peer for a message from any rank.
  static constexpr int kAnySource = -1;
  /// Sends a message of request.dtype and request.shape from entry.input
  /// (CPU memory, valid until the handle is done) to peer (a rank of the
  /// job), with tag (>= 0); the other fields of request and entry.output
  /// are ignored. Returns at once. Messages from one rank to another with
  /// one tag are received in the order they were sent. The peer need not
  /// have called anything: the pair connects (a local process set of the
  /// two, made the first time either side sends) while the message waits.
  /// Throws InvalidArgument for a bad peer or tag and for CUDA tensors,
  /// PeerFailure when the pair could not connect before. Not from a
  /// completion callback before the pair is connected.
  Handle send(int peer, int tag, Request request, Entry entry);
  /// Receives a message with tag from peer, or from whichever rank's
  /// message reaches this rank first (kAnySource; the handle's source()
  /// says whose), into entry.output (CPU memory of request.dtype and
  /// request.shape, valid until the handle is done). Messages reach a rank
  /// in the order its engine runs the pairs' negotiations; a receive takes
  /// the first one that matches it, and one that matches none waits. The
  /// handle fails with Mismatch when the message's dtype or size differ
  /// (naming both), with the engine's error when it stops. Any thread.
  Handle recv(int peer, int tag, Request request, Entry entry);
  /// Every set that exists now, by increasing id.
  std::vector<ProcessSetInfo> processSets() const;

  /// Stops the background thread after telling the other ranks; pending
  /// operations fail with ShutdownError. Idempotent. Blocks until the
  /// background thread has exited, so it must not be called from a
  /// completion callback or output allocator (that thread).
  void shutdown();

  /// Fails this rank with message: every rank's pending and future
  /// operations fail with PeerFailure("rank R failed: message"). Any thread;
  /// from a completion callback it returns at once and the engine stops
  /// after the current cycle, elsewhere it waits for the background thread.
  void abort(const std::string& message);

  /// The configuration the engine was built with (valid for its life).
  const Config& config() const;
  /// This rank's place in the job (valid for the engine's life).
  const Identity& identity() const;
  /// identity().rank.
  int rank() const { return identity().rank; }
  /// identity().size.
  int size() const { return identity().size; }
  /// The whole engine: cycles of set 0, every other counter summed over
  /// all sets (removed ones included).
  EngineStats stats() const;
  /// One process set this rank belongs to (InvalidArgument otherwise).
  EngineStats stats(int processSet) const;
  /// Tunables in force (from Config, or as chosen by the autotuner).
  TuningState tuning() const;

  /// Starts writing a Chrome-trace timeline of this rank to path (rank r > 0
  /// writes path with ".rank<r>" inserted before a ".json" suffix, or
  /// appended). Replaces a running timeline. Throws InvalidArgument when the
  /// file cannot be created. Any thread.
  void startTimeline(const std::string& path);
  /// Stops the timeline and returns once its file is complete (closing "]"
  /// written). No-op when none runs. Any thread.
  void stopTimeline();
  /// Set once the engine stopped because of a failure (its error); ok otherwise.
  Status failure() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo
