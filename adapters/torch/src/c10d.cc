// ProcessGroupKolo: construction, naming and submission of calls, and the
// helpers of c10d_call.h. The calls themselves are in c10d_collectives.cc
// (collectives), c10d_exchange.cc and c10d_peers.cc (send and recv); where
// a group runs is c10d_engine.cc's.
#include <algorithm>
#include <utility>

#include "c10d_call.h"
#include "c10d_engine.h"
#include "c10d_store.h"
#include "c10d_work.h"
#include "kolo/arrival.h"
#include "kolo/identity.h"
#include "kolo/kolo.h"
#include "kolo/tcp_store.h"
#include "tensor_util.h"

namespace kolo::torch {

namespace detail {

kolo::Request& C10dCall::add(kolo::OpType op, const at::Tensor& input, const at::Tensor& output,
                             const std::string& what) {
  kolo::Request q;
  q.op = op;
  describeTensor(input, what, q);
  kolo::Entry e;
  e.input = input.data_ptr();
  e.output = output.defined() ? output.data_ptr() : nullptr;
  std::shared_ptr<void> ready = compat::recordReady(input);
  e.readyEvent = ready.get();
  if (ready) this->ready.push_back(std::move(ready));
  keep.push_back(input);
  if (output.defined()) keep.push_back(output);
  device = input.device();
  requests.push_back(std::move(q));
  entries.push_back(std::move(e));
  return requests.back();
}

void C10dCall::land(const at::Tensor& target) {
  at::Tensor dest = target.is_contiguous() ? target : at::empty_like(target, at::MemoryFormat::Contiguous);
  keep.push_back(dest);
  const int64_t expected = dest.numel();
  void* data = dest.data_ptr();
  entries.back().allocate = [data, expected](const std::vector<int64_t>& shape) -> void* {
    KOLO_ENFORCE(kolo::numElements(shape) == expected,
                 "negotiated output of " + std::to_string(kolo::numElements(shape)) +
                     " elements for a tensor of " + std::to_string(expected));
    return data;
  };
  if (!dest.is_same(target)) {
    then([target, dest]() mutable {
      at::NoGradGuard noGrad;
      target.copy_(dest.view(target.sizes()));
    });
  }
}

void C10dCall::then(std::function<void()> step) {
  if (!finish) {
    finish = std::move(step);
    return;
  }
  finish = [first = std::move(finish), second = std::move(step)] {
    first();
    second();
  };
}

void C10dCall::thenCopyRows(const at::Tensor& rows, std::vector<at::Tensor> outs) {
  then([rows, outs]() mutable {
    at::NoGradGuard noGrad;
    for (size_t r = 0; r < outs.size(); ++r) outs[r].copy_(rows[r].view(outs[r].sizes()));
  });
}

at::Tensor realView(const at::Tensor& t) { return t.is_complex() ? at::view_as_real(t) : t; }

const char* reduceOpName(const ::c10d::ReduceOp& op) {
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM: return "SUM";
    case ::c10d::ReduceOp::AVG: return "AVG";
    case ::c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case ::c10d::ReduceOp::MIN: return "MIN";
    case ::c10d::ReduceOp::MAX: return "MAX";
    case ::c10d::ReduceOp::BAND: return "BAND";
    case ::c10d::ReduceOp::BOR: return "BOR";
    case ::c10d::ReduceOp::BXOR: return "BXOR";
    case ::c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNKNOWN";
  }
}

double premulFactor(const ::c10d::ReduceOp& op, const std::string& what) {
  const auto* s = dynamic_cast<const ::c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  KOLO_CHECK_ARG(s != nullptr, what + ": PREMUL_SUM without its factor (make it with "
                                      "torch.distributed._make_nccl_premul_sum)");
#if KOLO_TORCH_VERSION_AT_LEAST(2, 0)
  if (s->tensor_factor.defined()) return s->tensor_factor.item<double>();
#else
  if (!s->tensor_factors.empty()) return s->tensor_factors[0].item<double>();
#endif
  return s->double_factor;
}

at::Tensor inPlace(C10dCall& call, const at::Tensor& target) {
  if (target.is_contiguous()) return target;
  at::Tensor work = target.contiguous();
  call.then([target, work]() mutable {
    at::NoGradGuard noGrad;
    target.copy_(work);
  });
  return work;
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const std::string& what) {
  KOLO_CHECK_ARG(tensors.size() == 1,
                 what + ": kolo takes one tensor per call (got " + std::to_string(tensors.size()) +
                     "); it runs one device per process, so pass that device's tensor");
  return tensors[0];
}

void checkCallTensor(const at::Tensor& tensor, const std::string& what) {
  if (tensor.defined() && tensor.is_sparse()) {
    notImplemented(what + ": sparse tensors are not supported by the kolo backend; reduce the "
                          "dense tensor (tensor.to_dense()) or use a gloo group for them");
  }
  checkTensor(tensor, what);
}

void checkShapes(const std::vector<at::Tensor>& tensors, at::IntArrayRef shape,
                 const std::string& what, const char* role) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    checkCallTensor(tensors[i], what);
    KOLO_CHECK_ARG(tensors[i].sizes() == shape,
                   what + ": " + role + " " + std::to_string(i) + " has shape " +
                       c10::str(tensors[i].sizes()) + ", expected " + c10::str(shape));
  }
}

void notImplemented(const std::string& message) {
  throw c10::NotImplementedError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
}

namespace {

std::string rankList(const std::vector<int64_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// The group's ranks as messages name them: "process group 0", and the
// global ranks when the group is not the world in order.
std::string groupLabel(const ProcessGroupKoloOptions& o, int size) {
  std::string label = "process group " + o.groupName;
  bool world = o.globalRanks.empty();
  if (!world && static_cast<int>(o.globalRanks.size()) == size) {
    world = true;
    for (int i = 0; i < size; ++i) world = world && o.globalRanks[i] == i;
  }
  if (!world) label += " (global ranks " + rankList(o.globalRanks) + ")";
  return label;
}

// KOLO_* settings, with what the group's options decide: its timeout fails
// a call some ranks never make (and bounds rendezvous), and its calls, each
// named anew, skip the response cache.
kolo::Config groupConfig(const ProcessGroupKoloOptions& o) {
  kolo::Config config = kolo::Config::fromEnv();
  config.cacheCapacity = 0;
  config.stallShutdownTime = o.timeout;
  config.stallShutdownSetting = "the process group's timeout";
  if (o.timeout.count() > 0) config.timeout = std::min(config.timeout, o.timeout);
  if (!config.timelinePath.empty()) {
    // Each group's engine writes a timeline of its own, the default group's
    // included: KOLO_TIMELINE's own path is kolo.torch's engine's (hvd.init()),
    // which may run in the same process.
    std::string& path = config.timelinePath;
    const std::string tag = ".pg" + o.groupName;
    const size_t dot = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0
                           ? path.size() - 5
                           : path.size();
    path.insert(dot, tag);
  }
  return config;
}

// rank and size, with the local and cross ranks from every rank's host key
// (kolo::hostKey()), exchanged through store, as the core defines them
// (kolo::identityFromHosts, which its process sets use too).
kolo::Identity identityThrough(kolo::Store& store, int rank, int size,
                               std::chrono::milliseconds timeout) {
  const std::string mine = kolo::hostKey();
  store.set("kolo/c10d/host/" + std::to_string(rank), std::vector<char>(mine.begin(), mine.end()));
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    auto bytes = store.get("kolo/c10d/host/" + std::to_string(r), timeout);
    hosts.emplace_back(bytes.begin(), bytes.end());
  }
  return kolo::identityFromHosts(rank, hosts);
}

// Under kolorun, tells it this rank reached rendezvous (as kolo::init()
// does), once per process: kolorun stops a job whose ranks do not arrive
// within --start-timeout, and a torch.distributed program meets its peers
// through torch's store, which kolorun does not watch.
void announceArrival(std::chrono::milliseconds timeout) {
  static std::once_flag once;
  std::call_once(once, [&] { kolo::announceArrival(timeout); });
}

}  // namespace

}  // namespace detail

ProcessGroupKolo::ProcessGroupKolo(const c10::intrusive_ptr<::c10d::Store>& store, int rank,
                                   int size, ProcessGroupKoloOptions options)
    : C10dBackend(rank, size), options_(std::move(options)) {
  try {
    start(detail::adaptStore(store), nullptr);
  } catch (...) {
    detail::rethrowAsTorch(label_);
  }
}

ProcessGroupKolo::ProcessGroupKolo(std::shared_ptr<kolo::Store> store, int rank, int size,
                                   ProcessGroupKoloOptions options)
    : C10dBackend(rank, size), options_(std::move(options)) {
  try {
    start(std::move(store), nullptr);
  } catch (...) {
    detail::rethrowAsTorch(label_);
  }
}

ProcessGroupKolo::ProcessGroupKolo(std::shared_ptr<kolo::Store> store, const Identity& identity,
                                   ProcessGroupKoloOptions options,
                                   std::unique_ptr<TcpStoreServer> server)
    : C10dBackend(identity.rank, identity.size),
      options_(std::move(options)),
      server_(std::move(server)) {
  try {
    start(std::move(store), &identity);
  } catch (...) {
    detail::rethrowAsTorch(label_);
  }
}

void ProcessGroupKolo::start(std::shared_ptr<kolo::Store> store, const Identity* known) {
  label_ = detail::groupLabel(options_, getSize());
  KOLO_CHECK_ARG(getSize() >= 1 && getRank() >= 0 && getRank() < getSize(),
                 "kolo process group: rank " + std::to_string(getRank()) + " of size " +
                     std::to_string(getSize()) + " is not a rank of the group");
  KOLO_CHECK_ARG(options_.globalRanks.empty() ||
                     static_cast<int>(options_.globalRanks.size()) == getSize(),
                 "kolo process group: " + std::to_string(options_.globalRanks.size()) +
                     " global ranks for a group of " + std::to_string(getSize()));
  config_ = detail::groupConfig(options_);
  // A group on the process's engine keeps its own timeout and stall times
  // (groupConfig's), as a local set's limits.
  kolo::ProcessSetLimits limits;
  limits.timeout = config_.timeout;
  limits.stallCheckTime = config_.stallCheckTime;
  limits.stallShutdownTime = config_.stallShutdownTime;
  limits.stallShutdownSetting = config_.stallShutdownSetting;
  // torch's default group is "0": it makes the process's engine, and every
  // other group joins that when it can.
  const bool defaultGroup = options_.groupName == "0";
  if (!defaultGroup) {
    std::vector<int64_t> ranks = options_.globalRanks;
    if (ranks.empty()) {
      for (int r = 0; r < getSize(); ++r) ranks.push_back(r);
    }
    if (auto joined =
            detail::joinProcessEngine("c10d/" + options_.groupName, ranks, getRank(), limits)) {
      engine_ = std::move(joined->engine);
      processSet_ = joined->processSet;
      localSet_ = joined->localSet;
      engineRanks_ = std::move(joined->engineRanks);
      tagBase_ = joined->tagBase;
      tagLimit_ = joined->tagLimit;
      return;
    }
  }
  const Identity identity =
      known != nullptr ? *known
                       : detail::identityThrough(*store, getRank(), getSize(), config_.timeout);
  detail::announceArrival(config_.timeout);
  engine_ = std::make_shared<kolo::Engine>(config_, identity, store);
  ownsEngine_ = true;
  for (int r = 0; r < getSize(); ++r) engineRanks_.push_back(r);
  if (defaultGroup) {
    // The process's engine: later groups are sets of it, each with a range
    // of tags above this group's.
    detail::setProcessEngine(engine_);
    tagLimit_ = detail::kTagsPerGroup;
  }
}

ProcessGroupKolo::~ProcessGroupKolo() {
  try {
    shutdown();
  } catch (...) {
  }
}

c10::intrusive_ptr<ProcessGroupKolo> ProcessGroupKolo::createProcessGroupKolo(
    std::chrono::milliseconds timeout) {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<kolo::Store> store;
  LaunchInfo info;
  ProcessGroupKoloOptions options;
  options.timeout = timeout;
  try {
    info = launchInfoFromEnv();
    KOLO_CHECK_ARG(info.elasticWorker < 0,
                   "createProcessGroupKolo: this process is a worker of kolorun's elastic "
                   "driver; elastic jobs run through kolo::init() and kolo::elastic");
    const Config config = Config::fromEnv();
    store = connectLaunchStore(info, std::min(config.timeout, timeout), server);
  } catch (...) {
    detail::rethrowAsTorch("kolo process group");
  }
  return c10::make_intrusive<ProcessGroupKolo>(std::move(store), info.identity,
                                               std::move(options), std::move(server));
}

std::string ProcessGroupKolo::nextName() {
  return "process group " + options_.groupName + " #" + std::to_string(seq_++);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::run(
    const std::string& call, ::c10d::OpType type,
    const std::function<void(detail::C10dCall&)>& build) {
  detail::C10dCall c;
  c.call = call;
  c.type = type;
  try {
    build(c);
  } catch (...) {
    // Refused here: the other ranks learn of it at this call (their call
    // meets a different one) instead of waiting for it.
    std::string why = "refused";
    try {
      throw;
    } catch (const std::exception& e) {
      why = e.what();
      why = why.substr(0, why.find('\n'));
    } catch (...) {
    }
    refuse(call, why);
    detail::rethrowAsTorch(label_);
  }
  try {
    return submit(c);
  } catch (...) {
    detail::rethrowAsTorch(label_);
  }
}

void ProcessGroupKolo::refuse(const std::string& call, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  enqueueRefusal(nextName(), call, why);
}

void ProcessGroupKolo::enqueueRefusal(const std::string& name, const std::string& call,
                                      const std::string& why) {
  try {
    auto byte = std::make_shared<uint8_t>(0);
    kolo::Request q;
    q.name = name;
    q.op = kolo::OpType::kAllreduce;
    q.dtype = kolo::DataType::kUInt8;
    q.shape = {1};
    q.call = call + " [refused on this rank: " + why + "]";
    q.processSet = processSet_;
    kolo::Entry e;
    e.input = byte.get();
    e.output = byte.get();
    e.onDone = [byte](const kolo::Status&) {};
    engine_->enqueue(std::move(q), std::move(e));
  } catch (...) {
    // The engine failed or stopped: every call fails anyway.
  }
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupKolo::submit(detail::C10dCall& c) {
  const size_t n = c.requests.size();
  KOLO_ENFORCE(n > 0 && n == c.entries.size(), "a c10d call without operations");
  std::lock_guard<std::mutex> lock(mu_);
  const std::string name = nextName();
  auto work = c10::make_intrusive<WorkKolo>(getRank(), c.type, label_, name, c.device,
                                            std::move(c.outputs), std::move(c.finish));
  work->keep(std::move(c.keep));
  for (auto& event : c.ready) work->keepReady(std::move(event));
  work->expect(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    c.requests[i].name = n == 1 ? name : name + "." + std::to_string(i);
    c.requests[i].call = c.call;
    c.requests[i].processSet = processSet_;
    c.entries[i].onDone = WorkKolo::doneCallback(work);
  }
  std::vector<kolo::Handle> handles;
  try {
    if (n > 1) {
      handles = engine_->enqueueGroup(std::move(c.requests), std::move(c.entries));
    } else {
      handles.push_back(engine_->enqueue(std::move(c.requests[0]), std::move(c.entries[0])));
    }
  } catch (const kolo::InvalidArgument& e) {
    // The engine refused it on this rank: the others learn of it under
    // this call's name, as run() tells them of a call refused earlier.
    enqueueRefusal(name, c.call, e.what());
    throw;
  }
  work->started(std::move(handles));
  return work;
}

void ProcessGroupKolo::setSequenceNumberForGroup() {}

uint64_t ProcessGroupKolo::getSequenceNumberForGroup() {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

void ProcessGroupKolo::abort() {
  const std::string why = "ProcessGroupKolo::abort() called on rank " + std::to_string(getRank());
  if (engine_) engine_->abort(why);
}

void ProcessGroupKolo::shutdown() {
  if (!engine_) return;
  std::call_once(shutdownOnce_, [this] {
    try {
      if (localSet_) engine_->removeLocalProcessSet(processSet_);
    } catch (const kolo::Error&) {
      // The engine stopped (the default group was shut down first): the set
      // went with it.
    }
    if (ownsEngine_) engine_->shutdown();
  });
}

}  // namespace kolo::torch
