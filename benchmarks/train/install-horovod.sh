#!/usr/bin/env bash
# Installs Horovod (PyTorch, Gloo and MPI built in) into a local venv, as a
# peer for benchmarks/train. Nothing here is committed: build/ is git-ignored.
#
#   benchmarks/train/install-horovod.sh [VENV]     # default build/peers/venv
#
# The venv uses --system-site-packages so Horovod builds against, and the
# benchmark runs on, Debian's python3-torch (the same torch as kolo.torch and
# DDP). Output goes to build/peers/install.log; on success the venv has a
# working `python -c "import horovod.torch"` and build/peers/horovod.ok; on
# failure build/peers/horovod.failed holds a one-line reason.
#
# Environment: HOROVOD_VERSION (default 0.28.1, the last release),
# INSTALL_TIMEOUT seconds (default 2400), SKIP_APT=1 to not install packages.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-$root/build/peers/venv}
peers=$root/build/peers
log=$peers/install.log
version=${HOROVOD_VERSION:-0.28.1}
timeout_s=${INSTALL_TIMEOUT:-2400}
sys_python=/usr/bin/python3
mkdir -p "$peers"
rm -f "$peers/horovod.ok" "$peers/horovod.failed"

fail() {
  echo "$*" >"$peers/horovod.failed"
  echo "install-horovod: FAILED: $*" | tee -a "$log" >&2
  exit 1
}

{
  echo "== $(date -Is) install horovod==$version into $venv"
  uptime
} >"$log"

# Build prerequisites (Debian package names).
need=()
for pkg in cmake g++ make python3-dev python3-venv libopenmpi-dev openmpi-bin; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  if [[ ${SKIP_APT:-0} == 1 ]]; then
    fail "missing Debian packages: ${need[*]} (SKIP_APT=1)"
  fi
  echo "== apt-get install ${need[*]}" >>"$log"
  { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"; } \
    >>"$log" 2>&1 || fail "apt-get install ${need[*]} failed (see $log)"
fi

$sys_python -c 'import torch' 2>/dev/null || fail "$sys_python cannot import torch (install python3-torch)"

if [[ ! -x $venv/bin/python ]]; then
  echo "== create venv" >>"$log"
  $sys_python -m venv --system-site-packages "$venv" >>"$log" 2>&1 || fail "python3 -m venv failed"
fi
py=$venv/bin/python
# The torch the venv sees must be Debian's, not one pip might pull in.
torch_file=$($py -c 'import torch; print(torch.__file__)' 2>>"$log") || fail "venv cannot import torch"
echo "== venv torch: $torch_file" >>"$log"

# Horovod's setup.py imports torch to decide what to build, so build without
# isolation (an isolated build environment cannot see Debian's torch).
$py -m pip install --upgrade 'pip<24.1' setuptools wheel >>"$log" 2>&1 \
  || fail "pip could not install setuptools/wheel (is PyPI reachable?)"
$py -m pip install cloudpickle psutil pyyaml packaging cffi >>"$log" 2>&1 \
  || fail "pip could not install Horovod's Python dependencies"

echo "== $(date -Is) pip install horovod==$version (timeout ${timeout_s}s)" >>"$log"
# MAKEFLAGS keeps the build to the machine's cores; Horovod's setup.py runs
# CMake and then make/ninja with its own -j otherwise.
env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_GPU_OPERATIONS= \
    HOROVOD_CPU_OPERATIONS=${HOROVOD_CPU_OPERATIONS:-} \
    MAKEFLAGS="-j$(nproc)" \
    timeout "$timeout_s" "$py" -m pip install --no-build-isolation --no-cache-dir -v \
      "horovod==$version" >>"$log" 2>&1
rc=$?
echo "== $(date -Is) pip exit $rc" >>"$log"
if ((rc == 124)); then
  fail "pip install horovod==$version did not finish within ${timeout_s}s"
elif ((rc != 0)); then
  reason=$(grep -E 'error:|Error|FAILED|fatal' "$log" | grep -v -E '^\s*(warning|--)' | tail -n 3 | tr '\n' ' ' | cut -c1-400)
  fail "pip install horovod==$version exited $rc: ${reason:-see $log}"
fi

$py -c 'import horovod.torch as hvd; print("horovod", __import__("horovod").__version__,
"gloo", hvd.gloo_built(), "mpi", hvd.mpi_built())' >>"$log" 2>&1 \
  || fail "horovod installed but 'import horovod.torch' fails (see $log)"
$py -c 'import horovod.torch as hvd; print(__import__("horovod").__version__, "gloo=%s mpi=%s" % (hvd.gloo_built(), hvd.mpi_built()))' \
  >"$peers/horovod.ok" 2>>"$log"
echo "install-horovod: OK: $(cat "$peers/horovod.ok")" | tee -a "$log"
