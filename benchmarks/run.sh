#!/usr/bin/env bash
# One entry point for kolo's benchmarks (see benchmarks/README.md).
#
#   benchmarks/run.sh [sweep|fusion|latency|negotiation|train|shm|hierarchical|host_cost|all]...
#                                                                     (default: all)
#
# Builds what the chosen parts need in build/bench (RelWithDebInfo; configured
# once, then only rebuilt), installs gnuplot from apt when it is missing,
# runs the parts, prints their tables and writes CSV and PNG plots to
# benchmarks/results/. `all` runs sweep, fusion, latency and negotiation
# (about 10 minutes on 2 cores), then `train` when benchmarks/train/run.sh
# exists.
#
# Environment:
#   KOLO_BENCH_BUILD   build directory (default build/bench)
#   KOLO_BENCH_JOBS    parallel build jobs (default 2)
#   MPIRUN_ARGS        extra mpirun options (word-split), e.g. "--mca mpi_yield_when_idle 1"
#                      (Open MPI busy-polls by default; on a loaded machine that
#                      makes raw MPI calls wait for the scheduler)
#   SWEEP_ARGS, FUSION_ARGS, LATENCY_ARGS, NEGOTIATION_ARGS, TRAIN_ARGS,
#   SHM_ARGS, HIERARCHICAL_ARGS, HOST_COST_ARGS
#                      extra options for that part's program or script
#                      (word-split), e.g. SWEEP_ARGS="--max-bytes 1048576 --trials 1"
#   KOLO_*             engine settings (KOLO_CYCLE_TIME, KOLO_FUSION_THRESHOLD, ...)
#                      apply to every kolo engine the benchmarks start
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${KOLO_BENCH_BUILD:-$ROOT/build/bench}
BIN=$BUILD/benchmarks
RESULTS=$ROOT/benchmarks/results
PLOTS=$ROOT/benchmarks
JOBS=${KOLO_BENCH_JOBS:-2}
# shellcheck disable=SC2206
MPIRUN=(mpirun --allow-run-as-root --bind-to none -np 2 ${MPIRUN_ARGS:-})

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

log() { printf '\n==> %s\n' "$*"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

cache_flag() {  # cache_flag NAME: the build's value of a CMake cache BOOL
  sed -n "s/^$1:BOOL=//p" "$BUILD/CMakeCache.txt"
}

configure() {
  if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    log "configuring $BUILD"
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKOLO_BUILD_TESTS=OFF -DKOLO_BUILD_EXAMPLES=OFF -DKOLO_BUILD_BENCHMARKS=ON
  fi
}

build() {  # build TARGET...: (re)builds targets; the engine too when core/ changed
  log "building $*"
  cmake --build "$BUILD" --target "$@" -j "$JOBS"
}

have_mpi() {
  [[ $(cache_flag KOLO_WITH_MPI) == ON ]] && command -v mpirun >/dev/null
}

GNUPLOT_CHECKED=
ensure_gnuplot() {
  [[ -n $GNUPLOT_CHECKED ]] && { command -v gnuplot >/dev/null; return; }
  GNUPLOT_CHECKED=1
  command -v gnuplot >/dev/null && return 0
  local candidate
  candidate=$(apt-cache policy gnuplot-nox 2>/dev/null | sed -n 's/^ *Candidate: //p')
  if [[ -z $candidate || $candidate == "(none)" ]] && [[ $(id -u) == 0 ]]; then
    apt-get update -qq || true
    candidate=$(apt-cache policy gnuplot-nox 2>/dev/null | sed -n 's/^ *Candidate: //p')
  fi
  if [[ -n $candidate && $candidate != "(none)" && $(id -u) == 0 ]]; then
    log "installing gnuplot-nox $candidate (plots)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox >/dev/null || true
  fi
  if ! command -v gnuplot >/dev/null; then
    echo "gnuplot not available (apt-get install gnuplot-nox as root): no PNG plots" >&2
    return 1
  fi
}

plot() {  # plot NAME: benchmarks/NAME.gp reads results/NAME.csv, writes results/NAME.png
  local csv=$RESULTS/$1.csv png=$RESULTS/$1.png
  [[ -f $csv ]] || return 0
  ensure_gnuplot || return 0
  if gnuplot -e "csv='$csv'; png='$png'" "$PLOTS/$1.gp"; then
    echo "plot: ${png#"$ROOT"/}"
  else
    echo "gnuplot failed for $1 (CSV kept)" >&2
  fi
}

# mpi_part NAME PROGRAM [ARGS...]: builds PROGRAM, runs it on 2 ranks under
# mpirun writing results/NAME.csv, and plots it.
mpi_part() {
  local name=$1 program=$2
  shift 2
  have_mpi || { echo "$name: needs MPI (KOLO_WITH_MPI and mpirun); skipped"; return; }
  build "$program"
  log "$name (load average $(loadavg))"
  "${MPIRUN[@]}" "$BIN/$program" --csv "$RESULTS/$name.csv" "$@"
  echo "load average after: $(loadavg)"
  plot "$name"
}

# shellcheck disable=SC2086
part_sweep() { mpi_part sweep bench_allreduce_sweep ${SWEEP_ARGS:-}; }

# Gradient shapes from the model definitions (LibTorch); the CSVs in
# results/ are kept, so the fusion part also runs in builds without LibTorch.
model_shapes() {
  [[ $(cache_flag KOLO_WITH_TORCH) == ON ]] || return 0
  build bench_model_shapes
  local model
  for model in resnet50 bert-base; do
    local out=$RESULTS/shapes-$model.csv
    if [[ ! -f $out || $BIN/bench_model_shapes -nt $out ]]; then
      "$BIN/bench_model_shapes" --model "$model" --out "$out"
    fi
  done
}

part_fusion() {
  have_mpi || { echo "fusion: needs MPI (KOLO_WITH_MPI and mpirun); skipped"; return; }
  build bench_fusion_sets
  model_shapes
  local sets=() model
  for model in resnet50 bert-base; do
    if [[ -f $RESULTS/shapes-$model.csv ]]; then
      sets+=(--set "$model=$RESULTS/shapes-$model.csv")
    else
      echo "fusion: no $RESULTS/shapes-$model.csv (needs a LibTorch build once); skipping $model"
    fi
  done
  # shellcheck disable=SC2086
  mpi_part fusion bench_fusion_sets "${sets[@]}" ${FUSION_ARGS:-}
}

# shellcheck disable=SC2086
part_latency() { mpi_part latency bench_latency ${LATENCY_ARGS:-}; }

part_negotiation() {
  build bench_negotiation
  log "negotiation (load average $(loadavg))"
  # shellcheck disable=SC2086
  "$BIN/bench_negotiation" --csv "$RESULTS/negotiation.csv" ${NEGOTIATION_ARGS:-}
  echo "load average after: $(loadavg)"
  plot negotiation
}

# The shared-memory plane alone against memcpy (no MPI needed).
part_shm() {
  build bench_shm_planes
  log "shm (load average $(loadavg))"
  # shellcheck disable=SC2086
  "$BIN/bench_shm_planes" ${SHM_ARGS:-}
  echo "load average after: $(loadavg)"
}

# Hierarchical vs flat across two network-namespace hosts (root only).
part_hierarchical() {
  if [[ $(id -u) != 0 ]]; then
    echo "hierarchical: needs root for network namespaces; skipped"
    return
  fi
  build bench_hierarchical kolorun
  model_shapes
  log "hierarchical (load average $(loadavg))"
  # shellcheck disable=SC2086
  KOLO_BENCH_BUILD=$BUILD "$ROOT/benchmarks/hierarchical.sh" --no-build ${HIERARCHICAL_ARGS:-}
  plot hierarchical
}

# Host cost per gradient: plain PyTorch vs DDP vs kolo, Python and C++,
# world sizes 1 and 2 (benchmarks/host_cost/host_cost.py; about 3 minutes).
part_host_cost() {
  [[ $(cache_flag KOLO_WITH_TORCH) == ON ]] || { echo "host_cost: needs LibTorch; skipped"; return; }
  build bench_host_cost kolo_python kolorun
  log "host_cost (load average $(loadavg))"
  # shellcheck disable=SC2086
  python3 "$ROOT/benchmarks/host_cost/host_cost.py" --build "kolo=$BUILD" \
    --csv "$RESULTS/host_cost.csv" ${HOST_COST_ARGS:-}
}

# Part 5 (training) lives in benchmarks/train/, written separately.
part_train() {
  local script=$ROOT/benchmarks/train/run.sh
  if [[ -f $script ]]; then
    log "train (load average $(loadavg))"
    # shellcheck disable=SC2086
    bash "$script" ${TRAIN_ARGS:-}
  else
    echo "train: benchmarks/train/run.sh does not exist yet; skipped"
  fi
}

main() {
  local parts=("$@")
  [[ ${#parts[@]} -eq 0 ]] && parts=(all)
  local expanded=() p
  for p in "${parts[@]}"; do
    case $p in
      all) expanded+=(sweep fusion latency negotiation train) ;;
      sweep | fusion | latency | negotiation | train | shm | hierarchical | host_cost)
        expanded+=("$p") ;;
      -h | --help) usage; return 0 ;;
      *) usage >&2; echo "unknown part '$p'" >&2; return 2 ;;
    esac
  done
  mkdir -p "$RESULTS"
  configure
  local start=$SECONDS
  for p in "${expanded[@]}"; do
    "part_$p"
  done
  log "done in $((SECONDS - start)) s; results in ${RESULTS#"$ROOT"/}/"
}

main "$@"
