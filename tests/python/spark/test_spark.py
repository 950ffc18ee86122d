"""kolo.spark.run and pyspark's TorchDistributor with real PySpark in
local mode (local[2] and local[3]: a barrier stage of 2 or 3 tasks, each
in its own Spark Python worker).

The training function is a plain kolo.torch script's body (init,
broadcast_parameters, DistributedOptimizer, allreduce): the same function
runs unchanged under kolo.spark.run and under TorchDistributor, which sets
torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
"""
import os

import pytest


def train(steps=5, lr=0.1):
    """Trains a linear model on rank-dependent data; returns what rank 0
    saw of every rank (so TorchDistributor, which returns rank 0's result
    only, shows all of them)."""
    import torch
    import kolo.torch as hvd
    hvd.init()
    torch.manual_seed(1234 + hvd.rank())  # different initial weights per rank
    model = torch.nn.Linear(4, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                   named_parameters=model.named_parameters())
    x = torch.arange(8 * 4, dtype=torch.float32).reshape(8, 4) / 32 + hvd.rank()
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(hvd.allreduce(loss.detach(), name="loss").item())
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    mine = {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "weights": weights.tolist(), "losses": losses, "pid": os.getpid()}
    every = hvd.allgather_object(mine)
    hvd.shutdown()
    return every


def _ranks(spark):
    return int(spark.sparkContext.master.strip("local[]"))


def _check_training(every, size):
    assert [r["rank"] for r in every] == list(range(size))
    assert all(r["size"] == size for r in every)
    assert len({r["pid"] for r in every}) == size
    # Synchronous data-parallel training: identical weights on every rank,
    # and the averaged loss went down.
    assert all(r["weights"] == every[0]["weights"] for r in every)
    assert every[0]["losses"][-1] < every[0]["losses"][0]


def test_kolo_spark_run_trains_and_returns_results_in_rank_order(spark):
    import kolo.spark
    size = _ranks(spark)
    results = kolo.spark.run(train, args=(4,), kwargs={"lr": 0.05}, num_proc=size)
    assert len(results) == size
    for rank, every in enumerate(results):
        _check_training(every, size)
        assert every == results[0]  # every rank saw the same job
    # Each rank ran in a Spark Python worker, not in this driver.
    assert os.getpid() not in {r["pid"] for r in results[0]}


def fail_on_last_rank():
    import torch
    import kolo.torch as hvd
    hvd.init()
    hvd.barrier()
    if hvd.rank() == hvd.size() - 1:
        raise ArithmeticError("diverged on the last rank")
    hvd.allreduce(torch.ones(2), name="never.completes")
    return hvd.rank()


def test_kolo_spark_run_reraises_a_ranks_exception(spark):
    import kolo.spark
    from kolo.runner import RemoteTraceback
    size = _ranks(spark)
    with pytest.raises(ArithmeticError, match="diverged on the last rank") as info:
        kolo.spark.run(fail_on_last_rank, num_proc=size)
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert info.value.__cause__.rank == size - 1
    assert "fail_on_last_rank" in info.value.__cause__.text
    # The Spark application is still usable afterwards.
    assert spark.sparkContext.parallelize(range(4), 2).sum() == 6


def test_kolo_spark_run_with_too_few_task_slots(spark):
    import kolo.spark
    size = _ranks(spark)
    with pytest.raises(ValueError) as info:
        kolo.spark.run(train, num_proc=size + 2)
    text = str(info.value)
    assert "needs %d task slots" % (size + 2) in text
    assert "has %d" % size in text and spark.sparkContext.master in text


def test_torch_distributor_runs_the_same_function(spark):
    from pyspark.ml.torch.distributor import TorchDistributor
    size = _ranks(spark)
    every = TorchDistributor(num_processes=size, local_mode=False, use_gpu=False).run(
        train, 4, 0.05)
    _check_training(every, size)
