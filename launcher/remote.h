// How a rank starts on another host: the remote shell's argv (no secret in
// it) and the script sent on its standard input (the environment, secret
// included, then the program). Pure functions over strings.
#pragma once

#include <string>
#include <vector>

#include "options.h"

namespace kolo::launcher {

// The first line a remote script prints once the program is about to start;
// kolorun swallows it and treats a remote shell that ends before it as a
// rank that could not be started.
constexpr const char* kRemoteStartedMarker = "kolorun-remote-started";
// The line that ends the script on the remote shell's stdin; what follows it
// is never sent, the stream just stays open until kolorun stops the rank.
constexpr const char* kRemoteScriptEnd = "kolorun-script-end";

// Single-quotes text for a POSIX shell ('it'\''s').
std::string shellQuote(const std::string& text);

// Splits --rsh "CMD" into words the way a shell would for plain words,
// '...' and "..." quotes and backslashes (no expansion). Throws UsageError on
// an unterminated quote.
std::vector<std::string> splitCommandLine(const std::string& text);

struct RemoteShell {
  std::vector<std::string> prefix;  // argv before the host ("ssh -o ..." or --rsh)
};

// ssh with BatchMode (never prompts) and -p/-i passed through, or --rsh.
RemoteShell remoteShellFor(const Options& options);

// argv of the process kolorun starts for a remote rank:
// prefix..., host, "sh -c '<read the script from stdin and eval it>'".
std::vector<std::string> remoteArgv(const RemoteShell& shell, const std::string& host);

struct RemoteLaunch {
  std::string host;
  std::string cwd;
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> command;
  double graceSeconds = 5;
};

// The script for the remote shell's stdin: exports, cd, a check that the
// program exists, the started marker, then the program in its own session
// with a watchdog that stops it (SIGTERM, grace, SIGKILL) when stdin reaches
// EOF, i.e. when kolorun stops the rank or dies. Exits with the program's
// status (128+N for signal N). Ends with kRemoteScriptEnd.
std::string remoteScript(const RemoteLaunch& launch);

}  // namespace kolo::launcher
