// SyncBatchNorm: statistics over the batches of all ranks.
//
// Forward gathers (count, mean, M2) of every rank's batch, one row per rank,
// and combines them in rank order on every rank (Chan et al.'s parallel
// variance), so every rank computes bit-identical statistics without the
// cancellation of E[x^2] - E[x]^2. Backward sums sum(dy) and
// sum(dy * (x - mean)) over ranks. The statistics travel as CPU float64
// tensors whatever the input's device and dtype.
#include <cstdint>

#include <torch/csrc/autograd/custom_function.h>

#include "kolo/torch.h"

namespace kolo::torch {
namespace {

using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;

// Every dimension but the channel dimension 1.
std::vector<int64_t> reduceDims(const at::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped to broadcast against x: (1, C, 1, ...).
at::Tensor channelView(const at::Tensor& v, const at::Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = x.size(1);
  return v.view(shape);
}

// Float types of 16 bits compute in float32; float64 stays float64.
at::ScalarType computeType(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

class SyncBatchNormFunction : public ::torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* actx, const at::Tensor& input,
                            const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& running_mean, const at::Tensor& running_var,
                            double momentum, double eps, const std::string& name, Context* ctx) {
    const int64_t channels = input.size(1);
    const at::Tensor x = input.contiguous().to(computeType(input));
    const std::vector<int64_t> dims = reduceDims(x);
    const int64_t local = channels == 0 ? 0 : x.numel() / channels;
    auto f64cpu = at::TensorOptions().dtype(at::kDouble).device(at::kCPU);
    at::Tensor localMean = at::zeros({channels}, f64cpu);
    at::Tensor localM2 = at::zeros({channels}, f64cpu);
    if (local > 0) {
      at::Tensor mean = x.mean(dims);
      localMean = mean.to(f64cpu);
      localM2 = (x - channelView(mean, x)).pow(2).sum(dims).to(f64cpu);
    }
    at::Tensor row =
        at::cat({at::full({1}, static_cast<double>(local), f64cpu), localMean, localM2})
            .unsqueeze(0);
    at::Tensor all = ctx->allgather(row, name + ".stats");  // (ranks, 1 + 2C)
    at::Tensor counts = all.select(1, 0).unsqueeze(1);
    const double total = counts.sum().item<double>();
    if (total <= 1) {
      throw InvalidArgument("SyncBatchNorm '" + name +
                            "': expected more than 1 value per channel when training, got " +
                            std::to_string(static_cast<int64_t>(total)) +
                            " over all ranks (input " + c10::str(input.sizes()) + " on this rank)");
    }
    at::Tensor means = all.narrow(1, 1, channels);
    at::Tensor m2s = all.narrow(1, 1 + channels, channels);
    at::Tensor mean = (counts * means).sum(0) / total;
    at::Tensor m2 = (m2s + counts * (means - mean).pow(2)).sum(0);
    at::Tensor invstd = (m2 / total + eps).rsqrt();
    {
      at::NoGradGuard noGrad;
      if (running_mean.defined()) {
        running_mean.mul_(1.0 - momentum).add_(mean.to(running_mean.options()), momentum);
      }
      if (running_var.defined()) {
        running_var.mul_(1.0 - momentum)
            .add_((m2 / (total - 1)).to(running_var.options()), momentum);
      }
    }
    const at::Tensor meanX = mean.to(x.options());
    const at::Tensor invstdX = invstd.to(x.options());
    at::Tensor y = (x - channelView(meanX, x)) * channelView(invstdX, x);
    if (weight.defined()) y = y * channelView(weight.to(x.scalar_type()), x);
    if (bias.defined()) y = y + channelView(bias.to(x.scalar_type()), x);
    actx->save_for_backward({x, weight, meanX, invstdX});
    actx->saved_data["total"] = total;
    actx->saved_data["name"] = name;
    // The context outlives its operations (see Context); autograd keeps no
    // pointer type, so it travels as an integer.
    actx->saved_data["context"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(ctx));
    actx->saved_data["has_bias"] = bias.defined();
    return y.to(input.scalar_type());
  }

  static variable_list backward(AutogradContext* actx, variable_list grads) {
    if (!grads[0].defined()) return variable_list(9);
    const auto saved = actx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const double total = actx->saved_data["total"].toDouble();
    const std::string name = actx->saved_data["name"].toStringRef();
    auto* ctx =
        reinterpret_cast<Context*>(static_cast<intptr_t>(actx->saved_data["context"].toInt()));
    const at::Tensor dy = grads[0].contiguous().to(x.scalar_type());
    const std::vector<int64_t> dims = reduceDims(x);
    const at::Tensor xmu = x - channelView(mean, x);
    const int64_t channels = x.size(1);
    at::Tensor sumDy = dy.numel() > 0 ? dy.sum(dims) : at::zeros({channels}, x.options());
    at::Tensor sumDyXmu =
        dy.numel() > 0 ? (dy * xmu).sum(dims) : at::zeros({channels}, x.options());

    at::Tensor gradInput, gradWeight, gradBias;
    if (actx->needs_input_grad(0)) {
      // One collective for both sums, on the CPU in float64.
      at::Tensor both = at::stack({sumDy, sumDyXmu}).to(at::kDouble).to(at::kCPU);
      both = ctx->allreduce(both, ReduceOp::kSum, name + ".grad");
      const at::Tensor meanDy = (both[0] / total).to(x.options());
      const at::Tensor meanDyXmu = (both[1] / total).to(x.options());
      at::Tensor scale = invstd;
      if (weight.defined()) scale = scale * weight.to(x.scalar_type());
      gradInput =
          (dy - channelView(meanDy, x) - xmu * channelView(invstd * invstd * meanDyXmu, x)) *
          channelView(scale, x);
      gradInput = gradInput.to(grads[0].scalar_type());
    }
    if (weight.defined() && actx->needs_input_grad(1)) {
      gradWeight = (sumDyXmu * invstd).to(weight.scalar_type());
    }
    if (actx->saved_data["has_bias"].toBool() && actx->needs_input_grad(2)) {
      gradBias = sumDy.to(weight.defined() ? weight.scalar_type() : x.scalar_type());
    }
    return {gradInput,    gradWeight,   gradBias,     at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor sync_batch_norm(const at::Tensor& input, const at::Tensor& weight,
                           const at::Tensor& bias, const at::Tensor& running_mean,
                           const at::Tensor& running_var, double momentum, double eps,
                           const std::string& name, Context& ctx) {
  KOLO_CHECK_ARG(input.defined() && input.dim() >= 2,
                 "SyncBatchNorm: expected an input of at least 2 dimensions (N, C, ...), got " +
                     (input.defined() ? std::to_string(input.dim()) + "D" : std::string("none")));
  KOLO_CHECK_ARG(input.is_floating_point(), "SyncBatchNorm: expected a floating-point input, got " +
                                                std::string(c10::toString(input.scalar_type())));
  return SyncBatchNormFunction::apply(input, weight, bias, running_mean, running_var, momentum, eps,
                                      name, &ctx);
}

SyncBatchNormImpl::SyncBatchNormImpl(const ::torch::nn::BatchNormOptions& options, Context& ctx)
    : NormImplBase(options), ctx_(&ctx) {}

void SyncBatchNormImpl::_check_input_dim(const at::Tensor& input) {
  KOLO_CHECK_ARG(input.dim() >= 2, "SyncBatchNorm: expected at least 2D input (got " +
                                       std::to_string(input.dim()) + "D input)");
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  _check_input_dim(input);
  // torch::nn::BatchNorm's bookkeeping of the running statistics.
  double factor = options.momentum().has_value() ? *options.momentum() : 0.0;
  if (is_training() && options.track_running_stats() && num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    if (!options.momentum().has_value()) {
      factor = 1.0 / num_batches_tracked.item<double>();
    }
  }
  const bool useBatchStats = is_training() || !options.track_running_stats();
  if (!is_training() || ctx_->size() == 1) {
    // No synchronization outside training (as torch.nn.SyncBatchNorm).
    return ::torch::nn::functional::detail::batch_norm(input, running_mean, running_var, weight,
                                                       bias, useBatchStats, factor, options.eps());
  }
  // Named at the first synchronized forward (the engine exists by then;
  // every rank runs its layers' first forwards in the same order).
  if (name_.empty()) name_ = ctx_->name_or_next("", "sync_batch_norm");
  return sync_batch_norm(input, weight, bias, running_mean, running_var, factor, options.eps(),
                         name_, *ctx_);
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "kolo::torch::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps()
         << ", momentum=";
  if (options.momentum().has_value()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << options.affine()
         << ", track_running_stats=" << options.track_running_stats() << ")";
}

}  // namespace kolo::torch
