"""Ray Train with kolo.ray.KoloConfig on a local Ray cluster: a kolo.torch
training loop under DataParallelTrainer, fed by Ray Data shards, reporting
metrics and checkpoints through ray.train.report, resumed from its checkpoint
by a second fit, and ending with parameters equal to a single-process
reference. Runs under Ray Train V2 (Ray's default) here; the V1 test runs the
same loop in a child process with RAY_TRAIN_V2_ENABLED=0.

    PYTHONPATH=<build>/python python -m pytest -q tests/ray/test_train.py

Every test is bounded: KoloConfig(timeout_s=...) bounds kolo's collectives
and rendezvous, and conftest.py's watchdog ends the run (with every thread's
stack) if a test outlives its timeout_s mark.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

if __name__ != "__main__":
    # This process runs Train V2 (Ray's default); the V1 test's child process
    # sets RAY_TRAIN_V2_ENABLED=0 itself. Read when ray.train is imported.
    os.environ["RAY_TRAIN_V2_ENABLED"] = "1"

import pytest
import torch

import ray
import ray.cloudpickle

from kolo.ray.train import KoloBackend, KoloConfig, layout

# The training loop below runs in Ray's workers, which cannot import this
# file by name: ship its functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

FIT_TIMEOUT_S = 300  # two fits on a loaded 2-core machine take about 100 s
RAY_NUM_CPUS = 6     # logical: 3 one-CPU workers plus Ray Data's tasks
ROWS = 24           # divisible by every world size tested, so shards are equal
FEATURES = 4
LR = 0.1
MOMENTUM = 0.5


# ----------------------------------------------------------------------------
# The data, the model and the single-process reference.

def rows():
    """The data set: deterministic rows of a noisy linear relation."""
    out = []
    for i in range(ROWS):
        x = [((i * 7 + j * 3) % 11) / 5.0 - 1.0 for j in range(FEATURES)]
        y = 0.5 * x[0] - x[1] + 0.25 * x[2] + 2.0 * x[3] + 0.1 * ((i % 5) - 2)
        out.append({"id": i, "x0": x[0], "x1": x[1], "x2": x[2], "x3": x[3], "y": y})
    return out


def tensors(items):
    x = torch.tensor([[r["x%d" % j] for j in range(FEATURES)] for r in items], dtype=torch.float64)
    y = torch.tensor([[r["y"]] for r in items], dtype=torch.float64)
    return x, y


def make_model():
    torch.manual_seed(0)
    return torch.nn.Linear(FEATURES, 1).double()


def reference(steps):
    """Full-batch SGD over every row in one process: what N workers with
    equal shards and averaged gradients must reproduce."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    x, y = tensors(rows())
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {k: v.clone() for k, v in model.state_dict().items()}, losses


# ----------------------------------------------------------------------------
# The training loop every Ray Train worker runs.

def processes_holding(secret):
    """{"cmdline": pids whose command line holds secret, "environ": pids
    whose environment does}, over every process this user can read."""
    found = {"cmdline": [], "environ": []}
    needle = secret.encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for what in found:
            try:
                with open("/proc/%s/%s" % (pid, what), "rb") as f:
                    if needle in f.read():
                        found[what].append(int(pid))
            except OSError:
                pass
    return found


def train_loop(config):
    import ray.train

    import kolo.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    ctx = ray.train.get_context()
    rank, size = hvd.rank(), hvd.size()

    # Who is who: kolo's identity against Ray Train's, from every worker.
    facts = hvd.allgather_object({
        "hvd": [rank, size, hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
                hvd.cross_size()],
        "ray": [ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank(),
                ctx.get_local_world_size(), ctx.get_node_rank()],
        "secret_len": len(os.environ.get("KOLO_SECRET_KEY", "")),
        "pid": os.getpid(),
    }, name="facts")
    holders = processes_holding(os.environ["KOLO_SECRET_KEY"])
    total = hvd.allreduce(torch.tensor([float(rank + 1)]), op=hvd.Sum, name="sanity")

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())

    shard = ray.train.get_dataset_shard("train")
    for epoch in range(start, config["epochs"]):
        items = list(shard.iter_rows())
        ids = hvd.allgather_object(sorted(int(r["id"]) for r in items), name="ids.%d" % epoch)
        x, y = tensors(items)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        mean_loss = hvd.allreduce(loss.detach(), op=hvd.Average, name="loss.%d" % epoch).item()

        metrics = {"epoch": epoch, "loss": mean_loss, "facts": facts, "ids": ids,
                   "holders": holders,
                   "sum": total.item(), "resumed_at": start}
        with tempfile.TemporaryDirectory() as d:
            saved = None
            if rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "epoch": epoch}, os.path.join(d, "state.pt"))
                with open(os.path.join(d, "params.json"), "w") as f:
                    json.dump({k: v.tolist() for k, v in model.state_dict().items()}, f)
                saved = ray.train.Checkpoint.from_directory(d)
            ray.train.report(metrics, checkpoint=saved)
    hvd.shutdown()


# ----------------------------------------------------------------------------
# Checks on what a fit returned.

def check_result(result, size, epochs, resumed_at):
    assert result.error is None, result.error
    m = result.metrics
    assert m["epoch"] == epochs - 1 and m["resumed_at"] == resumed_at, m

    facts = m["facts"]
    assert len(facts) == size
    for r, f in enumerate(facts):
        world, wsize, local, lsize, cross, csize = f["hvd"]
        ray_world, ray_wsize, ray_local, ray_lsize, ray_node = f["ray"]
        assert (world, wsize) == (r, size) == (ray_world, ray_wsize), facts
        assert (local, lsize, cross) == (ray_local, ray_lsize, ray_node), facts
        assert csize == 1, facts                      # one Ray node here
        assert f["secret_len"] == 64, facts           # a fresh 256-bit secret
    assert m["sum"] == size * (size + 1) / 2

    # The secret is in no command line, and in no environment but the
    # workers' own (/proc/PID/environ shows a process's initial environment,
    # so even the workers show none: it was set after they started).
    holders = m["holders"]
    assert holders["cmdline"] == [], holders
    assert set(holders["environ"]) <= {f["pid"] for f in facts}, (holders, facts)

    # The shards are disjoint, equal, and together the whole data set.
    shards = m["ids"]
    assert sorted(i for s in shards for i in s) == list(range(ROWS)), shards
    assert {len(s) for s in shards} == {ROWS // size}, shards

    want, losses = reference(epochs)
    assert m["loss"] == pytest.approx(losses[-1], rel=1e-9, abs=1e-12)
    with result.checkpoint.as_directory() as d:
        with open(os.path.join(d, "params.json")) as f:
            got = json.load(f)
    for name, value in want.items():
        torch.testing.assert_close(torch.tensor(got[name], dtype=torch.float64), value,
                                   rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------------------------
# Fixtures and tests.

def fit(trainer_cls, size, epochs, storage, name, **kwargs):
    from ray.train import RunConfig, ScalingConfig
    trainer = trainer_cls(
        train_loop,
        train_loop_config={"epochs": epochs},
        backend_config=KoloConfig(timeout_s=60),
        scaling_config=ScalingConfig(num_workers=size, use_gpu=False),
        run_config=RunConfig(name=name, storage_path=str(storage)),
        datasets={"train": ray.data.from_items(rows())},
        **kwargs)
    return trainer.fit()


def test_layout_follows_nodes():
    got = layout(["a", "a", "b", "a", "c"])
    assert [g["local_rank"] for g in got] == [0, 1, 0, 2, 0]
    assert [g["local_size"] for g in got] == [3, 3, 1, 3, 1]
    assert [g["cross_rank"] for g in got] == [0, 0, 1, 0, 2]
    assert {g["cross_size"] for g in got} == {3}
    assert [g["rank"] for g in got] == [0, 1, 2, 3, 4]


def test_config_is_checked():
    assert KoloConfig().backend_cls is KoloBackend
    assert KoloConfig(nics={"eth0"}).iface() == "eth0"
    assert KoloConfig(nics={"eth1", "eth0"}).iface() == "eth0,eth1"
    assert KoloConfig(nics=["ib0", "eth0"]).iface() == "ib0,eth0"
    assert KoloConfig(nics="").iface() is None
    with pytest.raises(ValueError, match="interface names"):
        KoloConfig(nics=["eth0", ""])
    with pytest.raises(ValueError, match="set by the backend"):
        KoloConfig(env_vars={"KOLO_SECRET_KEY": "x"})
    with pytest.raises(ValueError, match="positive"):
        KoloConfig(timeout_s=0)
    # The job's secret is made per start, never part of the config.
    assert "secret" not in json.dumps(KoloConfig(timeout_s=5).to_dict()).lower()


@pytest.mark.timeout_s(FIT_TIMEOUT_S)
@pytest.mark.parametrize("size", [2, 3])
def test_train_v2(ray_cluster, tmp_path, size):
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    if size == 2:
        # Three epochs, then a second fit of the same run (same name and
        # storage) restores the last checkpoint and trains three more.
        first = fit(DataParallelTrainer, size, 3, tmp_path, "resume")
        check_result(first, size, epochs=3, resumed_at=0)
        second = fit(DataParallelTrainer, size, 6, tmp_path, "resume")
        check_result(second, size, epochs=6, resumed_at=3)
    else:
        check_result(fit(DataParallelTrainer, size, 4, tmp_path, "np3"), size, 4, 0)


def failing_loop(config):
    import kolo.torch as hvd

    hvd.init()
    hvd.allreduce(torch.ones(2), name="warm")
    if hvd.rank() == 1:
        with open(config["stamp"], "w") as f:
            f.write(repr(time.time()))
        raise ValueError("rank 1 gives up")
    hvd.allreduce(torch.ones(2), name="never")  # rank 1 never submits this
    time.sleep(3600)


@pytest.mark.timeout_s(FIT_TIMEOUT_S)
def test_failing_rank_ends_the_fit(ray_cluster, tmp_path):
    """One rank raising ends the fit with its error, without waiting for
    kolo's timeout in the rank it left blocked in an allreduce."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    timeout_s = 240
    stamp = str(tmp_path / "failed_at")
    trainer = DataParallelTrainer(
        failing_loop, train_loop_config={"stamp": stamp},
        backend_config=KoloConfig(timeout_s=timeout_s),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="fails", storage_path=str(tmp_path)))
    with pytest.raises(Exception, match="rank 1 gives up") as raised:
        trainer.fit()
    with open(stamp) as f:
        after_failure = time.time() - float(f.read())
    assert after_failure < timeout_s / 3, (after_failure, raised.value)


@pytest.mark.timeout_s(FIT_TIMEOUT_S)
def test_train_v1(ray_cluster, tmp_path):
    """The V1 DataParallelTrainer (RAY_TRAIN_V2_ENABLED=0), in a child
    process on the same cluster: a fit, then a second one resumed from its
    checkpoint with resume_from_checkpoint."""
    address = ray.get_runtime_context().gcs_address
    env = dict(os.environ, RAY_TRAIN_V2_ENABLED="0", RAY_ADDRESS=address)
    proc = subprocess.run([sys.executable, __file__, "v1", str(tmp_path)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=FIT_TIMEOUT_S - 20)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert "v1 ok" in proc.stdout, proc.stdout[-6000:]


def _v1_main(storage):
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False,
             runtime_env={"env_vars": {"RAY_TRAIN_V2_ENABLED": "0"}})
    from ray.train.data_parallel_trainer import DataParallelTrainer

    first = fit(DataParallelTrainer, 2, 2, storage, "v1")
    check_result(first, 2, epochs=2, resumed_at=0)
    second = fit(DataParallelTrainer, 2, 4, storage, "v1-resumed",
                 resume_from_checkpoint=first.checkpoint)
    check_result(second, 2, epochs=4, resumed_at=2)
    print("v1 ok", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["v1"]:
        _v1_main(sys.argv[2])
