// What an elastic job printed (elastic_worker.cc / elastic_worker.py lines,
// behind kolorun's "[id]<stdout>:" prefix, and kolorun's own lines), and the
// checks every elastic scenario makes of it.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace kolo::elastic::testing {

struct WorldEntry {  // WORLD
  int64_t world = 0, worker = 0;
  int rank = 0, size = 0;
  int64_t epoch = 0, batch = 0, processed = 0, t = 0;
};
struct BatchLine {  // BATCH
  int64_t world = 0;
  int rank = 0;
  int64_t epoch = 0, batch = 0;
  std::vector<int64_t> idx;
};
struct StepLine {  // STEP
  int64_t world = 0, worker = 0;
  int rank = 0;
  int64_t epoch = 0, batch = 0, t = 0;
};
struct CommitLine {  // COMMIT
  int64_t world = 0, worker = 0, epoch = 0, batch = 0, processed = 0;
};
struct DoneLine {  // DONE
  int64_t worker = 0;
  int rank = 0;
  int64_t world = 0, epochs = 0;
  std::string checksum;
};

struct ElasticLog {
  std::map<int64_t, int> pidOf;            // START: worker -> pid
  std::map<int64_t, std::string> hostOf;   // START: worker -> host
  std::vector<WorldEntry> worlds;
  std::vector<BatchLine> batches;
  std::vector<StepLine> steps;
  std::vector<CommitLine> commits;
  std::vector<DoneLine> done;
  std::vector<std::string> driver;  // kolorun's lines, without "kolorun: "
  std::map<int64_t, int> worldSize;  // from "kolorun: world N: K ranks"

  static ElasticLog parse(const std::string& out, const std::string& err);

  // The largest world version the driver formed.
  int64_t lastWorld() const;
  // The first STEP of world v: its time (ms), or -1.
  int64_t firstStepTime(int64_t world) const;
  // Workers whose START line is in the log and that are alive in world v's
  // WORLD lines.
  std::vector<int64_t> workersOf(int64_t world) const;
};

// The checks of every scenario that trains to the end; each failure is a
// gtest failure naming what is wrong. epochs/samples: the worker's flags.
//  - every rank of the last world printed DONE with the same checksum and
//    all epochs;
//  - in every world, every rank entered with the same epoch, batch and
//    processed count (sync gave everyone rank 0's state);
//  - counters continue from the commit: world v+1 starts where its rank 0
//    last committed (or entered) in world v;
//  - per epoch, the steps that counted (the last world that completed each
//    (epoch, batch)) processed every sample at least once, and twice only
//    as padding at the epoch's end (fewer than the world size).
void expectTrainedConsistently(const ElasticLog& log, int epochs, int64_t samples);

}  // namespace kolo::elastic::testing
