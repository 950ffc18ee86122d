// Running the elastic test workers (C++ and Python) under kolorun, steering
// the run from the test (kills, stops, host changes) and reading its log.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "elastic_log.h"
#include "launcher_test_util.h"

namespace kolo::elastic::testing {

using launcher::testing::Running;
using std::chrono::milliseconds;
using std::chrono::seconds;

enum class Lang { kCpp, kPython };

inline const char* langName(Lang lang) { return lang == Lang::kCpp ? "cpp" : "python"; }

inline int64_t realtimeMs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Whether the Python package was built (the Python cases skip otherwise).
inline bool havePython() { return std::string(KOLO_TEST_PYTHON).size() > 0; }

// PROGRAM ARGS... for kolorun: the worker of `lang` with the data set.
inline std::vector<std::string> workerCommand(Lang lang, const std::vector<std::string>& args) {
  std::vector<std::string> cmd;
  if (lang == Lang::kCpp) {
    cmd = {KOLO_ELASTIC_WORKER_CPP, "--data", KOLO_ELASTIC_DATA_CPP};
  } else {
    cmd = {KOLO_TEST_PYTHON, KOLO_ELASTIC_WORKER_PY, "--data", KOLO_ELASTIC_DATA_GZ};
  }
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

// A file the test rewrites and a discovery script that prints it.
class HostsFile {
 public:
  explicit HostsFile(const std::string& dir) : path_(dir + "/hosts") { set(""); }
  void set(const std::string& hosts) {
    std::ofstream(path_ + ".tmp") << hosts;
    std::filesystem::rename(path_ + ".tmp", path_);
  }
  std::string script() const { return "cat " + path_; }

 private:
  std::string path_;
};

// A scratch directory removed with its contents.
class Scratch {
 public:
  Scratch() {
    std::string templ = std::string(getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp") +
                        "/kolo-elastic-XXXXXX";
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~Scratch() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One elastic job: kolorun FLAGS... WORKER --tag TOKEN WORKER-ARGS...
class ElasticRun {
 public:
  ElasticRun(Lang lang, const std::vector<std::string>& kolorunFlags,
             const std::vector<std::string>& workerArgs, std::string token)
      : token_(std::move(token)) {
    std::vector<std::string> argv = {launcher::testing::kolorunPath()};
    argv.insert(argv.end(), kolorunFlags.begin(), kolorunFlags.end());
    if (lang == Lang::kPython) {
      argv.insert(argv.end(), {"-x", "PYTHONPATH"});
    }
    std::vector<std::string> args = {"--tag", token_};
    args.insert(args.end(), workerArgs.begin(), workerArgs.end());
    for (auto& a : workerCommand(lang, args)) argv.push_back(a);
    std::vector<std::string> env = {std::string("PYTHONPATH=") + KOLO_TEST_PYTHONPATH};
    run_ = std::make_unique<Running>(argv, env);
  }

  Running& running() { return *run_; }

  // Waits until rank 0 of `world` completed step (epoch, batch).
  bool waitForStep(int64_t world, int64_t epoch, int64_t batch, milliseconds timeout) {
    std::regex line("STEP v=" + std::to_string(world) + " worker=\\d+ rank=0 epoch=" +
                    std::to_string(epoch) + " batch=" + std::to_string(batch) + " ");
    return run_->waitUntil([&](const std::string& out) { return std::regex_search(out, line); },
                           timeout);
  }
  // Waits until kolorun formed world `world` and its rank 0 took a step.
  bool waitForWorld(int64_t world, milliseconds timeout) {
    std::regex line("STEP v=" + std::to_string(world) + " worker=\\d+ rank=0 ");
    return run_->waitUntil([&](const std::string& out) { return std::regex_search(out, line); },
                           timeout);
  }

  // The pid a worker printed in its START line (-1 if none yet).
  int pidOf(int64_t worker) const {
    std::smatch m;
    std::regex line("START worker=" + std::to_string(worker) + " pid=(\\d+)");
    const std::string& out = run_->out();
    return std::regex_search(out, m, line) ? std::stoi(m[1]) : -1;
  }
  // Signals a worker; returns the wall-clock time just before.
  int64_t signalWorker(int64_t worker, int sig) {
    int pid = pidOf(worker);
    int64_t t = realtimeMs();
    if (pid > 0) kill(pid, sig);
    return t;
  }

  launcher::testing::RunResult finish(milliseconds timeout) { return run_->wait(timeout); }
  const std::string& token() const { return token_; }

 private:
  std::string token_;
  std::unique_ptr<Running> run_;
};

// "[elastic] ..." lines: the measurements the tests report.
inline void report(const std::string& line) {
  std::fprintf(stderr, "[elastic] %s\n", line.c_str());
}

}  // namespace kolo::elastic::testing
