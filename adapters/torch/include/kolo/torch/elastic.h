/// \file
/// Elastic training for LibTorch: kolo::elastic (kolo/elastic.h) with the
/// state of a LibTorch training process.
///
/// \code{.cpp}
///   kolo::init();
///   Net model; auto sgd = std::make_shared<torch::optim::SGD>(...);
///   kolo::torch::DistributedOptimizer opt(sgd, model->named_parameters());
///   kolo::elastic::ElasticSampler sampler(dataset_size);
///   kolo::torch::elastic::TorchState state(*model, opt, {{"epoch", 0}, {"batch", 0}});
///   state.track("sampler", sampler);
///   state.register_reset_callbacks({[&] { set_lr(sgd, base_lr * kolo::size()); }});
///   kolo::elastic::run(state, [&] {
///     for (; state["epoch"] < epochs; ++state["epoch"]) {
///       ...  for each batch: step; sampler.record_batch(...); ++state["batch"]; state.commit();
///       state["batch"] = 0; sampler.set_epoch(state["epoch"] + 1);
///     }
///   });
/// \endcode
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kolo/elastic.h"
#include "kolo/torch.h"

/// Elastic training for LibTorch: TorchState, plus kolo::elastic's names.
namespace kolo::torch::elastic {

using kolo::elastic::ElasticSampler;
using kolo::elastic::HostsUpdatedInterrupt;
using kolo::elastic::run;
using kolo::elastic::State;

/// A module (parameters and buffers), an optimizer and named values, as
/// horovod.torch.elastic.TorchState(model, optimizer, **kwargs):
/// \verbatim
///   save()    copies them in memory (commit() calls it);
///   restore() copies the last save back and drops the interrupted step of a
///             DistributedOptimizer (DistributedOptimizer::reset_step);
///   sync()    gives every rank rank 0's: parameters and buffers, optimizer
///             state (broadcast_optimizer_state), counters and tracked values
///             (one broadcast), after restarting generated operation names.
/// \endverbatim
/// The module, optimizer and tracked objects are held by reference and must
/// outlive the state. Used from the training thread.
class TorchState : public kolo::elastic::State {
 public:
  /// State of model and the optimizer that optimizer wraps, with these
  /// counters (the same names on every rank); takes the first save() now.
  /// restore() also resets the DistributedOptimizer's interrupted step.
  TorchState(::torch::nn::Module& model, DistributedOptimizer& optimizer,
             std::map<std::string, int64_t> counters = {});
  /// The same with a plain LibTorch optimizer.
  TorchState(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
             std::map<std::string, int64_t> counters = {});

  /// A counter given to the constructor ("epoch", "batch", ...); every rank
  /// has the same set. Throws InvalidArgument for other names.
  int64_t& operator[](const std::string& name);
  /// The counter's value; throws InvalidArgument for unknown names.
  int64_t operator[](const std::string& name) const;

  /// Anything else that must be saved, restored and synced, as bytes.
  void track(const std::string& name, std::function<std::string()> save,
             std::function<void(const std::string&)> load);
  /// An object with std::string state_dict() const and
  /// load_state_dict(const std::string&) (an ElasticSampler, say).
  template <class T>
  void track(const std::string& name, T& object) {
    track(name, [&object] { return object.state_dict(); },
          [&object](const std::string& s) { object.load_state_dict(s); });
  }

  void save() override;
  void restore() override;
  void sync() override;

 private:
  struct Tracked {
    std::function<std::string()> save;
    std::function<void(const std::string&)> load;
    std::string saved;
  };
  /// Counters and tracked values as one blob, and back.
  std::string pack(bool current) const;
  void unpack(const std::string& blob);

  ::torch::nn::Module& model_;
  ::torch::optim::Optimizer& optimizer_;
  DistributedOptimizer* distributed_ = nullptr;
  std::map<std::string, int64_t> counters_;
  std::map<std::string, int64_t> savedCounters_;
  std::vector<std::pair<std::string, Tracked>> tracked_;
  std::vector<at::Tensor> savedTensors_;  ///< parameters then buffers
  std::string savedOptimizer_;
};

}  // namespace kolo::torch::elastic
