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

bool TensorHandle::poll() const { return bodyOf(body_).handle.poll(); }

at::Tensor TensorHandle::wait() const {
  bodyOf(body_).handle.wait();
  std::lock_guard<std::mutex> lock(body_->mu);
  if (!body_->finished) {
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
  compat::waitUntilReady(work);
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
      entry.allocate = [body, options](const std::vector<int64_t>& shape) {
        at::Tensor out = at::empty(shape, options);
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
                  double postscale) {
  Request r;
  r.name = std::move(name);
  r.op = op;
  r.reduceOp = reduceOp;
  r.prescale = prescale;
  r.postscale = postscale;
  return r;
}

Request rooted(OpType op, std::string name, int root) {
  Request r;
  r.name = std::move(name);
  r.op = op;
  r.root = root;
  return r;
}

// Index of an operation's name counter.
size_t counterIndex(const char* op) {
  static const char* const kOps[] = {"allreduce", "grouped_allreduce", "allgather",
                                     "broadcast", "alltoall",          "reducescatter",
                                     "broadcast_object"};
  for (size_t i = 0; i < sizeof(kOps) / sizeof(kOps[0]); ++i) {
    if (std::strcmp(op, kOps[i]) == 0) return i;
  }
  return 7;
}

}  // namespace

// ---- Context ----------------------------------------------------------------

Context::Context(Engine& engine) : engine_(&engine) {}

Context& default_context() {
  static Context context;
  return context;
}

Engine& Context::engine() const { return engine_ != nullptr ? *engine_ : kolo::defaultEngine(); }

std::string Context::name_or_next(const std::string& name, const char* op) {
  if (!name.empty()) return name;
  const uint64_t n = counters_[counterIndex(op)].fetch_add(1);
  return "noname." + std::string(op) + "." + std::to_string(n);
}

void Context::reset_names() {
  for (auto& c : counters_) c.store(0);
}

TensorHandle Context::allreduce_async(const at::Tensor& tensor, ReduceOp op,
                                      const std::string& name, double prescale,
                                      double postscale) {
  return submit(engine(),
                reduction(OpType::kAllreduce, name_or_next(name, "allreduce"), op, prescale,
                          postscale),
                tensor, Output::kNew);
}

TensorHandle Context::allreduce_async_(const at::Tensor& tensor, ReduceOp op,
                                       const std::string& name, double prescale,
                                       double postscale) {
  return submit(engine(),
                reduction(OpType::kAllreduce, name_or_next(name, "allreduce"), op, prescale,
                          postscale),
                tensor, Output::kInPlace);
}

at::Tensor Context::allreduce(const at::Tensor& tensor, ReduceOp op, const std::string& name,
                              double prescale, double postscale) {
  return allreduce_async(tensor, op, name, prescale, postscale).wait();
}

at::Tensor Context::allreduce_(const at::Tensor& tensor, ReduceOp op, const std::string& name,
                               double prescale, double postscale) {
  return allreduce_async_(tensor, op, name, prescale, postscale).wait();
}

std::vector<TensorHandle> Context::grouped_allreduce_async(
    const std::vector<at::Tensor>& tensors, ReduceOp op, const std::string& name,
    double prescale, double postscale) {
  KOLO_CHECK_ARG(!tensors.empty(), "grouped_allreduce: no tensors");
  const std::string base = name_or_next(name, "grouped_allreduce");
  std::vector<Request> requests;
  std::vector<Entry> entries;
  std::vector<std::shared_ptr<HandleBody>> bodies;
  for (size_t i = 0; i < tensors.size(); ++i) {
    requests.push_back(reduction(OpType::kAllreduce, base + "." + std::to_string(i), op,
                                 prescale, postscale));
    entries.emplace_back();
    bodies.push_back(prepare(tensors[i], Output::kNew, requests.back(), entries.back()));
  }
  std::vector<Handle> handles = engine().enqueueGroup(std::move(requests), std::move(entries));
  std::vector<TensorHandle> out;
  for (size_t i = 0; i < bodies.size(); ++i) {
    bodies[i]->handle = handles[i];
    out.emplace_back(std::move(bodies[i]));
  }
  return out;
}

std::vector<at::Tensor> Context::grouped_allreduce(const std::vector<at::Tensor>& tensors,
                                                   ReduceOp op, const std::string& name,
                                                   double prescale, double postscale) {
  std::vector<TensorHandle> handles =
      grouped_allreduce_async(tensors, op, name, prescale, postscale);
  std::vector<at::Tensor> out;
  for (auto& h : handles) out.push_back(h.wait());
  return out;
}

TensorHandle Context::allgather_async(const at::Tensor& tensor, const std::string& name) {
  Request r;
  r.name = name_or_next(name, "allgather");
  r.op = OpType::kAllgather;
  return submit(engine(), std::move(r), tensor, Output::kNegotiated);
}

at::Tensor Context::allgather(const at::Tensor& tensor, const std::string& name) {
  return allgather_async(tensor, name).wait();
}

TensorHandle Context::broadcast_async(const at::Tensor& tensor, int root,
                                      const std::string& name) {
  return submit(engine(), rooted(OpType::kBroadcast, name_or_next(name, "broadcast"), root),
                tensor, Output::kNew);
}

TensorHandle Context::broadcast_async_(const at::Tensor& tensor, int root,
                                       const std::string& name) {
  return submit(engine(), rooted(OpType::kBroadcast, name_or_next(name, "broadcast"), root),
                tensor, Output::kInPlace);
}

at::Tensor Context::broadcast(const at::Tensor& tensor, int root, const std::string& name) {
  return broadcast_async(tensor, root, name).wait();
}

at::Tensor Context::broadcast_(const at::Tensor& tensor, int root, const std::string& name) {
  return broadcast_async_(tensor, root, name).wait();
}

TensorHandle Context::alltoall_async(const at::Tensor& tensor,
                                     const std::vector<int64_t>& splits,
                                     const std::string& name) {
  Request r;
  r.name = name_or_next(name, "alltoall");
  r.op = OpType::kAlltoall;
  r.splits = splits;
  return submit(engine(), std::move(r), tensor, Output::kNegotiated);
}

AlltoallResult Context::alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits,
                                 const std::string& name) {
  TensorHandle h = alltoall_async(tensor, splits, name);
  AlltoallResult result;
  result.tensor = h.wait();
  result.received_splits = h.received_splits();
  return result;
}

TensorHandle Context::reducescatter_async(const at::Tensor& tensor, ReduceOp op,
                                          const std::string& name, double prescale,
                                          double postscale) {
  return submit(engine(),
                reduction(OpType::kReducescatter, name_or_next(name, "reducescatter"), op,
                          prescale, postscale),
                tensor, Output::kNegotiated);
}

at::Tensor Context::reducescatter(const at::Tensor& tensor, ReduceOp op,
                                  const std::string& name, double prescale,
                                  double postscale) {
  return reducescatter_async(tensor, op, name, prescale, postscale).wait();
}

void Context::barrier() { engine().barrier().wait(); }

int Context::join() {
  Handle h = engine().join();
  h.wait();
  return h.joinResult();
}

std::string Context::broadcast_object(const std::string& bytes, int root,
                                      const std::string& name) {
  const std::string base = name_or_next(name, "broadcast_object");
  const bool isRoot = rank() == root;
  at::Tensor length = at::full({1}, isRoot ? static_cast<int64_t>(bytes.size()) : 0, at::kLong);
  broadcast_(length, root, base + ".size");
  const int64_t n = length.item<int64_t>();
  if (n == 0) return std::string();
  at::Tensor data = at::empty({n}, at::kByte);
  if (isRoot) std::memcpy(data.data_ptr(), bytes.data(), static_cast<size_t>(n));
  broadcast_(data, root, base + ".data");
  return std::string(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(n));
}

}  // namespace kolo::torch
