// Element-wise arithmetic on raw buffers for every kolo dtype: reductions,
// scaling and half-precision conversion. Shared by backends (as their reduce
// functions) and by the engine (prescale/postscale, CPU packing).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kolo/types.h"

namespace kolo {

// out[i] = a[i] (op) b[i] for n elements; out may alias a or b. op is
// kSum, kMin, kMax or kProduct. bool: sum/max = OR, product/min = AND.
void reduceElements(void* out, const void* a, const void* b, size_t n,
                    DataType dtype, ReduceOp op);

// out[i] = (a[i] op b[i]) * factor, and out2[i] the same when out2 is not
// null: reduceElements, scaleElements and a copy in one pass over the data,
// rounded as those are (the reduced value is rounded to dtype, then scaled).
// out and out2 may each alias a or b exactly (element i is read before it is
// written). For the planes that fold the engine's average into their last
// pass (comm::Collectives::allreduceScaled).
void reduceScaledElements(void* out, void* out2, const void* a, const void* b, size_t n,
                          DataType dtype, ReduceOp op, double factor);

// buf[i] *= factor, as Horovod scales on the CPU: float64 in double, float32
// in float (factor rounded to float), fp16/bf16 in float and rounded once,
// integers in double then truncated toward zero and cast back. bool throws
// Internal (refused at enqueue).
void scaleElements(void* buf, size_t n, DataType dtype, double factor);

// Integer average: buf[i] /= divisor (truncating, like integer division).
void divideElements(void* buf, size_t n, DataType dtype, int64_t divisor);

float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace kolo
