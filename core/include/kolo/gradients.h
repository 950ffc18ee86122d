/// \file
/// What every framework's DistributedOptimizer shares: the option table and
/// its checks, Horovod's num_groups split, the scale factors of a gradient
/// reduction, the bucket planner and the per-step pass counting. An adapter
/// keeps its framework's hooks, tensors and optimizer; the decisions are
/// made here, once, so the C++, Python and every framework's optimizer make
/// them alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kolo/types.h"

namespace kolo {

/// How gradients travel. Only float32 and float64 gradients are cast; others
/// travel as they are.
enum class Compression : uint8_t {
  kNone,  ///< As they are.
  kFP16,  ///< As float16, cast back after the reduction.
  kBF16,  ///< As bfloat16, cast back after the reduction.
};

/// "none", "fp16" or "bf16"; static storage.
const char* toString(Compression compression);

/// The dtype a gradient of dtype travels as under compression.
DataType wireType(DataType dtype, Compression compression);

/// The settings every DistributedOptimizer has (each adapter spells them in
/// its own language: backward_passes_per_step, op, ...).
struct GradientOptions {
  int backwardPassesPerStep = 1;            ///< Local passes summed before a reduction; >= 1.
  ReduceOp op = ReduceOp::kAverage;         ///< Average, Sum or Adasum.
  double gradientPredivideFactor = 1.0;     ///< > 0; other than 1 only with Average.
  int numGroups = 0;                        ///< >= 0; 0: no split.
  bool explicitGroups = false;              ///< Groups were given by name (then numGroups == 0).
  int64_t bucketBytes = int64_t{25} << 20;  ///< >= 0; 0: a bucket per parameter.
};

/// Throws InvalidArgument naming who ("DistributedOptimizer") and the field
/// in the words of the Python and C++ APIs (backward_passes_per_step, op,
/// gradient_predivide_factor, num_groups, groups, bucket_bytes) when options
/// are out of range.
void checkGradientOptions(const GradientOptions& options,
                          const std::string& who = "DistributedOptimizer");

/// What a gradient reduction asks the engine for.
struct GradientScales {
  double prescale = 1.0;   ///< Request::prescale.
  double postscale = 1.0;  ///< Request::postscale.
};
/// Average with a predivide factor f: 1/f before and f after the averaging
/// (Horovod's gradient_predivide_factor); 1 and 1 otherwise.
GradientScales gradientScales(ReduceOp op, double predivideFactor);

/// Horovod's split of count parameters (in order) into numGroups contiguous
/// groups: the first count % numGroups groups get one more, so 10 in 4 is
/// 3,3,2,2. No empty groups: numGroups > count gives count groups of one.
/// numGroups <= 0 or count == 0: no groups.
std::vector<std::vector<size_t>> splitIntoGroups(size_t count, int numGroups);

/// One parameter's gradient, as the planner needs it.
struct GradientInfo {
  std::string name;                      ///< Unique, not empty.
  int64_t numel = 0;                     ///< Elements.
  DataType dtype = DataType::kFloat32;   ///< The gradient's own dtype.
  DeviceKind device = DeviceKind::kCpu;  ///< Where it lives.
  int deviceIndex = -1;                  ///< CUDA ordinal; -1 on the CPU.
};

/// One bucket: a flat buffer of its members' gradients, reduced as one
/// request named `name` (stable across steps, so the response cache hits).
struct GradientBucket {
  std::string name;                      ///< "<prefix><first member's name>[+<members - 1>]".
  std::vector<size_t> members;           ///< Indices into the planned gradients, in buffer order.
  std::vector<int64_t> offsets;          ///< Each member's first element in the buffer.
  int64_t numel = 0;                     ///< Elements of the buffer.
  DataType wire = DataType::kFloat32;    ///< The buffer's dtype.
  DeviceKind device = DeviceKind::kCpu;  ///< The members' device.
  int deviceIndex = -1;                  ///< Their CUDA ordinal.
};

/// How planBuckets groups gradients.
struct BucketPlan {
  /// Buckets given by the caller (indices into the gradients), each kept
  /// whole: split only where members differ in device or wire dtype. A
  /// gradient may be in one group at most.
  std::vector<std::vector<size_t>> groups;
  /// The others: consecutive gradients in reverse order (the order backward
  /// produces them), up to this many bytes on the wire per bucket; a larger
  /// gradient gets a bucket of its own; 0: one per gradient.
  int64_t bucketBytes = int64_t{25} << 20;
  std::string namePrefix = "grad.";              ///< Start of every bucket's name.
  Compression compression = Compression::kNone;  ///< Decides each wire dtype.
};

/// The buckets of gradients: groups first, in order, then the rest.
/// Throws InvalidArgument (naming who) for empty or duplicate names, and
/// for a group that names a gradient out of range or one already grouped.
std::vector<GradientBucket> planBuckets(const std::vector<GradientInfo>& gradients,
                                        const BucketPlan& plan,
                                        const std::string& who = "GradientReducer");

/// Counts backward passes per gradient and tells when a bucket is ready:
/// all of its members accumulated passesPerStep passes. Not thread-safe
/// (the reducer calls it under its lock).
class GradientSteps {
 public:
  /// What one accumulation meant.
  enum class Arrival {
    kCounted,        ///< Counted; the bucket waits for more.
    kBucketReady,    ///< Its bucket is complete: submit it.
    kTooManyPasses,  ///< More passes than passesPerStep before a step: an error.
    kLate,           ///< Its bucket was submitted without it: an error.
  };
  /// An empty plan.
  GradientSteps() = default;
  /// For buckets over gradients gradients (planBuckets' result).
  GradientSteps(const std::vector<GradientBucket>& buckets, size_t gradients, int passesPerStep);

  /// Gradient i was accumulated once. countOnly: count passes but never
  /// report a bucket ready (Adasum reduces updates, not gradients).
  Arrival accumulated(size_t i, bool countOnly = false);
  /// The message for an error arrival of gradient name.
  std::string describe(Arrival arrival, const std::string& name) const;
  /// Bucket b is (being) submitted.
  void markSubmitted(size_t b) { submitted_[b] = true; }
  /// Whether bucket b was submitted this step.
  bool submitted(size_t b) const { return submitted_[b]; }
  /// The bucket of gradient i.
  size_t bucketOf(size_t i) const { return bucketOf_[i]; }
  /// Passes counted for some gradient this step.
  bool anyCounted() const;
  /// A new step: every count and submission forgotten.
  void reset();
  /// Changes passesPerStep (>= 1) and forgets the counts.
  void setPassesPerStep(int passes);
  /// Passes per step in force.
  int passesPerStep() const { return passesPerStep_; }

 private:
  int passesPerStep_ = 1;
  std::vector<size_t> bucketOf_;
  std::vector<int> passes_;      // per gradient
  std::vector<size_t> members_;  // per bucket
  std::vector<size_t> ready_;    // per bucket: members at passesPerStep
  std::vector<bool> submitted_;  // per bucket
};

}  // namespace kolo
