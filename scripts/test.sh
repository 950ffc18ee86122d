#!/usr/bin/env bash
# Installs what is missing, checks that every file includes the standard
# headers it uses (scripts/include-check.sh: Clang 16 with libc++, and
# include-what-you-use), builds kolo and runs the whole test suite:
# the default build against Debian's LibTorch 1.13 (every test label), then
# the documentation (scripts/docs.sh: the site with warnings as errors, its
# generated reference and checks, the quick starts' commands), then
# the build against pip's torch 2.11 with CUDA and NCCL (the other end of
# the supported range), then the in-process suite under
# AddressSanitizer+UBSan and ThreadSanitizer, then a short libFuzzer run of
# every fuzz target. Exits non-zero on any failure.
#
#   scripts/test.sh              # everything
#   KOLO_SKIP_INCLUDE_CHECK=1 KOLO_SKIP_SANITIZERS=1 KOLO_SKIP_FUZZ=1 KOLO_SKIP_TORCH2=1 scripts/test.sh   # just the default build and the docs
#   KOLO_SKIP_INCLUDE_CHECK=1 KOLO_SKIP_DEFAULT=1 KOLO_SKIP_DOCS=1 KOLO_SKIP_SANITIZERS=1 KOLO_SKIP_FUZZ=1 scripts/test.sh   # just torch 2.11
#
# The torch 2.11 stage keeps its venv (about 4.6 GB) in $KOLO_CACHE_DIR
# (default: .cache/ in the checkout, git-ignored), made once by
# scripts/python-venv.sh; point KOLO_CACHE_DIR at a folder outside the
# checkout to share it between clones on one machine.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
jobs=$(nproc)
cache_dir=${KOLO_CACHE_DIR:-$PWD/.cache}
ci_start=$SECONDS
# Seconds per stage, printed at the end (CI's budget on a 2-core machine is
# 90 minutes, and the run should stay under 45; docs/developers/testing.md).
timings=()
stage_done() { timings+=("$(printf '%-34s %5d s' "$1" $((SECONDS - $2)))"); }
# ctest run by preset, with what it passed, skipped and failed counted
# apart (scripts/test-summary.py: each skip with its reason, and the tests
# that passed while skipping cases inside), printed after the run and again
# at the end: a skip is never read as a pass. ctest keeps up to 1 MiB of a
# passing test's output for it (pytest's skip reasons come last).
summaries=()
run_ctest() {
  local preset=$1 timeout=$2 junit=$PWD/build/$1/ctest-junit.xml
  shift 2
  rm -f "$junit"
  local rc=0
  "$@" ctest --preset "$preset" --timeout "$timeout" -j"$jobs" \
    --test-output-size-passed 1048576 --output-junit "$junit" || rc=$?
  if [ -f "$junit" ]; then
    local summary
    summary=$(python3 scripts/test-summary.py "$preset" "$junit") ||
      summary="$preset: scripts/test-summary.py could not read $junit"
    echo "$summary"
    summaries+=("$summary")
  fi
  return $rc
}

# ccache (installed by install-deps.sh) for every build, in
# $KOLO_CACHE_DIR/ccache unless CCACHE_DIR says otherwise: a machine that is
# kept compiles only what changed; a fresh one loses nothing.
launcher=(-DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER=
          -DCMAKE_CUDA_COMPILER_LAUNCHER=)
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$cache_dir/ccache} CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  # The LibTorch targets' precompiled headers (KOLO_PRECOMPILED_HEADERS):
  # ccache serves them, and the files compiled with them, only with these
  # (the pip wheel's build then hits the torch2 build's objects again).
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

# Portability first (minutes, no build): GCC 12's libstdc++ is not the
# only standard library kolo must compile with.
if [ "${KOLO_SKIP_INCLUDE_CHECK:-0}" != "1" ]; then
  stage_start=$SECONDS
  echo "== include check (clang 16 + libc++, include-what-you-use)"
  scripts/include-check.sh
  stage_done "include check" "$stage_start"
fi

# Tests run two at a time (ctest -j): most of them wait on sockets,
# processes or timeouts, and every test that could hang has its own limit.
if [ "${KOLO_SKIP_DEFAULT:-0}" != "1" ]; then
  stage_start=$SECONDS
  echo "== build (default preset)"
  cmake --preset default "${launcher[@]}" >/dev/null
  cmake --build --preset default -j"$jobs"
  stage_done "default build" "$stage_start"

  stage_start=$SECONDS
  echo "== tests (default preset)"
  run_ctest default 600
  stage_done "default tests" "$stage_start"
fi

# The documentation, from the default build's kolorun and Python module
# (built here when the default stage was skipped).
if [ "${KOLO_SKIP_DOCS:-0}" != "1" ]; then
  stage_start=$SECONDS
  echo "== docs (scripts/docs.sh)"
  if [ "${KOLO_SKIP_DEFAULT:-0}" = "1" ]; then
    cmake --preset default "${launcher[@]}" >/dev/null
    cmake --build --preset default -j"$jobs" --target kolorun kolo_python fashion_mnist
  fi
  scripts/docs.sh build/default
  # docs-block: cpp-try-it (docs/quickstart/cpp.md, README): the C++ quick
  # start's first command, with one epoch (the page's --epochs N) instead of
  # three to keep this stage cheap; the second command is this script.
  scripts/quickstart.sh --epochs 1
  stage_done "docs" "$stage_start"
fi

# The other end of the supported torch range: pip's torch 2.11 (a CUDA
# build) in a cached venv. Configures with CUDA and NCCL (the NCCL LibTorch
# loads) and compiles every CUDA and NCCL source (core, adapter, bindings,
# tests/gpu, bench_gpu_pack) against it; nothing GPU runs here. Runs the
# LibTorch adapter tests, the Python suite at np 2 and 3, the GPU host
# tests, the install test and the pip wheel test (label package).
if [ "${KOLO_SKIP_TORCH2:-0}" != "1" ]; then
  stage_start=$SECONDS
  torch2=2.11.0
  venv=$cache_dir/venv-torch-$torch2
  scripts/python-venv.sh --no-kolo --torch "$torch2" "$venv"
  stage_done "torch $torch2 venv" "$stage_start"
  stage_start=$SECONDS
  # This stage builds the same sources twice (build/torch2, and the wheel's
  # build/wheel in package.pip_wheel): ccache serves the second from the
  # first (same flags, same folder depth).
  if command -v ccache >/dev/null; then
    export CMAKE_ARGS="${launcher[*]}"  # read by scikit-build-core
    export KOLO_WHEEL_BUILD_DIR=$PWD/build/wheel
  fi
  echo "== build (torch2 preset: LibTorch $torch2 with CUDA and NCCL)"
  # docs-block: gpu-cpp-build (docs/quickstart/gpu.md): the GPU quick start's
  # two build commands, with the venv made above.
  cmake --preset torch2 -DKOLO_PYTHON="$venv/bin/python" "${launcher[@]}" >/dev/null
  cache=build/torch2/CMakeCache.txt
  config=build/torch2/core/include/kolo/build_config.h
  if ! grep -q '^KOLO_TORCH_CUDA_BUILD:INTERNAL=ON' "$cache" ||
     [ "$(grep -cE 'define KOLO_WITH_(CUDA|NCCL) 1' "$config")" != 2 ]; then
    echo "torch2 preset: expected a CUDA LibTorch with CUDA and NCCL on; see cmake --preset torch2" >&2
    exit 1
  fi
  if command -v ccache >/dev/null; then
    # The wheel's build must name the same compilers as build/torch2 (ccache
    # hashes the compiler's name: scikit-build-core otherwise picks Python's
    # x86_64-linux-gnu-g++ where CMake picked c++, and nothing hits).
    for lang in C CXX; do
      compiler=$(sed -n "s/^CMAKE_${lang}_COMPILER:[A-Z]*=//p" "$cache")
      [ -n "$compiler" ] && CMAKE_ARGS+=" -DCMAKE_${lang}_COMPILER=$compiler"
    done
    export CMAKE_ARGS
  fi
  cmake --build --preset torch2 -j"$jobs"
  stage_done "torch2 build" "$stage_start"
  stage_start=$SECONDS
  echo "== tests (torch2 preset: torch, python, gpu_host, gpu (skips without a GPU), package)"
  run_ctest torch2 600
  stage_done "torch2 tests" "$stage_start"
fi

# The binaries holding the in-process suite (ctest label inprocess): the
# sanitizer builds compile only these.
inprocess_targets=(test_core_units test_engine test_comm_gloo test_comm_shm test_rendezvous
                   test_observability test_reliability_api)
if [ "${KOLO_SKIP_SANITIZERS:-0}" != "1" ]; then
  for preset in asan tsan; do
    stage_start=$SECONDS
    echo "== build ($preset preset, core only)"
    cmake --preset "$preset" -DKOLO_WITH_TORCH=OFF -DKOLO_WITH_CUDA=OFF -DKOLO_WITH_MPI=OFF \
      "${launcher[@]}" >/dev/null
    cmake --build --preset "$preset" -j"$jobs" --target "${inprocess_targets[@]}"
    stage_done "$preset build" "$stage_start"
    stage_start=$SECONDS
    echo "== tests ($preset preset: in-process suite)"
    run_ctest "$preset" 900 env ASAN_OPTIONS=detect_leaks=1 \
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
    stage_done "$preset tests" "$stage_start"
  done
fi
if [ "${KOLO_SKIP_FUZZ:-0}" != "1" ]; then
  stage_start=$SECONDS
  echo "== fuzzing (libFuzzer, 15 s per target)"
  fuzz/run.sh 15
  stage_done "fuzzing" "$stage_start"
fi
echo "== tests per stage (passed and skipped apart)"
printf '%s\n' "${summaries[@]}" | sed 's/^/   /'
echo "== time per stage"
printf '   %s\n' "${timings[@]}"
echo "   $(printf '%-34s %5d s' total $((SECONDS - ci_start)))"
echo "== all tests passed"
