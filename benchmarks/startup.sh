#!/usr/bin/env bash
# Start-up at scale: runs bench_startup (benchmarks/startup.cc) under kolorun
# at several job sizes, one after another in one run, with KOLO_SHM=0 so
# that every rank talks over TCP as with one rank per host, and prints per
# size the launcher's floor (kolorun -np N /bin/true, timed just before),
# the floor of N processes that load kolo's libraries and exit (kolorun -np
# N bench_startup --load-only: what the machine spends before kolo::init
# runs), the slowest rank's times (seconds from kolorun's start: last process
# started, init done, first and tenth 4-byte allreduce done), the most
# sockets and store requests of any rank, the median rank's cost of one
# store request while all ask at once, and the ratio of each size's first
# allreduce to the smallest size's. Writes benchmarks/results/startup.csv.
#
#   benchmarks/startup.sh [--ranks "8 64 128 256 512"] [--rounds 3] [--shm] [--no-build]
#
# Each size runs --rounds times, sizes taking turns; the table shows the
# median round. --shm keeps kolo's default for one host (shared memory, no
# sockets between ranks) and writes results/startup-shm.csv instead.
# Environment: KOLO_BENCH_BUILD (build directory, default build/bench),
# KOLO_BENCH_JOBS (build jobs, default 2).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KOLO_BENCH_BUILD:-$root/build/bench}
ranks="8 64 128 256 512" rounds=3 do_build=1 shm=0
while (($#)); do
  case $1 in
    --ranks) ranks=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --no-build) do_build=0 ;;
    --shm) shm=1 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "startup.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

if ((do_build)); then
  if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKOLO_BUILD_TESTS=OFF -DKOLO_BUILD_EXAMPLES=OFF -DKOLO_BUILD_BENCHMARKS=ON >/dev/null
  fi
  cmake --build "$build" --target bench_startup kolorun -j "${KOLO_BENCH_JOBS:-2}"
fi
kolorun=$build/launcher/kolorun
bench=$build/benchmarks/bench_startup
[[ -x $kolorun && -x $bench ]] || { echo "startup.sh: build $build first" >&2; exit 1; }

# Many processes: each holds a few dozen descriptors, kolorun three per rank.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# floor NAME FILE COMMAND...: writes NAME=<milliseconds COMMAND took> to FILE.
floor() {
  local name=$1 file=$2 t0
  shift 2
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1 || true
  echo "$name=$(( ($(date +%s%N) - t0) / 1000000 ))" >"$file"
}

for ((round = 1; round <= rounds; ++round)); do
  for n in $ranks; do
    log=$out/$n.$round
    # The floors: the launcher starting N processes that do nothing, and
    # N processes that load kolo's libraries and exit.
    floor launch "$out/$n.$round.launch" "$kolorun" -np "$n" /bin/true
    floor load "$out/$n.$round.load" "$kolorun" -np "$n" "$bench" --load-only
    if ! env $( ((shm)) || echo KOLO_SHM=0) KOLO_BENCH_EPOCH_NS="$(date +%s%N)" \
        timeout 900 "$kolorun" -np "$n" "$bench" >"$log" 2>&1; then
      echo "startup.sh: $n ranks failed (round $round):" >&2
      grep -v '^\[[0-9]*\]<stdout>:startup ' "$log" | tail -5 >&2
    fi
  done
done

suffix=""
((shm)) && suffix=-shm
csv=$root/benchmarks/results/startup$suffix.csv
python3 - "$out" "$rounds" "$csv" "$shm" $ranks <<'EOF'
import re, statistics, sys
out, rounds, csv_path, shm, sizes = (sys.argv[1], int(sys.argv[2]), sys.argv[3],
                                      sys.argv[4] == "1", sys.argv[5:])
fields = ["started", "init", "first", "tenth", "sockets", "store_requests", "store_us"]
table = {}
for n in sizes:
    per_round = []
    for r in range(1, rounds + 1):
        try:
            lines = open(f"{out}/{n}.{r}").read().splitlines()
        except OSError:
            continue
        rows = [dict((k, float(v)) for k, v in re.findall(r"(\w+)=([\d.]+)", l))
                for l in lines if "startup rank=" in l]
        if len(rows) != int(n):
            continue  # a failed round
        worst = {k: max(row[k] for row in rows) for k in fields}
        worst["store_us"] = statistics.median(row["store_us"] for row in rows)
        for floor in ("launch", "load"):
            ms = open(f"{out}/{n}.{r}.{floor}").read().strip().split("=")[1]
            worst[floor] = float(ms) / 1000
        per_round.append(worst)
    if per_round:
        table[n] = {k: statistics.median(r[k] for r in per_round)
                    for k in fields + ["launch", "load"]}
        table[n]["rounds"] = len(per_round)
base = table.get(sizes[0], {}).get("first")
print(f"{'ranks':>6} {'launch':>8} {'load':>8} {'started':>8} {'init':>8} {'first':>8} {'tenth':>8} "
      f"{'sockets':>8} {'requests':>9} {'store us':>9} {'first/' + sizes[0]:>9}")
with open(csv_path, "w") as csv:
    csv.write("ranks,rounds,launch_only_s,load_only_s,last_started_s,init_s,first_allreduce_s,tenth_allreduce_s,"
              "max_sockets,max_store_requests,median_store_request_us\n")
    for n in sizes:
        if n not in table:
            print(f"{n:>6} failed")
            continue
        t = table[n]
        ratio = f"{t['first'] / base:.1f}x" if base else "-"
        print(f"{n:>6} {t['launch']:8.2f} {t['load']:8.2f} {t['started']:8.2f} {t['init']:8.2f} {t['first']:8.2f} {t['tenth']:8.2f} "
              f"{t['sockets']:8.0f} {t['store_requests']:9.0f} {t['store_us']:9.0f} {ratio:>9}")
        csv.write(f"{n},{t['rounds']},{t['launch']:.3f},{t['load']:.3f},{t['started']:.3f},{t['init']:.3f},{t['first']:.3f},"
                  f"{t['tenth']:.3f},{t['sockets']:.0f},{t['store_requests']:.0f},"
                  f"{t['store_us']:.1f}\n")
planes = "kolo's defaults" if shm else "KOLO_SHM=0"
print(f"(slowest rank per round, median of {rounds} rounds; {planes}; wrote {csv_path})")
EOF
