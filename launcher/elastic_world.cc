// ElasticJob: worlds. When the current world is broken (a member died or
// left) or was told to re-form (a notice), wait until every live member has
// left it, then form the next one from the workers that are ready.
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <map>

#include "elastic_job.h"
#include "kolo/elastic_world.h"
#include "world_plan.h"

namespace kolo::launcher {
namespace {

std::string seconds(std::chrono::steady_clock::duration d) {
  double s = std::chrono::duration<double>(d).count();
  return formatNumber(static_cast<double>(static_cast<long long>(s * 100 + 0.5)) / 100) + " s";
}

std::string plural(size_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace

std::string ElasticJob::describe(const Worker& w) const {
  std::string text = "worker " + std::to_string(w.id) + " (";
  if (w.world > 0 && w.rank >= 0 && !w.waiting()) {
    text += "rank " + std::to_string(w.rank) + " of world " + std::to_string(w.world) + ", ";
  }
  return text + "host " + w.host + ")";
}

std::vector<ElasticJob::Worker*> ElasticJob::members() {
  std::vector<Worker*> out;
  for (auto& w : workers_) {
    if (w->alive() && world_ > 0 && w->world == world_) out.push_back(w.get());
  }
  return out;
}

void ElasticJob::fail(const Worker& w, const std::string& what, Clock::time_point now) {
  auto cooldown = hosts_.recordFailure(w.host, now);
  int failures = hosts_.failures(w.host);
  std::string blacklist =
      cooldown ? "for " + seconds(*cooldown) : std::string("for the rest of the job");
  say(describe(w) + " " + what + "; host " + w.host + " takes no new workers " + blacklist +
      " (failure " + std::to_string(failures) + ")");
}

void ElasticJob::onWorkerExit(Worker& w, Clock::time_point now) {
  const int status = w.process->status();
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  const std::string how = describeExit(status, w.remote);
  if (phase_ == Phase::kStopping || w.dropping) {
    if (options_.verbose) say(describe(w) + " " + how + " (stopped)");
    return;
  }
  const bool member = world_ > 0 && w.world == world_;
  if (phase_ == Phase::kFinishing) {
    if (!ok && exitCode_ == 0) {
      outcome_ = Outcome::kWorkerFailed;
      exitCode_ = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
      summary_ = describe(w) + " " + how + " after the job began finishing (" +
                 textOfFinish_ + ")" +
                 (w.waiting() && !w.reason.empty() ? "; it had left its world: " + w.reason : "");
    }
    return;
  }
  if (ok && (member || !everFormed_)) {
    enterFinishing(w, now);
    return;
  }
  if (ok) {
    fail(w, "exited with code 0 without being in a world", now);
    return;
  }
  fail(w, how, now);
  if (member && !w.waiting()) {
    // Its peers' engines name it at once instead of waiting for an answer.
    elastic::publishLostRank(*store_, world_, w.rank,
                             "worker " + std::to_string(w.id) + " on host " + w.host + " " + how +
                                 " (seen by kolorun)");
  }
  if (member && !brokenAt_) brokenAt_ = now;
}

void ElasticJob::enterFinishing(const Worker& w, Clock::time_point now) {
  (void)now;
  phase_ = Phase::kFinishing;
  textOfFinish_ = describe(w) + " finished";
  try {
    store_->set(elastic::keys::kFinished, elastic::textValue(textOfFinish_));
  } catch (...) {
  }
  // Workers that are not training in the current world have nothing to do.
  for (auto& other : workers_) {
    if (other->alive() && !other->dropping && (other->world != world_ || world_ == 0)) {
      other->dropping = true;
      other->process->stop();
    }
  }
  if (options_.verbose) say(textOfFinish_ + "; waiting for the other workers to finish");
}

void ElasticJob::checkBelowMin(size_t have, Clock::time_point now, const std::string& what) {
  if (!belowMinSince_) belowMinSince_ = now;
  if (now - *belowMinSince_ < std::chrono::milliseconds(
                                  static_cast<long long>(options_.elasticTimeoutSeconds * 1000))) {
    return;
  }
  std::string line = "waited " + formatNumber(options_.elasticTimeoutSeconds) +
                     " s (--elastic-timeout) for " + what + " but had " + std::to_string(have);
  // "workers 0,2 on localhost, worker 5 on b"
  std::vector<std::pair<std::string, std::string>> byHost;
  for (const auto& w : workers_) {
    if (!w->alive() || w->dropping) continue;
    auto it = std::find_if(byHost.begin(), byHost.end(),
                           [&](const auto& h) { return h.first == w->host; });
    if (it == byHost.end()) it = byHost.insert(byHost.end(), {w->host, ""});
    it->second += (it->second.empty() ? "" : ",") + std::to_string(w->id);
  }
  if (!byHost.empty()) {
    line += " (";
    for (size_t i = 0; i < byHost.size(); ++i) {
      bool several = byHost[i].second.find(',') != std::string::npos;
      line += (i ? ", " : "") + std::string(several ? "workers " : "worker ") + byHost[i].second +
              " on " + byHost[i].first;
    }
    line += ")";
  }
  line += "; hosts: " + hosts_.describe(now) + "; stopped the job";
  stopEverything(Outcome::kTimeout, 124, line, now);
}

void ElasticJob::issueNotice(const std::string& why) {
  ++notice_;
  noticed_ = true;
  noticedAt_ = Clock::now();
  store_->set(elastic::keys::kNotice, elastic::textValue(std::to_string(notice_)));
  say("world " + std::to_string(world_) + " re-forms at its next commit: " + why);
}

void ElasticJob::manageWorld(Clock::time_point now) {
  if (world_ == 0) {
    // The first world: every worker started so far has announced itself.
    size_t ready = 0, pending = 0;
    for (const auto& w : workers_) {
      if (!w->alive() || w->dropping) continue;
      (w->waiting() ? ready : pending) += 1;
    }
    if (workers_.empty() || pending > 0) return;  // the start timeout bounds this
    if (ready >= static_cast<size_t>(options_.minNp)) {
      formWorld(now);
    } else {
      checkBelowMin(ready, now,
                    "at least " + std::to_string(options_.minNp) + " ready workers (--min-np " +
                        std::to_string(options_.minNp) + ")");
    }
    return;
  }

  std::vector<Worker*> current = members();
  bool anyLeft = static_cast<int>(current.size()) < worldSize_;
  for (Worker* w : current) anyLeft = anyLeft || w->waiting();
  if (anyLeft && !brokenAt_) brokenAt_ = now;

  if (brokenAt_ && now - *brokenAt_ > hangTimeout_) {
    for (Worker* w : current) {
      if (w->waiting() || w->dropping) continue;
      fail(*w,
           "did not leave world " + std::to_string(world_) + " within " + seconds(hangTimeout_) +
               " (KOLO_TIMEOUT) after it broke: hung; killed it",
           now);
      w->dropping = true;
      w->process->kill(SIGKILL);
    }
  }

  bool allLeft = true;
  for (Worker* w : current) allLeft = allLeft && (w->waiting() || w->dropping);
  if ((brokenAt_ || noticed_) && allLeft) {
    formWorld(now);
    return;
  }
  if (brokenAt_ || noticed_) return;

  // A healthy world: re-form it when ready workers can join or a member's
  // host is gone from discovery.
  std::vector<std::string> joining, gone;
  bool starting = false;  // started workers that have not announced themselves yet
  for (const auto& w : workers_) {
    if (!w->alive() || w->dropping) continue;
    starting = starting || w->readyAfter < 0;
    if (w->world == 0 && w->waiting() && worldSize_ < options_.maxNp) {
      joining.push_back(std::to_string(w->id));
    }
    if (w->world == world_ && !hosts_.listed(w->host) &&
        std::find(gone.begin(), gone.end(), w->host) == gone.end()) {
      gone.push_back(w->host);
    }
  }
  if (!gone.empty()) {
    std::string list;
    for (const auto& h : gone) list += (list.empty() ? "" : ", ") + h;
    issueNotice("host" + std::string(gone.size() == 1 ? " " : "s ") + list +
                " left the discovered hosts");
  } else if (!joining.empty() && !starting) {
    // All new workers at once (one re-formation, not one per worker); the
    // start timeout bounds the wait for the slow ones.
    std::string list;
    for (const auto& id : joining) list += (list.empty() ? "" : ",") + id;
    issueNotice("worker" + std::string(joining.size() == 1 ? " " : "s ") + list + " ready to join");
  }
}

void ElasticJob::formWorld(Clock::time_point now) {
  std::vector<WorldCandidate> candidates;
  size_t survivors = 0;
  for (const auto& w : workers_) {
    if (!w->alive() || w->dropping || !w->waiting()) continue;
    if (!hosts_.listed(w->host)) continue;  // its host is gone: it goes too
    bool survivor = world_ > 0 && w->world == world_;
    survivors += survivor ? 1 : 0;
    candidates.push_back({w->id, w->host, w->slot, survivor ? w->rank : -1});
  }
  if (world_ > 0 && survivors == 0) {
    stopEverything(Outcome::kFatal, 1,
                   "no worker of world " + std::to_string(world_) +
                       " is left, so no one holds the training state (" +
                       plural(candidates.size(), "new worker") + " waiting); stopped the job",
                   now);
    return;
  }
  if (candidates.size() < static_cast<size_t>(options_.minNp)) {
    checkBelowMin(candidates.size(), now,
                  "at least " + std::to_string(options_.minNp) + " ready workers (--min-np " +
                      std::to_string(options_.minNp) + ")");
    return;
  }
  if (world_ > 0 && options_.resetLimit && resets_ >= *options_.resetLimit) {
    stopEverything(Outcome::kFatal, 1,
                   "world " + std::to_string(world_) + " broke, but the job already re-formed " +
                       plural(static_cast<size_t>(resets_), "time") + " (--reset-limit " +
                       std::to_string(*options_.resetLimit) + "); stopped the job",
                   now);
    return;
  }
  belowMinSince_.reset();

  std::vector<PlannedMember> plan = planWorld(candidates, hosts_.order(), options_.maxNp);
  elastic::World record;
  record.version = world_ + 1;
  record.notice = notice_;
  std::map<int64_t, int> rankOf;
  for (const auto& m : plan) {
    const RankPlacement& p = m.placement;
    elastic::WorldMember member;
    member.worker = m.worker;
    member.host = p.host;
    member.identity = Identity{p.rank, p.size, p.localRank, p.localSize, p.crossRank, p.crossSize};
    record.members.push_back(member);
    rankOf[m.worker] = p.rank;
  }
  store_->set(elastic::keys::world(record.version), elastic::textValue(elastic::encodeWorld(record)));
  store_->set(elastic::keys::kWorld, elastic::textValue(std::to_string(record.version)));

  std::string workers, where;
  std::vector<std::pair<std::string, int>> perHost;
  for (const auto& m : plan) {
    workers += (workers.empty() ? "" : ",") + std::to_string(m.worker);
    if (perHost.empty() || perHost.back().first != m.placement.host) {
      perHost.push_back({m.placement.host, 0});
    }
    ++perHost.back().second;
  }
  for (const auto& [h, n] : perHost) where += (where.empty() ? "" : ",") + h + ":" + std::to_string(n);
  for (auto& w : workers_) {
    auto it = rankOf.find(w->id);
    if (it != rankOf.end()) {
      w->world = record.version;
      w->rank = it->second;
    } else if (w->alive() && !w->dropping && w->waiting() &&
               (!hosts_.listed(w->host) || w->world > 0)) {
      w->dropping = true;  // over --max-np, or its host is gone
      w->process->stop();
    }
  }
  std::string since;
  if (noticed_) {
    since = ", " + seconds(now - noticedAt_) + " after the notice";
  } else if (brokenAt_) {
    since = ", " + seconds(now - *brokenAt_) + " after world " + std::to_string(world_) + " broke";
  }
  say("world " + std::to_string(record.version) + ": " + plural(plan.size(), "rank") + " on " +
      where + " (workers " + workers + ")" + since);
  if (world_ > 0) ++resets_;
  world_ = record.version;
  worldSize_ = static_cast<int>(plan.size());
  noticed_ = false;
  brokenAt_.reset();
  everFormed_ = true;
}

}  // namespace kolo::launcher
