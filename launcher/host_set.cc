#include "host_set.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "options.h"

namespace kolo::launcher {

HostSet::HostSet(std::vector<double> cooldownRange) : cooldown_(std::move(cooldownRange)) {}

HostSet::Change HostSet::update(const std::vector<HostSlots>& listed) {
  Change change;
  std::map<std::string, int> now;
  for (const auto& h : listed) now[h.host] = h.slots;
  for (auto& [name, host] : hosts_) {
    auto it = now.find(name);
    int slots = it == now.end() ? 0 : it->second;
    if (slots < host.slots) change.removed.push_back(name);
    if (slots > host.slots) change.added.push_back(name);
    host.slots = slots;
  }
  for (const auto& h : listed) {
    if (hosts_.count(h.host) != 0) continue;
    hosts_[h.host].slots = h.slots;
    order_.push_back(h.host);
    change.added.push_back(h.host);
  }
  return change;
}

std::optional<std::chrono::milliseconds> HostSet::recordFailure(const std::string& host,
                                                                Clock::time_point now) {
  Host& h = hosts_[host];
  if (std::find(order_.begin(), order_.end(), host) == order_.end()) order_.push_back(host);
  ++h.failures;
  if (cooldown_.size() != 2) {
    h.forever = true;
    return std::nullopt;
  }
  double seconds = std::min(cooldown_[1], cooldown_[0] * std::pow(2.0, h.failures - 1));
  auto delay = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
  h.until = std::max(h.until, now + delay);
  return delay;
}

bool HostSet::listed(const std::string& host) const { return slots(host) > 0; }

int HostSet::slots(const std::string& host) const {
  auto it = hosts_.find(host);
  return it == hosts_.end() ? 0 : it->second.slots;
}

bool HostSet::blacklisted(const std::string& host, Clock::time_point now) const {
  auto it = hosts_.find(host);
  return it != hosts_.end() && (it->second.forever || now < it->second.until);
}

int HostSet::failures(const std::string& host) const {
  auto it = hosts_.find(host);
  return it == hosts_.end() ? 0 : it->second.failures;
}

bool HostSet::available(const std::string& host, Clock::time_point now) const {
  return listed(host) && !blacklisted(host, now);
}

int HostSet::availableSlots(Clock::time_point now) const {
  int total = 0;
  for (const auto& name : order_) {
    if (available(name, now)) total += slots(name);
  }
  return total;
}

std::optional<HostSet::Clock::time_point> HostSet::nextRecovery(Clock::time_point now) const {
  std::optional<Clock::time_point> next;
  for (const auto& [name, h] : hosts_) {
    if (h.slots == 0 || h.forever || h.until <= now) continue;
    if (!next || h.until < *next) next = h.until;
  }
  return next;
}

std::string HostSet::describe(Clock::time_point now) const {
  std::string out;
  for (const auto& name : order_) {
    const Host& h = hosts_.at(name);
    if (h.slots == 0) continue;
    if (!out.empty()) out += ", ";
    out += name + ":" + std::to_string(h.slots);
    if (h.forever) {
      out += " (blacklisted after " + std::to_string(h.failures) + " failure" +
             (h.failures == 1 ? "" : "s") + ")";
    } else if (now < h.until) {
      double left = std::chrono::duration<double>(h.until - now).count();
      out += " (blacklisted for " + formatNumber(std::ceil(left * 10) / 10) + " s more after " +
             std::to_string(h.failures) + " failure" + (h.failures == 1 ? "" : "s") + ")";
    }
  }
  return out.empty() ? "none" : out;
}

}  // namespace kolo::launcher
