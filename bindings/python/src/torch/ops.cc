// TensorHandle and the tensor collectives, as thin wrappers over
// the LibTorch adapter's default context. The Python layer (kolo/torch)
// adds the horovod.torch signatures, autograd and compression on top.
//
// GIL: every call that enqueues or waits releases it. The engine's
// background thread may drop the last reference to a tensor that Python
// created, which takes the GIL; holding it while blocked on the engine
// could deadlock.
#include <string>
#include <vector>

#include "bindings.h"
#include "kolo/torch.h"

namespace kolo::python {

namespace kt = kolo::torch;
using Release = py::call_guard<py::gil_scoped_release>;

void bindOps(py::module_& m) {
  py::class_<kt::TensorHandle>(m, "TensorHandle",
                               "Completion of one asynchronous tensor operation.")
      .def("poll", &kt::TensorHandle::poll, Release(),
           "True once the operation finished (successfully or not).")
      .def("wait", &kt::TensorHandle::wait, Release(),
           "Blocks until done (without the GIL); returns the result tensor or raises the "
           "operation's error.")
      .def("received_splits", &kt::TensorHandle::received_splits,
           "alltoall: rows received from each rank (after wait()).");

  auto& ctx = kt::default_context();
  // Every operation takes the process set's id last (0: every rank).
  using kt::ProcessSet;

  m.def(
      "allreduce_async",
      [&ctx](const at::Tensor& t, ReduceOp op, const std::string& name, double prescale,
             double postscale, bool inplace, int set) {
        return inplace ? ctx.allreduce_async_(t, op, name, prescale, postscale, ProcessSet(set))
                       : ctx.allreduce_async(t, op, name, prescale, postscale, ProcessSet(set));
      },
      Release(), py::arg("tensor"), py::arg("op"), py::arg("name"), py::arg("prescale"),
      py::arg("postscale"), py::arg("inplace"), py::arg("process_set"));

  m.def(
      "grouped_allreduce_async",
      [&ctx](const std::vector<at::Tensor>& ts, ReduceOp op, const std::string& name,
             double prescale, double postscale, int set) {
        return ctx.grouped_allreduce_async(ts, op, name, prescale, postscale, ProcessSet(set));
      },
      Release(), py::arg("tensors"), py::arg("op"), py::arg("name"), py::arg("prescale"),
      py::arg("postscale"), py::arg("process_set"));

  m.def(
      "allgather_async",
      [&ctx](const at::Tensor& t, const std::string& name, int set) {
        return ctx.allgather_async(t, name, ProcessSet(set));
      },
      Release(), py::arg("tensor"), py::arg("name"), py::arg("process_set"));

  m.def(
      "grouped_allgather_async",
      [&ctx](const std::vector<at::Tensor>& ts, const std::string& name, int set) {
        return ctx.grouped_allgather_async(ts, name, ProcessSet(set));
      },
      Release(), py::arg("tensors"), py::arg("name"), py::arg("process_set"));

  m.def(
      "broadcast_async",
      [&ctx](const at::Tensor& t, int root, const std::string& name, bool inplace, int set) {
        return inplace ? ctx.broadcast_async_(t, root, name, ProcessSet(set))
                       : ctx.broadcast_async(t, root, name, ProcessSet(set));
      },
      Release(), py::arg("tensor"), py::arg("root"), py::arg("name"), py::arg("inplace"),
      py::arg("process_set"));

  m.def(
      "alltoall_async",
      [&ctx](const at::Tensor& t, const std::vector<int64_t>& splits, const std::string& name,
             int set) { return ctx.alltoall_async(t, splits, name, ProcessSet(set)); },
      Release(), py::arg("tensor"), py::arg("splits"), py::arg("name"), py::arg("process_set"));

  m.def(
      "reducescatter_async",
      [&ctx](const at::Tensor& t, ReduceOp op, const std::string& name, double prescale,
             double postscale, int set) {
        return ctx.reducescatter_async(t, op, name, prescale, postscale, ProcessSet(set));
      },
      Release(), py::arg("tensor"), py::arg("op"), py::arg("name"), py::arg("prescale"),
      py::arg("postscale"), py::arg("process_set"));

  m.def(
      "grouped_reducescatter_async",
      [&ctx](const std::vector<at::Tensor>& ts, ReduceOp op, const std::string& name,
             double prescale, double postscale, int set) {
        return ctx.grouped_reducescatter_async(ts, op, name, prescale, postscale, ProcessSet(set));
      },
      Release(), py::arg("tensors"), py::arg("op"), py::arg("name"), py::arg("prescale"),
      py::arg("postscale"), py::arg("process_set"));

  // bytes in, bytes out: the payload must not go through str conversion.
  m.def(
      "broadcast_object_bytes",
      [&ctx](const std::string& bytes, int root, const std::string& name, int set) {
        std::string out;
        {
          py::gil_scoped_release release;
          out = ctx.broadcast_object(bytes, root, name, ProcessSet(set));
        }
        return py::bytes(out);
      },
      py::arg("data"), py::arg("root"), py::arg("name"), py::arg("process_set"));

  // SyncBatchNorm's training-mode forward (kolo::torch::sync_batch_norm):
  // the result carries a C++ autograd node whose backward reduces over ranks.
  m.def(
      "sync_batch_norm",
      [&ctx](const at::Tensor& input, const c10::optional<at::Tensor>& weight,
             const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
             const c10::optional<at::Tensor>& running_var, double momentum, double eps,
             const std::string& name) {
        auto value = [](const c10::optional<at::Tensor>& t) { return t ? *t : at::Tensor(); };
        return kt::sync_batch_norm(input, value(weight), value(bias), value(running_mean),
                                   value(running_var), momentum, eps, name, ctx);
      },
      Release(), py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("running_mean"),
      py::arg("running_var"), py::arg("momentum"), py::arg("eps"), py::arg("name"));

  m.def(
      "broadcast_parameters",
      [&ctx](const kt::NamedTensors& tensors, int root, int set) {
        kt::broadcast_parameters(tensors, root, ctx, ProcessSet(set));
      },
      Release(), py::arg("tensors"), py::arg("root"), py::arg("process_set"),
      "Broadcasts (name, tensor) pairs in place from root, all in flight at once.");

  // Names generated by the adapter's default context ("noname.<op>.<n>"),
  // for Python-side composite operations on tensors.
  m.def(
      "next_name",
      [&ctx](const std::string& op, int set) {
        return ctx.name_or_next("", op.c_str(), ProcessSet(set));
      },
      py::arg("op"), py::arg("process_set") = 0);
  m.def(
      "reset_names", [&ctx] { ctx.reset_names(); },
      "The adapter's generated names start again at 0 (every rank of a new world).");
}

}  // namespace kolo::python
