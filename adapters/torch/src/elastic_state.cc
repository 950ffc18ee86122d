// kolo::torch::elastic::TorchState.
#include <sstream>

#include "kolo/torch/elastic.h"
#include "tensor_util.h"

namespace kolo::torch::elastic {
namespace {

std::vector<at::Tensor> stateTensors(const ::torch::nn::Module& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) out.push_back(p.value());
  for (const auto& b : model.named_buffers(/*recurse=*/true)) out.push_back(b.value());
  return out;
}

}  // namespace

TorchState::TorchState(::torch::nn::Module& model, DistributedOptimizer& optimizer,
                       std::map<std::string, int64_t> counters)
    : TorchState(model, optimizer.optimizer(), std::move(counters)) {
  distributed_ = &optimizer;
}

TorchState::TorchState(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
                       std::map<std::string, int64_t> counters)
    : model_(model), optimizer_(optimizer), counters_(std::move(counters)) {
  save();
}

int64_t& TorchState::operator[](const std::string& name) {
  auto it = counters_.find(name);
  KOLO_CHECK_ARG(it != counters_.end(),
                 "TorchState: no counter '" + name +
                     "'; give every counter to the constructor, e.g. {{\"" + name + "\", 0}}");
  return it->second;
}

int64_t TorchState::operator[](const std::string& name) const {
  return const_cast<TorchState&>(*this)[name];
}

void TorchState::track(const std::string& name, std::function<std::string()> save,
                       std::function<void(const std::string&)> load) {
  for (const auto& [n, t] : tracked_) {
    KOLO_CHECK_ARG(n != name, "TorchState::track: '" + name + "' is tracked already");
  }
  Tracked t{std::move(save), std::move(load), ""};
  t.saved = t.save();
  tracked_.emplace_back(name, std::move(t));
}

std::string TorchState::pack(bool current) const {
  std::ostringstream out;
  const auto& counters = current ? counters_ : savedCounters_;
  out << counters.size() << "\n";
  for (const auto& [name, value] : counters) out << name << " " << value << "\n";
  out << tracked_.size() << "\n";
  for (const auto& [name, t] : tracked_) {
    std::string bytes = current ? t.save() : t.saved;
    out << name << " " << bytes.size() << "\n" << bytes;
  }
  return out.str();
}

void TorchState::unpack(const std::string& blob) {
  std::istringstream in(blob);
  auto bad = [] {
    return Internal("TorchState: rank 0's state does not match this rank's (different "
                    "counters or tracked values?)");
  };
  size_t n = 0;
  if (!(in >> n) || n != counters_.size()) throw bad();
  std::map<std::string, int64_t> counters;
  for (size_t i = 0; i < n; ++i) {
    std::string name;
    int64_t value = 0;
    if (!(in >> name >> value) || counters_.count(name) == 0) throw bad();
    counters[name] = value;
  }
  if (!(in >> n) || n != tracked_.size()) throw bad();
  std::vector<std::string> values;
  for (size_t i = 0; i < n; ++i) {
    std::string name;
    size_t size = 0;
    if (!(in >> name >> size) || name != tracked_[i].first) throw bad();
    in.get();  // the newline
    std::string bytes(size, '\0');
    if (!in.read(bytes.data(), static_cast<std::streamsize>(size))) throw bad();
    values.push_back(std::move(bytes));
  }
  counters_ = std::move(counters);
  for (size_t i = 0; i < values.size(); ++i) tracked_[i].second.load(values[i]);
}

void TorchState::save() {
  at::NoGradGuard noGrad;
  savedTensors_.clear();
  for (const auto& t : stateTensors(model_)) savedTensors_.push_back(t.detach().clone());
  savedOptimizer_ = detail::saveOptimizer(optimizer_);
  savedCounters_ = counters_;
  for (auto& [name, t] : tracked_) t.saved = t.save();
}

void TorchState::restore() {
  // The interrupted step's allreduces end (with an error) once the failed
  // engine stops; drop them before touching the gradients' parameters.
  if (distributed_ != nullptr) distributed_->reset_step();
  {
    at::NoGradGuard noGrad;
    std::vector<at::Tensor> now = stateTensors(model_);
    KOLO_ENFORCE(now.size() == savedTensors_.size(), "TorchState: the module changed shape");
    for (size_t i = 0; i < now.size(); ++i) now[i].copy_(savedTensors_[i]);
  }
  detail::loadOptimizer(optimizer_, savedOptimizer_, /*root=*/0);
  counters_ = savedCounters_;
  for (auto& [name, t] : tracked_) t.load(t.saved);
}

void TorchState::sync() {
  // Survivors and new workers issue unnamed operations from 0 again.
  default_context().reset_names();
  if (distributed_ != nullptr) distributed_->reset_step();
  broadcast_parameters(model_, 0);
  broadcast_optimizer_state(optimizer_, 0);
  std::string blob = default_context().broadcast_object(
      default_context().rank() == 0 ? pack(true) : std::string(), 0, "elastic.torch_state");
  unpack(blob);
}

}  // namespace kolo::torch::elastic
