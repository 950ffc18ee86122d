// DistributedOptimizer: a GradientReducer (reducer.cc) for the gradients,
// Adasum's delta step, and the wrapped optimizer.
//
// Threading: the reducer's hooks run on the thread that executes backward;
// step/synchronize/zero_grad on the user's thread. State::mu guards `skip`.
#include <exception>
#include <unordered_map>
#include <unordered_set>

#include "compat.h"
#include "kolo/torch/optimizer.h"
#include "kolo/torch/reducer.h"
#include "tensor_util.h"

namespace kolo::torch {

struct DistributedOptimizer::State {
  Context* ctx = nullptr;
  DistributedOptimizerOptions options;
  bool member = true;  // of options.process_set; false: local steps only
  std::vector<std::string> names;  // trainable parameters, in optimizer order
  std::vector<at::Tensor> params;
  std::vector<std::string> adasumNames;  // name_prefix + names, made at the first Adasum step
  std::unique_ptr<GradientReducer> reducer;
  mutable std::mutex mu;
  bool skip = false;
};

namespace {

std::string describe(const at::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + c10::str(t.sizes());
}

void checkOptions(const DistributedOptimizerOptions& o) {
  GradientOptions checked;
  checked.backwardPassesPerStep = o.backward_passes_per_step;
  checked.op = o.op;
  checked.gradientPredivideFactor = o.gradient_predivide_factor;
  checked.numGroups = o.num_groups;
  checked.explicitGroups = !o.groups.empty();
  checked.bucketBytes = o.bucket_bytes;
  checkGradientOptions(checked, "DistributedOptimizer");
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(
    std::shared_ptr<::torch::optim::Optimizer> optimizer,
    const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
    DistributedOptimizerOptions options, Context& ctx)
    : DistributedOptimizer(std::move(optimizer), to_named_tensors(named_parameters),
                           std::move(options), ctx) {}

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                                           const NamedTensors& named_parameters,
                                           DistributedOptimizerOptions options, Context& ctx)
    : optimizer_(std::move(optimizer)), state_(std::make_shared<State>()) {
  KOLO_CHECK_ARG(optimizer_ != nullptr, "DistributedOptimizer: the optimizer is null");
  if (dynamic_cast<::torch::optim::LBFGS*>(optimizer_.get()) != nullptr) {
    throw InvalidArgument(
        "DistributedOptimizer does not support torch::optim::LBFGS: it re-evaluates the "
        "closure several times per step, so gradients cannot be reduced once per step; "
        "use SGD, Adam, AdamW, RMSprop or Adagrad");
  }
  checkOptions(options);
  State& st = *state_;
  st.ctx = &ctx;
  st.options = std::move(options);
  // InvalidArgument for an unknown set.
  const ProcessSetInfo setInfo = ctx.process_set_info(st.options.process_set);
  st.member = setInfo.included();

  // Names: unique, and every optimizer parameter must have one.
  std::unordered_map<const c10::TensorImpl*, std::string> nameOf;
  std::unordered_set<std::string> seenNames;
  std::vector<std::string> duplicates;
  for (const auto& [name, tensor] : named_parameters) {
    KOLO_CHECK_ARG(!name.empty(), "DistributedOptimizer: named_parameters has an empty name");
    if (!seenNames.insert(name).second) {
      duplicates.push_back(name);
      continue;
    }
    if (tensor.defined()) nameOf.emplace(tensor.unsafeGetTensorImpl(), name);
  }
  if (!duplicates.empty()) {
    std::string list;
    for (const auto& d : duplicates) list += (list.empty() ? "'" : ", '") + d + "'";
    throw InvalidArgument(
        "DistributedOptimizer: parameter names in named_parameters must be unique; "
        "found duplicates: " + list);
  }
  std::unordered_set<const c10::TensorImpl*> seenParams;
  const auto& paramGroups = optimizer_->param_groups();
  for (size_t g = 0; g < paramGroups.size(); ++g) {
    const auto& params = paramGroups[g].params();
    for (size_t k = 0; k < params.size(); ++k) {
      const at::Tensor& p = params[k];
      if (!seenParams.insert(p.unsafeGetTensorImpl()).second) continue;
      auto it = nameOf.find(p.unsafeGetTensorImpl());
      if (it == nameOf.end()) {
        throw InvalidArgument(
            "DistributedOptimizer: named_parameters was specified, but parameter " +
            std::to_string(k) + " of param group " + std::to_string(g) + " (" + describe(p) +
            ") of the wrapped optimizer is not named in it; pass the named_parameters() of "
            "the module whose parameters the optimizer was built from");
      }
      if (!p.requires_grad()) continue;  // never gets a gradient
      KOLO_CHECK_ARG(p.is_leaf(), "DistributedOptimizer: parameter '" + it->second +
                                      "' is not a leaf tensor");
      st.names.push_back(it->second);
      st.params.push_back(p);
    }
  }

  // Groups, as indices into the trainable parameters.
  GradientReducerOptions ro;
  const size_t n = st.params.size();
  ro.groups = splitIntoGroups(n, st.options.num_groups);
  if (!st.options.groups.empty()) {
    std::unordered_map<std::string, size_t> indexOf;
    for (size_t i = 0; i < n; ++i) indexOf.emplace(st.names[i], i);
    std::unordered_set<std::string> used;
    for (size_t g = 0; g < st.options.groups.size(); ++g) {
      std::vector<size_t> group;
      for (const auto& name : st.options.groups[g]) {
        auto it = indexOf.find(name);
        KOLO_CHECK_ARG(it != indexOf.end(),
                       "DistributedOptimizer: group " + std::to_string(g) + " names '" + name +
                           "', which is not a trainable parameter of the wrapped optimizer");
        KOLO_CHECK_ARG(used.insert(name).second, "DistributedOptimizer: parameter '" + name +
                                                     "' is in more than one group");
        group.push_back(it->second);
      }
      if (!group.empty()) ro.groups.push_back(std::move(group));
    }
  }
  ro.backward_passes_per_step = st.options.backward_passes_per_step;
  ro.op = st.options.op;
  ro.compression = st.options.compression;
  ro.gradient_predivide_factor = st.options.gradient_predivide_factor;
  ro.name_prefix = st.options.name_prefix;
  ro.sparse_as_dense = st.options.sparse_as_dense;
  ro.process_set = st.options.process_set;
  ro.bucket_bytes = st.options.bucket_bytes;
  NamedTensors named;
  for (size_t i = 0; i < n; ++i) named.emplace_back(st.names[i], st.params[i]);
  // The hooks: on the process set's members only.
  st.reducer = std::make_unique<GradientReducer>(std::move(named), std::move(ro), ctx);
}

DistributedOptimizer::~DistributedOptimizer() = default;  // the reducer waits

void DistributedOptimizer::synchronize() { state_->reducer->synchronize(); }

void adasum_delta_step(const std::vector<at::Tensor>& params,
                       const std::vector<std::string>& names,
                       const std::function<void()>& local_step, const DeltaTransform& compress,
                       const DeltaTransform& decompress, ProcessSet set, Context& ctx) {
  KOLO_CHECK_ARG(params.size() == names.size(),
                 "adasum_delta_step: " + std::to_string(params.size()) + " parameters but " +
                     std::to_string(names.size()) + " names");
  KOLO_CHECK_ARG(static_cast<bool>(local_step), "adasum_delta_step: local_step is empty");
  std::vector<at::Tensor> start;
  {
    at::NoGradGuard noGrad;
    for (const auto& p : params) {
      KOLO_CHECK_ARG(p.defined(), "adasum_delta_step: an undefined parameter");
      if (!p.grad().defined()) {
        at::Tensor param = p;  // mutable_grad() is not const
        param.mutable_grad() = at::zeros_like(p);
      }
      start.push_back(p.detach().clone());
    }
  }
  local_step();
  std::vector<TensorHandle> handles;
  std::vector<at::Tensor> deltas;
  std::exception_ptr error;
  {
    at::NoGradGuard noGrad;
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor delta = params[i].detach() - start[i];
      if (compress) delta = compress(i, delta);
      delta = delta.contiguous();
      deltas.push_back(delta);
      try {
        handles.push_back(ctx.allreduce_async_(delta, ReduceOp::kAdasum, names[i], 1.0, 1.0, set));
      } catch (...) {
        error = std::current_exception();
        break;
      }
    }
  }
  // Every submitted reduction ends before the deltas may go: the engine
  // writes into them.
  for (auto& h : handles) {
    try {
      h.wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  at::NoGradGuard noGrad;
  if (error) {
    for (size_t i = 0; i < params.size(); ++i) params[i].detach().copy_(start[i]);
    std::rethrow_exception(error);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor change = decompress ? decompress(i, deltas[i]) : deltas[i];
    params[i].detach().copy_(start[i] + change.to(start[i].scalar_type()));
  }
}

// Adasum with the options' compression (a cast of float32 and float64 to
// half or bfloat16, and back).
void DistributedOptimizer::adasumStep() {
  State& st = *state_;
  const Compression compression = st.options.compression;
  DeltaTransform compress;
  if (compression != Compression::kNone) {
    compress = [compression](size_t, const at::Tensor& delta) {
      if (!delta.is_floating_point() || delta.scalar_type() == at::kHalf ||
          delta.scalar_type() == at::kBFloat16) {
        return delta;
      }
      return delta.to(compression == Compression::kFP16 ? at::kHalf : at::kBFloat16);
    };
  }
  if (st.adasumNames.empty()) {
    for (const auto& n : st.names) st.adasumNames.push_back(st.options.name_prefix + n);
  }
  try {
    adasum_delta_step(st.params, st.adasumNames, [this] { optimizer_->step(nullptr); }, compress, nullptr,
                      st.options.process_set, *st.ctx);
  } catch (...) {
    st.reducer->clear_passes();
    throw;
  }
  st.reducer->clear_passes();
}

at::Tensor DistributedOptimizer::step(::torch::optim::Optimizer::LossClosure closure) {
  at::Tensor loss;
  if (closure) loss = closure();
  if (state_->options.op == ReduceOp::kAdasum && state_->member) {
    adasumStep();
    return loss;
  }
  bool skip;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    skip = state_->skip;
  }
  if (!skip) synchronize();
  optimizer_->step(nullptr);
  return loss;
}

DistributedOptimizer::SkipSynchronize::SkipSynchronize(DistributedOptimizer& owner)
    : owner_(owner) {
  std::lock_guard<std::mutex> lock(owner_.state_->mu);
  KOLO_CHECK_ARG(owner_.state_->options.op != ReduceOp::kAdasum,
                 "DistributedOptimizer: skip_synchronize() is not supported with op Adasum: "
                 "step() reduces the optimizer's update, not the gradients");
  owner_.state_->skip = true;
}

DistributedOptimizer::SkipSynchronize::~SkipSynchronize() {
  std::lock_guard<std::mutex> lock(owner_.state_->mu);
  owner_.state_->skip = false;
}

namespace {
void checkIdle(const GradientReducer& reducer) {
  const int inFlight = reducer.submitted();
  if (inFlight > 0) {
    throw InvalidArgument(
        "DistributedOptimizer: zero_grad() was called after backward() and before step() or "
        "synchronize() while " + std::to_string(inFlight) +
        " gradient allreduce(s) are in flight; that would race with them. Call step() or "
        "synchronize() first");
  }
}
}  // namespace

void DistributedOptimizer::zero_grad() {
  checkIdle(*state_->reducer);
  state_->reducer->clear_passes();
  compat::zeroGrad(*optimizer_);
}

void DistributedOptimizer::zero_grad(bool set_to_none) {
  checkIdle(*state_->reducer);
  state_->reducer->clear_passes();
  compat::zeroGrad(*optimizer_, set_to_none);
}

void DistributedOptimizer::reset_step() { state_->reducer->reset_step(); }

const DistributedOptimizerOptions& DistributedOptimizer::options() const {
  return state_->options;
}

int DistributedOptimizer::submitted() const { return state_->reducer->submitted(); }

}  // namespace kolo::torch
