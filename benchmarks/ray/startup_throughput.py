"""kolo on Ray vs kolorun, in one run on one machine.

1. Start-up: from RayExecutor.start() (Ray already initialised) to the
   first completed allreduce on every rank, against from starting
   `kolorun -np N python -c <init; allreduce>` to the same point. The time
   of a rank is its wall clock after the allreduce; the job's is the
   latest rank's. Trials alternate.
2. Throughput: examples/ray/fashion_mnist.py --workers N against
   examples/python/fashion_mnist.py under kolorun -np N, one epoch each,
   images/s of the epoch as each prints it.

    PYTHONPATH=build/torch2/python .cache/venv-torch-2.11.0/bin/python \\
        benchmarks/ray/startup_throughput.py --workers 2 --trials 3 \\
        [--kolorun build/torch2/launcher/kolorun] [--skip-throughput]

Prints one line per trial and the medians.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FIRST_ALLREDUCE = (
    "import time, torch, kolo.torch as hvd\n"
    "hvd.init()\n"
    "hvd.allreduce(torch.ones(4), name='first')\n"
    "print('DONE %.6f' % time.time(), flush=True)\n"
    "hvd.shutdown()\n")


def first_allreduce():
    import torch
    import kolo.torch as hvd
    hvd.init()
    hvd.allreduce(torch.ones(4), name="first")
    return time.time()


def ray_startup(n):
    from kolo.ray import RayExecutor
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=n)
    t0 = time.time()
    ex.start()
    done = ex.run(first_allreduce)
    ex.shutdown()
    return max(done) - t0


def kolorun_startup(kolorun, n):
    t0 = time.time()
    out = subprocess.run([kolorun, "-np", str(n), sys.executable, "-c", FIRST_ALLREDUCE],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    done = [float(t) for t in re.findall(r"DONE ([0-9.]+)", out)]
    assert len(done) == n, out
    return max(done) - t0


def images_per_s(text):
    found = re.findall(r"epoch 1: .*?, ([0-9.]+) images/s", text)
    if not found:
        raise RuntimeError("no images/s in:\n" + text)
    return float(found[-1])


def ray_throughput(n, epochs):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "ray", "fashion_mnist.py"),
                          "--workers", str(n), "--epochs", str(epochs)],
                         capture_output=True, text=True, timeout=900, check=True)
    return images_per_s(out.stdout)


def kolorun_throughput(kolorun, n, epochs):
    out = subprocess.run([kolorun, "-np", str(n), sys.executable,
                          os.path.join(ROOT, "examples", "python", "fashion_mnist.py"),
                          "--epochs", str(epochs)],
                         capture_output=True, text=True, timeout=900, check=True)
    return images_per_s(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--kolorun", default=os.path.join(ROOT, "build", "torch2", "launcher", "kolorun"))
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    env_note = "OMP_NUM_THREADS=%s" % os.environ.get("OMP_NUM_THREADS", "unset")

    import ray
    ray.init(num_cpus=args.workers, include_dashboard=False, logging_level="WARNING")
    results = {"ray start": [], "kolorun start": [], "ray images/s": [], "kolorun images/s": []}
    try:
        for t in range(args.trials):
            r = ray_startup(args.workers)
            k = kolorun_startup(args.kolorun, args.workers)
            results["ray start"].append(r)
            results["kolorun start"].append(k)
            print("trial %d: start to first allreduce: ray %.3f s, kolorun %.3f s" % (t + 1, r, k),
                  flush=True)
    finally:
        ray.shutdown()
    if not args.skip_throughput:
        for t in range(args.trials):
            r = ray_throughput(args.workers, args.epochs)
            k = kolorun_throughput(args.kolorun, args.workers, args.epochs)
            results["ray images/s"].append(r)
            results["kolorun images/s"].append(k)
            print("trial %d: Fashion-MNIST images/s: ray %.0f, kolorun %.0f" % (t + 1, r, k),
                  flush=True)
    print("medians (%d workers, %s):" % (args.workers, env_note))
    for name, values in results.items():
        if values:
            print("  %-18s %.3f" % (name, statistics.median(values)))


if __name__ == "__main__":
    main()
