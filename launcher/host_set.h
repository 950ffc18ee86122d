// The elastic driver's view of the hosts: what discovery lists now, in the
// order hosts were first seen, and which hosts are blacklisted after their
// workers failed. Pure bookkeeping over a clock the caller passes in, so it
// is tested without processes.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hosts.h"

namespace kolo::launcher {

class HostSet {
 public:
  using Clock = std::chrono::steady_clock;

  // cooldownRange: {min, max} seconds (--blacklist-cooldown-range); empty:
  // a failed host is blacklisted for the rest of the job, as Horovod does.
  explicit HostSet(std::vector<double> cooldownRange = {});

  struct Change {
    std::vector<std::string> added;    // newly listed, or more slots than before
    std::vector<std::string> removed;  // no longer listed, or fewer slots
    bool any() const { return !added.empty() || !removed.empty(); }
  };
  // Replaces what discovery lists. Hosts keep the place they were first seen
  // at (older hosts get lower ranks).
  Change update(const std::vector<HostSlots>& listed);

  // A worker on host failed at now: one more failure; the host takes no new
  // workers for min(max, min * 2^(failures-1)) seconds, or ever again
  // without a cool-down range. Returns how long (nullopt: for good).
  std::optional<std::chrono::milliseconds> recordFailure(const std::string& host,
                                                         Clock::time_point now);

  bool listed(const std::string& host) const;
  int slots(const std::string& host) const;  // 0 when not listed
  bool blacklisted(const std::string& host, Clock::time_point now) const;
  int failures(const std::string& host) const;
  // Listed and not blacklisted: may take new workers.
  bool available(const std::string& host, Clock::time_point now) const;
  // Every host ever listed, in first-seen order.
  const std::vector<std::string>& order() const { return order_; }
  // Slots of the available hosts.
  int availableSlots(Clock::time_point now) const;
  // The next time a blacklisted, listed host becomes available again.
  std::optional<Clock::time_point> nextRecovery(Clock::time_point now) const;

  // "a:2, b:2 (blacklisted for 3 s more after 2 failures)" for messages.
  std::string describe(Clock::time_point now) const;

 private:
  struct Host {
    int slots = 0;  // 0: not listed now
    int failures = 0;
    bool forever = false;
    Clock::time_point until{};
  };

  std::vector<double> cooldown_;
  std::vector<std::string> order_;
  std::map<std::string, Host> hosts_;
};

}  // namespace kolo::launcher
