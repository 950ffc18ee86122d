#include "elastic_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <sstream>

namespace kolo::elastic::testing {
namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

// "KEY=VALUE KEY=VALUE ..." after the tag.
std::map<std::string, std::string> fields(const std::string& text) {
  std::map<std::string, std::string> out;
  std::stringstream in(text);
  std::string word;
  while (in >> word) {
    size_t eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

int64_t num(const std::map<std::string, std::string>& f, const char* key) {
  auto it = f.find(key);
  return it == f.end() ? -1 : std::stoll(it->second);
}

}  // namespace

ElasticLog ElasticLog::parse(const std::string& out, const std::string& err) {
  ElasticLog log;
  static const std::regex prefixed(R"(^\[\d+\]<stdout>:(\w+) (.*)$)");
  for (const auto& l : lines(out)) {
    std::smatch m;
    if (!std::regex_match(l, m, prefixed)) continue;
    const std::string tag = m[1];
    auto f = fields(m[2]);
    if (tag == "START") {
      log.pidOf[num(f, "worker")] = static_cast<int>(num(f, "pid"));
      log.hostOf[num(f, "worker")] = f["host"];
    } else if (tag == "WORLD") {
      log.worlds.push_back({num(f, "v"), num(f, "worker"), static_cast<int>(num(f, "rank")),
                            static_cast<int>(num(f, "size")), num(f, "epoch"), num(f, "batch"),
                            num(f, "processed"), num(f, "t")});
    } else if (tag == "BATCH") {
      BatchLine b{num(f, "v"), static_cast<int>(num(f, "rank")), num(f, "epoch"), num(f, "batch"),
                  {}};
      std::stringstream idx(f["idx"]);
      std::string i;
      while (std::getline(idx, i, ',')) {
        if (!i.empty()) b.idx.push_back(std::stoll(i));
      }
      log.batches.push_back(std::move(b));
    } else if (tag == "STEP") {
      log.steps.push_back({num(f, "v"), num(f, "worker"), static_cast<int>(num(f, "rank")),
                           num(f, "epoch"), num(f, "batch"), num(f, "t")});
    } else if (tag == "COMMIT") {
      log.commits.push_back({num(f, "v"), num(f, "worker"), num(f, "epoch"), num(f, "batch"),
                             num(f, "processed")});
    } else if (tag == "DONE") {
      log.done.push_back({num(f, "worker"), static_cast<int>(num(f, "rank")), num(f, "world"),
                          num(f, "epochs"), f["checksum"]});
    }
  }
  static const std::regex world(R"(^world (\d+): (\d+) ranks? on )");
  for (const auto& l : lines(err)) {
    if (l.rfind("kolorun: ", 0) != 0) continue;
    std::string text = l.substr(9);
    log.driver.push_back(text);
    std::smatch m;
    if (std::regex_search(text, m, world)) log.worldSize[std::stoll(m[1])] = std::stoi(m[2]);
  }
  return log;
}

int64_t ElasticLog::lastWorld() const {
  return worldSize.empty() ? 0 : worldSize.rbegin()->first;
}

int64_t ElasticLog::firstStepTime(int64_t world) const {
  int64_t first = -1;
  for (const auto& s : steps) {
    if (s.world == world && (first < 0 || s.t < first)) first = s.t;
  }
  return first;
}

std::vector<int64_t> ElasticLog::workersOf(int64_t world) const {
  std::vector<int64_t> out;
  for (const auto& w : worlds) {
    if (w.world == world) out.push_back(w.worker);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void expectTrainedConsistently(const ElasticLog& log, int epochs, int64_t samples) {
  // The last world finished training, identically everywhere.
  const int64_t last = log.lastWorld();
  ASSERT_GT(last, 0) << "no world was formed";
  ASSERT_EQ(static_cast<int>(log.done.size()), log.worldSize.at(last))
      << "every rank of the last world prints DONE";
  for (const auto& d : log.done) {
    EXPECT_EQ(d.world, last);
    EXPECT_EQ(d.epochs, epochs);
    EXPECT_EQ(d.checksum, log.done.front().checksum)
        << "worker " << d.worker << " (rank " << d.rank << ") ended with other parameters";
  }

  // Every rank of a world entered it with rank 0's counters.
  std::map<int64_t, std::vector<WorldEntry>> entries;
  for (const auto& w : log.worlds) entries[w.world].push_back(w);
  for (const auto& [v, list] : entries) {
    auto size = log.worldSize.find(v);
    ASSERT_NE(size, log.worldSize.end()) << "WORLD v=" << v << " was never formed by kolorun";
    EXPECT_EQ(static_cast<int>(list.size()), size->second) << "world " << v;
    for (const auto& e : list) {
      EXPECT_EQ(e.size, size->second);
      EXPECT_EQ(e.epoch, list.front().epoch) << "world " << v << ", worker " << e.worker;
      EXPECT_EQ(e.batch, list.front().batch) << "world " << v << ", worker " << e.worker;
      EXPECT_EQ(e.processed, list.front().processed) << "world " << v << ", worker " << e.worker;
    }
  }

  // Counters continue from the commit that world v+1's rank 0 made in v.
  for (const auto& [v, list] : entries) {
    if (v == 1) continue;
    auto zero = std::find_if(list.begin(), list.end(), [](const WorldEntry& e) { return e.rank == 0; });
    ASSERT_NE(zero, list.end());
    const int64_t x = zero->worker;
    int64_t epoch = -1, batch = -1, processed = -1;
    bool found = false;
    // Its entry into the previous world it was in, then its commits there.
    int64_t prev = 0;
    for (const auto& e : log.worlds) {
      if (e.worker == x && e.world < v) prev = std::max(prev, e.world);
    }
    for (const auto& e : log.worlds) {
      if (e.worker == x && e.world == prev) {
        std::tie(epoch, batch, processed) = std::make_tuple(e.epoch, e.batch, e.processed);
        found = true;
      }
    }
    for (const auto& c : log.commits) {
      if (c.worker == x && c.world == prev) {
        std::tie(epoch, batch, processed) = std::make_tuple(c.epoch, c.batch, c.processed);
      }
    }
    ASSERT_TRUE(found) << "rank 0 of world " << v << " (worker " << x
                       << ") was not in an earlier world";
    EXPECT_EQ(zero->epoch, epoch) << "world " << v << " did not start at worker " << x
                                  << "'s last commit in world " << prev;
    EXPECT_EQ(zero->batch, batch) << "world " << v;
    EXPECT_EQ(zero->processed, processed) << "world " << v;
  }

  // The steps that counted: for each (epoch, batch) the last world that
  // completed it; its samples are what every rank's BATCH line of that world
  // and step said.
  std::map<std::pair<int64_t, int64_t>, int64_t> counted;  // (epoch, batch) -> world
  for (const auto& s : log.steps) {
    auto& w = counted[{s.epoch, s.batch}];
    w = std::max(w, s.world);
  }
  for (int64_t e = 0; e < epochs; ++e) {
    std::map<int64_t, int> seen;  // index -> times
    int64_t lastBatch = -1;
    int64_t lastBatchWorld = 0;
    for (const auto& [key, world] : counted) {
      if (key.first != e) continue;
      if (key.second > lastBatch) {
        lastBatch = key.second;
        lastBatchWorld = world;
      }
    }
    ASSERT_GE(lastBatch, 0) << "epoch " << e << " has no steps";
    for (int64_t b = 0; b <= lastBatch; ++b) {
      EXPECT_TRUE(counted.count({e, b})) << "epoch " << e << ": step " << b << " is missing";
    }
    std::set<int64_t> lastBatchIdx;
    for (const auto& b : log.batches) {
      auto it = counted.find({b.epoch, b.batch});
      if (b.epoch != e || it == counted.end() || it->second != b.world) continue;
      for (int64_t i : b.idx) {
        ++seen[i];
        if (b.batch == lastBatch) lastBatchIdx.insert(i);
      }
    }
    int extra = 0;
    for (int64_t i = 0; i < samples; ++i) {
      auto it = seen.find(i);
      EXPECT_NE(it, seen.end()) << "epoch " << e << ": sample " << i << " was never processed";
      if (it == seen.end()) continue;
      extra += it->second - 1;
      if (it->second > 1) {
        EXPECT_TRUE(lastBatchIdx.count(i))
            << "epoch " << e << ": sample " << i << " was processed " << it->second
            << " times, not as padding of the epoch's last step";
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), samples) << "epoch " << e << ": unknown samples";
    const int padLimit = log.worldSize.count(lastBatchWorld) ? log.worldSize.at(lastBatchWorld) : 1;
    EXPECT_LT(extra, padLimit) << "epoch " << e << ": " << extra
                               << " repeated samples, more than the padding of the last step";
  }
}

}  // namespace kolo::elastic::testing
