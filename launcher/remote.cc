#include <cstddef>

#include "remote.h"

#include "usage_error.h"

namespace kolo::launcher {

std::string shellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::vector<std::string> splitCommandLine(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool inWord = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote == '\'') {
      if (c == '\'') {
        quote = 0;
      } else {
        word += c;
      }
    } else if (quote == '"') {
      if (c == '"') {
        quote = 0;
      } else if (c == '\\' && i + 1 < text.size() &&
                 (text[i + 1] == '"' || text[i + 1] == '\\' || text[i + 1] == '$')) {
        word += text[++i];
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      inWord = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
      inWord = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (inWord) words.push_back(word);
      word.clear();
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (quote != 0) {
    throw UsageError("--rsh '" + text + "': unterminated " + std::string(1, quote) + " quote");
  }
  if (inWord) words.push_back(word);
  return words;
}

RemoteShell remoteShellFor(const Options& options) {
  RemoteShell shell;
  if (!options.rsh.empty()) {
    shell.prefix = splitCommandLine(options.rsh);
    if (shell.prefix.empty()) throw UsageError("--rsh is empty; give a command such as 'ssh -x'");
    return shell;
  }
  shell.prefix = {"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"};
  if (options.sshPort != 0) {
    shell.prefix.push_back("-p");
    shell.prefix.push_back(std::to_string(options.sshPort));
  }
  if (!options.sshIdentity.empty()) {
    shell.prefix.push_back("-i");
    shell.prefix.push_back(options.sshIdentity);
  }
  return shell;
}

std::vector<std::string> remoteArgv(const RemoteShell& shell, const std::string& host) {
  // Reads the script line by line (the shell's read takes one byte at a time
  // from a pipe, so nothing after the end line is consumed) and runs it only
  // when it arrived whole.
  const std::string bootstrap =
      std::string("s=; while IFS= read -r l; do if [ \"$l\" = ") + kRemoteScriptEnd +
      " ]; then eval \"$s\"; exit $?; fi; s=\"$s$l\n\"; done; exit 2";
  std::vector<std::string> argv = shell.prefix;
  argv.push_back(host);
  argv.push_back("sh -c " + shellQuote(bootstrap));
  return argv;
}

std::string remoteScript(const RemoteLaunch& launch) {
  std::string s;
  for (const auto& [name, value] : launch.env) {
    s += "export " + name + "=" + shellQuote(value) + "\n";
  }
  const std::string host = shellQuote(launch.host);
  const std::string program = shellQuote(launch.command.front());
  std::string command;
  for (const auto& word : launch.command) command += shellQuote(word) + " ";
  int ticks = static_cast<int>(launch.graceSeconds * 5 + 0.5);  // 0.2 s each

  s += "cd " + shellQuote(launch.cwd) + " || { echo \"kolorun: cannot cd to " +
       shellQuote(launch.cwd) + " on host \"" + host + " >&2; exit 2; }\n";
  s += "command -v " + program + " >/dev/null 2>&1 || { echo \"kolorun: program \"" + program +
       "\" not found on host \"" + host + " >&2; exit 127; }\n";
  s += "exec 3<&0\n";
  s += std::string("echo ") + kRemoteStartedMarker + "\n";
  // Own session, so the watchdog can signal the program's whole group.
  s += "if command -v setsid >/dev/null 2>&1; then setsid " + command +
       "</dev/null 3<&- & else " + command + "</dev/null 3<&- & fi\n";
  s += "pid=$!\n";
  s += "( while IFS= read -r _; do :; done; "
       "kill -TERM -$pid 2>/dev/null || kill -TERM $pid 2>/dev/null; n=0; "
       "while kill -0 $pid 2>/dev/null && [ $n -lt " + std::to_string(ticks) +
       " ]; do sleep 0.2; n=$((n+1)); done; "
       "kill -KILL -$pid 2>/dev/null; kill -KILL $pid 2>/dev/null ) <&3 >/dev/null 2>&1 &\n";
  s += "wd=$!\n";
  s += "exec 3<&-\n";
  s += "wait $pid; rc=$?\n";
  s += "kill -KILL -$pid 2>/dev/null\n";  // whatever the program left behind
  s += "kill $wd 2>/dev/null\n";
  s += "exit $rc\n";
  s += std::string(kRemoteScriptEnd) + "\n";
  return s;
}

}  // namespace kolo::launcher
