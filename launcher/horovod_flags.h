// horovodrun's flags where kolo differs from Horovod: Horovod's spellings
// of kolo's settings (upper-case log levels, comma lists of interfaces,
// deprecated names), the HOROVOD_* variables horovodrun takes its defaults
// from, and the notices (Options::notices) for flags kolo accepts but
// follows differently or not at all (docs/migrating/horovodrun-flags.md).
// parseCommandLine (options.cc) calls these in the order given below.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kolo/config.h"
#include "options.h"

namespace kolo::launcher {

// Flags as horovodrun spells them, held as the command line gave them until
// applyHorovodSpellings maps them onto Options.
struct HorovodSpellings {
  std::vector<std::string> networkInterface;   // --network-interface: NIC or NIC,NIC,...
  std::vector<std::string> networkInterfaces;  // --network-interfaces NIC[,NIC...]
  std::string logLevel;                        // kolo's level names or Horovod's upper-case ones
  std::optional<bool> logHideTimestamp;        // --log-hide-timestamp / --no-log-hide-timestamp
};

// Seconds from the variable `name` (HOROVOD_START_TIMEOUT,
// HOROVOD_ELASTIC_TIMEOUT: the defaults horovodrun reads for its timeout
// flags), or `fallback` when it is unset. Throws UsageError naming the
// variable for a value that is not a number of seconds >= 0.
double secondsFromEnv(const EnvLookup& env, const char* name, double fallback);

// After the command line is parsed, before --config-file applies: sets
// o.networkInterfaces to the interfaces of both flags (in order, each
// once) and o.networkInterface to the first; o.logLevel to kolo's name
// for a given --log-level; and o.logWithTimestamp from
// --(no-)log-hide-timestamp unless --log-with(out)-timestamp was given.
// Each deprecated spelling, and FATAL (kolo has none), adds a notice.
// Throws UsageError for an empty name in an interface list.
void applyHorovodSpellings(const HorovodSpellings& given, Options& o);

// Last, on the final options: one notice for each Horovod flag given that
// kolo accepts without following it, or follows differently, saying what
// kolo does instead.
void addHorovodNotices(Options& o);

}  // namespace kolo::launcher
