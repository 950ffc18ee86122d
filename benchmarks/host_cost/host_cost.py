"""Host cost per gradient: plain PyTorch vs DDP (gloo) vs kolo's
DistributedOptimizer, in Python and in C++ (LibTorch), at world size 1 and 2.

The model has 161 parameters of 4 values each (ResNet-50's gradient count)
and a forward of one multiply and one sum per parameter, so a step's time is
almost all host cost: autograd, the optimizer, and what the data-parallel
layer adds. Host cost per gradient = (step time - plain step time) / 161,
plain being the same model and optimizer without any data-parallel layer,
measured in the same process in the same round.

  python3 benchmarks/host_cost/host_cost.py [--rounds 5] [--steps 10] [--blocks 20]
      [--sizes 1,2] [--langs py,cpp] [--build [NAME=]build/default ...]
      [--compression python] [--csv benchmarks/results/host_cost.csv]

--compression python gives Python's kolo optimizer a compressor written in
Python (the identity, but not one of the built-in ones), which kolo's hooks
call for every gradient, each then reduced on its own.

A build directory holds benchmarks/bench_host_cost, launcher/kolorun and
python/ (the kolo package); its CMakeCache names the Python interpreter.
Several --build options compare builds (before/after a change) round by round.

Rounds are interleaved: round r runs every configuration (language x world
size x build) once before round r+1 starts, and inside each process the modes take
turns (plain, ddp, kolo) in blocks of --steps steps, --blocks blocks each; a
round's step time is the median of its blocks, which keeps the comparison fair
when the machine's load changes during the round. The table reports
medians over rounds, min-max in brackets, and kolo/DDP: the ratio of host
costs per gradient (C++ kolo against Python DDP of the same round: LibTorch
has no DDP). The machine's load average is printed before and after.

Worker mode (one process, or each rank under kolorun) prints one JSON line:
  host_cost.py --worker --steps N --warmup W
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

NPARAMS = 161
NUMEL = 4


def make_model(torch):
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.full((NUMEL,), 0.01 * (i + 1))) for i in range(NPARAMS)])

        def forward(self, x):
            total = None
            for p in self.ps:
                term = (p * x).sum()
                total = term if total is None else total + term
            return total

    return Tiny()


def compression(hvd, which):
    """The compressor of --compression: built-in none, or one in Python."""
    if which == "none":
        return hvd.Compression.none

    class Identity(hvd.Compression.none):
        """none's compress and decompress, in a class kolo does not know as
        built in: its hooks call them."""
    return Identity


def worker(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    import kolo.torch as hvd
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % os.environ["HOST_COST_PORT"],
                            rank=rank, world_size=size)

    x = torch.ones(NUMEL)
    models, opts = {}, {}
    for mode in args.modes:
        torch.manual_seed(0)
        model = make_model(torch)
        base = torch.optim.SGD(model.parameters(), lr=1e-3)
        if mode == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model)
            base = torch.optim.SGD(model.parameters(), lr=1e-3)
        elif mode == "kolo":
            base = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters(),
                                            compression=compression(hvd, args.compression))
        models[mode], opts[mode] = model, base

    def run(mode, steps):
        model, opt = models[mode], opts[mode]
        start = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad()
            model(x).backward()
            opt.step()
        return (time.perf_counter() - start) / steps

    for mode in args.modes:
        run(mode, args.warmup)
    times = {m: [] for m in args.modes}
    for _ in range(args.blocks):
        for mode in args.modes:
            dist.barrier()
            times[mode].append(run(mode, args.steps))
    result = {m: statistics.median(v) * 1e3 for m, v in times.items()}  # ms per step
    dist.barrier()
    if rank == 0:
        print("HOST_COST " + json.dumps({"lang": "py", "size": size, "step_ms": result,
                                          "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()
    hvd.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(cmd, size, kolorun, env):
    if size > 1:
        cmd = [kolorun, "-np", str(size)] + cmd
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True, timeout=600)
    lines = [l for l in out.stdout.splitlines() if "HOST_COST " in l]
    if out.returncode != 0 or not lines:
        sys.stderr.write(out.stdout)
        raise SystemExit("host_cost: %s failed (exit %d)" % (" ".join(cmd), out.returncode))
    return json.loads(lines[-1].split("HOST_COST ", 1)[1])


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cached_python(build):
    """The interpreter the build made its Python package for."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("KOLO_PYTHON_EXECUTABLE:INTERNAL="):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return sys.executable


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--modes", default="plain,ddp,kolo")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="steps per block")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--blocks", type=int, default=20,
                    help="blocks per mode per round; the modes take turns block by block and "
                         "each round reports the median block")
    ap.add_argument("--sizes", default="1,2")
    ap.add_argument("--langs", default="py,cpp")
    ap.add_argument("--build", action="append", default=[], metavar="[NAME=]DIR",
                    help="a kolo build directory (default build/default); give several "
                         "(e.g. before=DIR1 --build after=DIR2) to compare them round by round")
    ap.add_argument("--python", default="", help="default: the build's KOLO_PYTHON_EXECUTABLE")
    ap.add_argument("--csv", default="")
    ap.add_argument("--compression", choices=["none", "python"], default="none",
                    help="Python's kolo optimizer: built-in none, or a compressor in Python")
    args = ap.parse_args()
    args.modes = args.modes.split(",")
    if args.worker:
        worker(args)
        return

    builds = []
    for spec in args.build or [os.path.join(root, "build/default")]:
        name, _, path = spec.rpartition("=")
        path = os.path.abspath(path)
        builds.append((name or os.path.basename(path), path))
    sizes = [int(s) for s in args.sizes.split(",")]
    langs = args.langs.split(",")
    print("host_cost: %d rounds x %d steps, %d parameters; load average %s"
          % (args.rounds, args.steps, NPARAMS, loadavg()), flush=True)
    rows = {}  # (build, lang, size) -> list of {mode: ms}
    for r in range(args.rounds):
        for size in sizes:
            for lang in langs:
                for bname, bdir in builds:
                    env = dict(os.environ)
                    env["PYTHONPATH"] = (os.path.join(bdir, "python") + os.pathsep
                                         + env.get("PYTHONPATH", ""))
                    env.setdefault("OMP_NUM_THREADS", "1")
                    env["HOST_COST_PORT"] = str(free_port())
                    if lang == "py":
                        cmd = [args.python or cached_python(bdir), os.path.abspath(__file__),
                               "--worker", "--modes", ",".join(args.modes),
                               "--steps", str(args.steps), "--warmup", str(args.warmup),
                               "--blocks", str(args.blocks), "--compression", args.compression]
                    else:
                        cmd = [os.path.join(bdir, "benchmarks/bench_host_cost"),
                               "--steps", str(args.steps), "--warmup", str(args.warmup),
                               "--blocks", str(args.blocks)]
                    res = launch(cmd, size, os.path.join(bdir, "launcher/kolorun"), env)
                    rows.setdefault((bname, lang, size), []).append(res["step_ms"])
                    print("  round %d %s %s size %d: %s" % (r + 1, bname, lang, size, " ".join(
                        "%s %.3f ms" % kv for kv in res["step_ms"].items())), flush=True)

    def med(xs):
        return statistics.median(xs)

    print("\nload average after: %s" % loadavg())
    print("%-8s %-4s %4s %-6s %10s %20s %17s %9s" % (
        "build", "lang", "size", "mode", "step ms", "(min-max)", "host us/gradient",
        "kolo/DDP"))
    csv = ["build,lang,size,mode,rounds,step_ms_median,step_ms_min,step_ms_max,"
           "host_us_per_grad,kolo_over_ddp"]
    for bname, _ in builds:
        for size in sizes:
            # Python DDP of the same build's rounds is the yardstick for both
            # languages (LibTorch has no DDP).
            ddp_cost = None
            if (bname, "py", size) in rows and "ddp" in args.modes:
                pr = rows[(bname, "py", size)]
                ddp_cost = med([(x["ddp"] - x["plain"]) * 1e3 / NPARAMS for x in pr])
            for lang in langs:
                rs = rows[(bname, lang, size)]
                for mode in rs[0]:
                    steps = [x[mode] for x in rs]
                    cost = med([(x[mode] - x["plain"]) * 1e3 / NPARAMS for x in rs])
                    ratio = ""
                    if mode == "kolo" and ddp_cost:
                        ratio = "%.2f" % (cost / ddp_cost)
                    print("%-8s %-4s %4d %-6s %10.3f %20s %17s %9s" % (
                        bname, lang, size, mode, med(steps),
                        "(%.3f-%.3f)" % (min(steps), max(steps)),
                        "-" if mode == "plain" else "%.2f" % cost, ratio))
                    csv.append("%s,%s,%d,%s,%d,%.4f,%.4f,%.4f,%s,%s" % (
                        bname, lang, size, mode, len(rs), med(steps), min(steps), max(steps),
                        "" if mode == "plain" else "%.3f" % cost, ratio))
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("\n".join(csv) + "\n")
        print("csv: %s" % args.csv)


if __name__ == "__main__":
    main()
