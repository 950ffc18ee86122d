"""Elastic recovery time, kolo vs Horovod on the same script and scenario.

Runs tests/elastic/elastic_worker.py (a Horovod elastic script; --horovod
makes it import horovod.torch) with 4 workers on this machine under an elastic
launcher (two "hosts" of 2 slots: two of its names), SIGKILLs the worker of
rank 2 (on the second host) after --kill-after steps, and
measures the time from the kill to the first completed training step of
the next world (the STEP line of the new world with the earliest time
stamp). Trials of the launchers alternate.

    python3 benchmarks/elastic/recovery.py [--trials 3] [--launchers kolo,horovod]
        [--kolorun build/default/launcher/kolorun]
        [--horovod-venv build/peers/venv]   # benchmarks/train/install-horovod.sh
        [--hosts 127.0.0.1:2,ADDRESS:2]

kolo runs with /usr/bin/python3 and PYTHONPATH=build/default/python;
Horovod with its venv's interpreter and horovodrun. Prints one line per
trial and the medians.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "elastic", "elastic_worker.py")
STEP = re.compile(r"STEP v=(\d+) worker=(\d+) rank=(\d+) .* t=(\d+)")
WORLD = re.compile(r"WORLD v=(\d+) worker=(\d+) rank=(\d+) size=(\d+)")


def now_ms():
    return int(time.time() * 1000)


def trial(launcher, args, scratch):
    discovery = os.path.join(scratch, "discover.sh")
    with open(discovery, "w") as f:
        f.write("#!/bin/sh\n" + "".join(f"echo {h}\n" for h in args.hosts.split(",")))
    os.chmod(discovery, 0o755)
    worker_args = [WORKER, "--epochs", "50", "--samples", "4096", "--batch", "8",
                   "--commit-every", "4", "--step-sleep-ms", "20"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    if launcher == "kolo":
        cmd = [args.kolorun, "-np", "4", "--min-np", "2", "--max-np", "4",
               "--host-discovery-script", discovery, "/usr/bin/python3"] + worker_args
        env["PYTHONPATH"] = os.path.join(ROOT, "build", "default", "python")
    else:
        venv = args.horovod_venv
        # Without --network-interfaces, horovodrun's interface probe never
        # finishes on this machine (no output, no worker started).
        cmd = [os.path.join(venv, "bin", "horovodrun"), "--network-interfaces", "lo",
               "-np", "4", "--min-np", "2",
               "--max-np", "4", "--host-discovery-script", discovery,
               os.path.join(venv, "bin", "python")] + worker_args + ["--horovod"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    pids = {}          # rank -> pid of the first world
    steps = 0
    killed_at = None
    first_new = None
    log = []
    deadline = time.time() + args.trial_timeout

    def watchdog():
        while proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    threading.Thread(target=watchdog, daemon=True).start()

    for line in proc.stdout:
        log.append(line)
        m = WORLD.search(line)
        if m and int(m.group(1)) == 1:
            pids[int(m.group(3))] = int(m.group(2))
        m = STEP.search(line)
        if not m:
            continue
        v, t = int(m.group(1)), int(m.group(4))
        if killed_at is None and v == 1:
            steps += 1
            if steps >= args.kill_after * 4 and 2 in pids:
                # WORLD's worker= is kolo's worker id, or the pid on Horovod.
                victim = pids[2] if launcher == "horovod" else worker_pid(pids[2], log)
                killed_at = now_ms()
                os.kill(victim, signal.SIGKILL)
        elif killed_at is not None and v >= 2:
            first_new = t if first_new is None else min(first_new, t)
            # A few more lines so that every rank's first step is seen.
            if sum(1 for l in log[-40:] if "STEP v=2" in l) >= 3:
                break
    stop(proc)
    if killed_at is None or first_new is None:
        tail = "".join(log[-15:])
        raise RuntimeError(f"{launcher}: no recovery seen (killed={killed_at})\n{tail}")
    size = next((int(m.group(4)) for m in map(WORLD.search, log)
                 if m and int(m.group(1)) == 2), None)
    return first_new - killed_at, size


def stop(proc):
    """Ends the job: SIGTERM first, so that horovodrun's multiprocessing
    cleans up its semaphores in /dev/shm (a SIGKILL leaves them behind)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


def worker_pid(worker_id, log):
    """kolo prints its worker id, not the pid: START lines carry the pid."""
    for line in log:
        m = re.search(r"START worker=(\d+) pid=(\d+)", line)
        if m and int(m.group(1)) == worker_id:
            return int(m.group(2))
    raise RuntimeError(f"no START line for worker {worker_id}")


def default_hosts():
    address = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    address = [a for a in address if ":" not in a]
    return f"127.0.0.1:2,{address[0]}:2" if address else "localhost:4"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--launchers", default="kolo,horovod")
    p.add_argument("--kolorun", default=os.path.join(ROOT, "build", "default", "launcher", "kolorun"))
    p.add_argument("--horovod-venv", default=os.path.join(ROOT, "build", "peers", "venv"))
    p.add_argument("--kill-after", type=int, default=10, help="steps per rank before the kill")
    p.add_argument("--hosts", default=default_hosts(),
                   help="host:slots,... for the discovery script (4 slots in all); default: two "
                        "names of this machine (127.0.0.1 and its first address), as two hosts "
                        "of 2 slots, so Horovod, which blacklists the host of a failed worker, "
                        "can go on")
    p.add_argument("--trial-timeout", type=float, default=180)
    args = p.parse_args()
    launchers = args.launchers.split(",")
    results = {l: [] for l in launchers}
    with tempfile.TemporaryDirectory() as scratch:
        for t in range(args.trials):
            for i in range(len(launchers)):
                launcher = launchers[(i + t) % len(launchers)]
                try:
                    ms, size = trial(launcher, args, scratch)
                except RuntimeError as e:
                    print(f"{launcher} trial {t + 1}: FAILED: {e}", flush=True)
                    continue
                results[launcher].append(ms)
                print(f"{launcher} trial {t + 1}: SIGKILL to the first step of the next world "
                      f"({size} ranks): {ms} ms", flush=True)
    for launcher, values in results.items():
        if values:
            print(f"{launcher}: median {statistics.median(values):.0f} ms over {len(values)} "
                  f"trials (min {min(values)}, max {max(values)})")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
