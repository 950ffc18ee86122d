/// \file
/// kolo::torch::DistributedOptimizer: wraps a LibTorch optimizer so that
/// gradients are reduced over ranks, and its options. Included by
/// <kolo/torch.h>.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kolo/gradients.h"
#include "kolo/torch.h"  // which includes this file at its end (#pragma once ends the cycle)

namespace kolo::torch {

/// How DistributedOptimizer sends gradients (DistributedOptimizerOptions::
/// compression): kNone, kFP16 or kBF16 (kolo/gradients.h). Only float32 and
/// float64 gradients are cast; others travel as they are.
using Compression = kolo::Compression;

/// Settings of a DistributedOptimizer; the defaults reduce every gradient
/// with Average over all ranks, uncompressed. Checked by the constructor
/// (InvalidArgument naming the bad field).
struct DistributedOptimizerOptions {
  /// Local backward passes accumulated before gradients are reduced. The
  /// gradients of those passes are summed, as LibTorch accumulates them;
  /// scale the loss by 1/backward_passes_per_step to average instead.
  int backward_passes_per_step = 1;
  /// Average, Sum or Adasum. With Adasum (Horovod's delta optimizer) step()
  /// takes the wrapped optimizer's step locally and combines the parameter
  /// changes over ranks with Adasum; synchronize() is then a no-op and
  /// skip_synchronize() throws.
  ReduceOp op = Average;
  /// How gradients travel (Compression::kFP16 halves the bytes).
  Compression compression = kolo::Compression::kNone;
  /// Average only: multiply by 1/f before the reduction and by f after the
  /// averaging (keeps large sums in range, as Horovod does).
  double gradient_predivide_factor = 1.0;
  /// Gradients of one group are reduced together once all are ready on this
  /// rank. num_groups > 0 splits the parameters (optimizer order) into that
  /// many contiguous groups as Horovod does (the first ones one longer: 10
  /// in 4 are 3,3,2,2; kolo::splitIntoGroups); or list groups of parameter
  /// names explicitly.
  int num_groups = 0;
  /// Explicit groups of parameter names (see num_groups); parameters in no
  /// group are reduced on their own.
  std::vector<std::vector<std::string>> groups;
  /// Prefix of the engine names of the gradients ("<prefix><param name>");
  /// give two DistributedOptimizers on one engine different prefixes.
  std::string name_prefix = "grad.";
  /// Sparse gradients (torch::nn::Embedding with sparse(true)) are reduced as
  /// Horovod does: an allgather of every rank's indices and values (divided
  /// by the size for Average), leaving an uncoalesced sparse gradient. With
  /// sparse_as_dense they are reduced as dense tensors and made sparse again.
  bool sparse_as_dense = false;
  /// Gradients are reduced among this set's ranks. On ranks outside it the
  /// optimizer steps on local gradients (as Horovod's does).
  ProcessSet process_set;
  /// Gradients are reduced in buckets of consecutive parameters (in reverse
  /// order, as backward produces them) of up to this many bytes, one request
  /// per bucket; param.grad() becomes a view of its bucket, reduced in place
  /// (see kolo/torch/reducer.h). 0: one bucket per parameter. Explicit
  /// groups are buckets of their own.
  int64_t bucket_bytes = int64_t{25} << 20;
};

/// Wraps a LibTorch optimizer so gradients are averaged over ranks.
///
/// Construct it after the model is on its device: its GradientReducer
/// (kolo/torch/reducer.h) registers a post-hook on every parameter's
/// gradient accumulator and enqueues a bucket of gradients (one request) as
/// soon as backward has accumulated all of them (after
/// backward_passes_per_step passes), so communication overlaps the rest of
/// backward. Gradients are reduced in place: param.grad() becomes an alias of
/// its region of the bucket. step() waits for the buckets and steps the
/// wrapped optimizer. Parameters whose gradient never arrived in a step
/// (unused on this rank) contribute zeros, so every rank submits the same
/// buckets; their grad is then defined (zeros).
///
/// The wrapped optimizer stays the one that owns state: save/load it and
/// attach LR schedulers to optimizer() (or to the shared_ptr you passed).
/// Threading: use from the thread that runs backward.
class DistributedOptimizer {
 public:
  /// Wraps optimizer; named_parameters names every parameter of it (names
  /// key the allreduces: use the same names on every rank). Throws
  /// InvalidArgument for a null or LBFGS optimizer, bad options, empty or
  /// duplicate names, a parameter of the optimizer missing from
  /// named_parameters, or an unknown process set. ctx must outlive it.
  DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                       const NamedTensors& named_parameters,
                       DistributedOptimizerOptions options = {},
                       Context& ctx = default_context());
  /// The same with Module::named_parameters() as it comes.
  DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                       const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                       DistributedOptimizerOptions options = {},
                       Context& ctx = default_context());
  /// Removes the hooks and waits for allreduces still in flight.
  ~DistributedOptimizer();
  /// Not copyable (nor movable).
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  /// Not copy-assignable.
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  /// synchronize() (unless inside skip_synchronize()) and the wrapped step.
  /// With a closure, the closure (forward + backward) runs first.
  at::Tensor step(::torch::optim::Optimizer::LossClosure closure = nullptr);

  /// Submits the gradients that have not been submitted yet (zeros where a
  /// parameter got none), waits for every allreduce and writes the results
  /// into param.grad(). Calling it again before new gradients arrive is a
  /// no-op. Throws the first failed allreduce's error.
  void synchronize();

  /// While alive, step() does not synchronize: call synchronize() yourself,
  /// then e.g. clip the averaged gradients, then step().
  class SkipSynchronize {
   public:
    /// Starts skipping; owner must outlive the guard.
    explicit SkipSynchronize(DistributedOptimizer& owner);
    /// step() synchronizes again.
    ~SkipSynchronize();
    /// Not copyable (nor movable).
    SkipSynchronize(const SkipSynchronize&) = delete;
    /// Not copy-assignable.
    SkipSynchronize& operator=(const SkipSynchronize&) = delete;

   private:
    DistributedOptimizer& owner_;
  };
  /// The guard above (Horovod's `with optimizer.skip_synchronize():`).
  [[nodiscard]] SkipSynchronize skip_synchronize() { return SkipSynchronize(*this); }

  /// Forgets the gradients of the current step: waits for allreduces still
  /// in flight (after a failure they end with an error once the engine
  /// stops) and drops them, so zero_grad() and the next step start clean.
  /// For elastic training, after a peer failure interrupted a step.
  void reset_step();

  /// The wrapped optimizer's zero_grad(). Throws InvalidArgument while
  /// allreduces are in flight (after backward, before step/synchronize).
  void zero_grad();
  /// The same, passing set_to_none to the wrapped optimizer.
  void zero_grad(bool set_to_none);

  /// The wrapped optimizer (owns the optimizer state and param groups).
  ::torch::optim::Optimizer& optimizer() { return *optimizer_; }
  /// The wrapped optimizer as passed to the constructor.
  const std::shared_ptr<::torch::optim::Optimizer>& optimizer_ptr() const { return optimizer_; }
  /// The options it was built with.
  const DistributedOptimizerOptions& options() const;

  /// Gradients whose bucket was enqueued since the last synchronize() (by
  /// the hooks or by synchronize itself). Lets tests observe overlap.
  int submitted() const;

  struct State;  ///< Internal: shared with the gradient hooks

 private:
  void adasumStep();

  std::shared_ptr<::torch::optim::Optimizer> optimizer_;
  std::shared_ptr<State> state_;
};

/// One tensor in, another out: index is the parameter's position in the
/// parameters given (a compressor's compress or decompress, as
/// adasum_delta_step and GradientReducerOptions take them).
using TensorTransform = std::function<at::Tensor(size_t index, const at::Tensor& tensor)>;

/// One tensor of adasum_delta_step in, another out: index is the
/// parameter's position in params. An empty function passes the tensor on.
using DeltaTransform = TensorTransform;

/// Horovod's Adasum delta step, the one DistributedOptimizer takes with op
/// Adasum (kolo.torch's Python optimizer takes this one too):
///   1. a parameter without a gradient gets zeros, so every rank submits
///      every parameter;
///   2. local_step() updates the parameters (the wrapped optimizer's step);
///   3. each parameter's change goes through compress, is reduced in place
///      with Adasum over set under names[i], and comes back through
///      decompress;
///   4. each parameter becomes its value before the step plus that result.
/// Every rank of set calls it with the same names, in the same order. If a
/// reduction fails, every parameter gets its value before the step back and
/// the first failure is thrown, after all the reductions ended. An
/// exception from local_step() or a transform is thrown as it is, with the
/// parameters as that left them. ctx must be initialized.
void adasum_delta_step(const std::vector<at::Tensor>& params,
                       const std::vector<std::string>& names,
                       const std::function<void()>& local_step, const DeltaTransform& compress,
                       const DeltaTransform& decompress, ProcessSet set,
                       Context& ctx = default_context());

}  // namespace kolo::torch
