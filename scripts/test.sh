#!/usr/bin/env bash
# Installs what is missing, builds kolo and runs the whole test suite:
# the default build (every test label), then the in-process suite under
# AddressSanitizer+UBSan and ThreadSanitizer, then a short libFuzzer run of
# every fuzz target. Exits non-zero on any failure.
#
#   scripts/test.sh              # everything
#   KOLO_SKIP_SANITIZERS=1 KOLO_SKIP_FUZZ=1 scripts/test.sh   # just the default build
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
jobs=$(nproc)

echo "== build (default preset)"
cmake --preset default >/dev/null
cmake --build --preset default -j"$jobs"

echo "== tests (default preset)"
ctest --preset default --timeout 600

# The binaries holding the in-process suite (ctest label inprocess): the
# sanitizer builds compile only these.
inprocess_targets=(test_core_units test_engine test_comm_gloo test_comm_shm test_rendezvous
                   test_observability test_reliability_api)
if [ "${KOLO_SKIP_SANITIZERS:-0}" != "1" ]; then
  for preset in asan tsan; do
    echo "== build ($preset preset, core only)"
    cmake --preset "$preset" -DKOLO_WITH_TORCH=OFF -DKOLO_WITH_CUDA=OFF -DKOLO_WITH_MPI=OFF >/dev/null
    cmake --build --preset "$preset" -j"$jobs" --target "${inprocess_targets[@]}"
    echo "== tests ($preset preset: in-process suite)"
    ASAN_OPTIONS=detect_leaks=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
      ctest --preset "$preset" --timeout 900
  done
fi
if [ "${KOLO_SKIP_FUZZ:-0}" != "1" ]; then
  echo "== fuzzing (libFuzzer, 15 s per target)"
  fuzz/run.sh 15
fi
echo "== all tests passed"
