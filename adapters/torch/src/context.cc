// Context, TensorHandle and the tensor collectives.
#include <cstring>

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

// Fills entry for tensor and returns the body that keeps its memory alive.
// The entry's callbacks hold the body too, so the memory outlives the
// operation even if the caller drops the TensorHandle.
std::shared_ptr<HandleBody> prepare(const at::Tensor& tensor, Output output, Request& request,
                                    Entry& entry) {
  detail::describeTensor(tensor, detail::what(toString(request.op), request.name), request);
  auto body = std::make_shared<HandleBody>();
  at::Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
  body->ready = compat::recordReady(work);
  entry.readyEvent = body->ready.get();
  body->input = work;
  entry.input = work.data_ptr();
  switch (output) {
    case Output::kNew:
      body->output = at::empty_like(work, at::MemoryFormat::Contiguous);
      entry.output = body->output.data_ptr();
      break;
    case Output::kInPlace:
      body->output = work;
      entry.output = work.data_ptr();
      if (!work.is_same(tensor)) body->target = tensor;
      break;
    case Output::kNegotiated: {
      auto options = work.options();
      body->negotiated = true;
      entry.allocate = [body, options](const std::vector<int64_t>& shape) {
        at::Tensor out = compat::emptyOnStream(shape, options, kolo::outputAllocationStream());
        std::lock_guard<std::mutex> lock(body->mu);
        body->output = out;
        return out.data_ptr();
      };
      break;
    }
  }
  entry.onDone = [body](const Status&) {};
  return body;
}

TensorHandle submit(Engine& engine, Request request, const at::Tensor& tensor, Output output) {
  Entry entry;
  auto body = prepare(tensor, output, request, entry);
  body->handle = engine.enqueue(std::move(request), std::move(entry));
  return TensorHandle(std::move(body));
}

Request reduction(OpType op, std::string name, ReduceOp reduceOp, double prescale,
                  double postscale, ProcessSet set) {
  Request r;
  r.name = std::move(name);
  r.op = op;
  r.reduceOp = reduceOp;
  r.prescale = prescale;
  r.postscale = postscale;
  r.processSet = set.id();
  return r;
}

Request rooted(OpType op, std::string name, int root, ProcessSet set) {
  Request r;
  r.name = std::move(name);
  r.op = op;
  r.root = root;
  r.processSet = set.id();
  return r;
}

// One request per tensor ("<base>.<i>", a copy of prototype), negotiated as
// a group.
std::vector<TensorHandle> submitGroup(Engine& engine, const std::vector<at::Tensor>& tensors,
                                      const Request& prototype, const std::string& base,
                                      Output output) {
  KOLO_CHECK_ARG(!tensors.empty(),
                 std::string("grouped_") + toString(prototype.op) + ": no tensors");
  std::vector<Request> requests;
  std::vector<Entry> entries;
  std::vector<std::shared_ptr<HandleBody>> bodies;
  for (size_t i = 0; i < tensors.size(); ++i) {
    requests.push_back(prototype);
    requests.back().name = base + "." + std::to_string(i);
    entries.emplace_back();
    bodies.push_back(prepare(tensors[i], output, requests.back(), entries.back()));
  }
  std::vector<Handle> handles = engine.enqueueGroup(std::move(requests), std::move(entries));
  std::vector<TensorHandle> out;
  for (size_t i = 0; i < bodies.size(); ++i) {
    bodies[i]->handle = handles[i];
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
  if (!name.empty()) return name;
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(countersMu_);
    n = counters_[{process_set.id(), op}]++;
  }
  std::string set = process_set.id() == 0 ? "" : "ps" + std::to_string(process_set.id()) + ".";
  return "noname." + std::string(op) + "." + set + std::to_string(n);
}

void Context::reset_names() {
  std::lock_guard<std::mutex> lock(countersMu_);
  counters_.clear();
}

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
                rooted(OpType::kAllgather, name_or_next(name, "allgather", process_set), 0,
                       process_set),
                tensor, Output::kNegotiated);
}

at::Tensor Context::allgather(const at::Tensor& tensor, const std::string& name,
                              ProcessSet process_set) {
  return allgather_async(tensor, name, process_set).wait();
}

std::vector<TensorHandle> Context::grouped_allgather_async(
    const std::vector<at::Tensor>& tensors, const std::string& name, ProcessSet process_set) {
  const std::string base = name_or_next(name, "grouped_allgather", process_set);
  return submitGroup(engine(), tensors, rooted(OpType::kAllgather, base, 0, process_set), base,
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
                rooted(OpType::kBroadcast, name_or_next(name, "broadcast", process_set), root,
                       process_set),
                tensor, Output::kNew);
}

TensorHandle Context::broadcast_async_(const at::Tensor& tensor, int root,
                                       const std::string& name, ProcessSet process_set) {
  return submit(engine(),
                rooted(OpType::kBroadcast, name_or_next(name, "broadcast", process_set), root,
                       process_set),
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
  Request r = rooted(OpType::kAlltoall, name_or_next(name, "alltoall", process_set), 0,
                     process_set);
  r.splits = splits;
  return submit(engine(), std::move(r), tensor, Output::kNegotiated);
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
  const std::string base = name_or_next(name, "broadcast_object", process_set);
  const bool isRoot = rank() == root;
  at::Tensor length = at::full({1}, isRoot ? static_cast<int64_t>(bytes.size()) : 0, at::kLong);
  broadcast_(length, root, base + ".size", process_set);
  const int64_t n = length.item<int64_t>();
  if (n == 0) return std::string();
  at::Tensor data = at::empty({n}, at::kByte);
  if (isRoot) std::memcpy(data.data_ptr(), bytes.data(), static_cast<size_t>(n));
  broadcast_(data, root, base + ".data", process_set);
  return std::string(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(n));
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
