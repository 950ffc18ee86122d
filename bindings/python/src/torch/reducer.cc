// GradientReducer (kolo/torch/reducer.h) and the Adasum delta step
// (kolo/torch/optimizer.h) for kolo.torch.DistributedOptimizer: the gradient
// hooks, buckets and waits run in C++; the Python optimizer keeps Horovod's
// API on top (kolo/torch/optimizer.py).
//
// GIL: every method of the reducer runs without it (the hooks hold the
// reducer's lock while they call a compressor, which takes the GIL: no
// thread may hold the GIL while it waits for that lock), and so do
// adasum_delta_step and the destructor, which wait on the engine. The hooks
// run inside backward, which PyTorch runs without the GIL; they take it to
// call a Python compressor and, on an error, to raise Horovod's
// AssertionError. adasum_delta_step takes it to call back into Python (the
// local step, a compressor).
#include <torch/csrc/Exceptions.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "kolo/torch/optimizer.h"
#include "kolo/torch/reducer.h"

namespace kolo::python {

namespace kt = kolo::torch;
using Release = py::call_guard<py::gil_scoped_release>;

namespace {

// Destroys a reducer without the GIL: its destructor waits for reductions in
// flight.
struct ReleasingDelete {
  void operator()(kt::GradientReducer* reducer) const {
    py::gil_scoped_release release;
    delete reducer;
  }
};

// Raises AssertionError(message) in the Python thread that runs backward.
[[noreturn]] void raiseAssertion(const std::string& message) {
  py::gil_scoped_acquire gil;
  PyErr_SetString(PyExc_AssertionError, message.c_str());
  python_error error;
  error.persist();
  throw error;
}

// compress or decompress as a TensorTransform that takes the GIL to call f
// (None: no transform). The transform owns f, and drops it with the GIL:
// the reducer that holds it is destroyed without it.
kt::TensorTransform owningTransform(const py::object& f) {
  if (f.is_none()) return nullptr;
  std::shared_ptr<py::object> held(new py::object(f), [](py::object* o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
  return [held](size_t index, const at::Tensor& tensor) {
    py::gil_scoped_acquire gil;
    return (*held)(index, tensor).cast<at::Tensor>();
  };
}

}  // namespace

void bindReducer(py::module_& m) {
  py::class_<kt::GradientReducer, std::unique_ptr<kt::GradientReducer, ReleasingDelete>>(
      m, "GradientReducer",
      "Gradient hooks, buckets and in-place reductions for the parameters given "
      "(see kolo/torch/reducer.h).")
      .def(py::init([](std::vector<std::pair<std::string, at::Tensor>> params,
                       int backward_passes_per_step, ReduceOp op, const std::string& compression,
                       double gradient_predivide_factor,
                       std::vector<std::vector<size_t>> groups, const std::string& name_prefix,
                       bool sparse_as_dense, int process_set, int64_t bucket_bytes,
                       const py::object& compress, const py::object& decompress) {
             kt::GradientReducerOptions o;
             o.backward_passes_per_step = backward_passes_per_step;
             o.op = op;
             if (compression == "fp16") {
               o.compression = kt::Compression::kFP16;
             } else if (compression == "bf16") {
               o.compression = kt::Compression::kBF16;
             } else {
               KOLO_CHECK_ARG(compression == "none",
                              "GradientReducer: compression must be none, fp16 or bf16, got '" +
                                  compression + "'");
             }
             o.gradient_predivide_factor = gradient_predivide_factor;
             o.groups = std::move(groups);
             o.name_prefix = name_prefix;
             o.sparse_as_dense = sparse_as_dense;
             o.process_set = kt::ProcessSet(process_set);
             o.bucket_bytes = bucket_bytes;
             o.compress = owningTransform(compress);
             o.decompress = owningTransform(decompress);
             o.hook_error = raiseAssertion;
             // Without the GIL, as every method: a failed check drops the
             // transforms, which take it.
             py::gil_scoped_release release;
             return std::unique_ptr<kt::GradientReducer, ReleasingDelete>(
                 new kt::GradientReducer(std::move(params), std::move(o),
                                         kt::default_context()));
           }),
           py::arg("params"), py::arg("backward_passes_per_step"), py::arg("op"),
           py::arg("compression"), py::arg("gradient_predivide_factor"), py::arg("groups"),
           py::arg("name_prefix"), py::arg("sparse_as_dense"), py::arg("process_set"),
           py::arg("bucket_bytes"), py::arg("compress") = py::none(),
           py::arg("decompress") = py::none())
      .def("synchronize", &kt::GradientReducer::synchronize, Release(),
           "Submits what the hooks did not, waits, writes results into p.grad.")
      .def("reset_step", &kt::GradientReducer::reset_step, Release(),
           "Waits for reductions in flight (ignoring errors) and forgets the step.")
      .def("clear_passes", &kt::GradientReducer::clear_passes, Release(),
           "Forgets counted backward passes (nothing may be in flight).")
      .def("pending", &kt::GradientReducer::pending, Release(),
           "Backward passes were counted or reductions are in flight.")
      .def("submitted", &kt::GradientReducer::submitted, Release(),
           "Gradients submitted since the last synchronize().")
      .def("set_backward_passes_per_step", &kt::GradientReducer::set_backward_passes_per_step,
           Release(), py::arg("passes"))
      .def("buckets", &kt::GradientReducer::buckets, Release(),
           "Member parameter names of each bucket, in submission order.")
      .def("requests", &kt::GradientReducer::requests, Release(),
           "Engine requests (buckets, sparse allgathers) enqueued so far.");

  m.def(
      "adasum_delta_step",
      [](const std::vector<at::Tensor>& params, const std::vector<std::string>& names,
         const py::function& local_step, const py::object& compress,
         const py::object& decompress, int set) {
        // The callables stay owned by this frame; the functions below only
        // call them, with the GIL.
        auto step = [&local_step] {
          py::gil_scoped_acquire gil;
          local_step();
        };
        auto through = [](const py::object& f) -> kt::DeltaTransform {
          if (f.is_none()) return nullptr;
          return [&f](size_t index, const at::Tensor& tensor) {
            py::gil_scoped_acquire gil;
            return f(index, tensor).cast<at::Tensor>();
          };
        };
        const kt::DeltaTransform c = through(compress);
        const kt::DeltaTransform d = through(decompress);
        py::gil_scoped_release release;
        kt::adasum_delta_step(params, names, step, c, d, kt::ProcessSet(set),
                              kt::default_context());
      },
      py::arg("params"), py::arg("names"), py::arg("local_step"), py::arg("compress"),
      py::arg("decompress"), py::arg("process_set"),
      "Horovod's Adasum delta step (kolo::torch::adasum_delta_step): local_step() "
      "updates params, compress(i, delta) and decompress(i, reduced) (None: as they "
      "are) carry each change through the Adasum reduction.");
}

}  // namespace kolo::python
