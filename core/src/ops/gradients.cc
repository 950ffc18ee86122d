// The neutral half of every DistributedOptimizer (kolo/gradients.h).
#include "kolo/gradients.h"

#include <algorithm>
#include <unordered_set>

#include "kolo/error.h"

namespace kolo {

const char* toString(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "none";
    case Compression::kFP16:
      return "fp16";
    case Compression::kBF16:
      return "bf16";
  }
  return "unknown-compression";
}

DataType wireType(DataType dtype, Compression compression) {
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) return dtype;
  switch (compression) {
    case Compression::kFP16:
      return DataType::kFloat16;
    case Compression::kBF16:
      return DataType::kBFloat16;
    case Compression::kNone:
      break;
  }
  return dtype;
}

void checkGradientOptions(const GradientOptions& o, const std::string& who) {
  KOLO_CHECK_ARG(o.backwardPassesPerStep >= 1, who +
                                                   ": backward_passes_per_step must be >= 1, got " +
                                                   std::to_string(o.backwardPassesPerStep));
  KOLO_CHECK_ARG(o.op == ReduceOp::kAverage || o.op == ReduceOp::kSum || o.op == ReduceOp::kAdasum,
                 who + ": op must be Average, Sum or Adasum, got " + toString(o.op));
  KOLO_CHECK_ARG(o.gradientPredivideFactor > 0.0,
                 who + ": gradient_predivide_factor must be > 0, got " +
                     std::to_string(o.gradientPredivideFactor));
  KOLO_CHECK_ARG(
      o.gradientPredivideFactor == 1.0 || o.op == ReduceOp::kAverage,
      who + ": gradient_predivide_factor needs op == Average (got op " + toString(o.op) + ")");
  KOLO_CHECK_ARG(o.numGroups >= 0,
                 who + ": num_groups must be >= 0, got " + std::to_string(o.numGroups));
  KOLO_CHECK_ARG(o.numGroups == 0 || !o.explicitGroups,
                 who + ": set num_groups or groups, not both");
  KOLO_CHECK_ARG(o.bucketBytes >= 0,
                 who + ": bucket_bytes must be >= 0, got " + std::to_string(o.bucketBytes));
}

GradientScales gradientScales(ReduceOp op, double predivideFactor) {
  GradientScales s;
  if (op == ReduceOp::kAverage && predivideFactor != 1.0) {
    s.prescale = 1.0 / predivideFactor;
    s.postscale = predivideFactor;
  }
  return s;
}

std::vector<std::vector<size_t>> splitIntoGroups(size_t count, int numGroups) {
  std::vector<std::vector<size_t>> groups;
  if (numGroups <= 0 || count == 0) return groups;
  const size_t n = std::min(count, static_cast<size_t>(numGroups));
  const size_t base = count / n;
  const size_t longer = count % n;  // the first `longer` groups get one more
  size_t next = 0;
  for (size_t g = 0; g < n; ++g) {
    groups.emplace_back();
    for (size_t k = 0; k < base + (g < longer ? 1 : 0); ++k) groups.back().push_back(next++);
  }
  return groups;
}

std::vector<GradientBucket> planBuckets(const std::vector<GradientInfo>& gradients,
                                        const BucketPlan& plan, const std::string& who) {
  std::unordered_set<std::string> names;
  for (const auto& g : gradients) {
    KOLO_CHECK_ARG(!g.name.empty(), who + ": a parameter has an empty name");
    KOLO_CHECK_ARG(names.insert(g.name).second,
                   who + ": parameter name '" + g.name + "' appears twice");
  }
  std::vector<GradientBucket> buckets;
  // Appends buckets of members, split where device or wire dtype change
  // and (cap >= 0) at cap bytes.
  auto add = [&](const std::vector<size_t>& members, int64_t cap) {
    GradientBucket* b = nullptr;
    int64_t bytes = 0;
    for (size_t i : members) {
      const GradientInfo& g = gradients[i];
      const DataType wire = wireType(g.dtype, plan.compression);
      const int64_t size = g.numel * static_cast<int64_t>(elementSize(wire));
      if (b == nullptr || b->wire != wire || b->device != g.device ||
          b->deviceIndex != g.deviceIndex || (cap >= 0 && bytes + size > cap)) {
        buckets.emplace_back();
        b = &buckets.back();
        b->wire = wire;
        b->device = g.device;
        b->deviceIndex = g.deviceIndex;
        bytes = 0;
      }
      b->members.push_back(i);
      b->offsets.push_back(b->numel);
      b->numel += g.numel;
      bytes += size;
    }
  };
  std::vector<bool> grouped(gradients.size(), false);
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    for (size_t i : plan.groups[k]) {
      KOLO_CHECK_ARG(i < gradients.size(), who + ": group " + std::to_string(k) +
                                               " names parameter " + std::to_string(i) + " of " +
                                               std::to_string(gradients.size()));
      KOLO_CHECK_ARG(!grouped[i],
                     who + ": parameter '" + gradients[i].name + "' is in more than one group");
      grouped[i] = true;
    }
    add(plan.groups[k], -1);
  }
  std::vector<size_t> rest;
  for (size_t i = gradients.size(); i-- > 0;) {
    if (!grouped[i]) rest.push_back(i);
  }
  add(rest, plan.bucketBytes);
  for (auto& b : buckets) {
    b.name = plan.namePrefix + gradients[b.members.front()].name;
    if (b.members.size() > 1) b.name += "+" + std::to_string(b.members.size() - 1);
  }
  return buckets;
}

GradientSteps::GradientSteps(const std::vector<GradientBucket>& buckets, size_t gradients,
                             int passesPerStep)
    : passesPerStep_(passesPerStep),
      bucketOf_(gradients, 0),
      passes_(gradients, 0),
      members_(buckets.size(), 0),
      ready_(buckets.size(), 0),
      submitted_(buckets.size(), false) {
  KOLO_CHECK_ARG(passesPerStep >= 1,
                 "backward_passes_per_step must be >= 1, got " + std::to_string(passesPerStep));
  for (size_t b = 0; b < buckets.size(); ++b) {
    members_[b] = buckets[b].members.size();
    for (size_t i : buckets[b].members) bucketOf_[i] = b;
  }
}

GradientSteps::Arrival GradientSteps::accumulated(size_t i, bool countOnly) {
  if (passes_[i] >= passesPerStep_) return Arrival::kTooManyPasses;
  if (++passes_[i] < passesPerStep_ || countOnly) return Arrival::kCounted;
  const size_t b = bucketOf_[i];
  if (submitted_[b]) return Arrival::kLate;
  return ++ready_[b] == members_[b] ? Arrival::kBucketReady : Arrival::kCounted;
}

std::string GradientSteps::describe(Arrival arrival, const std::string& name) const {
  const std::string n = std::to_string(passesPerStep_);
  switch (arrival) {
    case Arrival::kTooManyPasses:
      return "the gradient of '" + name + "' was computed more than backward_passes_per_step (" +
             n + ") times before step() or synchronize(); call step() after every " + n +
             " backward pass(es) or increase backward_passes_per_step to accumulate locally";
    case Arrival::kLate:
      return "the gradient of '" + name +
             "' arrived after synchronize() had submitted its bucket without it; call step() "
             "or zero_grad() before the next backward pass";
    case Arrival::kCounted:
    case Arrival::kBucketReady:
      break;
  }
  return std::string();
}

bool GradientSteps::anyCounted() const {
  return std::any_of(passes_.begin(), passes_.end(), [](int p) { return p > 0; });
}

void GradientSteps::reset() {
  std::fill(passes_.begin(), passes_.end(), 0);
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(submitted_.begin(), submitted_.end(), false);
}

void GradientSteps::setPassesPerStep(int passes) {
  KOLO_CHECK_ARG(passes >= 1,
                 "backward_passes_per_step must be >= 1, got " + std::to_string(passes));
  passesPerStep_ = passes;
  std::fill(passes_.begin(), passes_.end(), 0);
  std::fill(ready_.begin(), ready_.end(), 0);
}

}  // namespace kolo
