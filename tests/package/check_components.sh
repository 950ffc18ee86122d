#!/usr/bin/env bash
# find_package(kolo) with components, from an install of BUILD_DIR in a
# scratch prefix, in projects configured with find_package(Torch) disabled
# (CMAKE_DISABLE_FIND_PACKAGE_Torch: any search for LibTorch finds none):
#
#   1. COMPONENTS core: configures, builds, and runs as a 2-rank job under
#      the installed kolorun; kolo::torch is not defined.
#   2. no COMPONENTS: configures too (torch is optional then) and says that
#      kolo::torch is not defined.
#   3. COMPONENTS torch: fails, naming LibTorch (Torch) or, for a kolo built
#      without it, saying so: the negative control of 1 and 2.
#   4. COMPONENTS bogus: fails, naming the component.
#
#   check_components.sh BUILD_DIR
# Prints "components: ok" when every step passed.
set -euo pipefail
build_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d /tmp/kolo-components.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
prefix=$scratch/prefix
cmake --install "$build_dir" --prefix "$prefix" >/dev/null

configure() {  # NAME COMPONENTS: configures core_consumer in $scratch/NAME
  cmake -S "$here/core_consumer" -B "$scratch/$1" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON -DKOLO_COMPONENTS="$2" 2>&1
}

echo "== COMPONENTS core, find_package(Torch) disabled"
out=$(configure core core) || { echo "$out"; echo "COMPONENTS core failed to configure" >&2; exit 1; }
echo "$out" | grep "kolo components:"
cmake --build "$scratch/core" >/dev/null
env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$scratch" KOLO_TIMEOUT=60 \
  "$prefix/bin/kolorun" -np 2 --timeout-seconds 60 "$scratch/core/consumer"

echo "== no COMPONENTS, find_package(Torch) disabled"
out=$(configure none none) || { echo "$out"; echo "find_package(kolo) failed without LibTorch" >&2; exit 1; }
echo "$out" | grep "kolo components:"
if [ -f "$prefix/lib/cmake/kolo/koloTorchTargets.cmake" ] || compgen -G "$prefix/lib*/cmake/kolo/koloTorchTargets.cmake" >/dev/null; then
  echo "$out" | grep -q "kolo: LibTorch not found, so kolo::torch is not defined" ||
    { echo "$out"; echo "no notice that kolo::torch is not defined" >&2; exit 1; }
fi

echo "== COMPONENTS torch, find_package(Torch) disabled (must fail)"
if out=$(configure torch torch); then
  echo "$out"; echo "COMPONENTS torch configured without LibTorch" >&2; exit 1
fi
echo "$out" | grep -qE "Torch|built without LibTorch" ||
  { echo "$out"; echo "the failure does not name LibTorch" >&2; exit 1; }
echo "$out" | grep -E "Torch|built without LibTorch" | head -3

echo "== COMPONENTS bogus (must fail)"
if out=$(configure bogus bogus); then
  echo "$out"; echo "COMPONENTS bogus configured" >&2; exit 1
fi
echo "$out" | grep -q 'kolo has no component "bogus" (its components: core, torch)' ||
  { echo "$out"; echo "the failure does not name the component" >&2; exit 1; }
echo "components: ok"
