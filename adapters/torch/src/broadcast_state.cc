// broadcast_parameters and broadcast_optimizer_state.
#include <exception>
#include <sstream>
#include <unordered_set>

#include "compat.h"
#include "tensor_util.h"

namespace kolo::torch {

namespace {

// Broadcasts every tensor in place under the engine name prefix + name.
// All are enqueued before any is waited for, so they negotiate together.
void broadcastAll(const NamedTensors& tensors, const std::string& prefix, int root,
                  Context& ctx, ProcessSet set) {
  std::unordered_set<std::string> seen;
  for (const auto& item : tensors) {
    KOLO_CHECK_ARG(seen.insert(item.first).second,
                   "broadcast_parameters: duplicate name '" + item.first + "'");
  }
  std::vector<TensorHandle> handles;
  handles.reserve(tensors.size());
  std::exception_ptr error;
  try {
    for (const auto& [name, tensor] : tensors) {
      handles.push_back(ctx.broadcast_async_(tensor, root, prefix + name, set));
    }
  } catch (...) {
    error = std::current_exception();
  }
  // Wait for everything enqueued, even after an error: the engine still
  // writes into those tensors.
  for (const auto& h : handles) {
    try {
      h.wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

namespace detail {
namespace {
const char kOptionsKey[] = "kolo.param_group_options";
const char kDefaultsKey[] = "kolo.defaults";

}  // namespace

std::string saveOptimizer(const ::torch::optim::Optimizer& optimizer) {
  ::torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  // Optimizer::load() of LibTorch 1.13 ignores saved param-group options, so
  // they travel separately and are applied by loadOptimizer().
  const auto& groups = optimizer.param_groups();
  archive.write(std::string(kOptionsKey) + "/size",
                c10::IValue(static_cast<int64_t>(groups.size())));
  for (size_t i = 0; i < groups.size(); ++i) {
    ::torch::serialize::OutputArchive options(archive.compilation_unit());
    groups[i].options().serialize(options);
    archive.write(std::string(kOptionsKey) + "/" + std::to_string(i), options);
  }
  ::torch::serialize::OutputArchive defaults(archive.compilation_unit());
  optimizer.defaults().serialize(defaults);
  archive.write(kDefaultsKey, defaults);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void loadOptimizer(::torch::optim::Optimizer& optimizer, const std::string& bytes, int root) {
  c10::optional<at::Device> device;
  for (const auto& g : optimizer.param_groups()) {
    if (!g.params().empty()) {
      device = g.params().front().device();
      break;
    }
  }
  try {
    std::istringstream in(bytes);
    ::torch::serialize::InputArchive archive;
    archive.load_from(in, device);
    optimizer.state().clear();  // state root does not have must not survive
    optimizer.load(archive);
    c10::IValue count;
    archive.read(std::string(kOptionsKey) + "/size", count);
    auto& groups = optimizer.param_groups();
    if (count.toInt() != static_cast<int64_t>(groups.size())) {
      throw InvalidArgument("broadcast_optimizer_state: rank " + std::to_string(root) +
                            "'s optimizer has " + std::to_string(count.toInt()) +
                            " param groups, this rank's has " + std::to_string(groups.size()));
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      ::torch::serialize::InputArchive options;
      archive.read(std::string(kOptionsKey) + "/" + std::to_string(i), options);
      groups[i].options().serialize(options);
    }
    ::torch::serialize::InputArchive defaults;
    archive.read(kDefaultsKey, defaults);
    optimizer.defaults().serialize(defaults);
  } catch (const c10::Error& e) {
    throw InvalidArgument(
        "broadcast_optimizer_state: cannot load rank " + std::to_string(root) +
        "'s optimizer state (is it the same optimizer type over the same parameters?): " +
        e.what_without_backtrace());
  }
}

}  // namespace detail

void broadcast_parameters(const NamedTensors& tensors, int root, Context& ctx,
                          ProcessSet process_set) {
  broadcastAll(tensors, "broadcast_parameters.", root, ctx, process_set);
}

void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& tensors,
                          int root, Context& ctx, ProcessSet process_set) {
  broadcastAll(to_named_tensors(tensors), "broadcast_parameters.", root, ctx, process_set);
}

void broadcast_parameters(const ::torch::nn::Module& module, int root, Context& ctx,
                          ProcessSet process_set) {
  NamedTensors all = to_named_tensors(module.named_parameters(/*recurse=*/true));
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    all.emplace_back("buffer:" + item.key(), item.value());
  }
  broadcastAll(all, "broadcast_parameters.", root, ctx, process_set);
}

void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root, Context& ctx,
                               ProcessSet process_set) {
  const bool isRoot = ctx.rank() == root;
  std::string bytes = isRoot ? detail::saveOptimizer(optimizer) : std::string();
  bytes = ctx.broadcast_object(bytes, root, "", process_set);
  if (!isRoot) detail::loadOptimizer(optimizer, bytes, root);
}

}  // namespace kolo::torch
