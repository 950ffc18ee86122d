#!/usr/bin/env bash
# Installs what is missing, builds kolo and runs the whole test suite:
# the default build (every test label), then the in-process suite under
# AddressSanitizer+UBSan and ThreadSanitizer. Exits non-zero on any failure.
#
#   scripts/test.sh              # everything
#   KOLO_SKIP_SANITIZERS=1 scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
jobs=$(nproc)

echo "== build (default preset)"
cmake --preset default >/dev/null
cmake --build --preset default -j"$jobs"

echo "== tests (default preset)"
ctest --preset default --timeout 600

if [ "${KOLO_SKIP_SANITIZERS:-0}" != "1" ]; then
  for preset in asan tsan; do
    echo "== build ($preset preset, core only)"
    cmake --preset "$preset" -DKOLO_WITH_TORCH=OFF >/dev/null
    cmake --build --preset "$preset" -j"$jobs"
    echo "== tests ($preset preset: in-process suite)"
    ASAN_OPTIONS=detect_leaks=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
      ctest --preset "$preset" --timeout 900
  done
fi
echo "== all tests passed"
