// kolo's dtypes and reduce ops in NCCL's terms. Host logic, tested without
// a GPU.
#pragma once

#include <string>

#include <nccl.h>

#include "kolo/types.h"

namespace kolo::comm::nccl {

// float16 -> ncclFloat16, bfloat16 -> ncclBfloat16, uint8 and bool ->
// ncclUint8 (bool is stored as one byte holding 0 or 1). NCCL has no 16-bit
// integer: int16 travels as ncclFloat16, which broadcast, allgather and
// send/recv copy bit for bit; toNcclOp refuses to reduce it.
ncclDataType_t toNcclType(DataType dtype);

// Sum, min, max, product; average -> ncclAvg for floating types only
// (integer average is a sum plus a truncating division by the engine).
// bool: sum -> max (logical or), product -> min (logical and), so the
// result stays 0 or 1. Throws InvalidArgument for what NCCL cannot do:
// any reduction of int16, and Adasum.
ncclRedOp_t toNcclOp(ReduceOp op, DataType dtype);

// "ncclRemoteError: remote process exited or there was a network error" plus
// NCCL's last error text when it has one.
std::string describe(ncclResult_t result, ncclComm_t comm = nullptr);

}  // namespace kolo::comm::nccl
