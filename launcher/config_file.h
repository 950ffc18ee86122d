// kolorun --config-file: Horovod's YAML file of run-time settings.
//
// The schema is horovodrun 0.28.1's: a top-level `controller` (gloo | mpi)
// and the sections params, autotune, timeline, stall_check,
// library_options and logging, each a map of the settings that horovodrun's
// flags of the same names set (params.fusion_threshold_mb is
// --fusion-threshold-mb, ...). As in horovodrun, a setting whose flag is on
// the command line, wherever it stands, keeps the command line's value;
// `controller` applies only when neither --gloo nor --mpi is given; a
// present `autotune` section without `enabled` turns autotuning off and a
// present `stall_check` section without `enabled` leaves it on.
// logging.hide_timestamp (older Horovod's key) is read as the inverse of
// logging.with_timestamp. Keys outside the schema are reported in
// Options::notices and ignored, as horovodrun ignores them.
#pragma once

#include <functional>
#include <string>

#include "options.h"

namespace kolo::launcher {

// Whether a flag (by any of its names, e.g. "--autotune") was given on the
// command line.
using FlagGiven = std::function<bool(const std::string& flag)>;

// Reads the file and applies it to `options`. Throws UsageError naming the
// file, the key and its line for unreadable files, malformed YAML and
// values of the wrong type or range.
void applyConfigFile(const std::string& path, Options& options, const FlagGiven& given);

// The same for YAML text; `source` names it in errors.
void applyConfigText(const std::string& text, const std::string& source, Options& options,
                     const FlagGiven& given);

}  // namespace kolo::launcher
