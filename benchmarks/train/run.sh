#!/usr/bin/env bash
# Training step time: kolo vs no communication vs PyTorch DDP vs Horovod on
# the same models (benchmarks/train/bench_train.py), plus kolo's C++
# examples. See benchmarks/train/README.md.
#
#   benchmarks/train/run.sh [--rounds N] [--cnn-steps N] [--mlp-steps N] [--warmup N]
#                           [--models "cnn mlp"] [--cnn-batch B] [--mlp-batch B] [--threads T]
#                           [--modes "nocomm kolo ddp ddp-kolo horovod-gloo horovod-mpi"]
#                           [--no-cpp] [--no-python] [--no-install] [--csv FILE]
#                           [--run-timeout S] [--no-build] [--blas openblas|system]
#
# Every mode of a model runs once per round, in an order that rotates from
# round to round, so all modes see the same background load; the table
# reports the median over rounds. Writes benchmarks/results/train.csv.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/benchmarks/train
build=${KOLO_TRAIN_BUILD:-$root/build/train}
peers=$root/build/peers
sys_python=/usr/bin/python3
rounds=5 cnn_steps=200 mlp_steps=100 warmup=10 threads=1 np=2 run_timeout=900
models="cnn mlp"
cnn_batch=64 mlp_batch=128 blas=openblas
modes="nocomm kolo ddp ddp-kolo horovod-gloo horovod-mpi"
cpp=1 python_suite=1 install=1 do_build=1
csv=$root/benchmarks/results/train.csv

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift ;;
    --steps) cnn_steps=$2; mlp_steps=$2; shift ;;
    --cnn-steps) cnn_steps=$2; shift ;;
    --mlp-steps) mlp_steps=$2; shift ;;
    --run-timeout) run_timeout=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --models) models=$2; shift ;;
    --cnn-batch) cnn_batch=$2; shift ;;
    --mlp-batch) mlp_batch=$2; shift ;;
    --threads) threads=$2; shift ;;
    --modes) modes=$2; shift ;;
    --no-cpp) cpp=0 ;;
    --no-python) python_suite=0 ;;
    --no-install) install=0 ;;
    --no-build) do_build=0 ;;
    --blas) blas=$2; shift ;;
    --csv) csv=$2; shift ;;
    -h|--help) usage 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
  shift
done

logs=$build/bench-logs/$(date +%Y%m%d-%H%M%S)
mkdir -p "$logs" "$(dirname "$csv")"
raw=$logs/raw.tsv   # suite model mode round step_ms load1
: >"$raw"

# --- build: kolo's Python package, kolorun and the C++ examples -----------
# Configure every time: other work may add or remove source files.
if ((do_build)); then
echo "== building kolo in $build (log: $logs/build.log)"
{
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_PYTHON=$sys_python
  targets=(kolo_python kolorun)
  ((cpp)) && targets+=(synthetic_benchmark fashion_mnist)
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
} >"$logs/build.log" 2>&1 || {
  tail -n 30 "$logs/build.log" >&2
  echo "run.sh: build failed; --no-build measures the previous build in $build" >&2
  exit 1
}
fi
[[ -x $build/launcher/kolorun ]] || { echo "run.sh: no kolorun in $build; build first" >&2; exit 1; }
echo "== kolo: source $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- core adapters bindings 2>/dev/null || echo '+local changes'), python module built $(date -r "$(ls "$build"/python/kolo/_kolo*.so | head -n 1)" '+%F %T')"
kolorun=$build/launcher/kolorun
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=$threads   # torchrun sets this; set it for every mode alike

# --- BLAS -------------------------------------------------------------------
# Debian's torch calls whatever libblas.so.3 the alternatives system points
# at; on a machine without OpenBLAS that is netlib's reference BLAS, which
# makes every Linear layer ~10x slower and so hides communication behind
# compute. --blas openblas (the default) unpacks Debian's OpenBLAS into
# build/peers/openblas (apt-get download + dpkg -x; the system is unchanged)
# and puts it first on LD_LIBRARY_PATH for every mode and the C++ examples.
case $blas in
  openblas)
    ob=$peers/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread
    if [[ ! -e $ob/libblas.so.3 ]]; then
      echo "== fetching Debian's libopenblas0-pthread into $peers/openblas"
      mkdir -p "$peers/debs"
      (cd "$peers/debs" && apt-get download libopenblas0-pthread >/dev/null 2>&1) &&
        dpkg -x "$(ls "$peers"/debs/libopenblas0-pthread_*.deb | tail -n 1)" "$peers/openblas" ||
        { echo "run.sh: could not fetch libopenblas0-pthread; use --blas system" >&2; exit 1; }
    fi
    export LD_LIBRARY_PATH=$ob${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export OPENBLAS_NUM_THREADS=$threads ;;
  system) ;;
  *) echo "run.sh: --blas must be openblas or system" >&2; exit 2 ;;
esac
blas_lib=$($sys_python -c 'import torch, re
for line in open("/proc/self/maps"):
    if re.search(r"lib(open)?blas[^/]*\.so", line): print(line.split()[-1]); break')
echo "== BLAS: ${blas_lib:-unknown}"

# --- peers: Horovod in build/peers/venv -----------------------------------
hvd_python=$peers/venv/bin/python
horovod_reason=""
if ! "$hvd_python" -c 'import horovod.torch' >/dev/null 2>&1; then
  if ((install)) && [[ ! -f $peers/horovod.failed ]]; then
    echo "== installing Horovod into $peers/venv (log: $peers/install.log)"
    "$here/install-horovod.sh" || true
  fi
  if ! "$hvd_python" -c 'import horovod.torch' >/dev/null 2>&1; then
    if [[ -f $peers/horovod.failed ]]; then
      horovod_reason=$(cat "$peers/horovod.failed")
    else
      horovod_reason="not installed (run benchmarks/train/install-horovod.sh)"
    fi
    echo "== horovod: not available: $horovod_reason"
  fi
fi
if [[ -z $horovod_reason ]]; then
  echo "== horovod: $("$hvd_python" -c 'import horovod; print(horovod.__version__)') in $peers/venv"
fi

load1() { cut -d' ' -f1 /proc/loadavg; }

# run_py MODEL MODE ROUND: one launch of bench_train.py; appends to $raw.
run_py() {
  local model=$1 mode=$2 round=$3 batch=$cnn_batch steps=$cnn_steps out
  [[ $model == mlp ]] && batch=$mlp_batch steps=$mlp_steps
  local args=(--model "$model" --batch-size "$batch" --steps "$steps" --warmup "$warmup"
              --threads "$threads")
  out=$logs/$model.$mode.r$round.log
  local load; load=$(load1)
  local t=(timeout -k 20 "$run_timeout")   # a hung job must not stop the table
  case $mode in
    nocomm) "${t[@]}" "$kolorun" --start-timeout 0 -np $np $sys_python "$here/bench_train.py" --mode nocomm "${args[@]}" ;;
    kolo) "${t[@]}" "$kolorun" -np $np $sys_python "$here/bench_train.py" --mode kolo "${args[@]}" ;;
    # Debian's torch 1.13 torchrun fails on Python 3.11 with the default
    # --redirects 0 (Std.from_str); --redirects 1 --tee 1 logs stdout and
    # still prints it.
    ddp) "${t[@]}" $sys_python -m torch.distributed.run --nproc_per_node $np --redirects 1 --tee 1 \
           --log_dir "$logs/torchrun.$model.r$round" \
           "$here/bench_train.py" --mode ddp "${args[@]}" ;;
    ddp-kolo) "${t[@]}" "$kolorun" -np $np $sys_python "$here/bench_train.py" --mode ddp-kolo \
           "${args[@]}" ;;
    horovod-gloo) "${t[@]}" "$peers/venv/bin/horovodrun" -np $np --gloo \
           "$hvd_python" "$here/bench_train.py" --mode horovod "${args[@]}" ;;
    horovod-mpi) "${t[@]}" mpirun --allow-run-as-root --bind-to none --tag-output -np $np \
           $(for v in PATH PYTHONPATH OMP_NUM_THREADS LD_LIBRARY_PATH OPENBLAS_NUM_THREADS; do
               [[ -n ${!v:-} ]] && echo "-x $v"; done) \
           "$hvd_python" "$here/bench_train.py" --mode horovod "${args[@]}" ;;
    *) echo "run.sh: unknown mode $mode" >&2; return 2 ;;
  esac >"$out" 2>&1 || { echo "   $model $mode round $round FAILED (see $out)"; tail -n 5 "$out"; return 0; }
  # The mean of the ranks' median step times.
  local ms
  ms=$(grep -o 'RANKSTEP rank=[0-9]* step_ms=[0-9.]*' "$out" | sed 's/.*step_ms=//' |
       awk '{s += $1; n++} END {if (n) printf "%.3f", s / n}')
  local params; params=$(grep -o 'params=[0-9]*' "$out" | head -n 1 | cut -d= -f2)
  printf 'python\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$mode" "$round" "${ms:-nan}" "$load" \
    "$batch" "${params:-0}" >>"$raw"
  printf '   %-4s %-13s round %d: %8s ms/step  (load %s)\n' "$model" "$mode" "$round" "${ms:-?}" "$load"
}

# run_cpp NAME ROUND: one launch of a C++ example; appends to $raw.
run_cpp() {
  local name=$1 round=$2 out=$logs/cpp.$1.r$2.log load value
  load=$(load1)
  case $name in
    synthetic-nocomm|synthetic-kolo)
      local flag=(); [[ $name == synthetic-nocomm ]] && flag=(--no-kolo)
      timeout -k 20 "$run_timeout" "$kolorun" -np $np "$build/examples/synthetic_benchmark/synthetic_benchmark" --model resnet18 \
        --batch-size 16 --image-size 64 --num-warmup-batches 3 --num-batches-per-iter 3 \
        --num-iters 6 "${flag[@]}" >"$out" 2>&1 || { echo "   $name FAILED (see $out)"; return 0; }
      value=$(grep -o 'step time: [0-9.]*' "$out" | tail -n 1 | awk '{print $3}') ;;
    fashion-np1|fashion-np2)
      timeout -k 20 "$run_timeout" "$kolorun" -np "${name#fashion-np}" "$build/examples/fashion_mnist/fashion_mnist" --epochs 1 \
        >"$out" 2>&1 || { echo "   $name FAILED (see $out)"; return 0; }
      value=$(grep -o '[0-9.]* images/s' "$out" | tail -n 1 | awk '{print $1}') ;;
  esac
  printf 'cpp\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${name%%-*}" "${name#*-}" "$round" "${value:-nan}" \
    "$load" 0 0 >>"$raw"
  printf '   %-24s round %d: %8s  (load %s)\n' "$name" "$round" "${value:-?}" "$load"
}

# Rotate a word list by N: "a b c" 1 -> "b c a".
rotate() { local -a w=($1); local n=$(($2 % ${#w[@]})); echo "${w[@]:n} ${w[@]:0:n}"; }

py_modes=()
for m in $modes; do
  if [[ $m == horovod-* && -n $horovod_reason ]]; then continue; fi
  py_modes+=("$m")
done
start_load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== $(date -Is) load average $start_load; $rounds rounds, $np processes, $threads thread(s) each"
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r"
  if ((python_suite)); then
    for model in $models; do
      for mode in $(rotate "${py_modes[*]}" $((r - 1))); do run_py "$model" "$mode" "$r"; done
    done
  fi
  if ((cpp)); then
    for name in $(rotate "synthetic-nocomm synthetic-kolo" $((r - 1))) \
                $(rotate "fashion-np1 fashion-np2" $((r - 1))); do
      run_cpp "$name" "$r"
    done
  fi
done
end_load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== $(date -Is) load average $end_load"

# --- table and CSV ----------------------------------------------------------
$sys_python - "$raw" "$csv" "$threads" "$np" "$start_load" "$end_load" "${horovod_reason}" \
  "$(basename "$(dirname "${blas_lib:-?/?}")")/$(basename "${blas_lib:-?}")" <<'EOF'
import csv, statistics, sys, time
raw, out, threads, np_, start_load, end_load, hvd_reason, blas = sys.argv[1:9]
rows = {}
for line in open(raw):
    suite, model, mode, rnd, value, load, batch, params = line.rstrip("\n").split("\t")
    r = rows.setdefault((suite, model, mode), {"values": {}, "loads": [], "batch": batch,
                                               "params": params})
    if value != "nan":
        r["values"][int(rnd)] = float(value)
    r["loads"].append(float(load))

def med(key):
    v = rows.get(key, {}).get("values", {})
    return statistics.median(v.values()) if v else None

def paired_overhead(key, base):
    """Median over rounds of (mode / nocomm of the same round) - 1, in %."""
    a, b = rows.get(key, {}).get("values", {}), rows.get(base, {}).get("values", {})
    ratios = [a[r] / b[r] - 1 for r in a if r in b]
    return 100 * statistics.median(ratios) if ratios else None

fmt = lambda x, f: "-" if x is None else f % x
records = []
print()
print("Python (bench_train.py): %s processes, %s thread(s) each, BLAS %s; load average %s at start, %s at end"
      % (np_, threads, blas, start_load, end_load))
print("%-4s %-13s %6s %10s %10s %-17s %10s %12s" % ("model", "mode", "batch", "params", "step ms",
      "min..max", "overhead", "ovh/DDP ovh"))
for model in sorted({k[1] for k in rows if k[0] == "python"}, key=["cnn", "mlp"].index):
    base = ("python", model, "nocomm")
    ddp_ovh = paired_overhead(("python", model, "ddp"), base)
    for mode in ["nocomm", "kolo", "ddp", "ddp-kolo", "horovod-gloo", "horovod-mpi"]:
        key = ("python", model, mode)
        if key not in rows:
            continue
        v = list(rows[key]["values"].values())
        ovh = None if mode == "nocomm" else paired_overhead(key, base)
        # The ratio means nothing when DDP's overhead is within the noise.
        rel = (ovh / ddp_ovh if (ovh is not None and ddp_ovh is not None and ddp_ovh >= 2.0
                                 and mode != "ddp") else None)
        print("%-4s %-13s %6s %10s %10s %-17s %10s %12s" % (
            model, mode, rows[key]["batch"], rows[key]["params"], fmt(med(key), "%.1f"),
            ("%.1f..%.1f" % (min(v), max(v))) if v else "-", fmt(ovh, "%+.1f%%"),
            fmt(rel, "%.2f")))
        records.append(dict(suite="python", model=model, mode=mode, np=np_, batch=rows[key]["batch"],
                            threads=threads, params=rows[key]["params"], metric="step_ms",
                            value=fmt(med(key), "%.3f"), min=fmt(min(v) if v else None, "%.3f"),
                            max=fmt(max(v) if v else None, "%.3f"), rounds=len(v),
                            overhead_pct=fmt(ovh, "%.2f"), overhead_over_ddp=fmt(rel, "%.3f"),
                            load_start=start_load, load_end=end_load))
if hvd_reason:
    print("horovod: not available: %s" % hvd_reason)

cpp = [k for k in rows if k[0] == "cpp"]
if cpp:
    print()
    print("C++ examples (kolorun, %s processes unless noted)" % np_)
    for key, label, metric in [(("cpp", "synthetic", "nocomm"), "synthetic resnet18 b16 64px, no comm", "step_ms"),
                               (("cpp", "synthetic", "kolo"), "synthetic resnet18 b16 64px, kolo", "step_ms"),
                               (("cpp", "fashion", "np1"), "fashion_mnist np 1 (1 epoch)", "images_per_s"),
                               (("cpp", "fashion", "np2"), "fashion_mnist np 2 (1 epoch)", "images_per_s")]:
        if key not in rows:
            continue
        v = list(rows[key]["values"].values())
        ovh = None
        if key[2] == "kolo":
            ovh = paired_overhead(key, ("cpp", "synthetic", "nocomm"))
        unit = "ms/step" if metric == "step_ms" else "images/s (all ranks)"
        print("  %-40s %9s %s  (%s)%s" % (label, fmt(med(key), "%.1f"), unit,
              ("%.1f..%.1f" % (min(v), max(v))) if v else "-",
              "" if ovh is None else "  overhead %+.1f%%" % ovh))
        records.append(dict(suite="cpp", model=key[1], mode=key[2],
                            np="1" if key[2] == "np1" else np_, batch="16" if key[1] == "synthetic" else "64",
                            threads="1", params="", metric=metric, value=fmt(med(key), "%.3f"),
                            min=fmt(min(v) if v else None, "%.3f"),
                            max=fmt(max(v) if v else None, "%.3f"), rounds=len(v),
                            overhead_pct=fmt(ovh, "%.2f"), overhead_over_ddp="-",
                            load_start=start_load, load_end=end_load))

fields = ["date", "blas", "suite", "model", "mode", "np", "batch", "threads", "params", "metric", "value",
          "min", "max", "rounds", "overhead_pct", "overhead_over_ddp", "load_start", "load_end"]
stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    for rec in records:
        w.writerow(dict(rec, date=stamp, blas=blas))
print()
print("wrote %s" % out)
EOF
echo "logs: $logs"
