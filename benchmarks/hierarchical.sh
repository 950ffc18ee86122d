#!/usr/bin/env bash
# Hierarchical vs flat allreduce across two "hosts" (network namespaces on a
# bridge, scripts/netns-hosts.sh) with two ranks each and every host link
# limited by tc tbf in both directions; runs bench_hierarchical under kolorun
# and writes benchmarks/results/hierarchical.csv. Root only (CAP_NET_ADMIN).
#
#   benchmarks/hierarchical.sh [--rate 1gbit] [--trials 3] [--steps 2]
#                              [--methods kolo-hierarchical,kolo-flat,gloo-flat]
#                              [--sets "resnet50 bert-base"] [--no-build]
#
# Environment: KOLO_BENCH_BUILD (build directory, default build/bench),
# KOLO_BENCH_JOBS (build jobs, default 2).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KOLO_BENCH_BUILD:-$root/build/bench}
rate=1gbit trials=3 steps=2 sets="resnet50 bert-base" do_build=1
methods=kolo-hierarchical,kolo-flat,gloo-flat
while (($#)); do
  case $1 in
    --rate) rate=$2; shift ;;
    --trials) trials=$2; shift ;;
    --steps) steps=$2; shift ;;
    --methods) methods=$2; shift ;;
    --sets) sets=$2; shift ;;
    --no-build) do_build=0 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "hierarchical.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
[[ $(id -u) == 0 ]] || { echo "hierarchical.sh: needs root for network namespaces" >&2; exit 1; }

if ((do_build)); then
  if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKOLO_BUILD_TESTS=OFF -DKOLO_BUILD_EXAMPLES=OFF -DKOLO_BUILD_BENCHMARKS=ON >/dev/null
  fi
  cmake --build "$build" --target bench_hierarchical kolorun -j "${KOLO_BENCH_JOBS:-2}"
fi

# Namespaces kh<pid>h1 and kh<pid>h2 on 10.77.250.0/24 (the tests use
# third octets 20-249).
prefix="kh$$h" net=250
cleanup() {
  "$root/scripts/netns-hosts.sh" down "$prefix" >/dev/null 2>&1 || true
  ip link del "${prefix}v1" >/dev/null 2>&1 || true
  ip link del "${prefix}v2" >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$root/scripts/netns-hosts.sh" up "$prefix" 2 "$net" >/dev/null
for i in 1 2; do
  # Into the host (bridge side) and out of it (inside the namespace).
  tc qdisc add dev "${prefix}v$i" root tbf rate "$rate" burst 1mb latency 50ms
  ip netns exec "$prefix$i" tc qdisc add dev eth0 root tbf rate "$rate" burst 1mb latency 50ms
done

set_args=()
for s in $sets; do set_args+=(--set "$s=$root/benchmarks/results/shapes-$s.csv"); done
echo "== $(date -Is) load average $(cut -d' ' -f1-3 /proc/loadavg); 2 hosts x 2 ranks, links $rate"
"$build/launcher/kolorun" -H "10.77.$net.2:2,10.77.$net.3:2" \
  --rsh "$root/scripts/netns-rsh.sh" --timeout-seconds 900 --start-timeout 0 \
  "$build/benchmarks/bench_hierarchical" "${set_args[@]}" --methods "$methods" \
  --trials "$trials" --steps "$steps" --csv "$root/benchmarks/results/hierarchical.csv"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
