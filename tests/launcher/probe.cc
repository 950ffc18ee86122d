// A worker for kolorun's process tests. Runs its arguments as a sequence of
// commands, in order:
//   env                  print every KOLO_* variable as NAME=VALUE, then PID,
//                        PGID and NETNS (inode of its network namespace)
//   out TEXT / err TEXT  print a line on stdout / stderr
//   partial TEXT         print TEXT on stdout without a newline
//   lines N              print N numbered lines fast through a small stdio
//                        buffer (writes end mid-line on purpose)
//   sleep S              sleep S seconds (fractions allowed)
//   exit CODE            exit now
//   exit-if-rank R CODE  exit when KOLO_RANK == R
//   sleep-if-rank R S    sleep when KOLO_RANK == R
//   kill-self SIG        raise a signal
//   ignore-term          ignore SIGTERM from now on
//   spawn-child S        fork a child (same process group) that sleeps S s
//   arrive               connect to the job's store and set kolo/arrived/RANK
//   arrive-unless-rank R[,R...]  the same, except on the listed ranks
//   exchange             set probe/RANK in the store, wait for every rank's
//                        key, print EXCHANGE_OK and the values
//   wrong-secret         connect with a wrong secret; print WRONG_SECRET=...
//   tag TOKEN            nothing (marks the process for /proc scans)
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "kolo/tcp_store.h"

extern char** environ;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

int rank() { return std::atoi(env("KOLO_RANK").c_str()); }

std::shared_ptr<kolo::Store> connect(const std::string& secret) {
  kolo::TcpStoreOptions options;
  options.connectTimeout = std::chrono::seconds(10);
  return kolo::makeTcpStore(env("KOLO_RENDEZVOUS_ADDR"),
                            static_cast<uint16_t>(std::atoi(env("KOLO_RENDEZVOUS_PORT").c_str())),
                            secret, options);
}

void arrive() {
  auto store = connect(env("KOLO_SECRET_KEY"));
  std::string host = env("KOLO_HOSTNAME");
  store->set("kolo/arrived/" + std::to_string(rank()), std::vector<char>(host.begin(), host.end()));
  std::printf("ARRIVED %d\n", rank());
}

void exchange() {
  auto store = connect(env("KOLO_SECRET_KEY"));
  std::string mine = env("KOLO_HOSTNAME") + "/" + std::to_string(rank());
  store->set("probe/" + std::to_string(rank()), std::vector<char>(mine.begin(), mine.end()));
  int size = std::atoi(env("KOLO_SIZE").c_str());
  std::string all;
  for (int r = 0; r < size; ++r) {
    auto v = store->get("probe/" + std::to_string(r), std::chrono::seconds(20));
    all += " " + std::string(v.begin(), v.end());
  }
  std::printf("EXCHANGE_OK%s\n", all.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto arg = [&](size_t i) -> std::string {
    if (i >= args.size()) {
      std::fprintf(stderr, "probe: missing argument for '%s'\n", args[i - 1].c_str());
      std::exit(100);
    }
    return args[i];
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& cmd = args[i];
    if (cmd == "env") {
      for (char** e = environ; *e != nullptr; ++e) {
        if (std::strncmp(*e, "KOLO_", 5) == 0) std::printf("%s\n", *e);
      }
      struct stat st {};
      stat("/proc/self/ns/net", &st);
      std::printf("PID=%d\nPGID=%d\nNETNS=%lu\n", getpid(), getpgrp(),
                  static_cast<unsigned long>(st.st_ino));
    } else if (cmd == "out") {
      std::printf("%s\n", arg(++i).c_str());
    } else if (cmd == "err") {
      std::fprintf(stderr, "%s\n", arg(++i).c_str());
    } else if (cmd == "partial") {
      std::printf("%s", arg(++i).c_str());
    } else if (cmd == "lines") {
      long n = std::atol(arg(++i).c_str());
      static char buf[4000];  // not a multiple of the line length
      std::setvbuf(stdout, buf, _IOFBF, sizeof(buf));
      for (long k = 0; k < n; ++k) {
        std::printf("r%d line %ld %s end\n", rank(), k, "abcdefghijklmnopqrstuvwxyz0123456789");
      }
      std::fflush(stdout);
      std::setvbuf(stdout, nullptr, _IOLBF, 0);
    } else if (cmd == "sleep") {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg(++i).c_str())));
    } else if (cmd == "exit") {
      std::fflush(nullptr);
      std::_Exit(std::atoi(arg(++i).c_str()));
    } else if (cmd == "exit-if-rank") {
      int r = std::atoi(arg(++i).c_str());
      int code = std::atoi(arg(++i).c_str());
      if (r == rank()) {
        std::fflush(nullptr);
        std::_Exit(code);
      }
    } else if (cmd == "sleep-if-rank") {
      int r = std::atoi(arg(++i).c_str());
      double s = std::atof(arg(++i).c_str());
      if (r == rank()) std::this_thread::sleep_for(std::chrono::duration<double>(s));
    } else if (cmd == "kill-self") {
      std::fflush(nullptr);
      raise(std::atoi(arg(++i).c_str()));
    } else if (cmd == "ignore-term") {
      signal(SIGTERM, SIG_IGN);
    } else if (cmd == "spawn-child") {
      double s = std::atof(arg(++i).c_str());
      std::fflush(nullptr);
      pid_t child = fork();
      if (child == 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(s));
        std::_Exit(0);
      }
      std::printf("CHILD=%d\n", child);
    } else if (cmd == "arrive") {
      arrive();
    } else if (cmd == "arrive-unless-rank") {
      std::string list = "," + arg(++i) + ",";
      if (list.find("," + std::to_string(rank()) + ",") == std::string::npos) arrive();
    } else if (cmd == "exchange") {
      exchange();
    } else if (cmd == "wrong-secret") {
      try {
        auto store = connect(env("KOLO_SECRET_KEY") + "-wrong");
        store->set("probe/intruder", {'x'});
        std::printf("WRONG_SECRET=accepted\n");
      } catch (const std::exception& e) {
        std::printf("WRONG_SECRET=refused (%s)\n", e.what());
      }
    } else if (cmd == "tag") {
      ++i;
    } else {
      std::fprintf(stderr, "probe: unknown command '%s'\n", cmd.c_str());
      return 100;
    }
    std::fflush(nullptr);
  }
  return 0;
}
