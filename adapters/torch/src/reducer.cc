// GradientReducer: hooks, buckets, one request per bucket, in-place results.
// With a compressor kolo does not implement (options.compress), each bucket
// is one parameter or one group, and its members travel as what compress
// made of them, one grouped request per bucket.
//
// Threading: the hooks run on the thread that executes backward (for CPU
// tensors the caller's thread; for CUDA tensors possibly an autograd device
// thread); synchronize/reset_step on the user's thread. Impl::mu guards
// every field below `mu`. Engine::enqueue never blocks, so it is called under
// mu; the waits in synchronize() are not.
#include "kolo/torch/reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "compat.h"
#include "kolo/gradients.h"
#include "kolo/shareable.h"
#include "kolo/tensor.h"
#include "tensor_util.h"

namespace kolo::torch {

struct GradientReducer::Impl {
  // One parameter that receives gradients.
  struct Slot {
    std::string name;
    at::Tensor param;
    std::shared_ptr<::torch::autograd::Node> accumulator;  // keeps our hook registered
    uintptr_t hookKey = 0;
    size_t bucket = 0;
    int64_t offset = 0;  // elements into the bucket's flat buffer
    // The slot's region of the flat buffer, shaped like param (sharing its
    // storage). Where inPlace, param.grad() is made this very tensor.
    at::Tensor view;
    bool inPlace = false;  // wire dtype == param dtype and param contiguous
    // Set at submission: the result must be copied (or converted) back
    // into param.grad() after the reduction, from `region`.
    bool writeBack = false;
    bool sparseGrad = false;  // param.grad() was sparse (sparse_as_dense)
    at::Tensor region;
    // Sparse gradient reduced by allgather (not sparse_as_dense).
    bool sparse = false;
    TensorHandle sparseIndices;
    TensorHandle sparseValues;
    // options.compress: what travels (reduced in place) and its request.
    at::Tensor sent;
    Handle sentHandle;
  };
  struct Bucket {
    std::string name;
    std::vector<size_t> members;  // slot indices
    int64_t numel = 0;
    at::ScalarType wire = at::kFloat;
    at::Device device = at::kCPU;
    at::Tensor flat;
    compat::ReadyEvent ready;  // CUDA: re-recorded at each submission
    Handle handle;  // invalid when the bucket had only sparse members
  };

  Context* ctx = nullptr;
  GradientReducerOptions options;
  bool member = true;  // of options.process_set
  bool countOnly = false;  // Adasum: count passes, reduce nothing
  bool transformed = false;  // options.compress: a compressor kolo does not implement

  mutable std::mutex mu;
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  GradientSteps steps;  // passes per gradient, ready and submitted buckets
  int inFlight = 0;  // gradients submitted since the last synchronize
  uint64_t requests = 0;
  bool synchronized = false;
  // The first failure to submit a bucket from a hook (the engine failed: a
  // peer died, a timeout): synchronize() raises it. Thrown through
  // backward(), autograd would wrap it in a c10::Error / RuntimeError and
  // lose its kind, which elastic training recovers by.
  std::exception_ptr deferred;
  // Gradients autograd made afresh (zero_grad() set them to None, torch
  // 2.x's default), with their regions of the bucket being submitted: copied
  // in together, once per bucket. Kept here for their capacity (no
  // allocation per step); empty between submissions.
  std::vector<at::Tensor> fillTo;
  std::vector<at::Tensor> fillFrom;

  [[noreturn]] void hookError(const std::string& message) {
    if (options.hook_error) options.hook_error(message);
    throw InvalidArgument(message);
  }

  // Hook: slot i's gradient has just been accumulated into param.grad().
  void onAccumulated(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    const GradientSteps::Arrival arrival = steps.accumulated(i, countOnly);
    synchronized = false;
    switch (arrival) {
      case GradientSteps::Arrival::kCounted:
        return;
      case GradientSteps::Arrival::kTooManyPasses:
      case GradientSteps::Arrival::kLate:
        hookError(steps.describe(arrival, slots[i].name));
      case GradientSteps::Arrival::kBucketReady:
        break;
    }
    try {
      submitLocked(steps.bucketOf(i));
    } catch (...) {
      if (!deferred) deferred = std::current_exception();
    }
  }

  // The bucket's flat buffer (and the slots' views) on the parameters'
  // current device; made again if a parameter moved.
  void ensureFlatLocked(Bucket& b) {
    const at::Tensor& first = slots[b.members.front()].param;
    if (b.flat.defined() && b.flat.device() == first.device()) return;
    b.device = first.device();
    const at::TensorOptions options = first.options().dtype(b.wire);
    b.flat = at::Tensor();
    if (b.device.is_cpu() && b.numel > 0) {
      // From the shared arena when there is one: the ranks of a host then
      // reduce the buckets in place (kolo/shareable.h). Zero-filled.
      const size_t bytes = static_cast<size_t>(b.numel) * at::elementSize(b.wire);
      if (std::shared_ptr<void> block = allocateShareable(bytes)) {
        b.flat = at::from_blob(
            block.get(), {b.numel}, [block](void*) mutable { block.reset(); }, options);
      }
    }
    if (!b.flat.defined()) b.flat = at::zeros({b.numel}, options);
    for (size_t i : b.members) {
      Slot& s = slots[i];
      // An alias of the bucket's storage that is not an autograd view:
      // LibTorch's Optimizer::zero_grad() detach_()es gradients, which
      // views refuse.
      const auto sizes = s.param.sizes();
      std::vector<int64_t> strides(sizes.size(), 1);
      for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
      s.view = at::empty({0}, b.flat.options()).set_(b.flat.storage(), s.offset, sizes, strides);
    }
  }

  static bool isView(const at::Tensor& grad, const at::Tensor& view) {
    return grad.unsafeGetTensorImpl() == view.unsafeGetTensorImpl() ||
           (grad.data_ptr() == view.data_ptr() && grad.scalar_type() == view.scalar_type() &&
            grad.sizes() == view.sizes() && grad.strides() == view.strides());
  }

  // Enqueues bucket b: sparse members by allgather, the dense ones as one
  // allreduce of the flat buffer. The layout is the fixed one unless sparse
  // members are left out (then the dense ones are packed and copied back).
  void submitLocked(size_t bucket) {
    at::NoGradGuard noGrad;
    Bucket& b = buckets[bucket];
    steps.markSubmitted(bucket);
    inFlight += static_cast<int>(b.members.size());
    std::vector<size_t> dense;
    for (size_t i : b.members) {
      Slot& s = slots[i];
      const at::Tensor grad = s.param.grad();
      if (grad.defined() && grad.is_sparse() && !options.sparse_as_dense) {
        submitSparseLocked(s, grad);
      } else {
        dense.push_back(i);
      }
    }
    if (dense.empty()) return;
    if (transformed) {
      submitTransformedLocked(b, dense);
      return;
    }
    ensureFlatLocked(b);
    const bool fixedLayout = dense.size() == b.members.size();
    fillTo.clear();
    fillFrom.clear();
    int64_t offset = 0;
    for (size_t i : dense) {
      Slot& s = slots[i];
      at::Tensor region =
          fixedLayout ? s.view
                      : b.flat.narrow(0, offset, s.param.numel()).view(s.param.sizes());
      offset += s.param.numel();
      at::Tensor grad = s.param.grad();
      s.sparseGrad = grad.defined() && grad.is_sparse();
      s.writeBack = false;
      if (!grad.defined()) {
        region.zero_();
      } else if (s.sparseGrad) {
        region.copy_(grad.to_dense());
      } else if (fixedLayout && s.inPlace && isView(grad, region)) {
        continue;  // accumulated into the bucket already
      } else {
        fillTo.push_back(region);
        fillFrom.push_back(grad);
      }
      if (fixedLayout && s.inPlace && !s.sparseGrad) {
        // From now on the gradient lives in the bucket: reduced in place,
        // and the next backward accumulates into it.
        s.param.mutable_grad() = region;
      } else {
        s.writeBack = true;
        s.region = region;
      }
    }
    compat::copyAll(fillTo, fillFrom);
    fillTo.clear();  // the gradients autograd made are not kept past the copy
    fillFrom.clear();
    at::Tensor work = fixedLayout ? b.flat : b.flat.narrow(0, 0, offset);
    const GradientScales scales = gradientScales(options.op, options.gradient_predivide_factor);
    // Recorded on the current stream: in a hook autograd's stream that
    // produced the gradients (and ran the copies above); in synchronize()
    // the caller's. Re-recording is safe: the previous step's submission
    // was enqueued (synchronize waited for that) before this one.
    TensorRef input = detail::toRef(work);
    input.readyEvent = b.ready.record(work);
    // The bucket's memory (input.keepAlive) lives until the engine is done
    // with it, as every other op's: the engine drops it once the device
    // stopped touching the buffer, and keeps it for good when the device is
    // wedged. Without it, ~GradientReducer or reset_step would free memory
    // a device that did not stop may still write.
    b.handle = kolo::submit(ctx->engine(),
                            allreduceRequest(b.name, options.op, scales.prescale,
                                             scales.postscale, options.process_set.id()),
                            std::move(input))
                   .handle();
    ++requests;
  }

  // The dense members of b through options.compress, as one grouped
  // request (one request for a bucket of one parameter), each reduced in
  // place.
  void submitTransformedLocked(Bucket& b, const std::vector<size_t>& dense) {
    std::vector<TensorRef> inputs;
    std::vector<Request> reductions;
    const GradientScales scales = gradientScales(options.op, options.gradient_predivide_factor);
    const bool alone = b.members.size() == 1;
    for (size_t k = 0; k < dense.size(); ++k) {
      Slot& s = slots[dense[k]];
      at::Tensor grad = s.param.grad();
      s.sparseGrad = grad.defined() && grad.is_sparse();
      // Another rank may have a gradient for it: every rank submits one.
      if (!grad.defined()) grad = at::zeros_like(s.param);
      if (s.sparseGrad) grad = grad.to_dense();
      at::Tensor sent = options.compress(dense[k], grad);
      KOLO_CHECK_ARG(sent.defined() && !sent.is_sparse(),
                     "GradientReducer: the compressor's compress() gave " +
                         std::string(sent.defined() ? "a sparse" : "an undefined") +
                         " tensor for parameter '" + s.name + "'; it must give a dense one");
      s.sent = sent.contiguous();
      s.writeBack = true;
      inputs.push_back(detail::toRef(s.sent));
      reductions.push_back(allreduceRequest(alone ? b.name : groupMemberName(b.name, k),
                                            options.op, scales.prescale, scales.postscale,
                                            options.process_set.id()));
    }
    // One event after every compress: all of them ran on the current stream.
    void* ready = b.ready.record(slots[dense.back()].sent);
    for (TensorRef& in : inputs) in.readyEvent = ready;
    if (alone) {
      slots[dense.front()].sentHandle =
          kolo::submit(ctx->engine(), std::move(reductions.front()), std::move(inputs.front()))
              .handle();
    } else {
      std::vector<TensorOp> ops =
          kolo::submitGroup(ctx->engine(), std::move(reductions), std::move(inputs));
      for (size_t k = 0; k < dense.size(); ++k) slots[dense[k]].sentHandle = ops[k].handle();
    }
    ++requests;
  }

  void submitSparseLocked(Slot& s, const at::Tensor& grad) {
    s.sparse = true;
    const std::string name = options.name_prefix + s.name;
    s.sparseIndices = ctx->allgather_async(grad._indices().t().contiguous(), name + ".indices",
                                           options.process_set);
    s.sparseValues =
        ctx->allgather_async(grad._values().contiguous(), name + ".values", options.process_set);
    requests += 2;
  }

  // Slot i's result into its parameter's gradient, where it is not there.
  void writeBackLocked(size_t i) {
    at::NoGradGuard noGrad;
    Slot& s = slots[i];
    if (s.sparse) {
      // As Horovod: every rank's entries, uncoalesced; Average divides them.
      at::Tensor values = s.sparseValues.wait();
      // The set's size now (elastic training may have changed it).
      if (options.op == ReduceOp::kAverage) {
        values = values / ctx->process_set_info(options.process_set).size();
      }
      s.param.mutable_grad() = at::sparse_coo_tensor(
          s.sparseIndices.wait().t(), values.to(s.param.scalar_type()), s.param.sizes());
      return;
    }
    if (!s.writeBack) return;
    if (s.sent.defined()) s.region = options.decompress(i, s.sent);
    at::Tensor grad = s.param.grad();
    if (s.sparseGrad) {
      s.param.mutable_grad() = s.region.to(s.param.scalar_type()).to_sparse();
    } else if (grad.defined()) {
      grad.copy_(s.region);
    } else {
      s.param.mutable_grad() =
          s.region.to(s.param.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    }
  }

  void resetStepLocked() {
    steps.reset();
    for (Slot& s : slots) {
      s.writeBack = false;
      s.region = at::Tensor();
      s.sparse = false;
      s.sparseIndices = TensorHandle();
      s.sparseValues = TensorHandle();
      s.sent = at::Tensor();
      s.sentHandle = Handle();
    }
    for (Bucket& b : buckets) b.handle = Handle();
    inFlight = 0;
    deferred = nullptr;
  }

  // Handles of everything submitted (engine level), under mu.
  std::vector<std::pair<Handle, at::Device>> inFlightLocked() const {
    std::vector<std::pair<Handle, at::Device>> out;
    for (size_t k = 0; k < buckets.size(); ++k) {
      const Bucket& b = buckets[k];
      if (steps.submitted(k) && b.handle.valid()) out.emplace_back(b.handle, b.device);
    }
    for (const Slot& s : slots) {
      if (s.sentHandle.valid()) out.emplace_back(s.sentHandle, s.sent.device());
      if (!s.sparse) continue;
      out.emplace_back(s.sparseIndices.handle(), s.param.device());
      out.emplace_back(s.sparseValues.handle(), s.param.device());
    }
    return out;
  }
};

namespace {

class ReducerHook : public ::torch::autograd::FunctionPostHook {
 public:
  ReducerHook(std::weak_ptr<GradientReducer::Impl> impl, size_t index)
      : impl_(std::move(impl)), index_(index) {}

  ::torch::autograd::variable_list operator()(
      const ::torch::autograd::variable_list& outputs,
      const ::torch::autograd::variable_list& /*inputs*/) override {
    if (auto impl = impl_.lock()) impl->onAccumulated(index_);
    return outputs;
  }

 private:
  std::weak_ptr<GradientReducer::Impl> impl_;
  size_t index_;
};

}  // namespace

GradientReducer::GradientReducer(std::vector<std::pair<std::string, at::Tensor>> params,
                                 GradientReducerOptions options, Context& ctx)
    : impl_(std::make_shared<Impl>()) {
  Impl& st = *impl_;
  GradientOptions checked;
  checked.backwardPassesPerStep = options.backward_passes_per_step;
  checked.op = options.op;
  checked.gradientPredivideFactor = options.gradient_predivide_factor;
  checked.bucketBytes = options.bucket_bytes;
  checkGradientOptions(checked, "GradientReducer");
  st.ctx = &ctx;
  st.options = std::move(options);
  st.countOnly = st.options.op == ReduceOp::kAdasum;
  KOLO_CHECK_ARG(!st.options.compress == !st.options.decompress,
                 "GradientReducer: give both compress and decompress, or neither");
  st.transformed = st.options.compress != nullptr;
  KOLO_CHECK_ARG(!st.transformed || st.options.compression == kolo::Compression::kNone,
                 "GradientReducer: compress and decompress replace compression; leave it none");
  const ProcessSetInfo setInfo = ctx.process_set_info(st.options.process_set);
  st.member = setInfo.included();

  std::vector<GradientInfo> gradients;
  for (auto& [name, param] : params) {
    KOLO_CHECK_ARG(param.defined(), "GradientReducer: parameter '" + name + "' is undefined");
    KOLO_CHECK_ARG(param.is_leaf(), "GradientReducer: parameter '" + name +
                                        "' is not a leaf tensor");
    GradientInfo g;
    g.name = name;
    g.numel = param.numel();
    g.dtype = to_data_type(param.scalar_type(), "GradientReducer: parameter '" + name + "'");
    g.device = param.is_cuda() ? DeviceKind::kCuda : DeviceKind::kCpu;
    g.deviceIndex = param.is_cuda() ? param.get_device() : -1;
    gradients.push_back(std::move(g));
    Impl::Slot slot;
    slot.name = name;
    slot.param = param;
    st.slots.push_back(std::move(slot));
  }
  BucketPlan plan;
  plan.groups = st.options.groups;
  // A compressor's wire tensors are known only once it ran: one parameter
  // (or one group) per bucket.
  plan.bucketBytes = st.transformed ? 0 : st.options.bucket_bytes;
  plan.namePrefix = st.options.name_prefix;
  plan.compression = st.options.compression;
  const std::vector<GradientBucket> planned = planBuckets(gradients, plan, "GradientReducer");
  for (const GradientBucket& p : planned) {
    Impl::Bucket b;
    b.name = p.name;
    b.members = p.members;
    b.numel = p.numel;
    b.wire = to_scalar_type(p.wire);
    b.device = st.slots[p.members.front()].param.device();
    for (size_t k = 0; k < p.members.size(); ++k) {
      Impl::Slot& slot = st.slots[p.members[k]];
      slot.bucket = st.buckets.size();
      slot.offset = p.offsets[k];
      slot.inPlace = b.wire == slot.param.scalar_type() && slot.param.is_contiguous();
    }
    st.buckets.push_back(std::move(b));
  }
  st.steps = GradientSteps(planned, st.slots.size(), st.options.backward_passes_per_step);

  // Hooks last, so a throwing constructor leaves no hook behind. Outside
  // the process set nothing is reduced, so no hooks.
  for (size_t i = 0; st.member && i < st.slots.size(); ++i) {
    Impl::Slot& slot = st.slots[i];
    slot.accumulator = ::torch::autograd::impl::grad_accumulator(slot.param);
    KOLO_ENFORCE(slot.accumulator != nullptr,
                 "no gradient accumulator for parameter '" + slot.name + "'");
    slot.hookKey = slot.accumulator->add_post_hook(
        std::make_unique<ReducerHook>(std::weak_ptr<Impl>(impl_), i));
  }
}

GradientReducer::~GradientReducer() {
  std::vector<std::pair<Handle, at::Device>> pending;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& slot : impl_->slots) {
      if (slot.accumulator) slot.accumulator->del_post_hook(slot.hookKey);
    }
    pending = impl_->inFlightLocked();
  }
  // The engine may still read and write the buckets.
  for (const auto& entry : pending) entry.first.waitFor(std::chrono::hours(24));
}

void GradientReducer::synchronize() {
  Impl& st = *impl_;
  std::vector<std::pair<Handle, at::Device>> handles;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.countOnly || st.synchronized) return;
    if (!st.member) {
      st.synchronized = true;  // the local gradients stay as they are
      return;
    }
    // Every rank must submit every bucket: fill in what the hooks did not.
    try {
      for (size_t k = 0; k < st.buckets.size(); ++k) {
        if (!st.steps.submitted(k)) st.submitLocked(k);
      }
    } catch (...) {
      error = std::current_exception();
    }
    if (st.deferred) error = st.deferred;  // a hook's came first
    st.deferred = nullptr;
    // Whatever was enqueued is waited for, even after a failure: the
    // engine may still write into the buckets until then.
    handles = st.inFlightLocked();
  }
  try {
    compat::waitAllOnCurrentStream(handles);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(st.mu);
  if (!error) {
    try {
      for (size_t i = 0; i < st.slots.size(); ++i) st.writeBackLocked(i);
    } catch (...) {
      error = std::current_exception();
    }
  }
  st.resetStepLocked();
  st.synchronized = true;
  if (error) std::rethrow_exception(error);
}

void GradientReducer::reset_step() {
  std::vector<std::pair<Handle, at::Device>> pending;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    pending = impl_->inFlightLocked();
  }
  // The engine may still write into the buckets until they end.
  for (const auto& entry : pending) entry.first.waitFor(std::chrono::hours(24));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->resetStepLocked();
  impl_->synchronized = false;
}

void GradientReducer::clear_passes() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  KOLO_CHECK_ARG(impl_->inFlight == 0,
                 "GradientReducer: gradients are in flight; call synchronize() first");
  impl_->resetStepLocked();
  impl_->synchronized = false;
}

bool GradientReducer::pending() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->inFlight > 0 || impl_->steps.anyCounted();
}

int GradientReducer::submitted() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->inFlight;
}

void GradientReducer::set_backward_passes_per_step(int passes) {
  KOLO_CHECK_ARG(passes >= 1, "backward_passes_per_step must be >= 1, got " +
                                  std::to_string(passes));
  std::lock_guard<std::mutex> lock(impl_->mu);
  KOLO_CHECK_ARG(impl_->inFlight == 0,
                 "backward_passes_per_step cannot change while gradients are in flight; call "
                 "synchronize() or step() first");
  impl_->steps.setPassesPerStep(passes);
  impl_->options.backward_passes_per_step = passes;
}

const GradientReducerOptions& GradientReducer::options() const { return impl_->options; }

std::vector<std::vector<std::string>> GradientReducer::buckets() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::vector<std::string>> out;
  for (const auto& b : impl_->buckets) {
    out.emplace_back();
    for (size_t i : b.members) out.back().push_back(impl_->slots[i].name);
  }
  return out;
}

uint64_t GradientReducer::requests() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->requests;
}

}  // namespace kolo::torch
