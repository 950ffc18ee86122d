// kolo dtypes and reduce ops as MPI datatypes and ops.
//
// float32/float64/int32/int64/int8/uint8 map to MPI's own types and ops.
// float16 and bfloat16 travel as MPI_UINT16_T and bool as MPI_UINT8_T
// (storage types, so MPI splits buffers on element boundaries), reduced by
// commutative user-defined ops that call kolo::reduceElements.
//
// Threading: as the owning Collectives.
#pragma once

#include <mpi.h>

#include <array>

#include "kolo/types.h"

namespace kolo::comm::mpi {

MPI_Datatype datatypeOf(DataType dtype);

// Owns the user-defined ops, created on first use and freed (while MPI is
// active) on destruction.
class OpTable {
 public:
  OpTable() { ops_.fill(MPI_OP_NULL); }
  ~OpTable();
  OpTable(const OpTable&) = delete;
  OpTable& operator=(const OpTable&) = delete;

  // op must be kSum, kMin, kMax or kProduct (InvalidArgument otherwise).
  MPI_Op get(DataType dtype, ReduceOp op);

 private:
  // 3 dtypes (float16, bfloat16, bool) x 4 ops.
  std::array<MPI_Op, 12> ops_;
};

}  // namespace kolo::comm::mpi
