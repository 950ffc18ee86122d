#include "rendezvous/peer_failure.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "common/ranks_text.h"

namespace kolo {
namespace {

std::string abortKey(int rank) { return "abort/" + std::to_string(rank); }
constexpr char kAnyAbortKey[] = "abort/any";  // set with every abortKey
std::string aliveKey(int rank) { return "alive-after-failure/" + std::to_string(rank); }
std::string presenceKey(int rank) { return "present/" + std::to_string(rank); }

}  // namespace

void publishPresence(Store& store, int rank) { store.set(presenceKey(rank), {'1'}); }

void publishAbort(Store& store, int rank, const std::string& message) {
  try {
    store.set(abortKey(rank), std::vector<char>(message.begin(), message.end()));
    store.set(kAnyAbortKey, {'1'});  // what publishedAbort reads first
  } catch (...) {
  }
}

namespace {

// "rank r failed: <the message r published>"; r's abort key exists.
std::string abortReport(Store& store, int r) {
  const std::vector<char> bytes = store.get(abortKey(r), std::chrono::seconds(1));
  return "rank " + std::to_string(r) + " failed: " + std::string(bytes.begin(), bytes.end());
}

}  // namespace

Status publishedAbort(Store& store, int size) {
  // One read while no rank aborted, whatever the job's size.
  if (!store.check(kAnyAbortKey)) return Status::Ok();
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(abortKey(r));
  const std::vector<bool> aborted = store.checkMany(keys);
  for (int r = 0; r < size; ++r) {
    if (!aborted[r]) continue;
    try {
      return Status{ErrorCode::kPeerFailure, abortReport(store, r)};
    } catch (const std::exception&) {
      return Status{ErrorCode::kPeerFailure,
                    "rank " + std::to_string(r) + " failed (its message could not be read)"};
    }
  }
  return Status::Ok();
}

Status diagnoseFailure(const std::exception& error, Store& store, const Identity& identity,
                       std::chrono::milliseconds timeout) {
  const std::string cause = error.what();
  if (identity.size == 1) return Status{ErrorCode::kPeerFailure, cause};
  const auto* local = dynamic_cast<const Error*>(&error);
  if (local != nullptr && (local->code() == ErrorCode::kInternal ||
                           local->code() == ErrorCode::kInvalidArgument)) {
    // This rank's own failure (a device fault, a tensor on the wrong GPU):
    // nothing to find out about the peers. Leave the message for them, so
    // each names it when its connection to this rank closes.
    publishAbort(store, identity.rank, cause);
    try {
      store.set(aliveKey(identity.rank), {'1'});
    } catch (...) {
    }
    return Status{local->code(), cause};
  }
  std::vector<int> missing;
  std::vector<int> unknown;  // never shared the store with us
  std::string messages;
  try {
    store.set(aliveKey(identity.rank), {'1'});
    const auto* kolo = dynamic_cast<const Error*>(&error);
    const bool closed = kolo != nullptr && kolo->code() == ErrorCode::kPeerFailure;
    auto limit = std::min<std::chrono::milliseconds>(
        timeout, closed ? std::chrono::seconds(2) : std::chrono::seconds(5));
    auto deadline = std::chrono::steady_clock::now() + limit;
    // A few requests per poll, whatever the job's size: every rank of a
    // large job diagnoses at once.
    std::vector<int> others;
    std::vector<std::string> keys;
    for (int r = 0; r < identity.size; ++r) {
      if (r == identity.rank) continue;
      others.push_back(r);
      keys.push_back(presenceKey(r));
    }
    const std::vector<bool> present = store.checkMany(keys);
    std::vector<int> pending;  // present: waiting for alive or aborted
    for (size_t i = 0; i < others.size(); ++i) {
      (present[i] ? pending : unknown).push_back(others[i]);
    }
    std::vector<int> aborted;
    while (!pending.empty()) {
      keys.clear();
      for (int r : pending) {
        keys.push_back(abortKey(r));
        keys.push_back(aliveKey(r));
      }
      const std::vector<bool> seen = store.checkMany(keys);
      std::vector<int> still;
      for (size_t i = 0; i < pending.size(); ++i) {
        if (seen[2 * i]) {
          aborted.push_back(pending[i]);
        } else if (!seen[2 * i + 1]) {
          still.push_back(pending[i]);
        }
      }
      pending = std::move(still);
      if (pending.empty() || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    missing = pending;
    std::sort(aborted.begin(), aborted.end());
    for (int r : aborted) messages += (messages.empty() ? "" : "; ") + abortReport(store, r);
  } catch (const std::exception& e) {
    return Status{ErrorCode::kPeerFailure,
                  "lost contact with the other ranks and with the rendezvous store (" +
                      std::string(e.what()) + "); first error: " + cause};
  }
  if (!messages.empty()) return Status{ErrorCode::kPeerFailure, messages};
  if (missing.empty() && static_cast<int>(unknown.size()) == identity.size - 1) {
    return Status{ErrorCode::kPeerFailure,
                  cause +
                      " (which rank failed cannot be told: the ranks share no rendezvous "
                      "store; start the job with kolorun --mpi, or under mpirun set MASTER_ADDR "
                      "and MASTER_PORT, to get it named)"};
  }
  if (!missing.empty()) {
    return Status{ErrorCode::kPeerFailure,
                  ranksPhrase(missing) + " stopped responding (exited, crashed or hung): " + cause};
  }
  return Status{ErrorCode::kPeerFailure, cause};
}

}  // namespace kolo
