#!/usr/bin/env bash
# Builds the libFuzzer targets with Clang and runs each for N seconds
# (default 20) over a scratch copy of its committed corpus.
#   fuzz/run.sh [seconds]
# Env: KOLO_FUZZ_BUILD (build dir, default build/fuzz), KOLO_FUZZ_JOBS (-j, default 2).
# Exits non-zero on the first fuzzer that finds a crash; its reproducer is
# left in the build dir (crash-*, leak-*, timeout-*).
set -euo pipefail

seconds=${1:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KOLO_FUZZ_BUILD:-$root/build/fuzz}
jobs=${KOLO_FUZZ_JOBS:-2}
targets=(fuzz_wire_requests fuzz_wire_responses fuzz_hostfile fuzz_store_frames)

source_dir=$root
if ! grep -q KOLO_BUILD_FUZZERS "$root/CMakeLists.txt"; then
  # Top level without the fuzz/ hook: build through a wrapper project.
  source_dir=$build/wrapper
  mkdir -p "$source_dir"
  cat > "$source_dir/CMakeLists.txt" <<WRAP
cmake_minimum_required(VERSION 3.22)
project(kolo_fuzz_wrapper C CXX)
add_subdirectory($root kolo)
add_subdirectory($root/fuzz fuzz)
WRAP
fi

cmake -S "$source_dir" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DKOLO_BUILD_FUZZERS=ON \
  -DKOLO_WITH_TORCH=OFF -DKOLO_WITH_CUDA=OFF -DKOLO_WITH_MPI=OFF -DKOLO_BUILD_TESTS=OFF \
  -DKOLO_BUILD_EXAMPLES=OFF -DKOLO_BUILD_BENCHMARKS=OFF >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j"$jobs" --target kolo_fuzzers

bin=$(dirname "$(find "$build" -name fuzz_wire_requests -type f -perm -u+x | head -1)")
status=0
for t in "${targets[@]}"; do
  work=$build/corpus/$t
  mkdir -p "$work"
  log=$build/$t.log
  # New inputs go to the scratch dir; the committed corpus is read only.
  if (cd "$build" && "$bin/$t" -max_total_time="$seconds" -print_final_stats=1 \
        "$work" "$root/fuzz/corpus/$t" >"$log" 2>&1); then
    runs=$(grep -o 'Done [0-9]* runs' "$log" | awk '{print $2}')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    printf '%-22s ok   %10s executions in %ss (cov %s)\n' "$t" "$runs" "$seconds" "$cov"
  else
    printf '%-22s FAILED, see %s\n' "$t" "$log"
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" || tail -20 "$log"
    status=1
  fi
done

# Inputs that once crashed a fuzzer must stay fixed: replay each once.
for input in "$root"/fuzz/regressions/*; do
  [ -e "$input" ] || continue
  case $(basename "$input") in
    wire_requests_*) t=fuzz_wire_requests ;;
    wire_responses_*) t=fuzz_wire_responses ;;
    hostfile_*) t=fuzz_hostfile ;;
    store_frames_*) t=fuzz_store_frames ;;
    *) continue ;;
  esac
  if "$bin/$t" "$input" >"$build/regression.log" 2>&1; then
    printf '%-22s ok   regression %s\n' "$t" "$(basename "$input")"
  else
    printf '%-22s FAILED on regression %s\n' "$t" "$(basename "$input")"
    grep -E 'ERROR|SUMMARY|runtime error' "$build/regression.log" | head -5
    status=1
  fi
done
exit $status
