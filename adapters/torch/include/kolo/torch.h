/// \file
/// kolo::torch — data-parallel training for LibTorch on top of kolo::Engine.
///
/// \code{.cpp}
///   kolo::init();
///   kolo::torch::broadcast_parameters(*model, /*root=*/0);
///   auto adam = std::make_shared<torch::optim::Adam>(model->parameters(), 1e-3);
///   kolo::torch::DistributedOptimizer opt(adam, model->named_parameters());
///   kolo::torch::broadcast_optimizer_state(*adam, /*root=*/0);
///   for (...) { opt.zero_grad(); loss.backward(); opt.step(); }
/// \endcode
///
/// Every collective is negotiated by name across ranks. Operations called
/// without a name get a generated one ("noname.allreduce.<n>") from a counter
/// per operation kind and process set in the Context, so unnamed operations
/// must be issued in the same order on every rank of their set. Name the
/// operations of a hot loop: a stable name also lets the engine's response
/// cache skip negotiation.
///
/// Process sets: every operation takes a trailing ProcessSet (default: all
/// ranks) and then runs among that set's ranks only (see kolo::Engine). Roots
/// are ranks of the job; allgather and alltoall order blocks by the set's
/// rank order.
///
/// The public API uses snake_case, like the Horovod and PyTorch APIs it
/// mirrors. Do not write `using namespace kolo;` next to LibTorch code:
/// kolo::torch would then hide the global torch namespace.
///
/// Tensors: float32/64, float16, bfloat16, int64/32/16, int8, uint8 and bool.
/// Undefined tensors, other dtypes, sparse tensors and devices other than CPU
/// and CUDA throw kolo::InvalidArgument. A non-contiguous input is copied to a
/// contiguous one; in-place operations copy the result back into the caller's
/// tensor when they complete (for the *_async_ variants: in wait()). Results
/// carry no autograd history.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kolo/kolo.h"

/// The LibTorch adapter: collectives on at::Tensor, DistributedOptimizer,
/// parameter and optimizer-state broadcast, SyncBatchNorm (Horovod's
/// horovod.torch API in C++).
namespace kolo::torch {

// ---- process-level API (the default engine) --------------------------------

using kolo::init;
using kolo::isInitialized;
using kolo::rank;
using kolo::shutdown;
using kolo::size;
/// kolo::localRank(): this process's rank on its host; throws
/// InvalidArgument before init().
inline int local_rank() { return kolo::localRank(); }
/// kolo::localSize(): ranks on this host; throws InvalidArgument before init().
inline int local_size() { return kolo::localSize(); }
/// kolo::crossRank(): this host's index; throws InvalidArgument before init().
inline int cross_rank() { return kolo::crossRank(); }
/// kolo::crossSize(): number of hosts; throws InvalidArgument before init().
inline int cross_size() { return kolo::crossSize(); }

/// cuda:local_rank when LibTorch sees a CUDA device, else the CPU (cuda:0
/// before init()).
::torch::Device device();

/// Sum over ranks divided by the set's size (the default of every reduction).
inline constexpr ReduceOp Average = ReduceOp::kAverage;
/// Sum over ranks.
inline constexpr ReduceOp Sum = ReduceOp::kSum;
/// Elementwise minimum over ranks.
inline constexpr ReduceOp Min = ReduceOp::kMin;
/// Elementwise maximum over ranks.
inline constexpr ReduceOp Max = ReduceOp::kMax;
/// Elementwise product over ranks.
inline constexpr ReduceOp Product = ReduceOp::kProduct;
/// Adaptive summation (floating types, allreduce only; CPU tensors only for
/// now, CUDA ones throw InvalidArgument): see docs/guides/adasum.md.
inline constexpr ReduceOp Adasum = ReduceOp::kAdasum;

/// (name, tensor) pairs, as Module::named_parameters() lists them; names
/// key the collectives, so they must be the same on every rank.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
/// The pairs of dict in its order (the tensors are shared, not copied).
NamedTensors to_named_tensors(const ::torch::OrderedDict<std::string, at::Tensor>& dict);

/// at::ScalarType <-> kolo::DataType. to_data_type throws InvalidArgument
/// naming `what` (e.g. "allreduce 'loss'") for unsupported dtypes.
DataType to_data_type(at::ScalarType type, const std::string& what);
/// The at::ScalarType of a kolo::DataType (every DataType has one).
at::ScalarType to_scalar_type(DataType type);

/// A process set of a Context's engine, by id; ProcessSet() is the set of
/// all ranks. Static sets (kolo::init(process_sets)) have ids 1, 2, ... in
/// the order given; add_process_set returns the others.
class ProcessSet {
 public:
  /// The set of all ranks (id 0).
  constexpr ProcessSet() = default;
  /// The set with this id. Not checked here: operations on an id the engine
  /// does not know throw InvalidArgument.
  constexpr explicit ProcessSet(int id) : id_(id) {}
  /// The engine's id of the set (0: all ranks).
  constexpr int id() const { return id_; }
  /// Same id.
  bool operator==(const ProcessSet& o) const { return id_ == o.id_; }
  /// Different ids.
  bool operator!=(const ProcessSet& o) const { return id_ != o.id_; }

 private:
  int id_ = 0;
};
/// The set of all ranks (Horovod's hvd.global_process_set).
inline constexpr ProcessSet global_process_set{};

/// Internal: the adapter's implementation details.
namespace detail {
struct HandleBody;
}

/// Completion of one asynchronous tensor operation. Keeps the input and
/// output tensors alive until the operation ends. Copyable; copies share the
/// operation. Any thread may poll or wait.
class TensorHandle {
 public:
  /// An empty handle (valid() is false); the other members must not be called.
  TensorHandle() = default;
  /// Internal: made by Context's *_async operations.
  explicit TensorHandle(std::shared_ptr<detail::HandleBody> body);

  /// False for a default-constructed handle.
  bool valid() const { return body_ != nullptr; }
  /// True once the operation finished (successfully or not).
  bool poll() const;
  /// Blocks until done; throws the operation's error (kolo::Mismatch,
  /// Timeout, PeerFailure, ...). Returns the result: the output tensor, or
  /// for in-place operations the caller's tensor (copied back if it was not
  /// contiguous). Calling it again returns the same tensor.
  at::Tensor wait() const;
  /// alltoall: rows received from each rank of the set; allgather: rows
  /// each rank contributed (0 for a joined rank). Valid after wait().
  std::vector<int64_t> received_splits() const;
  /// The engine-level handle.
  const kolo::Handle& handle() const;

 private:
  std::shared_ptr<detail::HandleBody> body_;
};

/// What Context::alltoall returns.
struct AlltoallResult {
  at::Tensor tensor;                     ///< rows received, in rank order
  std::vector<int64_t> received_splits;  ///< rows received from each rank
};

/// Binds the adapter to one Engine and holds the counters for generated
/// names. default_context() serves kolo::defaultEngine(); tests and programs
/// with several engines make one Context per engine. Thread-safe; must
/// outlive the operations and DistributedOptimizers that use it.
class Context {
 public:
  /// A context bound to engine, which must outlive it.
  explicit Context(Engine& engine);
  /// Not copyable (nor movable).
  Context(const Context&) = delete;
  /// Not copy-assignable.
  Context& operator=(const Context&) = delete;

  /// The bound engine (kolo::defaultEngine() for the default context; throws
  /// before kolo::init()).
  Engine& engine() const;
  /// The bound engine's rank in the job.
  int rank() const { return engine().rank(); }
  /// The bound engine's number of ranks.
  int size() const { return engine().size(); }

  /// Elementwise reduction over ranks. prescale/postscale multiply before and
  /// after the reduction (any dtype but bool; integers are scaled in float64
  /// and truncated, float16/bfloat16 in float32, as Horovod does).
  /// Blocks until done and returns a new tensor; throws the operation's
  /// error (InvalidArgument for a bad tensor or unknown set, Mismatch when
  /// ranks disagree, PeerFailure, Timeout, ShutdownError).
  at::Tensor allreduce(const at::Tensor& tensor, ReduceOp op = Average,
                       const std::string& name = "", double prescale = 1.0,
                       double postscale = 1.0, ProcessSet process_set = {});
  /// allreduce() in place: writes the result into tensor and returns it.
  at::Tensor allreduce_(const at::Tensor& tensor, ReduceOp op = Average,
                        const std::string& name = "", double prescale = 1.0,
                        double postscale = 1.0, ProcessSet process_set = {});
  /// allreduce() without blocking: errors in the request throw here, later
  /// ones from TensorHandle::wait(). The engine reads tensor while the
  /// operation runs: do not modify it before the handle completes.
  TensorHandle allreduce_async(const at::Tensor& tensor, ReduceOp op = Average,
                               const std::string& name = "", double prescale = 1.0,
                               double postscale = 1.0, ProcessSet process_set = {});
  /// allreduce_() without blocking; the result is in tensor once wait()
  /// returns (not before: leave tensor alone until then).
  TensorHandle allreduce_async_(const at::Tensor& tensor, ReduceOp op = Average,
                                const std::string& name = "", double prescale = 1.0,
                                double postscale = 1.0, ProcessSet process_set = {});
  /// Negotiated as one unit (Engine::enqueueGroup) and fused; the members
  /// are named "<name>.<i>".
  std::vector<at::Tensor> grouped_allreduce(const std::vector<at::Tensor>& tensors,
                                            ReduceOp op = Average,
                                            const std::string& name = "",
                                            double prescale = 1.0, double postscale = 1.0,
                                            ProcessSet process_set = {});
  /// grouped_allreduce() without blocking: one handle per tensor.
  std::vector<TensorHandle> grouped_allreduce_async(const std::vector<at::Tensor>& tensors,
                                                    ReduceOp op = Average,
                                                    const std::string& name = "",
                                                    double prescale = 1.0,
                                                    double postscale = 1.0,
                                                    ProcessSet process_set = {});

  /// Concatenation over ranks along dim 0; the first dimension may differ
  /// per rank, the others must match.
  at::Tensor allgather(const at::Tensor& tensor, const std::string& name = "",
                       ProcessSet process_set = {});
  /// allgather() without blocking.
  TensorHandle allgather_async(const at::Tensor& tensor, const std::string& name = "",
                               ProcessSet process_set = {});
  /// Several allgathers negotiated as one unit.
  std::vector<at::Tensor> grouped_allgather(const std::vector<at::Tensor>& tensors,
                                            const std::string& name = "",
                                            ProcessSet process_set = {});
  /// grouped_allgather() without blocking: one handle per tensor.
  std::vector<TensorHandle> grouped_allgather_async(const std::vector<at::Tensor>& tensors,
                                                    const std::string& name = "",
                                                    ProcessSet process_set = {});

  /// root's tensor on every rank (root: a rank of the job, in the set).
  at::Tensor broadcast(const at::Tensor& tensor, int root, const std::string& name = "",
                       ProcessSet process_set = {});
  /// broadcast() in place: root's values are written into tensor.
  at::Tensor broadcast_(const at::Tensor& tensor, int root, const std::string& name = "",
                        ProcessSet process_set = {});
  /// broadcast() without blocking.
  TensorHandle broadcast_async(const at::Tensor& tensor, int root,
                               const std::string& name = "", ProcessSet process_set = {});
  /// broadcast_() without blocking; tensor holds root's values once wait()
  /// returns.
  TensorHandle broadcast_async_(const at::Tensor& tensor, int root,
                                const std::string& name = "", ProcessSet process_set = {});

  /// Sends splits[j] rows (dim 0) to the set's rank j; empty splits = an
  /// even split.
  AlltoallResult alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits = {},
                          const std::string& name = "", ProcessSet process_set = {});
  /// alltoall() without blocking; TensorHandle::received_splits() gives the
  /// rows received from each rank after wait().
  TensorHandle alltoall_async(const at::Tensor& tensor,
                              const std::vector<int64_t>& splits = {},
                              const std::string& name = "", ProcessSet process_set = {});

  /// Reduces over ranks and returns this rank's share of dim 0 (rows split as
  /// evenly as possible, the first ranks taking the remainder).
  at::Tensor reducescatter(const at::Tensor& tensor, ReduceOp op = Average,
                           const std::string& name = "", double prescale = 1.0,
                           double postscale = 1.0, ProcessSet process_set = {});
  /// reducescatter() without blocking.
  TensorHandle reducescatter_async(const at::Tensor& tensor, ReduceOp op = Average,
                                   const std::string& name = "", double prescale = 1.0,
                                   double postscale = 1.0, ProcessSet process_set = {});
  /// Several reducescatters negotiated as one unit.
  std::vector<at::Tensor> grouped_reducescatter(const std::vector<at::Tensor>& tensors,
                                                ReduceOp op = Average,
                                                const std::string& name = "",
                                                double prescale = 1.0, double postscale = 1.0,
                                                ProcessSet process_set = {});
  /// grouped_reducescatter() without blocking: one handle per tensor.
  std::vector<TensorHandle> grouped_reducescatter_async(
      const std::vector<at::Tensor>& tensors, ReduceOp op = Average,
      const std::string& name = "", double prescale = 1.0, double postscale = 1.0,
      ProcessSet process_set = {});

  /// Blocks until every rank of the set reached the barrier.
  void barrier(ProcessSet process_set = {});
  /// This rank has no more data; blocks until every rank of the set joined
  /// and returns the last rank to join (see Engine::join).
  int join(ProcessSet process_set = {});

  /// root's bytes on every rank (other ranks' argument is ignored).
  std::string broadcast_object(const std::string& bytes, int root = 0,
                               const std::string& name = "", ProcessSet process_set = {});

  /// Process sets (see kolo::Engine): collective over all ranks, called
  /// with the same ranks in the same order everywhere. remove_process_set
  /// returns false for the global set (which cannot be removed).
  ProcessSet add_process_set(const std::vector<int>& ranks);
  /// Removes a set (see add_process_set); its pending operations fail.
  bool remove_process_set(ProcessSet process_set);
  /// The set's ranks and this rank's place in it (any thread); throws
  /// InvalidArgument for an unknown set.
  ProcessSetInfo process_set_info(ProcessSet process_set) const;

  /// `name` if not empty, else the next generated name for `op` in the set
  /// ("noname.<op>.<n>"; other sets: "noname.<op>.ps<id>.<n>"), from the
  /// engine's counters (Engine::nameOrNext), which every adapter and the
  /// Python bindings share. An elastic reset makes a new engine, whose
  /// counters start at 0 on every rank.
  std::string name_or_next(const std::string& name, const char* op,
                           ProcessSet process_set = {});
  /// Generated names start again at 0 in every set (Engine::resetNames).
  void reset_names();

 private:
  friend Context& default_context();
  Context() = default;  ///< the default engine

  Engine* engine_ = nullptr;  ///< null: kolo::defaultEngine()
};

/// The context of kolo::defaultEngine(); valid before init() (it resolves the
/// engine at each call).
Context& default_context();

// ---- functional API on the default engine ----------------------------------

/// Context::allreduce on default_context().
inline at::Tensor allreduce(const at::Tensor& t, ReduceOp op = Average,
                            const std::string& name = "", double prescale = 1.0,
                            double postscale = 1.0, ProcessSet process_set = {}) {
  return default_context().allreduce(t, op, name, prescale, postscale, process_set);
}
/// Context::allreduce_ on default_context().
inline at::Tensor allreduce_(const at::Tensor& t, ReduceOp op = Average,
                             const std::string& name = "", double prescale = 1.0,
                             double postscale = 1.0, ProcessSet process_set = {}) {
  return default_context().allreduce_(t, op, name, prescale, postscale, process_set);
}
/// Context::allreduce_async on default_context().
inline TensorHandle allreduce_async(const at::Tensor& t, ReduceOp op = Average,
                                    const std::string& name = "", double prescale = 1.0,
                                    double postscale = 1.0, ProcessSet process_set = {}) {
  return default_context().allreduce_async(t, op, name, prescale, postscale, process_set);
}
/// Context::allreduce_async_ on default_context().
inline TensorHandle allreduce_async_(const at::Tensor& t, ReduceOp op = Average,
                                     const std::string& name = "", double prescale = 1.0,
                                     double postscale = 1.0, ProcessSet process_set = {}) {
  return default_context().allreduce_async_(t, op, name, prescale, postscale, process_set);
}
/// Context::grouped_allreduce on default_context().
inline std::vector<at::Tensor> grouped_allreduce(const std::vector<at::Tensor>& ts,
                                                 ReduceOp op = Average,
                                                 const std::string& name = "",
                                                 double prescale = 1.0, double postscale = 1.0,
                                                 ProcessSet process_set = {}) {
  return default_context().grouped_allreduce(ts, op, name, prescale, postscale, process_set);
}
/// Context::grouped_allreduce_async on default_context().
inline std::vector<TensorHandle> grouped_allreduce_async(
    const std::vector<at::Tensor>& ts, ReduceOp op = Average, const std::string& name = "",
    double prescale = 1.0, double postscale = 1.0, ProcessSet process_set = {}) {
  return default_context().grouped_allreduce_async(ts, op, name, prescale, postscale,
                                                   process_set);
}
/// Context::allgather on default_context().
inline at::Tensor allgather(const at::Tensor& t, const std::string& name = "",
                            ProcessSet process_set = {}) {
  return default_context().allgather(t, name, process_set);
}
/// Context::allgather_async on default_context().
inline TensorHandle allgather_async(const at::Tensor& t, const std::string& name = "",
                                    ProcessSet process_set = {}) {
  return default_context().allgather_async(t, name, process_set);
}
/// Context::grouped_allgather on default_context().
inline std::vector<at::Tensor> grouped_allgather(const std::vector<at::Tensor>& ts,
                                                 const std::string& name = "",
                                                 ProcessSet process_set = {}) {
  return default_context().grouped_allgather(ts, name, process_set);
}
/// Context::grouped_allgather_async on default_context().
inline std::vector<TensorHandle> grouped_allgather_async(const std::vector<at::Tensor>& ts,
                                                         const std::string& name = "",
                                                         ProcessSet process_set = {}) {
  return default_context().grouped_allgather_async(ts, name, process_set);
}
/// Context::broadcast on default_context().
inline at::Tensor broadcast(const at::Tensor& t, int root, const std::string& name = "",
                            ProcessSet process_set = {}) {
  return default_context().broadcast(t, root, name, process_set);
}
/// Context::broadcast_ on default_context().
inline at::Tensor broadcast_(const at::Tensor& t, int root, const std::string& name = "",
                             ProcessSet process_set = {}) {
  return default_context().broadcast_(t, root, name, process_set);
}
/// Context::broadcast_async on default_context().
inline TensorHandle broadcast_async(const at::Tensor& t, int root,
                                    const std::string& name = "",
                                    ProcessSet process_set = {}) {
  return default_context().broadcast_async(t, root, name, process_set);
}
/// Context::broadcast_async_ on default_context().
inline TensorHandle broadcast_async_(const at::Tensor& t, int root,
                                     const std::string& name = "",
                                     ProcessSet process_set = {}) {
  return default_context().broadcast_async_(t, root, name, process_set);
}
/// Context::alltoall on default_context().
inline AlltoallResult alltoall(const at::Tensor& t, const std::vector<int64_t>& splits = {},
                               const std::string& name = "", ProcessSet process_set = {}) {
  return default_context().alltoall(t, splits, name, process_set);
}
/// Context::alltoall_async on default_context().
inline TensorHandle alltoall_async(const at::Tensor& t,
                                   const std::vector<int64_t>& splits = {},
                                   const std::string& name = "",
                                   ProcessSet process_set = {}) {
  return default_context().alltoall_async(t, splits, name, process_set);
}
/// Context::reducescatter on default_context().
inline at::Tensor reducescatter(const at::Tensor& t, ReduceOp op = Average,
                                const std::string& name = "", double prescale = 1.0,
                                double postscale = 1.0, ProcessSet process_set = {}) {
  return default_context().reducescatter(t, op, name, prescale, postscale, process_set);
}
/// Context::reducescatter_async on default_context().
inline TensorHandle reducescatter_async(const at::Tensor& t, ReduceOp op = Average,
                                        const std::string& name = "", double prescale = 1.0,
                                        double postscale = 1.0, ProcessSet process_set = {}) {
  return default_context().reducescatter_async(t, op, name, prescale, postscale, process_set);
}
/// Context::grouped_reducescatter on default_context().
inline std::vector<at::Tensor> grouped_reducescatter(const std::vector<at::Tensor>& ts,
                                                     ReduceOp op = Average,
                                                     const std::string& name = "",
                                                     double prescale = 1.0,
                                                     double postscale = 1.0,
                                                     ProcessSet process_set = {}) {
  return default_context().grouped_reducescatter(ts, op, name, prescale, postscale,
                                                 process_set);
}
/// Context::grouped_reducescatter_async on default_context().
inline std::vector<TensorHandle> grouped_reducescatter_async(
    const std::vector<at::Tensor>& ts, ReduceOp op = Average, const std::string& name = "",
    double prescale = 1.0, double postscale = 1.0, ProcessSet process_set = {}) {
  return default_context().grouped_reducescatter_async(ts, op, name, prescale, postscale,
                                                       process_set);
}
/// Context::barrier on default_context().
inline void barrier(ProcessSet process_set = {}) { default_context().barrier(process_set); }
/// Context::join on default_context().
inline int join(ProcessSet process_set = {}) { return default_context().join(process_set); }
/// Context::broadcast_object on default_context().
inline std::string broadcast_object(const std::string& bytes, int root = 0,
                                    const std::string& name = "",
                                    ProcessSet process_set = {}) {
  return default_context().broadcast_object(bytes, root, name, process_set);
}
/// Context::add_process_set on default_context().
inline ProcessSet add_process_set(const std::vector<int>& ranks) {
  return default_context().add_process_set(ranks);
}
/// Context::remove_process_set on default_context().
inline bool remove_process_set(ProcessSet process_set) {
  return default_context().remove_process_set(process_set);
}
/// Context::process_set_info on default_context().
inline ProcessSetInfo process_set_info(ProcessSet process_set) {
  return default_context().process_set_info(process_set);
}
/// handle.poll(), as horovod.torch's poll(handle).
inline bool poll(const TensorHandle& handle) { return handle.poll(); }
/// handle.wait(), as horovod.torch's synchronize(handle): blocks, returns
/// the result and throws the operation's error.
inline at::Tensor synchronize(const TensorHandle& handle) { return handle.wait(); }

// ---- model and optimizer state ----------------------------------------------

/// Overwrites every tensor with root's values, in place (under NoGradGuard).
/// Collective: every rank (of process_set) calls it with the same names. The
/// module overload covers parameters and buffers (BatchNorm running
/// statistics).
void broadcast_parameters(const NamedTensors& tensors, int root = 0,
                          Context& ctx = default_context(), ProcessSet process_set = {});
/// The same for a module's named_parameters() or named_buffers().
void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& tensors,
                          int root = 0, Context& ctx = default_context(),
                          ProcessSet process_set = {});
/// The same for every parameter and buffer of module (and its children).
void broadcast_parameters(const ::torch::nn::Module& module, int root = 0,
                          Context& ctx = default_context(), ProcessSet process_set = {});

/// Makes the optimizer's per-parameter state (Adam exp_avg/exp_avg_sq/
/// max_exp_avg_sq/step, SGD momentum_buffer, RMSprop square_avg, Adagrad
/// sum/step, ...) and its param-group options (lr, betas, momentum,
/// weight_decay, ...) equal to root's, also on ranks whose state is still
/// empty. Every rank's optimizer must be the same type over the same
/// parameter layout. Collective (over process_set).
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root = 0,
                               Context& ctx = default_context(),
                               ProcessSet process_set = {});

}  // namespace kolo::torch

#include "kolo/torch/optimizer.h"        // IWYU pragma: export
#include "kolo/torch/sync_batch_norm.h"  // IWYU pragma: export
