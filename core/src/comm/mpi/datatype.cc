#include "comm/mpi/datatype.h"

#include <string>

#include "comm/mpi/runtime.h"
#include "kolo/error.h"
#include "kernels/reduce.h"

namespace kolo::comm::mpi {
namespace {

// MPI user functions cannot carry state, so there is one per (dtype, op).
template <DataType kType, ReduceOp kOp>
void reduceUser(void* in, void* inout, int* len, MPI_Datatype*) {
  reduceElements(inout, in, inout, static_cast<size_t>(*len), kType, kOp);
}

template <DataType kType>
MPI_User_function* userFunction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return &reduceUser<kType, ReduceOp::kSum>;
    case ReduceOp::kMin: return &reduceUser<kType, ReduceOp::kMin>;
    case ReduceOp::kMax: return &reduceUser<kType, ReduceOp::kMax>;
    case ReduceOp::kProduct: return &reduceUser<kType, ReduceOp::kProduct>;
    default: return nullptr;
  }
}

int opIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return 0;
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return 2;
    case ReduceOp::kProduct: return 3;
    default:
      throw InvalidArgument(std::string("mpi: unsupported reduce op ") + toString(op) +
                            " (the engine turns average into sum and a postscale)");
  }
}

MPI_Op nativeOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    default: return MPI_PROD;
  }
}

}  // namespace

MPI_Datatype datatypeOf(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16:
    case DataType::kBFloat16: return MPI_UINT16_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kInt16: return MPI_INT16_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt8:
    case DataType::kBool: return MPI_UINT8_T;
  }
  throw InvalidArgument("mpi: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

OpTable::~OpTable() {
  if (!mpiActive()) return;
  for (MPI_Op& op : ops_) {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
}

MPI_Op OpTable::get(DataType dtype, ReduceOp op) {
  const int index = opIndex(op);
  int row = 0;
  MPI_User_function* fn = nullptr;
  switch (dtype) {
    case DataType::kFloat16: row = 0; fn = userFunction<DataType::kFloat16>(op); break;
    case DataType::kBFloat16: row = 1; fn = userFunction<DataType::kBFloat16>(op); break;
    case DataType::kBool: row = 2; fn = userFunction<DataType::kBool>(op); break;
    default:
      datatypeOf(dtype);  // rejects an unknown dtype
      return nativeOp(op);
  }
  MPI_Op& slot = ops_[row * 4 + index];
  if (slot == MPI_OP_NULL) {
    if (MPI_Op_create(fn, /*commute=*/1, &slot) != MPI_SUCCESS) {
      slot = MPI_OP_NULL;
      throw Internal("mpi: MPI_Op_create failed");
    }
  }
  return slot;
}

}  // namespace kolo::comm::mpi
