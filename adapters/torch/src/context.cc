// Context, TensorHandle and the tensor collectives.
#include "compat.h"
#include "tensor_util.h"

namespace kolo::torch {

using detail::HandleBody;

// ---- TensorHandle -----------------------------------------------------------

TensorHandle::TensorHandle(std::shared_ptr<HandleBody> body) : body_(std::move(body)) {}

namespace {
const HandleBody& bodyOf(const std::shared_ptr<HandleBody>& body) {
  KOLO_CHECK_ARG(body != nullptr, "kolo::torch::TensorHandle: empty handle");
  return *body;
}
}  // namespace

// CUDA: true once the work is enqueued, when wait() no longer blocks the host.
bool TensorHandle::poll() const { return bodyOf(body_).handle.enqueued(); }

at::Tensor TensorHandle::wait() const {
  // CUDA: the caller's stream waits for the GPU work (not the host); the
  // engine keeps the tensors alive until that work is done (entry.onDone).
  const HandleBody& body = bodyOf(body_);
  compat::waitOnCurrentStream(body.handle, body.input.device());
  std::lock_guard<std::mutex> lock(body_->mu);
  if (!body_->finished) {
    if (body_->negotiated) body_->output = detail::tensorOf(body_->op.output());
    // Memory the engine allocated on its comm stream is now used on the
    // caller's stream.
    if (body_->negotiated) compat::recordCurrentStream(body_->output);
    if (body_->target.defined()) {
      at::NoGradGuard noGrad;
      body_->target.copy_(body_->output);
    }
    body_->finished = true;
  }
  return body_->target.defined() ? body_->target : body_->output;
}

std::vector<int64_t> TensorHandle::received_splits() const {
  return bodyOf(body_).handle.receivedSplits();
}

const kolo::Handle& TensorHandle::handle() const { return bodyOf(body_).handle; }

// ---- enqueueing -------------------------------------------------------------

namespace {

enum class Output {
  kNew,         // a fresh tensor of the input's shape
  kInPlace,     // the input itself
  kNegotiated,  // allocated on the engine thread once the shape is known
};

// The core's tensor (contiguous), its ready event, and the output policy.
struct Prepared {
  std::shared_ptr<HandleBody> body;
  TensorRef input;
  OutputSpec output;
};

Prepared prepare(const at::Tensor& tensor, Output output, const Request& request) {
  detail::checkTensor(tensor, detail::what(toString(request.op), request.name));
  Prepared p;
  p.body = std::make_shared<HandleBody>();
  HandleBody& body = *p.body;
  body.input = tensor.is_contiguous() ? tensor : tensor.contiguous();
  p.input = detail::toRef(body.input, compat::recordReady(body.input));
  switch (output) {
    case Output::kNew:
      body.output = at::empty_like(body.input, at::MemoryFormat::Contiguous);
      p.output = OutputSpec::intoTensor(detail::toRef(body.output));
      break;
    case Output::kInPlace:
      body.output = body.input;
      if (!body.input.is_same(tensor)) body.target = tensor;
      break;
    case Output::kNegotiated:
      body.negotiated = true;
      p.output = OutputSpec::negotiated(detail::tensorAllocator(body.input.options()));
      break;
  }
  return p;
}

TensorHandle submit(Engine& engine, Request request, const at::Tensor& tensor, Output output) {
  Prepared p = prepare(tensor, output, request);
  p.body->op = kolo::submit(engine, std::move(request), std::move(p.input), std::move(p.output));
  p.body->handle = p.body->op.handle();
  return TensorHandle(std::move(p.body));
}

Request reduction(OpType op, std::string name, ReduceOp reduceOp, double prescale,
                  double postscale, ProcessSet set) {
  return op == OpType::kAllreduce
             ? allreduceRequest(std::move(name), reduceOp, prescale, postscale, set.id())
             : reducescatterRequest(std::move(name), reduceOp, prescale, postscale, set.id());
}

// One request per tensor ("<base>.<i>", a copy of prototype), negotiated as
// a group.
std::vector<TensorHandle> submitGroup(Engine& engine, const std::vector<at::Tensor>& tensors,
                                      const Request& prototype, const std::string& base,
                                      Output output) {
  KOLO_CHECK_ARG(!tensors.empty(),
                 std::string("grouped_") + toString(prototype.op) + ": no tensors");
  std::vector<Request> requests;
  std::vector<TensorRef> inputs;
  std::vector<OutputSpec> outputs;
  std::vector<std::shared_ptr<HandleBody>> bodies;
  for (size_t i = 0; i < tensors.size(); ++i) {
    requests.push_back(prototype);
    requests.back().name = groupMemberName(base, i);
    Prepared p = prepare(tensors[i], output, requests.back());
    bodies.push_back(std::move(p.body));
    inputs.push_back(std::move(p.input));
    outputs.push_back(std::move(p.output));
  }
  std::vector<TensorOp> ops =
      kolo::submitGroup(engine, std::move(requests), std::move(inputs), std::move(outputs));
  std::vector<TensorHandle> out;
  for (size_t i = 0; i < bodies.size(); ++i) {
    bodies[i]->op = ops[i];
    bodies[i]->handle = ops[i].handle();
    out.emplace_back(std::move(bodies[i]));
  }
  return out;
}

std::vector<at::Tensor> waitAll(const std::vector<TensorHandle>& handles) {
  std::vector<at::Tensor> out;
  out.reserve(handles.size());
  for (const auto& h : handles) out.push_back(h.wait());
  return out;
}

}  // namespace

// ---- Context ----------------------------------------------------------------

Context::Context(Engine& engine) : engine_(&engine) {}

Context& default_context() {
  static Context context;
  return context;
}

Engine& Context::engine() const { return engine_ != nullptr ? *engine_ : kolo::defaultEngine(); }

std::string Context::name_or_next(const std::string& name, const char* op,
                                  ProcessSet process_set) {
  return engine().nameOrNext(name, op, process_set.id());
}

void Context::reset_names() { engine().resetNames(); }

TensorHandle Context::allreduce_async(const at::Tensor& tensor, ReduceOp op,
                                      const std::string& name, double prescale,
                                      double postscale, ProcessSet process_set) {
  return submit(engine(),
                reduction(OpType::kAllreduce, name_or_next(name, "allreduce", process_set), op,
                          prescale, postscale, process_set),
                tensor, Output::kNew);
}

TensorHandle Context::allreduce_async_(const at::Tensor& tensor, ReduceOp op,
                                       const std::string& name, double prescale,
                                       double postscale, ProcessSet process_set) {
  return submit(engine(),
                reduction(OpType::kAllreduce, name_or_next(name, "allreduce", process_set), op,
                          prescale, postscale, process_set),
                tensor, Output::kInPlace);
}

at::Tensor Context::allreduce(const at::Tensor& tensor, ReduceOp op, const std::string& name,
                              double prescale, double postscale, ProcessSet process_set) {
  return allreduce_async(tensor, op, name, prescale, postscale, process_set).wait();
}

at::Tensor Context::allreduce_(const at::Tensor& tensor, ReduceOp op, const std::string& name,
                               double prescale, double postscale, ProcessSet process_set) {
  return allreduce_async_(tensor, op, name, prescale, postscale, process_set).wait();
}

std::vector<TensorHandle> Context::grouped_allreduce_async(
    const std::vector<at::Tensor>& tensors, ReduceOp op, const std::string& name,
    double prescale, double postscale, ProcessSet process_set) {
  const std::string base = name_or_next(name, "grouped_allreduce", process_set);
  return submitGroup(engine(), tensors,
                     reduction(OpType::kAllreduce, base, op, prescale, postscale, process_set),
                     base, Output::kNew);
}

std::vector<at::Tensor> Context::grouped_allreduce(const std::vector<at::Tensor>& tensors,
                                                   ReduceOp op, const std::string& name,
                                                   double prescale, double postscale,
                                                   ProcessSet process_set) {
  return waitAll(grouped_allreduce_async(tensors, op, name, prescale, postscale, process_set));
}

TensorHandle Context::allgather_async(const at::Tensor& tensor, const std::string& name,
                                      ProcessSet process_set) {
  return submit(engine(),
                allgatherRequest(name_or_next(name, "allgather", process_set), process_set.id()),
                tensor, Output::kNegotiated);
}

at::Tensor Context::allgather(const at::Tensor& tensor, const std::string& name,
                              ProcessSet process_set) {
  return allgather_async(tensor, name, process_set).wait();
}

std::vector<TensorHandle> Context::grouped_allgather_async(
    const std::vector<at::Tensor>& tensors, const std::string& name, ProcessSet process_set) {
  const std::string base = name_or_next(name, "grouped_allgather", process_set);
  return submitGroup(engine(), tensors, allgatherRequest(base, process_set.id()), base,
                     Output::kNegotiated);
}

std::vector<at::Tensor> Context::grouped_allgather(const std::vector<at::Tensor>& tensors,
                                                   const std::string& name,
                                                   ProcessSet process_set) {
  return waitAll(grouped_allgather_async(tensors, name, process_set));
}

TensorHandle Context::broadcast_async(const at::Tensor& tensor, int root,
                                      const std::string& name, ProcessSet process_set) {
  return submit(engine(),
                broadcastRequest(name_or_next(name, "broadcast", process_set), root,
                                 process_set.id()),
                tensor, Output::kNew);
}

TensorHandle Context::broadcast_async_(const at::Tensor& tensor, int root,
                                       const std::string& name, ProcessSet process_set) {
  return submit(engine(),
                broadcastRequest(name_or_next(name, "broadcast", process_set), root,
                                 process_set.id()),
                tensor, Output::kInPlace);
}

at::Tensor Context::broadcast(const at::Tensor& tensor, int root, const std::string& name,
                              ProcessSet process_set) {
  return broadcast_async(tensor, root, name, process_set).wait();
}

at::Tensor Context::broadcast_(const at::Tensor& tensor, int root, const std::string& name,
                               ProcessSet process_set) {
  return broadcast_async_(tensor, root, name, process_set).wait();
}

TensorHandle Context::alltoall_async(const at::Tensor& tensor,
                                     const std::vector<int64_t>& splits,
                                     const std::string& name, ProcessSet process_set) {
  return submit(engine(),
                alltoallRequest(name_or_next(name, "alltoall", process_set), splits,
                                process_set.id()),
                tensor, Output::kNegotiated);
}

AlltoallResult Context::alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits,
                                 const std::string& name, ProcessSet process_set) {
  TensorHandle h = alltoall_async(tensor, splits, name, process_set);
  AlltoallResult result;
  result.tensor = h.wait();
  result.received_splits = h.received_splits();
  return result;
}

TensorHandle Context::reducescatter_async(const at::Tensor& tensor, ReduceOp op,
                                          const std::string& name, double prescale,
                                          double postscale, ProcessSet process_set) {
  return submit(engine(),
                reduction(OpType::kReducescatter,
                          name_or_next(name, "reducescatter", process_set), op, prescale,
                          postscale, process_set),
                tensor, Output::kNegotiated);
}

at::Tensor Context::reducescatter(const at::Tensor& tensor, ReduceOp op,
                                  const std::string& name, double prescale, double postscale,
                                  ProcessSet process_set) {
  return reducescatter_async(tensor, op, name, prescale, postscale, process_set).wait();
}

std::vector<TensorHandle> Context::grouped_reducescatter_async(
    const std::vector<at::Tensor>& tensors, ReduceOp op, const std::string& name,
    double prescale, double postscale, ProcessSet process_set) {
  const std::string base = name_or_next(name, "grouped_reducescatter", process_set);
  return submitGroup(engine(), tensors,
                     reduction(OpType::kReducescatter, base, op, prescale, postscale,
                               process_set),
                     base, Output::kNegotiated);
}

std::vector<at::Tensor> Context::grouped_reducescatter(const std::vector<at::Tensor>& tensors,
                                                       ReduceOp op, const std::string& name,
                                                       double prescale, double postscale,
                                                       ProcessSet process_set) {
  return waitAll(
      grouped_reducescatter_async(tensors, op, name, prescale, postscale, process_set));
}

void Context::barrier(ProcessSet process_set) { engine().barrier(process_set.id()).wait(); }

int Context::join(ProcessSet process_set) {
  Handle h = engine().join(process_set.id());
  h.wait();
  return h.joinResult();
}

std::string Context::broadcast_object(const std::string& bytes, int root,
                                      const std::string& name, ProcessSet process_set) {
  return kolo::broadcastObject(engine(), bytes, root,
                               name_or_next(name, "broadcast_object", process_set),
                               process_set.id());
}

ProcessSet Context::add_process_set(const std::vector<int>& ranks) {
  return ProcessSet(engine().addProcessSet(ranks));
}

bool Context::remove_process_set(ProcessSet process_set) {
  if (process_set.id() == 0) return false;
  engine().removeProcessSet(process_set.id());
  return true;
}

ProcessSetInfo Context::process_set_info(ProcessSet process_set) const {
  return engine().processSet(process_set.id());
}

}  // namespace kolo::torch
