// The checks of kolorun's number flags. CLI11 runs a check on the flag's
// text before converting it. kolorun uses these, not CLI11's
// PositiveNumber and Range, whose messages write the largest double out in
// full ("Value 0 not in range 0.000000 to 17976931348623157...").
#pragma once

#include <CLI/CLI.hpp>

#include <climits>
#include <string>

namespace kolo::launcher {

// What a number flag accepts besides being a number.
enum class Floor { kAny, kZero, kPositive };

// A whole number from min to max, read in decimal as horovodrun's int()
// reads it; give it with option->transform(), which lets it hand CLI11 the
// value in decimal (CLI11 alone reads "010" as octal). Out of range, or not a
// whole number: throws UsageError, one line naming the flag as users write
// it ("-np"), what it accepts and what it got ("-np must be at least 1, got
// 0"); CLI11 lets it out of app.parse() as it is.
CLI::Validator wholeFlag(const std::string& flag, long long min = INT_MIN, long long max = INT_MAX);

// A finite number at or above floor (kAny: any number, inf and nan
// included, for flags that validate() checks further), for
// option->check(): throws UsageError as wholeFlag does
// ("--start-timeout must be zero or more, got -1").
CLI::Validator numberFlag(const std::string& flag, Floor floor = Floor::kAny);

}  // namespace kolo::launcher
