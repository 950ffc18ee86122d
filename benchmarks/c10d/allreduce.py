"""dist.all_reduce on kolo's c10d backend against gloo, side by side in one
process: latency per size, and the host cost of an asynchronous call.

    kolorun -np 2 python3 benchmarks/c10d/allreduce.py [--sizes 4,65536,1048576,16777216]
        [--rounds 5] [--seconds 0.3] [--host-calls 2000] [--kolo-group default|new]
        [--csv FILE]

Both groups hold the same ranks: the default group is kolo's, the reference
a gloo group (new_group(backend="gloo")). The kolo group timed is the
default group, or with --kolo-group new a new_group(backend="kolo") of the
same ranks (a process set of the default group's engine). Every round times each size on
both, in an order that alternates between rounds, for about --seconds each;
a rank's figure is the median of its calls, the job's the mean over ranks,
and the printed ratio kolo/gloo is the median over rounds of each round's
ratio. Host cost: the time the caller spends in all_reduce(async_op=True) of
4 bytes (the call returns a Work; its waits come after), and the process's
CPU time per call (every thread: the backend's own included). kolo's figure
includes its negotiation, which checks every call against the other ranks'.

With TORCH_DISTRIBUTED_DEBUG=DETAIL set, torch wraps both groups in its
checking wrapper (the only way torch checks calls across ranks); run once
with and once without to see what that check costs each backend.
"""
import argparse
import csv
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import kolo.torch  # noqa: F401  (registers "kolo")


def timed_calls(group, tensor, iters):
    """Median seconds of one synchronous all_reduce over iters calls."""
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        dist.all_reduce(tensor, group=group)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def mean_over_ranks(value, group):
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, group=group)
    return t.item() / dist.get_world_size()


def host_cost(group, calls):
    """(issue seconds per call, process CPU seconds per call) for async 4-byte
    all_reduces, issued back to back in batches of 50 and then waited."""
    t = torch.ones(1)
    issue = 0.0
    cpu0 = time.process_time()
    done = 0
    while done < calls:
        works = []
        for _ in range(min(50, calls - done)):
            t0 = time.perf_counter()
            works.append(dist.all_reduce(t, group=group, async_op=True))
            issue += time.perf_counter() - t0
        for w in works:
            w.wait()
        done += len(works)
    return issue / calls, (time.process_time() - cpu0) / calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,65536,1048576,16777216",
                        help="bytes per all_reduce, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.3, help="per size, method and round")
    parser.add_argument("--host-calls", type=int, default=2000)
    parser.add_argument("--kolo-group", choices=["default", "new"], default="default",
                        help="the kolo group timed: the default group, or a new_group")
    parser.add_argument("--csv", default="")
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("kolo")
    groups = {"kolo": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    if args.kolo_group == "new":
        groups["kolo"] = dist.new_group(backend="kolo")
    rank, size = dist.get_rank(), dist.get_world_size()
    sizes = [int(s) for s in args.sizes.split(",")]
    debug = os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF")

    # Calls per block, from gloo's speed on the first pass (rank 0 decides).
    iters = {}
    for nbytes in sizes:
        tensor = torch.ones(max(1, nbytes // 4))
        per_call = timed_calls(groups["gloo"], tensor, 5)
        n = torch.tensor([max(5, min(20000, int(args.seconds / max(per_call, 1e-6))))])
        dist.broadcast(n, src=0, group=groups["gloo"])
        iters[nbytes] = int(n.item())

    ratios = {n: [] for n in sizes}
    latency = {(m, n): [] for m in groups for n in sizes}
    for r in range(args.rounds):
        order = list(groups) if r % 2 == 0 else list(reversed(list(groups)))
        for nbytes in sizes:
            tensor = torch.ones(max(1, nbytes // 4))
            for method in order:
                timed_calls(groups[method], tensor, 3)  # warm
                med = timed_calls(groups[method], tensor, iters[nbytes])
                latency[(method, nbytes)].append(mean_over_ranks(med, groups["gloo"]))
            ratios[nbytes].append(latency[("kolo", nbytes)][-1] / latency[("gloo", nbytes)][-1])

    host = {m: [] for m in groups}
    for r in range(args.rounds):
        order = list(groups) if r % 2 == 0 else list(reversed(list(groups)))
        for method in order:
            issue, cpu = host_cost(groups[method], args.host_calls)
            host[method].append((mean_over_ranks(issue, groups["gloo"]),
                                 mean_over_ranks(cpu, groups["gloo"])))

    if rank == 0:
        print("dist.all_reduce, float32 sum, %d ranks, %d rounds, kolo group: %s, "
              "TORCH_DISTRIBUTED_DEBUG=%s" % (size, args.rounds, args.kolo_group, debug))
        print("%10s %12s %12s %10s %s" % ("bytes", "gloo us", "kolo us", "kolo/gloo",
                                          "(ratio per round)"))
        rows = []
        for nbytes in sizes:
            g = statistics.median(latency[("gloo", nbytes)]) * 1e6
            k = statistics.median(latency[("kolo", nbytes)]) * 1e6
            ratio = statistics.median(ratios[nbytes])
            print("%10d %12.1f %12.1f %10.2f (%s)" % (
                nbytes, g, k, ratio, ", ".join("%.2f" % x for x in ratios[nbytes])))
            rows.append(["latency", nbytes, g, k, ratio, debug])
        print("host cost of all_reduce(async_op=True) of 4 bytes, per call:")
        for method in groups:
            issue = statistics.median(h[0] for h in host[method]) * 1e6
            cpu = statistics.median(h[1] for h in host[method]) * 1e6
            print("  %s: %.2f us in the call, %.2f us of process CPU time" % (method, issue, cpu))
        ki = statistics.median(h[0] for h in host["kolo"])
        gi = statistics.median(h[0] for h in host["gloo"])
        kc = statistics.median(h[1] for h in host["kolo"])
        gc = statistics.median(h[1] for h in host["gloo"])
        print("  kolo/gloo: %.2f in the call, %.2f of CPU time" % (ki / gi, kc / gc))
        rows.append(["host_issue_us", 4, gi * 1e6, ki * 1e6, ki / gi, debug])
        rows.append(["host_cpu_us", 4, gc * 1e6, kc * 1e6, kc / gc, debug])
        if args.csv:
            new = not os.path.exists(args.csv)
            with open(args.csv, "a", newline="") as f:
                w = csv.writer(f)
                if new:
                    w.writerow(["what", "bytes", "gloo", "kolo", "kolo_over_gloo",
                                "torch_distributed_debug"])
                w.writerows(rows)
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
