#!/usr/bin/env bash
# kolo under a real Slurm: a one-node cluster of its own (munged, slurmctld
# and slurmd on this host, in a temporary folder, on free ports), then one
# way of starting a job on it:
#
#   tests/slurm/slurm_test.sh [--expect REGEX]... [--fails] sbatch TASKS PROGRAM [ARGS...]
#       the batch script of docs/running/torchrun-slurm.md ("Slurm: a C++
#       program"), submitted with sbatch --wait: it exports MASTER_ADDR
#       (scontrol show hostnames), MASTER_PORT and KOLO_SECRET_KEY, and
#       srun --mpi=none starts the TASKS ranks;
#   tests/slurm/slurm_test.sh [--expect REGEX]... [--fails] run COMMAND [ARGS...]
#       COMMAND (srun ..., salloc ...) from a shell that exported
#       MASTER_ADDR (this host), MASTER_PORT and KOLO_SECRET_KEY, as a user
#       on a login node would.
#
# Prints the job's output. Passes when the job succeeded (with --fails:
# failed) and its output matches every --expect (grep -E). Exits 77
# (ctest: skipped) with the reason when it cannot run here: not root (the
# daemons run as root), or Slurm and munge not installed
# (scripts/install-deps.sh installs them).
set -uo pipefail
export PATH=$PATH:/usr/sbin

skip() {
  printf 'slurm_test.sh: Skipped\n%s\n' "$1"
  exit 77
}
expect=()
fails=0
while :; do
  case "${1:-}" in
    --expect) expect+=("${2:?--expect needs a regex}"); shift 2 ;;
    --fails) fails=1; shift ;;
    *) break ;;
  esac
done
usage="usage: $0 [--expect REGEX]... [--fails] sbatch TASKS PROGRAM [ARGS...] | run COMMAND [ARGS...]"
mode=${1:-}
case "$mode" in
  sbatch) [ $# -ge 3 ] || { echo "$usage" >&2; exit 2; }; tasks=$2; shift 2 ;;
  run) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; tasks=2; shift ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || skip "needs root (slurmd and munged run as root here)"
for tool in munged mungekey slurmctld slurmd sbatch srun salloc sinfo scontrol; do
  command -v "$tool" >/dev/null ||
    skip "$tool is not installed (scripts/install-deps.sh installs slurm-wlm and munge)"
done

dir=$(mktemp -d /tmp/kolo-slurm.XXXXXX)
chmod 755 "$dir"
export SLURM_CONF=$dir/slurm.conf
stop() {
  local f pid
  for f in slurmd slurmctld munged; do
    pid=$(cat "$dir/$f.pid" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$dir"
}
trap stop EXIT
fail() {
  echo "slurm_test.sh: $1" >&2
  local log
  for log in munged slurmctld slurmd; do
    [ -s "$dir/$log.log" ] && { echo "--- $log.log (end)"; tail -20 "$dir/$log.log"; } >&2
  done
  exit 1
}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

# munge, with a key and socket of its own (a munged of the machine's may run).
mungekey --create --keyfile="$dir/munge.key" >/dev/null 2>&1 || fail "mungekey failed"
chmod 600 "$dir/munge.key"
munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" \
  || fail "munged did not start"

host=$(hostname -s)
cpus=$(nproc)
[ "$cpus" -ge "$tasks" ] || cpus=$tasks   # OverSubscribe below runs more tasks than cores
mkdir -p "$dir/state" "$dir/spool"
cat >"$SLURM_CONF" <<CONF
ClusterName=kolo-test
SlurmctldHost=$host
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=5
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
ready=0
for _ in $(seq 300); do   # up to 30 s for the node to register
  if [ "$(sinfo -h -o %t 2>/dev/null)" = idle ]; then ready=1; break; fi
  sleep 0.1
done
[ $ready = 1 ] || fail "the node did not come up: sinfo says '$(sinfo -h -o %t 2>&1)'"

cd "$dir" || fail "no $dir"
if [ "$mode" = sbatch ]; then
  # The documented batch script, on CPUs: no --gpus-per-node.
  printf -v program '%q ' "$@"
  {
    echo '#!/bin/bash'
    echo "#SBATCH --nodes=1 --ntasks-per-node=$tasks"
    echo 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
    echo "export MASTER_PORT=$(free_port)"
    echo 'export KOLO_SECRET_KEY=$(openssl rand -hex 32)'
    echo "srun --mpi=none $program"
  } >"$dir/train.sbatch"
  sbatch --wait --output="$dir/job.out" "$dir/train.sbatch" >"$dir/sbatch.out" 2>&1
  status=$?
  what="job $(grep -o '[0-9]*' "$dir/sbatch.out" | head -1) (sbatch)"
  cat "$dir/job.out" 2>/dev/null
  [ $status = 0 ] || cat "$dir/sbatch.out"
else
  export MASTER_ADDR=$host MASTER_PORT=$(free_port) KOLO_SECRET_KEY=$(openssl rand -hex 32)
  "$@" >"$dir/job.out" 2>&1
  status=$?
  what="'$*'"
  cat "$dir/job.out"
fi
if [ $fails = 1 ]; then
  [ $status != 0 ] || fail "$what succeeded; it should have failed"
else
  [ $status = 0 ] || fail "$what failed (exit $status)"
fi
for re in "${expect[@]}"; do
  grep -Eq -- "$re" "$dir/job.out" || fail "the output of $what does not match '$re'"
done
echo "slurm_test.sh: $what ended as expected (exit $status)"
