#include "comm/shm/control_channel.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "comm/shm/copy.h"
#include "kolo/error.h"

namespace kolo::comm::shm {
namespace {

constexpr size_t kLine = 64;

size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

}  // namespace

ControlChannel::ControlChannel(std::unique_ptr<Group> group)
    : group_(std::move(group)), halfBytes_(group_->slotBytes() / 2), piece_(halfBytes_ - kLine) {
  KOLO_ENFORCE(halfBytes_ > 2 * kLine && piece_ % sizeof(uint64_t) == 0,
               "shm: control slot too small");
}

void ControlChannel::begin(const char* what) {
  group_->checkUsable(what);
  group_->waitAll(slotFree_, what);
}

void ControlChannel::end() {
  group_->publish();
  slotFree_ = group_->phase();
}

void ControlChannel::checkRoot(int root, const char* what) const {
  KOLO_CHECK_ARG(root >= 0 && root < size(), std::string("shm control ") + what + ": root " +
                                                 std::to_string(root) + " out of range for size " +
                                                 std::to_string(size()));
}

uint64_t ControlChannel::announcedLength(int r, const char* what) {
  uint64_t length = 0;
  std::memcpy(&length, half(r, 0), sizeof length);
  if (length > kMaxControlMessageBytes) {
    group_->fail(Internal(std::string("shm control ") + what + ": " + group_->rankName(r) +
                          " announced " + std::to_string(length) + " bytes (limit " +
                          std::to_string(kMaxControlMessageBytes) + ")"));
  }
  return length;
}

void ControlChannel::allreduceBits(std::vector<uint64_t>& bits, bool isAnd) {
  const char* what = isAnd ? "allreduce (and)" : "allreduce (or)";
  group_->checkUsable(what);
  if (size() == 1 || bits.empty()) return;
  const int me = rank();
  const size_t words = halfBytes_ / sizeof(uint64_t);
  const size_t steps = ceilDiv(bits.size(), words);
  begin(what);
  for (size_t s = 0; s < steps; ++s) {
    const uint32_t h = s % 2;
    const size_t first = s * words;
    const size_t count = std::min(words, bits.size() - first);
    copyShared(half(me, h), bits.data() + first, count * sizeof(uint64_t));
    group_->publish();
    group_->waitAll(group_->phase(), what);
    for (int k = 0; k < size(); ++k) {
      if (k == me) continue;
      const auto* theirs = reinterpret_cast<const uint64_t*>(half(k, h));
      uint64_t* ours = bits.data() + first;
      if (isAnd) {
        for (size_t i = 0; i < count; ++i) ours[i] &= theirs[i];
      } else {
        for (size_t i = 0; i < count; ++i) ours[i] |= theirs[i];
      }
    }
  }
  end();
}

// Step s: every rank puts piece s of its message in its half s%2 (step 0
// also the length, in the half's first line); after the step's
// synchronisation the root copies the pieces out.
std::vector<std::vector<char>> ControlChannel::gatherv(const std::vector<char>& mine, int root) {
  const char* what = "gatherv";
  checkRoot(root, what);
  group_->checkUsable(what);
  const int n = size();
  const int me = rank();
  std::vector<std::vector<char>> out;
  if (me == root) out.resize(n);
  if (n == 1) {
    out[0] = mine;
    return out;
  }
  begin(what);
  std::vector<uint64_t> lengths(n, 0);
  size_t steps = 1;
  for (size_t s = 0; s < steps; ++s) {
    const uint32_t h = s % 2;
    const size_t from = std::min(mine.size(), s * piece_);
    const size_t length = std::min(mine.size(), from + piece_) - from;
    if (s == 0) {
      const uint64_t total = mine.size();
      std::memcpy(half(me, 0), &total, sizeof total);
    }
    if (length > 0) copyShared(half(me, h) + kLine, mine.data() + from, length);
    group_->publish();
    group_->waitAll(group_->phase(), what);
    if (s == 0) {
      for (int k = 0; k < n; ++k) {
        lengths[k] = k == me ? mine.size() : announcedLength(k, what);
        steps = std::max(steps, ceilDiv(lengths[k], piece_));
        if (me == root) out[k].resize(lengths[k]);
      }
    }
    if (me != root) continue;
    for (int k = 0; k < n; ++k) {
      if (k == me) continue;
      const size_t at = std::min<size_t>(lengths[k], s * piece_);
      const size_t take = std::min<size_t>(lengths[k], at + piece_) - at;
      if (take > 0) copyShared(out[k].data() + at, half(k, h) + kLine, take);
    }
  }
  if (me == root) out[me] = mine;
  end();
  return out;
}

void ControlChannel::broadcast(std::vector<char>& bytes, int root) {
  const char* what = "broadcast";
  checkRoot(root, what);
  group_->checkUsable(what);
  if (size() == 1) return;
  const int me = rank();
  begin(what);
  const uint32_t base = group_->phase();
  uint64_t total = bytes.size();
  size_t steps = 1;
  for (size_t s = 0; s < steps; ++s) {
    const uint32_t h = s % 2;
    if (me == root) {
      // Half h last held step s-2; its readers finished it before their
      // phase of step s-1.
      if (s >= 2) group_->waitAll(base + static_cast<uint32_t>(s), what);
      if (s == 0) {
        std::memcpy(half(me, 0), &total, sizeof total);
        steps = std::max<size_t>(1, ceilDiv(total, piece_));
      }
      const size_t from = s * piece_;
      const size_t length = std::min<size_t>(total - std::min<size_t>(total, from), piece_);
      if (length > 0) copyShared(half(me, h) + kLine, bytes.data() + from, length);
      group_->publish();
    } else {
      group_->publish();
      group_->waitFor(root, group_->phase(), what);
      if (s == 0) {
        total = announcedLength(root, what);
        bytes.resize(total);
        steps = std::max<size_t>(1, ceilDiv(total, piece_));
      }
      const size_t from = s * piece_;
      const size_t length = std::min<size_t>(total - std::min<size_t>(total, from), piece_);
      if (length > 0) copyShared(bytes.data() + from, half(root, h) + kLine, length);
    }
  }
  end();
}

void ControlChannel::barrier() {
  group_->checkUsable("barrier");
  if (size() == 1) return;
  group_->publish();
  group_->waitAll(group_->phase(), "barrier");
}

}  // namespace kolo::comm::shm
