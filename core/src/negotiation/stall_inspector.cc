#include "negotiation/stall_inspector.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <utility>

#include "common/ranks_text.h"
#include "kolo/error.h"

namespace kolo {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxListed = 20;  // tensors named in one message

std::string rankList(const std::vector<int>& ranks) { return "[" + joinRanks(ranks) + "]"; }

std::string secondsText(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

struct Stall {
  std::string name;
  std::string what;  // PendingAge::what of the ranks that submitted it
  std::vector<int> submitted;
  std::vector<int> missing;
  int64_t ageMs = 0;
};

// Calls of another API (PendingAge::what) are named by their sequence name
// and described; kolo's own tensors by their name.
bool allCalls(const std::vector<Stall>& stalls) {
  return std::all_of(stalls.begin(), stalls.end(), [](const Stall& s) { return !s.what.empty(); });
}

std::string describe(const std::vector<Stall>& stalls) {
  std::string s;
  for (size_t i = 0; i < stalls.size() && i < kMaxListed; ++i) {
    const Stall& st = stalls[i];
    if (st.what.empty()) {
      s += (i ? "; " : "") + std::string("'") + st.name + "' missing on ranks " +
           rankList(st.missing) + " (submitted by ranks " + rankList(st.submitted) +
           ", waiting " + secondsText(st.ageMs) + ")";
    } else {
      s += (i ? "; " : "") + st.name + ": " + st.what + ", not called by ranks " +
           rankList(st.missing) + " (called by ranks " + rankList(st.submitted) +
           ", waiting " + secondsText(st.ageMs) + ")";
    }
  }
  if (stalls.size() > kMaxListed) {
    s += "; and " + std::to_string(stalls.size() - kMaxListed) + " more";
  }
  return s;
}

}  // namespace

StallInspector::StallInspector(const Config& config, const Identity& identity,
                               std::vector<int> ranks, std::string label)
    : checkTime_(config.stallCheckTime),
      shutdownTime_(config.stallShutdownTime),
      rank_(identity.rank),
      ranks_(std::move(ranks)),
      label_(std::move(label)),
      shutdownSetting_(config.stallShutdownSetting),
      lastCheck_(Clock::now()) {
  std::chrono::milliseconds shortest{0};
  for (auto t : {checkTime_, shutdownTime_}) {
    if (t.count() > 0 && (shortest.count() == 0 || t < shortest)) shortest = t;
  }
  if (shortest.count() > 0) {
    // Checking four times per period bounds the detection delay to a
    // quarter of it; a round is one small gather and broadcast.
    period_ = std::clamp<std::chrono::milliseconds>(shortest / 4, std::chrono::milliseconds(5),
                                                    std::chrono::milliseconds(10000));
  }
}

bool StallInspector::checkDue(Clock::time_point now) {
  if (!enabled() || rank_ != 0 || now - lastCheck_ < period_) return false;
  lastCheck_ = now;
  return true;
}

StallReport StallInspector::runRound(comm::ControlChannel& channel,
                                     const std::vector<PendingAge>& mine,
                                     const std::vector<bool>& joined) {
  auto gathered = channel.gatherv(wire::encode(mine), 0);
  std::vector<char> report;
  if (rank_ == 0) {
    std::vector<std::vector<PendingAge>> perRank;
    perRank.reserve(gathered.size());
    for (const auto& bytes : gathered) perRank.push_back(wire::decodePending(bytes));
    report = wire::encode(analyze(perRank, joined));
  }
  channel.broadcast(report, 0);
  return wire::decodeReport(report);
}

StallReport StallInspector::analyze(const std::vector<std::vector<PendingAge>>& perRank,
                                    const std::vector<bool>& joined) {
  const int size = static_cast<int>(perRank.size());
  std::map<std::string, std::vector<int64_t>> ages;  // name -> age per rank (-1: absent)
  std::map<std::string, std::string> whats;          // name -> PendingAge::what
  for (int r = 0; r < size; ++r) {
    for (const auto& p : perRank[r]) {
      auto& v = ages.try_emplace(p.name, std::vector<int64_t>(size, -1)).first->second;
      v[r] = p.ageMs;
      if (!p.what.empty()) whats.try_emplace(p.name, p.what);
    }
  }
  // fail: past the shutdown time. stalled: past the check time (or, with no
  // check time, the shutdown time); once one tensor fails the job, the
  // message names all of these: tensors stalled in one deadlock start
  // waiting moments apart, and the error shows the whole of it.
  std::vector<Stall> warn, fail, stalled;
  std::set<std::string> stalledNow;
  for (const auto& [name, perRankAge] : ages) {
    Stall st;
    st.name = name;
    if (auto w = whats.find(name); w != whats.end()) st.what = w->second;
    for (int r = 0; r < size; ++r) {
      const int jobRank = ranks_.empty() ? r : ranks_.at(r);
      if (perRankAge[r] >= 0) {
        st.submitted.push_back(jobRank);
        st.ageMs = std::max(st.ageMs, perRankAge[r]);
      } else if (r >= static_cast<int>(joined.size()) || !joined[r]) {
        st.missing.push_back(jobRank);
      }
    }
    if (st.missing.empty()) continue;
    if (checkTime_.count() > 0 && st.ageMs >= checkTime_.count()) {
      stalledNow.insert(name);
      if (warned_.insert(name).second) warn.push_back(st);
    }
    const bool failing = shutdownTime_.count() > 0 && st.ageMs >= shutdownTime_.count();
    if (failing) fail.push_back(st);
    if (failing || (checkTime_.count() > 0 && st.ageMs >= checkTime_.count())) stalled.push_back(st);
  }
  // A tensor that stopped stalling may be warned about again later.
  for (auto it = warned_.begin(); it != warned_.end();) {
    it = stalledNow.count(*it) ? std::next(it) : warned_.erase(it);
  }
  const std::string prefix = label_.empty() ? "" : label_ + ": ";
  StallReport report;
  if (!warn.empty()) {
    if (allCalls(warn)) {
      report.warning = prefix + "stall: " + std::to_string(warn.size()) +
                       " call(s) made by some ranks but not by others for more than " +
                       secondsText(checkTime_.count()) +
                       " (KOLO_STALL_CHECK_TIME): " + describe(warn) +
                       ". Every rank must make the same collective calls in the same order; a "
                       "rank that has not called may be hung, slower, or on a different code "
                       "path.";
    } else {
      report.warning = prefix + "stall: " + std::to_string(warn.size()) +
                       " tensor(s) submitted by some ranks but not by others for more than " +
                       secondsText(checkTime_.count()) +
                       " (KOLO_STALL_CHECK_TIME): " + describe(warn) +
                       ". Every rank must submit the same tensors under the same names; a "
                       "missing rank may be hung, slower, or on a different code path.";
    }
  }
  if (!fail.empty()) {
    report.shutdown = true;
    report.shutdownMessage = prefix + "stalled for more than " +
                             secondsText(shutdownTime_.count()) + " (" + shutdownSetting_ +
                             "), shutting down: " + describe(stalled);
  }
  return report;
}

}  // namespace kolo
