"""Step time of one training step at size 1 on one GPU, side by side in one
run: plain PyTorch, kolo.torch's DistributedOptimizer (NCCL), PyTorch DDP
(NCCL, world size 1) and the same DDP on torch.distributed's "kolo" backend
(goal: within 1% of DDP on nccl), in fp32 and with bf16 autocast. The
variants train copies of one model and are timed in interleaved rounds
(each round times every variant once), so drift of the machine hits all
three alike; the median round is reported.

Then each variant runs a few steps under torch.profiler, and the CUDA API
calls per step (runtime and driver: cudaLaunchKernel, cudaEventQuery,
cuLaunchKernelEx, ... from every thread of the process, kolo's background
thread included) are counted: kolo's own calls are kolo's count minus
plain PyTorch's, listed by name, so that a polling loop (cudaStreamQuery,
cudaEventQuery) shows.

    kolorun -np 1 python3 benchmarks/gpu_step_overhead.py [--model resnet50]
        [--batch-size 64] [--image-size 224] [--rounds 7] [--steps 10]
        [--precisions fp32,bf16] [--profile-steps 5] [--no-ddp]

Needs a CUDA device (exits 77 without one). Prints one line per variant,
then `summary:` lines with the goals (kolo's overhead over plain PyTorch
<= 3%) that scripts/gpu-check collects.

kolo has no size-1 shortcut: at size 1 a CUDA gradient is queued,
negotiated, packed, reduced by ncclAllReduce and unpacked as at any size,
so these numbers include its whole data plane.
"""
import argparse
import collections
import contextlib
import copy
import os
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import kolo.torch as hvd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples", "python"))
from pytorch_synthetic_benchmark import resnet  # noqa: E402

PLAIN, KOLO, DDP = "plain PyTorch", "kolo DistributedOptimizer", "PyTorch DDP"
DDP_KOLO = "PyTorch DDP on kolo"
GOAL_PERCENT = 3.0
# CUDA runtime (cudaX) and driver (cuX) API calls as torch.profiler names them.
API_CALL = re.compile(r"^cu(da)?[A-Z]\w*$")


def autocast(precision):
    if precision == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train(model, opt, data, target, steps, precision):
    for _ in range(steps):
        opt.zero_grad()
        with autocast(precision):
            loss = F.cross_entropy(model(data), target)
        loss.backward()
        opt.step()


def time_rounds(variants, data, target, args, precision):
    """Median ms/step of each variant over interleaved rounds."""
    for model, opt in variants.values():
        train(model, opt, data, target, args.warmup, precision)
    torch.cuda.synchronize()
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (model, opt) in variants.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            train(model, opt, data, target, args.steps, precision)
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) * 1000.0 / args.steps)
    return times


def count_api_calls(model, opt, data, target, steps, precision):
    """CUDA API calls per step by name, from torch.profiler over `steps` steps."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    train(model, opt, data, target, 2, precision)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        train(model, opt, data, target, steps, precision)
        torch.cuda.synchronize()
    calls = collections.Counter()
    for ev in prof.key_averages():
        if ev.device_type == DeviceType.CPU and API_CALL.match(ev.key):
            calls[ev.key] += ev.count
    return {name: n / steps for name, n in calls.items()}


def report(times, args, precision, device_name):
    print("%s, batch %d, image %d, %s, size 1, %s: median of %d rounds x %d steps" % (
        args.model, args.batch_size, args.image_size,
        "bf16 autocast" if precision == "bf16" else "fp32", device_name, args.rounds, args.steps))
    med = {name: statistics.median(t) for name, t in times.items()}
    ref = med[PLAIN]
    for name, t in times.items():
        extra = "" if name == PLAIN else "  overhead %+.1f%%" % (100.0 * (med[name] / ref - 1))
        print("  %-26s %8.2f ms/step (min %.2f, max %.2f)%s" % (name, med[name], min(t), max(t), extra))
    kolo_over = 100.0 * (med[KOLO] / ref - 1)
    line = "ResNet-50 b%d %s size 1, Python plain %.2f ms, kolo %.2f ms (%+.1f%%)" % (
        args.batch_size, "bf16 autocast" if precision == "bf16" else "fp32", ref, med[KOLO], kolo_over)
    if DDP in med:
        line += ", DDP %.2f ms (%+.1f%%)" % (med[DDP], 100.0 * (med[DDP] / ref - 1))
    line += " (goal kolo <= %g%%: %s)" % (GOAL_PERCENT, "MET" if kolo_over <= GOAL_PERCENT else "NOT MET")
    if DDP in med and DDP_KOLO in med:
        vs_nccl = 100.0 * (med[DDP_KOLO] / med[DDP] - 1)
        line += "; DDP on kolo %.2f ms, %+.1f%% against DDP on nccl (goal within 1%%: %s)" % (
            med[DDP_KOLO], vs_nccl, "MET" if vs_nccl <= 1.0 else "NOT MET")
    if args.model != "resnet50":
        line = line.replace("ResNet-50", args.model)
    return line


def cudacount():
    """tools/cudacount's counters when it is preloaded (LD_PRELOAD), else None."""
    import ctypes
    lib = ctypes.CDLL(None)
    try:
        total, named, reset = (lib.kolo_cudacount_total, lib.kolo_cudacount_total_named,
                               lib.kolo_cudacount_reset)
    except AttributeError:
        return None
    total.restype = named.restype = ctypes.c_uint64
    total.argtypes = [ctypes.c_int]
    named.argtypes = [ctypes.c_char_p]
    return total, named, reset


def count_runtime_calls(counters, model, opt, data, target, steps, precision):
    """CUDA runtime calls per step as tools/cudacount sees them (every cuda*
    call, cudaGetDevice included): (the training side's: every thread but
    kolo's, autograd's included, where the gradient hooks run; kolo's
    threads'; all)."""
    total, named, reset = counters
    train(model, opt, data, target, 2, precision)
    torch.cuda.synchronize()
    reset()
    train(model, opt, data, target, steps, precision)
    kolos, every = named(b"kolo-"), total(2)
    return (every - kolos) / steps, kolos / steps, every / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet50", choices=["resnet18", "resnet50"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10, help="steps per variant per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--precisions", default="fp32,bf16",
                        help="comma-separated: fp32, bf16 (autocast to bfloat16)")
    parser.add_argument("--profile-steps", type=int, default=5,
                        help="steps under torch.profiler per variant (0: no API call count)")
    parser.add_argument("--no-ddp", action="store_true")
    args = parser.parse_args()
    precisions = [p for p in args.precisions.split(",") if p]
    if any(p not in ("fp32", "bf16") for p in precisions):
        parser.error("--precisions takes fp32 and/or bf16")
    if not torch.cuda.is_available():
        print("gpu_step_overhead: no CUDA device; run it on a GPU machine (scripts/gpu-check)")
        return 77
    hvd.init()
    if hvd.size() != 1:
        print("gpu_step_overhead measures size 1: run it with kolorun -np 1")
        return 2
    dev = torch.device("cuda", hvd.local_rank())
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    base = resnet(args.model).to(dev)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=dev)
    target = torch.randint(0, 1000, (args.batch_size,), device=dev)

    variants = {}
    plain = copy.deepcopy(base)
    variants[PLAIN] = (plain, torch.optim.SGD(plain.parameters(), lr=0.01))
    kmodel = copy.deepcopy(base)
    kopt = hvd.DistributedOptimizer(torch.optim.SGD(kmodel.parameters(), lr=0.01),
                                    named_parameters=kmodel.named_parameters())
    variants[KOLO] = (kmodel, kopt)
    if not args.no_ddp:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP_
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % (29500 + os.getpid() % 1000),
                                rank=0, world_size=1)
        dmodel = DDP_(copy.deepcopy(base), device_ids=[dev.index])
        variants[DDP] = (dmodel, torch.optim.SGD(dmodel.parameters(), lr=0.01))
        # The same DDP over torch.distributed's "kolo" backend.
        kolo_group = dist.new_group(backend="kolo")
        kdmodel = DDP_(copy.deepcopy(base), device_ids=[dev.index], process_group=kolo_group)
        variants[DDP_KOLO] = (kdmodel, torch.optim.SGD(kdmodel.parameters(), lr=0.01))

    device_name = torch.cuda.get_device_name(dev)
    summaries = []
    for precision in precisions:
        times = time_rounds(variants, data, target, args, precision)
        summaries.append(report(times, args, precision, device_name))

    calls = None
    precision = precisions[0]
    if args.profile_steps > 0:
        try:
            calls = {name: count_api_calls(model, opt, data, target, args.profile_steps, precision)
                     for name, (model, opt) in variants.items()}
        except Exception as e:  # a profiler that cannot trace: keep the timings
            print("gpu_step_overhead: torch.profiler failed: %s" % e)
            summaries.append("CUDA API calls/step: torch.profiler failed (%s)" % e)
    if calls is not None:
        total = {name: sum(c.values()) for name, c in calls.items()}
        print("CUDA API calls per step (%s, torch.profiler over %d steps, all threads):" % (
            precision, args.profile_steps))
        for name in variants:
            print("  %-26s %8.1f" % (name, total[name]))
        extra = {k: calls[KOLO].get(k, 0.0) - calls[PLAIN].get(k, 0.0)
                 for k in set(calls[KOLO]) | set(calls[PLAIN])}
        top = sorted(extra.items(), key=lambda kv: -abs(kv[1]))[:8]
        print("  kolo minus plain, by call: " +
              ", ".join("%s %+.1f" % (k, v) for k, v in top if abs(v) >= 0.05))
        top_kolo = sorted(calls[KOLO].items(), key=lambda kv: -kv[1])[:5]
        print("  kolo's most frequent: " + ", ".join("%s %.1f" % kv for kv in top_kolo))
        line = "CUDA API calls/step (%s): plain %.0f, kolo %.0f (kolo's own %+.0f" % (
            precision, total[PLAIN], total[KOLO], total[KOLO] - total[PLAIN])
        shown = [(k, v) for k, v in top if v >= 0.5][:4]
        if shown:
            line += ": " + ", ".join("%s %+.0f" % kv for kv in shown)
        line += ")"
        if DDP in total:
            line += ", DDP %.0f" % total[DDP]
        polls = sum(v for k, v in extra.items() if k.endswith("Query"))
        line += " (goal: no polling loop: %s, %+.0f *Query calls/step)" % (
            "MET" if polls < 10 else "NOT MET", polls)
        summaries.append(line)

    counters = cudacount()
    if counters is None:
        summaries.append("CUDA runtime calls/step (tools/cudacount): not preloaded; "
                         "LD_PRELOAD=<build>/tools/cudacount/libkolo_cudacount.so counts them")
    else:
        runtime = {name: count_runtime_calls(counters, model, opt, data, target,
                                             max(args.profile_steps, 5), precision)
                   for name, (model, opt) in variants.items()}
        reducer = getattr(kopt, "_kolo_reducer", None)
        buckets = max(1, len(reducer.buckets())) if reducer is not None else 1
        print("CUDA runtime calls per step (%s, tools/cudacount): training side (every "
              "thread but kolo's), kolo's threads, all threads" % precision)
        for name in variants:
            print("  %-26s %8.1f %8.1f %8.1f" % ((name,) + runtime[name]))
        train_extra = runtime[KOLO][0] - runtime[PLAIN][0]
        per_bucket = runtime[KOLO][1] / buckets
        summaries.append(
            "CUDA runtime calls/step (%s, tools/cudacount): kolo's on the training side %+.0f "
            "over plain (goal <= 20: %s), on kolo's threads %.1f per bucket, %d bucket(s) "
            "(goal <= 10: %s)" % (precision, train_extra, "MET" if train_extra <= 20 else "NOT MET",
                                 per_bucket, buckets, "MET" if per_bucket <= 10 else "NOT MET"))

    print("kolo has no size-1 shortcut: at size 1 it negotiates, packs, runs ncclAllReduce "
          "and unpacks as at any size (these numbers include all of it)")
    for line in summaries:
        print("summary: " + line)
    sys.stdout.flush()
    if not args.no_ddp:
        dist.destroy_process_group()
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
