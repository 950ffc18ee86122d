/// \file
/// kolo::torch::SyncBatchNorm: batch normalization whose batch statistics are
/// those of every rank's batch together (torch.nn.SyncBatchNorm numerics).
/// Included by <kolo/torch.h>.
///
/// In training mode the mean and variance are taken over the batches of all
/// ranks (ranks may have different batch sizes, even 0), the running
/// statistics are updated with the unbiased variance of that global batch,
/// and backward reduces the two sums the input gradient needs, so N ranks
/// with batches of B compute what one process computes with the N*B batch.
/// The weight and bias gradients stay local (DistributedOptimizer reduces
/// them like any other gradient). In eval mode (with running statistics) no
/// communication happens. Collective in training mode: every rank runs
/// forward and backward of every SyncBatchNorm the same number of times, in
/// the same order (construct the model the same way on every rank).
#pragma once

#include <string>

#include <torch/torch.h>

namespace kolo::torch {

class Context;
Context& default_context();

/// The functional form (training with synchronized statistics). weight, bias
/// and the running statistics may be undefined; momentum is the factor of the
/// running-statistics update (the caller resolves a cumulative average).
/// `name` keys the collectives; every rank passes the same one for the same
/// layer. Differentiable with respect to input, weight and bias.
at::Tensor sync_batch_norm(const at::Tensor& input, const at::Tensor& weight,
                           const at::Tensor& bias, const at::Tensor& running_mean,
                           const at::Tensor& running_var, double momentum, double eps,
                           const std::string& name, Context& ctx = default_context());

/// torch::nn::BatchNorm{1,2,3}d's parameters, buffers and options
/// (BatchNormOptions: num_features, eps, momentum (nullopt: cumulative
/// average), affine, track_running_stats), for inputs of any rank >= 2 with
/// channels in dim 1.
class SyncBatchNormImpl
    : public ::torch::nn::NormImplBase<2, SyncBatchNormImpl, ::torch::nn::BatchNormOptions> {
 public:
  /// BatchNormOptions(num_features) with its defaults (eps 1e-5, momentum
  /// 0.1, affine, tracking running statistics), on default_context().
  explicit SyncBatchNormImpl(int64_t num_features)
      : SyncBatchNormImpl(::torch::nn::BatchNormOptions(num_features)) {}
  /// The layer's collectives are named after a counter of ctx, so build
  /// models in the same order on every rank.
  explicit SyncBatchNormImpl(const ::torch::nn::BatchNormOptions& options,
                             Context& ctx = default_context());

  /// Normalizes input (N, C, ...). In training mode with more than one rank
  /// the statistics are those of all ranks' batches (collective: see the
  /// file comment); in eval mode, or alone, it is plain batch norm. Throws
  /// InvalidArgument for inputs of fewer than 2 dimensions.
  at::Tensor forward(const at::Tensor& input);
  /// Prints "kolo::torch::SyncBatchNorm(C, eps=..., momentum=..., ...)".
  void pretty_print(std::ostream& stream) const override;

 protected:
  /// Throws InvalidArgument unless input has at least 2 dimensions.
  void _check_input_dim(const at::Tensor& input) override;

 private:
  Context* ctx_;
  std::string name_;
};

/// The module holder (TORCH_MODULE spells the torch namespace unqualified, which inside
/// kolo::torch names this namespace).
class SyncBatchNorm : public ::torch::nn::ModuleHolder<SyncBatchNormImpl> {
 public:
  using ::torch::nn::ModuleHolder<SyncBatchNormImpl>::ModuleHolder;
  using ::torch::nn::ModuleHolder<SyncBatchNormImpl>::get;
};

}  // namespace kolo::torch
