// DistributedOptimizer: gradient allreduces enqueued from autograd hooks.
//
// Threading: the hooks run on the thread that executes backward (for CPU
// tensors the caller's thread; for CUDA tensors possibly an autograd device
// thread); step/synchronize/zero_grad on the user's thread. State::mu guards
// every slot. Engine::enqueue never blocks, so it is called under mu; the
// waits in synchronize() are not.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <exception>
#include <unordered_map>
#include <unordered_set>

#include "compat.h"
#include "tensor_util.h"

namespace kolo::torch {

struct DistributedOptimizer::State {
  // One parameter that receives gradients.
  struct Slot {
    std::string name;         // as given in named_parameters
    std::string requestName;  // options.name_prefix + name
    at::Tensor param;
    std::shared_ptr<::torch::autograd::Node> accumulator;  // keeps our hook registered
    uintptr_t hookKey = 0;
    int group = -1;
    int passes = 0;          // backward passes accumulated since the last synchronize
    bool submitted = false;  // allreduce enqueued for this step
    at::Tensor send;         // the allreduce's input, alive until synchronize
    at::Tensor buffer;       // the allreduce's output, reused across steps
    compat::ReadyEvent ready;  // CUDA: send's ready event, re-recorded each step
    Handle handle;
    // A sparse gradient travels as two allgathers (indices, values).
    bool sparse = false;
    TensorHandle sparseIndices;
    TensorHandle sparseValues;
  };
  struct Group {
    std::vector<size_t> members;
    size_t ready = 0;
  };

  Context* ctx = nullptr;
  DistributedOptimizerOptions options;
  bool member = true;  // of options.process_set; false: local steps only
  int setSize = 1;     // ranks of options.process_set
  mutable std::mutex mu;
  std::vector<Slot> slots;
  std::vector<Group> groups;
  int inFlight = 0;
  bool synchronized = false;
  bool skip = false;

  // Hook: slot i's gradient has just been accumulated into param.grad().
  void onAccumulated(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    Slot& s = slots[i];
    if (s.passes >= options.backward_passes_per_step) {
      throw InvalidArgument(
          "DistributedOptimizer: the gradient of '" + s.name + "' was computed more than " +
          "backward_passes_per_step (" + std::to_string(options.backward_passes_per_step) +
          ") times before step() or synchronize(); call step() after every " +
          std::to_string(options.backward_passes_per_step) +
          " backward pass(es) or increase backward_passes_per_step to accumulate locally");
    }
    ++s.passes;
    synchronized = false;
    // Adasum reduces the optimizer's update in step(), not the gradient.
    if (options.op == ReduceOp::kAdasum) return;
    if (s.passes < options.backward_passes_per_step) return;
    if (s.group < 0) {
      submitLocked({i});
      return;
    }
    Group& g = groups[s.group];
    if (++g.ready == g.members.size()) submitLocked(g.members);
  }

  // Prepares slot i's input and output for this step: the accumulated
  // gradient (zeros if the parameter got none), compressed if asked.
  void prepareLocked(size_t i, Request& request, Entry& entry) {
    Slot& s = slots[i];
    at::NoGradGuard noGrad;
    at::Tensor grad = s.param.grad();
    if (grad.defined() && grad.is_sparse()) grad = grad.to_dense();  // sparse_as_dense
    const at::ScalarType gradType = grad.defined() ? grad.scalar_type() : s.param.scalar_type();
    at::ScalarType wire = gradType;
    if (gradType == at::kFloat || gradType == at::kDouble) {
      if (options.compression == Compression::kFP16) wire = at::kHalf;
      if (options.compression == Compression::kBF16) wire = at::kBFloat16;
    }
    if (!s.buffer.defined() || s.buffer.scalar_type() != wire ||
        s.buffer.sizes() != s.param.sizes() || s.buffer.device() != s.param.device()) {
      s.buffer = at::empty(s.param.sizes(), s.param.options().dtype(wire));
    }
    if (!grad.defined()) {
      s.buffer.zero_();
      s.send = s.buffer;
    } else if (wire != gradType || !grad.is_contiguous()) {
      s.buffer.copy_(grad);
      s.send = s.buffer;
    } else {
      s.send = grad;
    }
    // Recorded on the current stream: in the hook, autograd's stream that
    // produced the gradient; in synchronize(), the caller's.
    // Each submission is enqueued (synchronize() waits for that) before the
    // slot's next one re-records the event.
    entry.readyEvent = s.ready.record(s.send);
    request.name = s.requestName;
    request.op = OpType::kAllreduce;
    detail::describeTensor(s.send, detail::what("allreduce", request.name), request);
    request.reduceOp = options.op;
    request.processSet = options.process_set.id();
    if (options.op == ReduceOp::kAverage) {
      request.prescale = 1.0 / options.gradient_predivide_factor;
      request.postscale = options.gradient_predivide_factor;
    }
    entry.input = s.send.data_ptr();
    entry.output = s.buffer.data_ptr();
    // CUDA: synchronize() returns once the allreduce is enqueued; the
    // engine keeps its input and output alive until the GPU is done.
    if (s.send.is_cuda()) entry.onDone = [send = s.send, buffer = s.buffer](const Status&) {};
  }

  // Slot i's sparse gradient: allgathers of its indices (as rows) and values.
  void submitSparseLocked(size_t i) {
    Slot& s = slots[i];
    at::NoGradGuard noGrad;
    const at::Tensor grad = s.param.grad();
    s.sparse = true;
    s.sparseIndices =
        ctx->allgather_async(grad._indices().t().contiguous(), s.requestName + ".indices",
                             options.process_set);
    s.sparseValues = ctx->allgather_async(grad._values().contiguous(), s.requestName + ".values",
                                          options.process_set);
  }

  // Enqueues the allreduces of slots `members` (one slot, or a whole group);
  // sparse gradients go through allgather one by one.
  void submitLocked(const std::vector<size_t>& requested) {
    std::vector<size_t> members;
    for (size_t i : requested) {
      const at::Tensor grad = slots[i].param.grad();
      if (grad.defined() && grad.is_sparse() && !options.sparse_as_dense) {
        submitSparseLocked(i);
      } else {
        members.push_back(i);
      }
    }
    for (size_t i : requested) slots[i].submitted = true;
    inFlight += static_cast<int>(requested.size());
    if (members.empty()) return;
    Engine& engine = ctx->engine();
    if (members.size() == 1 && slots[members[0]].group < 0) {
      Request request;
      Entry entry;
      prepareLocked(members[0], request, entry);
      slots[members[0]].handle = engine.enqueue(std::move(request), std::move(entry));
    } else {
      std::vector<Request> requests(members.size());
      std::vector<Entry> entries(members.size());
      for (size_t k = 0; k < members.size(); ++k) {
        prepareLocked(members[k], requests[k], entries[k]);
      }
      std::vector<Handle> handles = engine.enqueueGroup(std::move(requests), std::move(entries));
      for (size_t k = 0; k < members.size(); ++k) slots[members[k]].handle = handles[k];
    }
  }

  // Slot s's result into its parameter's gradient.
  void writeBackLocked(Slot& s) {
    at::NoGradGuard noGrad;
    at::Tensor grad = s.param.grad();
    if (s.sparse) {
      // As Horovod: every rank's entries, uncoalesced; Average divides them.
      at::Tensor values = s.sparseValues.wait();
      if (options.op == ReduceOp::kAverage) values = values / setSize;
      s.param.mutable_grad() = at::sparse_coo_tensor(
          s.sparseIndices.wait().t(), values.to(s.param.scalar_type()), s.param.sizes());
    } else if (grad.defined() && grad.is_sparse()) {
      // sparse_as_dense: back to a sparse gradient for the update.
      s.param.mutable_grad() = s.buffer.to(s.param.scalar_type()).to_sparse();
    } else if (grad.defined()) {
      grad.copy_(s.buffer);
    } else {
      s.param.mutable_grad() =
          s.buffer.to(s.param.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    }
  }

  void resetStepLocked() {
    for (Slot& s : slots) {
      s.passes = 0;
      s.submitted = false;
      s.send = at::Tensor();
      s.handle = Handle();
      s.sparse = false;
      s.sparseIndices = TensorHandle();
      s.sparseValues = TensorHandle();
    }
    for (Group& g : groups) g.ready = 0;
    inFlight = 0;
  }
};

namespace {

class GradHook : public ::torch::autograd::FunctionPostHook {
 public:
  GradHook(std::weak_ptr<DistributedOptimizer::State> state, size_t index)
      : state_(std::move(state)), index_(index) {}

  ::torch::autograd::variable_list operator()(
      const ::torch::autograd::variable_list& outputs,
      const ::torch::autograd::variable_list& /*inputs*/) override {
    if (auto state = state_.lock()) state->onAccumulated(index_);
    return outputs;
  }

 private:
  std::weak_ptr<DistributedOptimizer::State> state_;
  size_t index_;
};

std::string describe(const at::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + c10::str(t.sizes());
}

void checkOptions(const DistributedOptimizerOptions& o) {
  KOLO_CHECK_ARG(o.backward_passes_per_step >= 1,
                 "DistributedOptimizer: backward_passes_per_step must be >= 1, got " +
                     std::to_string(o.backward_passes_per_step));
  KOLO_CHECK_ARG(o.op == ReduceOp::kAverage || o.op == ReduceOp::kSum ||
                     o.op == ReduceOp::kAdasum,
                 std::string("DistributedOptimizer: op must be Average, Sum or Adasum, got ") +
                     toString(o.op));
  KOLO_CHECK_ARG(o.gradient_predivide_factor > 0.0,
                 "DistributedOptimizer: gradient_predivide_factor must be > 0");
  KOLO_CHECK_ARG(o.gradient_predivide_factor == 1.0 || o.op == ReduceOp::kAverage,
                 "DistributedOptimizer: gradient_predivide_factor needs op == Average");
  KOLO_CHECK_ARG(o.num_groups >= 0, "DistributedOptimizer: num_groups must be >= 0");
  KOLO_CHECK_ARG(o.num_groups == 0 || o.groups.empty(),
                 "DistributedOptimizer: set num_groups or groups, not both");
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
  st.setSize = setInfo.size();

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
      State::Slot slot;
      slot.name = it->second;
      slot.requestName = st.options.name_prefix + it->second;
      slot.param = p;
      st.slots.push_back(std::move(slot));
    }
  }

  // Groups.
  if (st.options.num_groups > 0 && !st.slots.empty()) {
    const size_t n = st.slots.size();
    const size_t count = std::min(n, static_cast<size_t>(st.options.num_groups));
    const size_t per = (n + count - 1) / count;
    for (size_t i = 0; i < n; ++i) {
      const size_t g = i / per;
      if (g >= st.groups.size()) st.groups.emplace_back();
      st.groups[g].members.push_back(i);
      st.slots[i].group = static_cast<int>(g);
    }
  }
  if (!st.options.groups.empty()) {
    std::unordered_map<std::string, size_t> slotOf;
    for (size_t i = 0; i < st.slots.size(); ++i) slotOf.emplace(st.slots[i].name, i);
    for (size_t g = 0; g < st.options.groups.size(); ++g) {
      State::Group group;
      for (const auto& name : st.options.groups[g]) {
        auto it = slotOf.find(name);
        KOLO_CHECK_ARG(it != slotOf.end(),
                       "DistributedOptimizer: group " + std::to_string(g) + " names '" + name +
                           "', which is not a trainable parameter of the wrapped optimizer");
        State::Slot& slot = st.slots[it->second];
        KOLO_CHECK_ARG(slot.group < 0, "DistributedOptimizer: parameter '" + name +
                                           "' is in more than one group");
        slot.group = static_cast<int>(st.groups.size());
        group.members.push_back(it->second);
      }
      if (!group.members.empty()) st.groups.push_back(std::move(group));
    }
  }

  // Hooks last, so a throwing constructor leaves no hook behind. Outside
  // the process set nothing is reduced, so no hooks.
  for (size_t i = 0; st.member && i < st.slots.size(); ++i) {
    State::Slot& slot = st.slots[i];
    slot.accumulator = ::torch::autograd::impl::grad_accumulator(slot.param);
    KOLO_ENFORCE(slot.accumulator != nullptr,
                 "no gradient accumulator for parameter '" + slot.name + "'");
    slot.hookKey = slot.accumulator->add_post_hook(
        std::make_unique<GradHook>(std::weak_ptr<State>(state_), i));
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  std::vector<Handle> pending;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (auto& slot : state_->slots) {
      if (slot.accumulator) slot.accumulator->del_post_hook(slot.hookKey);
      if (slot.submitted) pending.push_back(slot.handle);
    }
  }
  // The engine may still read and write the slots' tensors.
  for (const Handle& h : pending) h.waitFor(std::chrono::hours(24));
}

void DistributedOptimizer::synchronize() {
  State& st = *state_;
  std::vector<std::pair<Handle, at::Device>> handles;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.options.op == ReduceOp::kAdasum) return;  // step() reduces the update
    if (st.synchronized) return;
    if (!st.member) {
      st.synchronized = true;  // the local gradients stay as they are
      return;
    }
    // Every rank must submit every gradient: fill in what the hooks did not.
    for (auto& g : st.groups) {
      if (!st.slots[g.members.front()].submitted) st.submitLocked(g.members);
    }
    for (size_t i = 0; i < st.slots.size(); ++i) {
      if (!st.slots[i].submitted) st.submitLocked({i});
    }
    for (const auto& s : st.slots) {
      if (s.sparse) {
        handles.emplace_back(s.sparseIndices.handle(), s.param.device());
        handles.emplace_back(s.sparseValues.handle(), s.param.device());
      } else {
        handles.emplace_back(s.handle, s.param.device());
      }
    }
  }
  std::exception_ptr error;
  // CUDA: the caller's stream waits for the allreduces, the host only until
  // they are enqueued; the write-back below runs on that stream after them.
  for (const auto& [h, device] : handles) {
    try {
      compat::waitOnCurrentStream(h, device);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  std::lock_guard<std::mutex> lock(st.mu);
  if (!error) {
    for (auto& s : st.slots) st.writeBackLocked(s);
  }
  st.resetStepLocked();
  st.synchronized = true;
  if (error) std::rethrow_exception(error);
}

// Adasum (Horovod's delta optimizer): every parameter takes the wrapped
// optimizer's local step, the change it made is combined over ranks with
// Adasum, and the parameter becomes its value before the step plus that
// combination. A parameter without a gradient steps on zeros, so every rank
// submits every parameter.
void DistributedOptimizer::adasumStep() {
  State& st = *state_;
  std::vector<at::Tensor> start;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    at::NoGradGuard noGrad;
    for (auto& s : st.slots) {
      if (!s.param.grad().defined()) s.param.mutable_grad() = at::zeros_like(s.param);
      start.push_back(s.param.detach().clone());
    }
  }
  optimizer_->step(nullptr);
  std::vector<TensorHandle> handles;
  std::vector<at::Tensor> deltas;
  {
    at::NoGradGuard noGrad;
    for (size_t i = 0; i < st.slots.size(); ++i) {
      const State::Slot& s = st.slots[i];
      at::Tensor delta = s.param.detach() - start[i];
      if (delta.is_floating_point() && delta.scalar_type() != at::kHalf &&
          delta.scalar_type() != at::kBFloat16) {
        if (st.options.compression == Compression::kFP16) delta = delta.to(at::kHalf);
        if (st.options.compression == Compression::kBF16) delta = delta.to(at::kBFloat16);
      }
      deltas.push_back(delta);
      handles.push_back(st.ctx->allreduce_async_(delta, ReduceOp::kAdasum, s.requestName, 1.0,
                                                  1.0, st.options.process_set));
    }
  }
  std::exception_ptr error;
  for (auto& h : handles) {
    try {
      h.wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  std::lock_guard<std::mutex> lock(st.mu);
  if (!error) {
    at::NoGradGuard noGrad;
    for (size_t i = 0; i < st.slots.size(); ++i) {
      st.slots[i].param.copy_(start[i] + deltas[i].to(start[i].scalar_type()));
    }
  }
  st.resetStepLocked();
  if (error) std::rethrow_exception(error);
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
void checkIdle(int inFlight) {
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
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    checkIdle(state_->inFlight);
    state_->resetStepLocked();
    state_->synchronized = false;
  }
  compat::zeroGrad(*optimizer_);
}

void DistributedOptimizer::zero_grad(bool set_to_none) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    checkIdle(state_->inFlight);
    state_->resetStepLocked();
    state_->synchronized = false;
  }
  compat::zeroGrad(*optimizer_, set_to_none);
}

void DistributedOptimizer::reset_step() {
  std::vector<Handle> pending;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (const auto& slot : state_->slots) {
      if (slot.submitted) pending.push_back(slot.handle);
    }
  }
  // The engine may still write into the slots' buffers until they end.
  for (const Handle& h : pending) h.waitFor(std::chrono::hours(24));
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->resetStepLocked();
  state_->synchronized = false;
}

const DistributedOptimizerOptions& DistributedOptimizer::options() const {
  return state_->options;
}

int DistributedOptimizer::submitted() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->inFlight;
}

}  // namespace kolo::torch
