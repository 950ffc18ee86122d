#include "tensor_util.h"

#include "compat.h"

namespace kolo::torch {

DataType to_data_type(at::ScalarType type, const std::string& what) {
  switch (type) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kShort: return DataType::kInt16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUInt8;
    case at::kBool: return DataType::kBool;
    default:
      throw InvalidArgument(what + ": dtype " + std::string(c10::toString(type)) +
                            " is not supported (supported: float32, float64, float16, "
                            "bfloat16, int64, int32, int16, int8, uint8, bool)");
  }
}

at::ScalarType to_scalar_type(DataType type) {
  switch (type) {
    case DataType::kFloat32: return at::kFloat;
    case DataType::kFloat64: return at::kDouble;
    case DataType::kFloat16: return at::kHalf;
    case DataType::kBFloat16: return at::kBFloat16;
    case DataType::kInt32: return at::kInt;
    case DataType::kInt64: return at::kLong;
    case DataType::kInt16: return at::kShort;
    case DataType::kInt8: return at::kChar;
    case DataType::kUInt8: return at::kByte;
    case DataType::kBool: return at::kBool;
  }
  throw InvalidArgument("unknown kolo::DataType " + std::to_string(static_cast<int>(type)));
}

NamedTensors to_named_tensors(const ::torch::OrderedDict<std::string, at::Tensor>& dict) {
  NamedTensors out;
  out.reserve(dict.size());
  for (const auto& item : dict) out.emplace_back(item.key(), item.value());
  return out;
}

::torch::Device device() {
  if (::torch::cuda::is_available()) {
    return ::torch::Device(::torch::kCUDA,
                           static_cast<c10::DeviceIndex>(isInitialized() ? localRank() : 0));
  }
  return ::torch::Device(::torch::kCPU);
}

namespace detail {

namespace {
// What a TensorRef made here keeps alive.
struct Held {
  at::Tensor tensor;
  std::shared_ptr<void> ready;
};
}  // namespace

TensorRef toRef(const at::Tensor& t, std::shared_ptr<void> ready) {
  TensorRef ref;
  ref.dtype = to_data_type(t.scalar_type(), "tensor");
  ref.shape = shapeOf(t);
  if (t.is_cuda()) {
    ref.device = DeviceKind::kCuda;
    ref.deviceIndex = t.get_device();
  }
  ref.data = t.data_ptr();
  ref.readyEvent = ready.get();
  ref.keepAlive = std::make_shared<Held>(Held{t, std::move(ready)});
  return ref;
}

at::Tensor tensorOf(const TensorRef& ref) {
  KOLO_ENFORCE(ref.keepAlive != nullptr, "kolo::torch: a tensor reference without its tensor");
  return std::static_pointer_cast<Held>(ref.keepAlive)->tensor;
}

TensorAllocator tensorAllocator(const at::TensorOptions& options) {
  return [options](const std::vector<int64_t>& shape) {
    return toRef(compat::emptyOnStream(shape, options, kolo::outputAllocationStream()));
  };
}

std::string what(const char* op, const std::string& name) {
  return std::string(op) + " '" + name + "'";
}

void checkTensor(const at::Tensor& tensor, const std::string& what) {
  if (!tensor.defined()) throw InvalidArgument(what + ": the tensor is undefined");
  if (tensor.layout() != at::kStrided) {
    throw InvalidArgument(what + ": only dense (strided) tensors are supported, got a " +
                          c10::str(tensor.layout()) + " tensor");
  }
  if (!tensor.is_cpu() && !tensor.is_cuda()) {
    throw InvalidArgument(what + ": tensors must be on the CPU or a CUDA device, got " +
                          tensor.device().str());
  }
  to_data_type(tensor.scalar_type(), what);
}

std::vector<int64_t> shapeOf(const at::Tensor& tensor) {
  auto sizes = tensor.sizes();
  return std::vector<int64_t>(sizes.begin(), sizes.end());
}

void describeTensor(const at::Tensor& tensor, const std::string& what, Request& request) {
  checkTensor(tensor, what);
  request.dtype = to_data_type(tensor.scalar_type(), what);
  request.shape = shapeOf(tensor);
  if (tensor.is_cuda()) {
    request.device = DeviceKind::kCuda;
    request.deviceIndex = tensor.get_device();
  } else {
    request.device = DeviceKind::kCpu;
    request.deviceIndex = -1;
  }
}

}  // namespace detail
}  // namespace kolo::torch
