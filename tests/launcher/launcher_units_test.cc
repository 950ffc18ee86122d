// kolorun's pure logic: hosts, rank placement, flags, environment, remote
// shell commands and output splitting. No processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "hosts.h"
#include "kolo/build_config.h"
#include "options.h"
#include "tuning_env.h"
#include "output.h"
#include "remote.h"
#include "usage_error.h"
#include "worker_env.h"

namespace kolo::launcher {
namespace {

std::string valueOf(const EnvList& env, const std::string& name) {
  std::string value = "<unset>";
  for (const auto& [n, v] : env) {
    if (n == name) value = v;
  }
  return value;
}

Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kolorun");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  auto parsed = parseCommandLine(static_cast<int>(argv.size()), argv.data());
  EXPECT_TRUE(parsed.options.has_value());
  return parsed.options.value_or(Options{});
}

std::string parseError(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(HostList, ParsesHostsAndSlots) {
  auto hosts = parseHostList("a:2,b.example.com:4,c,user@d:1,[fe80::1]:3,10.0.0.2:8");
  ASSERT_EQ(hosts.size(), 6u);
  EXPECT_EQ(hosts[0].host, "a");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].host, "b.example.com");
  EXPECT_EQ(hosts[2].slots, 1);
  EXPECT_EQ(hosts[3].host, "user@d");
  EXPECT_EQ(hosts[4].host, "[fe80::1]");
  EXPECT_EQ(hosts[4].slots, 3);
  EXPECT_EQ(hosts[5].slots, 8);
}

TEST(HostList, RejectsMalformedEntriesWithTheFix) {
  for (const char* bad : {"a:0", "a:-1", "a:x", "a:2,", ",a", "a::2", "a:2,a:3", "a b:2",
                          "[fe80::1", "a;rm:2", ""}) {
    EXPECT_THROW(parseHostList(bad), UsageError) << bad;
  }
  try {
    parseHostList("a:2,a:3");
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("listed twice"), std::string::npos) << e.what();
  }
}

TEST(Hostfile, ParsesSlotsCommentsAndBlankLines) {
  std::istringstream in("# cluster\n\nnode1 slots=4\n  node2   slots=2  # fast\nnode3\n");
  auto hosts = parseHostfile(in, "hosts.txt");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "node1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_EQ(hosts[2].slots, 1);
}

TEST(Hostfile, ErrorsNameFileAndLine) {
  std::istringstream in("node1 slots=4\nnode2 slots=two\n");
  try {
    parseHostfile(in, "hosts.txt");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("hosts.txt:2:"), std::string::npos) << e.what();
  }
  std::istringstream extra("node1 cpus=4\n");
  EXPECT_THROW(parseHostfile(extra, "f"), UsageError);
  std::istringstream empty("# nothing\n");
  EXPECT_THROW(parseHostfile(empty, "f"), UsageError);
  EXPECT_THROW(readHostfile("/nonexistent/kolo-hostfile"), UsageError);
}

TEST(AssignRanks, FillsHostsInOrderWithLocalAndCrossRanks) {
  auto ranks = assignRanks({{"a", 2}, {"b", 2}, {"c", 4}}, 5);
  ASSERT_EQ(ranks.size(), 5u);
  const char* hosts[] = {"a", "a", "b", "b", "c"};
  int local[] = {0, 1, 0, 1, 0};
  int localSize[] = {2, 2, 2, 2, 1};
  int cross[] = {0, 0, 1, 1, 2};
  int crossSize[] = {3, 2, 3, 2, 3};
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(ranks[r].rank, r);
    EXPECT_EQ(ranks[r].size, 5);
    EXPECT_EQ(ranks[r].host, hosts[r]) << r;
    EXPECT_EQ(ranks[r].localRank, local[r]) << r;
    EXPECT_EQ(ranks[r].localSize, localSize[r]) << r;
    EXPECT_EQ(ranks[r].crossRank, cross[r]) << r;
    EXPECT_EQ(ranks[r].crossSize, crossSize[r]) << r;
  }
}

TEST(AssignRanks, CrossRankCountsOnlyHostsWithThatLocalRank) {
  // -H a:1,b:2: b's local rank 1 has no peer on a, so it is cross rank 0 of
  // 1 (it was cross rank 1 of 1, which init() refuses).
  auto ranks = assignRanks({{"a", 1}, {"b", 2}}, 3);
  EXPECT_EQ(ranks[1].crossRank, 1);
  EXPECT_EQ(ranks[1].crossSize, 2);
  EXPECT_EQ(ranks[2].localRank, 1);
  EXPECT_EQ(ranks[2].crossRank, 0);
  EXPECT_EQ(ranks[2].crossSize, 1);
}

TEST(AssignRanks, UnusedHostsAreNotPartOfTheJob) {
  auto ranks = assignRanks({{"a", 4}, {"b", 4}}, 3);
  for (const auto& r : ranks) {
    EXPECT_EQ(r.host, "a");
    EXPECT_EQ(r.crossSize, 1);
    EXPECT_EQ(r.localSize, 3);
  }
}

TEST(AssignRanks, TooFewSlotsIsAnErrorWithTheFix) {
  try {
    assignRanks({{"a", 2}, {"b", 2}}, 5);
    FAIL();
  } catch (const UsageError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("-np 5"), std::string::npos) << m;
    EXPECT_NE(m.find("a:2,b:2"), std::string::npos) << m;
  }
}

TEST(LocalHost, RecognisesThisMachineWithoutDns) {
  LocalNames local;
  local.names = {"node7", "node7.cluster"};
  local.addresses = {"10.1.2.3"};
  for (const char* h : {"localhost", "LOCALHOST", "127.0.0.1", "127.1.2.3", "[::1]", "node7",
                        "node7.cluster", "10.1.2.3", "me@node7"}) {
    EXPECT_TRUE(isLocalHost(h, local)) << h;
  }
  for (const char* h : {"node8", "10.1.2.4", "127.example.com", "10.77.0.2"}) {
    EXPECT_FALSE(isLocalHost(h, local)) << h;
  }
}

TEST(CommandLine, HorovodStyleFlagsAndTheProgramsOwnArguments) {
  Options o = parse({"-np", "4", "-H", "a:2,b:2", "--verbose", "python3", "train.py", "-np", "9",
                     "--verbose", "-x", "Y"});
  EXPECT_EQ(o.np, 4);
  EXPECT_EQ(o.hosts, "a:2,b:2");
  EXPECT_TRUE(o.verbose);
  std::vector<std::string> cmd = {"python3", "train.py", "-np", "9", "--verbose", "-x", "Y"};
  EXPECT_EQ(o.command, cmd);

  Options o2 = parse({"-np=2", "-x", "A=1", "-x", "B", "--", "prog", "--help"});
  EXPECT_EQ(o2.np, 2);
  EXPECT_EQ(o2.exportEnv, (std::vector<std::string>{"A=1", "B"}));
  EXPECT_EQ(o2.command, (std::vector<std::string>{"prog", "--help"}));
}

TEST(CommandLine, FlagsBeforeMinusNpDoNotSwallowIt) {
  Options o = parse({"--verbose", "--gloo", "--autotune", "-np", "3", "--prefix-timestamp", "prog"});
  EXPECT_EQ(o.np, 3);
  EXPECT_TRUE(o.verbose && o.gloo && o.autotune && o.prefixTimestamp);
  EXPECT_EQ(o.command, (std::vector<std::string>{"prog"}));
}

TEST(CommandLine, NormalizeOnlyTouchesKolorunsOwnFlags) {
  auto out = normalizeArgs({"-np", "2", "--start-timeout", "-np", "prog", "-np", "3"},
                           {"--start-timeout"});
  EXPECT_EQ(out, (std::vector<std::string>{"--num-proc", "2", "--start-timeout", "-np", "prog",
                                           "-np", "3"}));
}

TEST(CommandLine, BadInputIsOneLineWithAHint) {
  EXPECT_NE(parseError({"-np", "2"}).find("no program"), std::string::npos);
  EXPECT_NE(parseError({"prog"}).find("-np"), std::string::npos);
  EXPECT_NE(parseError({"-np", "2", "--bogus-value", "prog"}).find("--help"), std::string::npos);
  if (!KOLO_WITH_MPI) {
    EXPECT_NE(parseError({"-np", "2", "--mpi", "prog"}).find("--mpi is not available"),
              std::string::npos);
  }
  EXPECT_NE(parseError({"-np", "2", "--bogus", "prog"}).find("--bogus"), std::string::npos);
  EXPECT_NE(parseError({"-np", "2", "--timeout-seconds", "0", "prog"}).find("positive"),
            std::string::npos);
  EXPECT_NE(parseError({"-np", "2", "-x", "1BAD", "prog"}).find("NAME"), std::string::npos);
  EXPECT_NE(parseError({"-np", "2", "-H", "a:1", "--hostfile", "f", "prog"}).find("xcludes"),
            std::string::npos);
  for (const auto& e : {parseError({"-np", "2"}), parseError({"--log-level", "loud", "prog"})}) {
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// Every number flag refuses a value out of its range, a non-number and a
// number too large for it in one line that names the flag as users write it
// and what it accepts (not CLI11's "Value 0 not in range 0.000000 to
// 1797693134862315708...", the largest double written out).
TEST(CommandLine, NumberFlagsSayWhatTheyAccept) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-np", "0"}, "-np must be at least 1, got 0"},
      {{"-np", "-1"}, "-np must be at least 1, got -1"},
      {{"--num-proc", "abc"}, "-np must be a whole number, got abc"},
      {{"-np", "2.5"}, "-np must be a whole number, got 2.5"},
      {{"-np", "99999999999"}, "-np must be at most 2147483647, got 99999999999"},
      {{"-np", "99999999999999999999999"}, "-np must be at most 2147483647"},
      {{"--min-np", "0"}, "--min-np must be at least 1, got 0"},
      {{"--max-np", "-4"}, "--max-np must be at least 1, got -4"},
      {{"--slots", "0"}, "--slots must be at least 1, got 0"},
      {{"--reset-limit", "-1"}, "--reset-limit must be zero or more, got -1"},
      {{"--elastic-timeout", "0"}, "--elastic-timeout must be positive, got 0"},
      {{"--elastic-timeout", "inf"}, "--elastic-timeout must be a finite number, got inf"},
      {{"--discovery-interval", "-1"}, "--discovery-interval must be positive, got -1"},
      {{"--blacklist-cooldown-range", "soon", "5"},
       "--blacklist-cooldown-range must be a number, got soon"},
      {{"--port", "0"}, "--port must be from 1 to 65535, got 0"},
      {{"--port", "70000"}, "--port must be from 1 to 65535, got 70000"},
      {{"-p", "-5"}, "-p/--ssh-port must be from 1 to 65535, got -5"},
      {{"--start-timeout", "-1"}, "--start-timeout must be zero or more, got -1"},
      {{"--start-timeout", "nan"}, "--start-timeout must be a finite number, got nan"},
      {{"--start-timeout", "1e400"}, "--start-timeout must be a finite number, got 1e400"},
      {{"--start-timeout", "later"}, "--start-timeout must be a number, got later"},
      {{"--grace-seconds", "-2"}, "--grace-seconds must be zero or more, got -2"},
      {{"--fusion-threshold-mb", "big"}, "--fusion-threshold-mb must be a number, got big"},
      {{"--cycle-time-ms", "-1"}, "--cycle-time-ms must be zero or more, got -1"},
      {{"--cache-capacity", "-1"}, "--cache-capacity must be zero or more, got -1"},
      {{"--cache-capacity", "1e20"}, "--cache-capacity must be a whole number, got 1e20"},
      {{"--autotune-warmup-samples", "99999999999"},
       "--autotune-warmup-samples must be at most 2147483647"},
      {{"--autotune-bayes-opt-max-samples", "x"},
       "--autotune-bayes-opt-max-samples must be a whole number, got x"},
      {{"--stall-check-warning-time-seconds", "x"},
       "--stall-check-warning-time-seconds must be a number, got x"},
      {{"--stall-check-shutdown-time-seconds", "-1"},
       "--stall-check-shutdown-time-seconds must be zero or more, got -1"},
      {{"--timeout-seconds", "soon"}, "--timeout-seconds must be a number, got soon"},
      {{"--gloo-timeout-seconds", "-1"}, "--gloo-timeout-seconds must be positive, got -1"},
      {{"--num-nccl-streams", "1.5"}, "--num-nccl-streams must be a whole number, got 1.5"},
      {{"--thread-affinity", "99999999999"}, "--thread-affinity must be at most 2147483647"},
  };
  for (const auto& [flags, expect] : cases) {
    std::vector<std::string> args = flags;
    if (flags.front() != "-np" && flags.front() != "--num-proc") {
      args.insert(args.begin(), {"-np", "2"});
    }
    args.push_back("prog");
    const std::string e = parseError(args);
    EXPECT_EQ(e.rfind(expect, 0), 0u) << flags.front() << ": " << e;
    EXPECT_LT(e.size(), 120u) << e;
    EXPECT_EQ(e.find("not in range"), std::string::npos) << e;
  }
  // Decimal, as horovodrun's int() reads it (CLI11 alone reads 010 as octal 8).
  EXPECT_EQ(parse({"-np", "010", "prog"}).np, 10);
  EXPECT_EQ(parse({"--port", "+8080", "-np", "1", "prog"}).port, 8080);
}

TEST(TuningEnv, FlagsMapToKoloVariables) {
  Options o = parse({"-np", "1", "--fusion-threshold-mb", "64", "--cycle-time-ms", "2.5",
                     "--cache-capacity", "0", "--timeline-filename", "/tmp/t.json", "--autotune",
                     "--autotune-log-file", "/tmp/a.csv", "--log-level", "debug",
                     "--stall-check-warning-time-seconds", "30",
                     "--stall-check-shutdown-time-seconds", "120", "--timeout-seconds", "7",
                     "--network-interface", "eth1", "--gloo", "prog"});
  EnvList env = tuningEnv(o);
  EXPECT_EQ(valueOf(env, "KOLO_FUSION_THRESHOLD"), "67108864");
  EXPECT_EQ(valueOf(env, "KOLO_CYCLE_TIME"), "2.5");
  EXPECT_EQ(valueOf(env, "KOLO_CACHE_CAPACITY"), "0");
  EXPECT_EQ(valueOf(env, "KOLO_TIMELINE"), "/tmp/t.json");
  EXPECT_EQ(valueOf(env, "KOLO_AUTOTUNE"), "1");
  EXPECT_EQ(valueOf(env, "KOLO_AUTOTUNE_LOG"), "/tmp/a.csv");
  EXPECT_EQ(valueOf(env, "KOLO_LOG_LEVEL"), "debug");
  EXPECT_EQ(valueOf(env, "KOLO_STALL_CHECK_TIME"), "30");
  EXPECT_EQ(valueOf(env, "KOLO_STALL_SHUTDOWN_TIME"), "120");
  EXPECT_EQ(valueOf(env, "KOLO_TIMEOUT"), "7");
  EXPECT_EQ(valueOf(env, "KOLO_IFACE"), "eth1");
  EXPECT_EQ(valueOf(env, "KOLO_CONTROLLER"), "gloo");
  EXPECT_EQ(valueOf(env, "KOLO_CPU_OPERATIONS"), "gloo");
  EXPECT_TRUE(tuningEnv(parse({"-np", "1", "prog"})).empty());
}

TEST(WorkerEnv, IdentityOverridesInheritedAndExportsApply) {
  Options o = parse({"-np", "2", "-x", "A=1", "-x", "HOME", "--cycle-time-ms", "3", "prog"});
  RankPlacement p;
  p.rank = 1;
  p.size = 2;
  p.localRank = 1;
  p.localSize = 2;
  p.host = "localhost";
  RendezvousInfo rv{"127.0.0.1", 4242, "s3cret"};
  std::vector<std::string> inherited = {"HOME=/root", "KOLO_RANK=7", "PATH=/bin", "KOLO_USER=x"};
  EnvList env = jobEnv(o, inherited, p, rv);
  EXPECT_EQ(valueOf(env, "A"), "1");
  EXPECT_EQ(valueOf(env, "HOME"), "/root");
  EXPECT_EQ(valueOf(env, "KOLO_CYCLE_TIME"), "3");
  EXPECT_EQ(valueOf(env, "KOLO_RANK"), "1");
  EXPECT_EQ(valueOf(env, "KOLO_LOCAL_SIZE"), "2");
  EXPECT_EQ(valueOf(env, "KOLO_RENDEZVOUS_PORT"), "4242");
  EXPECT_EQ(valueOf(env, "KOLO_SECRET_KEY"), "s3cret");

  auto local = localWorkerEnv(inherited, env);
  EXPECT_EQ(std::count(local.begin(), local.end(), "KOLO_RANK=1"), 1);
  EXPECT_EQ(std::count(local.begin(), local.end(), "KOLO_RANK=7"), 0);
  EXPECT_EQ(std::count(local.begin(), local.end(), "PATH=/bin"), 1);

  EnvList remote = remoteWorkerEnv(inherited, env);
  EXPECT_EQ(valueOf(remote, "PATH"), "<unset>");  // the remote host keeps its own
  EXPECT_EQ(valueOf(remote, "KOLO_USER"), "x");
  EXPECT_EQ(valueOf(remote, "KOLO_RANK"), "1");
  EXPECT_EQ(valueOf(env, "MASTER_PORT"), "<unset>");  // no torch port chosen
}

TEST(WorkerEnv, TorchsEnvVariablesNameRankZerosStoreAndDashXWins) {
  RankPlacement p;
  p.rank = 3;
  p.size = 4;
  p.localRank = 1;
  p.localSize = 2;
  p.crossRank = 1;
  p.crossSize = 2;
  p.host = "b";
  RendezvousInfo rv{"10.0.0.1", 4242, "s3cret", "a", 29500};
  EnvList env = jobEnv(parse({"-np", "4", "prog"}), {}, p, rv);
  EXPECT_EQ(valueOf(env, "RANK"), "3");
  EXPECT_EQ(valueOf(env, "WORLD_SIZE"), "4");
  EXPECT_EQ(valueOf(env, "LOCAL_RANK"), "1");
  EXPECT_EQ(valueOf(env, "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(valueOf(env, "GROUP_RANK"), "1");
  EXPECT_EQ(valueOf(env, "MASTER_ADDR"), "a");
  EXPECT_EQ(valueOf(env, "MASTER_PORT"), "29500");
  EnvList chosen = jobEnv(parse({"-np", "4", "-x", "MASTER_PORT=1234", "prog"}), {}, p, rv);
  EXPECT_EQ(valueOf(chosen, "MASTER_PORT"), "1234");
  // kolo's own variables still say where kolo's store is.
  EXPECT_EQ(valueOf(chosen, "KOLO_RENDEZVOUS_PORT"), "4242");
}

TEST(Remote, ShellQuotingAndRshSplitting) {
  EXPECT_EQ(shellQuote("a b"), "'a b'");
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(splitCommandLine("ssh -o 'Proxy Command=x y' \"a\\\"b\" c\\ d"),
            (std::vector<std::string>{"ssh", "-o", "Proxy Command=x y", "a\"b", "c d"}));
  EXPECT_THROW(splitCommandLine("ssh 'open"), UsageError);
}

TEST(Remote, SshArgvPassesPortAndIdentityButNoSecret) {
  Options o = parse({"-np", "1", "-p", "2222", "-i", "/k/id", "prog"});
  auto argv = remoteArgv(remoteShellFor(o), "node2");
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(argv.front(), "ssh");
  auto has = [&](const std::string& s) { return std::find(argv.begin(), argv.end(), s) != argv.end(); };
  EXPECT_TRUE(has("BatchMode=yes"));
  EXPECT_TRUE(has("2222"));
  EXPECT_TRUE(has("/k/id"));
  EXPECT_EQ(argv[argv.size() - 2], "node2");
  EXPECT_EQ(argv.back().rfind("sh -c ", 0), 0u);

  Options r = parse({"-np", "1", "--rsh", "ip netns exec", "prog"});
  auto rargv = remoteArgv(remoteShellFor(r), "h1");
  EXPECT_EQ((std::vector<std::string>(rargv.begin(), rargv.begin() + 4)),
            (std::vector<std::string>{"ip", "netns", "exec", "h1"}));
}

TEST(Remote, ScriptExportsEnvKeepsCwdAndEndsWithTheEndLine) {
  RemoteLaunch l;
  l.host = "h1";
  l.cwd = "/work dir";
  l.env = {{"KOLO_SECRET_KEY", "abc'def"}, {"KOLO_RANK", "3"}};
  l.command = {"python3", "my script.py", "--x=$HOME"};
  std::string s = remoteScript(l);
  EXPECT_NE(s.find("export KOLO_SECRET_KEY='abc'\\''def'\n"), std::string::npos) << s;
  EXPECT_NE(s.find("cd '/work dir'"), std::string::npos) << s;
  EXPECT_NE(s.find("'python3' 'my script.py' '--x=$HOME'"), std::string::npos) << s;
  EXPECT_NE(s.find(kRemoteStartedMarker), std::string::npos);
  EXPECT_EQ(s.substr(s.size() - std::string(kRemoteScriptEnd).size() - 1),
            std::string(kRemoteScriptEnd) + "\n");
}

TEST(Output, SplitterHandlesPartialAndLongLines) {
  LineSplitter split(8);
  std::vector<std::string> lines;
  auto collect = [&](std::string_view l) { lines.emplace_back(l); };
  split.feed("ab", collect);
  split.feed("c\nde", collect);
  split.feed("f\n\n0123456789abcdef\nxyz", collect);
  split.finish(collect);
  EXPECT_EQ(lines, (std::vector<std::string>{"abc", "def", "", "01234567", "89abcdef", "xyz"}));
}

TEST(Output, PrefixIsHorovodStyle) {
  EXPECT_EQ(linePrefix(3, StreamKind::kStdout, false), "[3]<stdout>:");
  EXPECT_EQ(linePrefix(12, StreamKind::kStderr, false), "[12]<stderr>:");
  std::string ts = linePrefix(0, StreamKind::kStdout, true);
  EXPECT_EQ(ts.substr(ts.size() - 12), "[0]<stdout>:");
  EXPECT_EQ(ts[4], '-');  // 2024-05-01 12:00:00.123 [0]<stdout>:
}

}  // namespace
}  // namespace kolo::launcher
