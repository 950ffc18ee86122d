// An environment for Config::fromEnv and launchInfoFromEnv in tests: the
// variables given, nothing else.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "kolo/config.h"

namespace kolo {

inline EnvLookup envOf(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace kolo
