/// \file
/// kolo::torch::GradientReducer: the gradient reducer behind both
/// DistributedOptimizers (C++ kolo::torch::DistributedOptimizer and Python
/// kolo.torch.DistributedOptimizer).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kolo/torch.h"

namespace kolo::torch {

/// How a GradientReducer reduces gradients.
struct GradientReducerOptions {
  /// Backward passes accumulated (summed) before a gradient is submitted.
  int backward_passes_per_step = 1;
  /// Average or Sum. Adasum: the hooks only count backward passes and
  /// synchronize() reduces nothing (the owner reduces parameter updates).
  ReduceOp op = ReduceOp::kAverage;
  /// Gradients travel as float16/bfloat16 when asked (floating types only).
  Compression compression = kolo::Compression::kNone;
  /// Average only: multiply by 1/f before the reduction and by f after it.
  double gradient_predivide_factor = 1.0;
  /// Buckets given by the caller, as indices into the parameters; each is
  /// reduced as one unit once all of its members are ready (split only
  /// where its members differ in device or dtype). Parameters in none of
  /// them are bucketed by bucket_bytes.
  std::vector<std::vector<size_t>> groups;
  /// Bucket names are "<name_prefix><first member's name>[+<members - 1>]".
  std::string name_prefix = "grad.";
  /// Sparse gradients: reduced as dense tensors (true) or by allgather of
  /// indices and values (false, Horovod's default).
  bool sparse_as_dense = false;
  /// On ranks outside this set nothing is reduced.
  ProcessSet process_set;
  /// Buckets of consecutive parameters (in reverse order, the order
  /// backward produces gradients) up to this many bytes on the wire; a
  /// larger parameter gets a bucket of its own. 0: one bucket per parameter.
  int64_t bucket_bytes = int64_t{25} << 20;
  /// A compressor kolo does not implement (a Horovod Compressor written in
  /// Python; TensorTransform is in kolo/torch/optimizer.h): both set, with
  /// compression kNone. compress(i, grad) gives the tensor that travels for
  /// parameter i (any dtype and shape; reduced in place), decompress(i,
  /// reduced) the gradient made from its reduction.
  /// Called on the threads that run the hooks and synchronize(), never
  /// twice at once. As Horovod does, each parameter is then reduced on its
  /// own and each group as one grouped allreduce (bucket_bytes is not
  /// used): what travels is known only once compress ran.
  TensorTransform compress;
  TensorTransform decompress;  ///< See compress.
  /// Called (instead of throwing InvalidArgument) when a gradient hook finds
  /// an error, with the message; must throw. Lets the Python binding raise
  /// Horovod's AssertionError from inside backward.
  std::function<void(const std::string& message)> hook_error;
};

/// Reduces the gradients of a set of parameters over the ranks of a
/// process set, in place.
///
/// The constructor registers a post-hook on each parameter's gradient
/// accumulator. Parameters are grouped into buckets; a bucket is one flat
/// buffer and one engine request, named stably across steps so the
/// engine's response cache hits. When the last member of a bucket has been
/// accumulated (after backward_passes_per_step passes), the hook copies the
/// members' gradients into the bucket (nothing to copy where param.grad()
/// already is the bucket's view) and enqueues the bucket. Where the wire
/// dtype is the parameter's and the parameter is contiguous, param.grad()
/// then is a view of the bucket, so the reduction writes the gradient in
/// place and later backward passes accumulate straight into the bucket.
/// Unused parameters contribute zeros.
///
/// synchronize() submits the buckets the hooks did not, waits, and writes
/// back only what is not in place (compressed, non-contiguous or sparse
/// gradients; with options.compress, each result through decompress). For
/// CUDA tensors the host waits only until the work is enqueued; the
/// caller's current stream waits on the done event, once per distinct
/// event (responses on one comm stream complete in order).
///
/// Threading: hooks run on the thread that runs backward; the other
/// methods on the user's thread. Not copyable; the Context must outlive it.
class GradientReducer {
 public:
  /// params: (name, parameter) pairs, names unique and not empty. Throws
  /// InvalidArgument for bad options, names or groups.
  GradientReducer(std::vector<std::pair<std::string, at::Tensor>> params,
                  GradientReducerOptions options, Context& ctx);
  /// Removes the hooks and waits for reductions still in flight.
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Submits what the hooks did not, waits and writes results into
  /// param.grad(). A no-op until new gradients arrive, with op Adasum and
  /// outside the process set. Throws the first failed reduction's error
  /// after waiting for all of them.
  void synchronize();
  /// Waits for reductions in flight (ignoring their errors) and forgets the
  /// step: pass counts restart. For elastic recovery after a failure.
  void reset_step();
  /// Forgets counted passes without waiting (nothing may be in flight).
  void clear_passes();
  /// Backward passes were counted or reductions are in flight.
  bool pending() const;
  /// Gradients submitted since the last synchronize().
  int submitted() const;
  /// Changes backward_passes_per_step and restarts the pass counts.
  void set_backward_passes_per_step(int passes);
  /// The options it was made with (backward_passes_per_step as last set).
  const GradientReducerOptions& options() const;
  /// The buckets: member parameter names, in submission order.
  std::vector<std::vector<std::string>> buckets() const;
  /// Engine requests (buckets and sparse allgathers) enqueued so far.
  uint64_t requests() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace kolo::torch
