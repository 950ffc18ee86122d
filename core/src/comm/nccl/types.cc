#include "comm/nccl/types.h"

#include "kolo/error.h"

namespace kolo::comm::nccl {

ncclDataType_t toNcclType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kInt8: return ncclInt8;
    case DataType::kInt16: return ncclFloat16;  // a 2-byte carrier: data movement only
    case DataType::kUInt8:
    case DataType::kBool: return ncclUint8;
  }
  throw InvalidArgument("nccl: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

ncclRedOp_t toNcclOp(ReduceOp op, DataType dtype) {
  toNcclType(dtype);  // rejects an unknown dtype first
  KOLO_CHECK_ARG(dtype != DataType::kInt16,
                 std::string("nccl: NCCL has no 16-bit integer type, so it cannot ") +
                     toString(op) + " int16 tensors; reduce an int32 copy, or reduce on the "
                     "host with KOLO_GPU_OPERATIONS=gloo or mpi");
  const bool isBool = dtype == DataType::kBool;
  switch (op) {
    case ReduceOp::kSum: return isBool ? ncclMax : ncclSum;
    case ReduceOp::kProduct: return isBool ? ncclMin : ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAverage:
      KOLO_CHECK_ARG(isFloatingPoint(dtype),
                     std::string("nccl: average of ") + toString(dtype) +
                         " is a sum plus an integer division, not ncclAvg");
      return ncclAvg;
    case ReduceOp::kAdasum:
      break;
  }
  KOLO_CHECK_ARG(op != ReduceOp::kAdasum,
                 "nccl: Adasum is computed by the engine, not by an NCCL reduction");
  throw InvalidArgument("nccl: unknown reduce op " + std::to_string(static_cast<int>(op)));
}

std::string describe(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') text += " (" + std::string(last) + ")";
  return text;
}

}  // namespace kolo::comm::nccl
