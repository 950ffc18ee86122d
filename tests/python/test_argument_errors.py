"""Bad arguments to kolo.torch are ValueErrors naming the function and the
argument (as in Horovod, whose test_torch.py expects ValueError), never the
binding's TypeError. Each check fires on the calling rank before anything
is enqueued, so a failing check here cannot leave the ranks out of step.
One test per class of bad argument, over every public function taking it.
"""
import numpy as np
import pytest
import torch

import kolo.torch as hvd


def raises_value_error(call, *words):
    with pytest.raises(ValueError) as info:
        call()
    assert not isinstance(info.value, TypeError)
    for w in words:
        assert w in str(info.value), str(info.value)
    return info.value


def test_alltoall_float32_splits(size):
    # Horovod's test_horovod_alltoall_splits_type_error: splits that are not
    # integers (here uninitialised float32 memory) are a ValueError.
    tensor = torch.empty(size)
    splits = torch.empty(size, dtype=torch.float32)
    raises_value_error(lambda: hvd.alltoall(tensor, splits), "splits", "float32")
    raises_value_error(lambda: hvd.alltoall_async(tensor, splits), "splits", "float32")


@pytest.mark.parametrize("bad, words", [
    ("float list", ("splits[0]", "float")),
    ("float64 tensor", ("float64",)),
    ("bool tensor", ("bool",)),
    ("2-d tensor", ("1-d",)),
    ("negative", (">= 0",)),
    ("huge", (">= 0",)),
    ("string", ("list of ints",)),
    ("scalar", ("list of ints",)),
])
def test_alltoall_bad_splits(size, bad, words):
    splits = {
        "float list": [1.0] * size,
        "float64 tensor": torch.ones(size, dtype=torch.float64),
        "bool tensor": torch.ones(size, dtype=torch.bool),
        "2-d tensor": torch.ones(1, size, dtype=torch.int32),
        "negative": [-1] + [1] * (size - 1),
        "huge": [2 ** 70] * size,
        "string": "1,1",
        "scalar": 3.5,
    }[bad]
    tensor = torch.ones(size, 2)
    raises_value_error(lambda: hvd.alltoall(tensor, splits), *words)


def test_alltoall_integer_splits_of_every_kind(rank, size):
    # The accepted forms: int32 (Horovod's), other integer dtypes, numpy
    # ints and plain lists all mean the same splits.
    tensor = torch.arange(size * 2, dtype=torch.float32).reshape(size, 2) + 100 * rank
    expected = None
    for i, splits in enumerate([torch.ones(size, dtype=torch.int32),
                                torch.ones(size, dtype=torch.int64),
                                np.ones(size, dtype=np.int64), [1] * size]):
        out, received = hvd.alltoall(tensor, splits, name="argerr.splits.%d" % i)
        assert received.tolist() == [1] * size
        if expected is None:
            expected = out
        assert torch.equal(out, expected)


NOT_TENSORS = [[1.0, 2.0], np.ones(3, dtype=np.float32), 3.0, "tensor", None]

TENSOR_OPS = {
    "allreduce": lambda x: hvd.allreduce(x),
    "allreduce_": lambda x: hvd.allreduce_(x),
    "allreduce_async": lambda x: hvd.allreduce_async(x),
    "allreduce_async_": lambda x: hvd.allreduce_async_(x),
    "allgather": lambda x: hvd.allgather(x),
    "allgather_async": lambda x: hvd.allgather_async(x),
    "broadcast": lambda x: hvd.broadcast(x, 0),
    "broadcast_": lambda x: hvd.broadcast_(x, 0),
    "broadcast_async": lambda x: hvd.broadcast_async(x, 0),
    "broadcast_async_": lambda x: hvd.broadcast_async_(x, 0),
    "alltoall": lambda x: hvd.alltoall(x),
    "alltoall_async": lambda x: hvd.alltoall_async(x),
    "reducescatter": lambda x: hvd.reducescatter(x),
    "reducescatter_async": lambda x: hvd.reducescatter_async(x),
}


@pytest.mark.parametrize("fn", sorted(TENSOR_OPS))
@pytest.mark.parametrize("value", NOT_TENSORS, ids=lambda v: type(v).__name__)
def test_tensor_that_is_not_a_tensor(fn, value):
    raises_value_error(lambda: TENSOR_OPS[fn](value), fn, "torch.Tensor")


GROUPED_OPS = {
    "grouped_allreduce": lambda ts: hvd.grouped_allreduce(ts),
    "grouped_allreduce_": lambda ts: hvd.grouped_allreduce_(ts),
    "grouped_allreduce_async": lambda ts: hvd.grouped_allreduce_async(ts),
    "grouped_allreduce_async_": lambda ts: hvd.grouped_allreduce_async_(ts),
    "grouped_allgather": lambda ts: hvd.grouped_allgather(ts),
    "grouped_allgather_async": lambda ts: hvd.grouped_allgather_async(ts),
    "grouped_reducescatter": lambda ts: hvd.grouped_reducescatter(ts),
    "grouped_reducescatter_async": lambda ts: hvd.grouped_reducescatter_async(ts),
}


@pytest.mark.parametrize("fn", sorted(GROUPED_OPS))
@pytest.mark.parametrize("value, words", [
    ([torch.ones(2), [1.0]], ("tensors[1]", "torch.Tensor")),
    (torch.ones(2), ("list of torch.Tensor", "one tensor")),
    (5, ("list of torch.Tensor",)),
], ids=["list-with-a-list", "one-tensor", "int"])
def test_tensor_list_with_non_tensors(fn, value, words):
    raises_value_error(lambda: GROUPED_OPS[fn](value), fn, *words)


SCALED_OPS = {
    "allreduce": lambda x, **kw: hvd.allreduce(x, **kw),
    "allreduce_": lambda x, **kw: hvd.allreduce_(x, **kw),
    "allreduce_async": lambda x, **kw: hvd.allreduce_async(x, **kw),
    "grouped_allreduce": lambda x, **kw: hvd.grouped_allreduce([x], **kw),
    "grouped_allreduce_async_": lambda x, **kw: hvd.grouped_allreduce_async_([x], **kw),
    "reducescatter": lambda x, **kw: hvd.reducescatter(x, **kw),
    "grouped_reducescatter_async": lambda x, **kw: hvd.grouped_reducescatter_async([x], **kw),
}


@pytest.mark.parametrize("fn", sorted(SCALED_OPS))
@pytest.mark.parametrize("which", ["prescale_factor", "postscale_factor"])
@pytest.mark.parametrize("value", ["2", None, [2.0]], ids=["str", "None", "list"])
def test_scale_factor_that_is_not_a_number(fn, which, value):
    raises_value_error(lambda: SCALED_OPS[fn](torch.ones(4), **{which: value}), which, "number")


ROOTED_OPS = {
    "broadcast": lambda r: hvd.broadcast(torch.ones(2), r),
    "broadcast_": lambda r: hvd.broadcast_(torch.ones(2), r),
    "broadcast_async": lambda r: hvd.broadcast_async(torch.ones(2), r),
    "broadcast_async_": lambda r: hvd.broadcast_async_(torch.ones(2), r),
    "broadcast_object": lambda r: hvd.broadcast_object({"a": 1}, r),
    "broadcast_parameters": lambda r: hvd.broadcast_parameters({"w": torch.ones(2)}, r),
    "broadcast_optimizer_state": lambda r: hvd.broadcast_optimizer_state(
        torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1), r),
}


@pytest.mark.parametrize("fn", sorted(ROOTED_OPS))
@pytest.mark.parametrize("value, words", [
    (0.0, ("int rank", "float")),
    ("0", ("int rank", "str")),
    (None, ("int rank",)),
    (True, ("int rank", "bool")),
    (-1, ("not a rank",)),
    (2 ** 40, ("not a rank",)),
], ids=["float", "str", "None", "bool", "negative", "huge"])
def test_root_rank_that_is_not_a_rank(fn, value, words):
    raises_value_error(lambda: ROOTED_OPS[fn](value), fn, "root_rank", *words)


def test_root_rank_of_integer_kinds(rank):
    # numpy ints and 0-d integer tensors are ranks too (operator.index).
    for i, root in enumerate([np.int64(0), torch.tensor(0), 0]):
        out = hvd.broadcast(torch.full((2,), float(rank)), root, name="argerr.root.%d" % i)
        assert out.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("value", ["global", 1.5, 2 ** 40, -3],
                         ids=["str", "float", "huge", "negative"])
def test_process_set_that_is_not_a_set(value):
    with pytest.raises(ValueError) as info:
        hvd.allreduce(torch.ones(2), process_set=value)
    assert "process_set" in str(info.value) or "process set" in str(info.value)
    with pytest.raises(ValueError):
        hvd.barrier(process_set=value)


@pytest.mark.parametrize("fn", ["allreduce", "grouped_allreduce", "reducescatter",
                                "grouped_reducescatter"])
def test_compression_that_is_not_a_compressor(fn):
    call = getattr(hvd, fn)
    arg = torch.ones(4) if not fn.startswith("grouped") else [torch.ones(4)]
    raises_value_error(lambda: call(arg, compression="fp16"), fn, "Compression")


@pytest.mark.parametrize("fn", ["synchronize", "poll"])
def test_handle_that_is_not_a_handle(fn):
    raises_value_error(lambda: getattr(hvd, fn)(torch.ones(2)), fn, "handle")
    raises_value_error(lambda: getattr(hvd, fn)(7), fn, "handle")


@pytest.mark.parametrize("fn", ["allreduce", "allreduce_async", "reducescatter",
                                "grouped_allreduce"])
def test_op_that_is_not_a_reduce_op(fn):
    call = getattr(hvd, fn)
    arg = torch.ones(4) if not fn.startswith("grouped") else [torch.ones(4)]
    raises_value_error(lambda: call(arg, op="sum"), "op must be")


def test_broadcast_optimizer_state_of_a_non_optimizer():
    raises_value_error(lambda: hvd.broadcast_optimizer_state(torch.nn.Linear(2, 2), 0),
                       "broadcast_optimizer_state", "torch.optim.Optimizer")


def test_names_of_any_type_are_their_str(rank):
    # Horovod formats names with str(); a non-str name is not an error.
    got = hvd.broadcast_object({"from": rank}, 0, name=12345)
    assert got == {"from": 0}
    gathered = hvd.allgather_object(rank, name=("argerr", 1))
    assert gathered == list(range(hvd.size()))


@pytest.mark.parametrize("ranks, words", [
    ([0, 2 ** 40], ("1099511627776", "not a rank")),
    ([0, -1], ("-1", "not a rank")),
    ([0, 1.0], ("int ranks",)),
    ("01", ("list of ranks",)),
], ids=["huge", "negative", "float", "str"])
def test_process_set_ranks_that_are_not_ranks(ranks, words):
    raises_value_error(lambda: hvd.add_process_set(ranks), *words)
    raises_value_error(lambda: hvd.ProcessSet(ranks), *words)


def _sgd():
    return torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)


@pytest.mark.parametrize("kwargs, words", [
    (dict(gradient_predivide_factor="2"), ("gradient_predivide_factor", "number", "str")),
    (dict(gradient_predivide_factor=None), ("gradient_predivide_factor", "number")),
    (dict(gradient_predivide_factor=0.0), ("gradient_predivide_factor", "> 0")),
    (dict(gradient_predivide_factor=float("nan")), ("gradient_predivide_factor", "> 0")),
    (dict(backward_passes_per_step=1.5), ("backward_passes_per_step", "int >= 1", "float")),
    (dict(backward_passes_per_step="2"), ("backward_passes_per_step", "int >= 1", "str")),
    (dict(backward_passes_per_step=0), ("backward_passes_per_step", "int >= 1")),
    (dict(backward_passes_per_step=2 ** 40), ("backward_passes_per_step", "int >= 1")),
    (dict(compression="fp16"), ("compression", "Compression")),
    (dict(op="average"), ("op must be",)),
    (dict(op=hvd.Min), ("op must be",)),
    (dict(named_parameters=5), ("named_parameters", "int")),
    (dict(named_parameters=[("w",)]), ("named_parameters", "tuples")),
    (dict(groups=1.5), ("groups", "float")),
    (dict(groups=-1), ("groups", "int >= 0")),
    (dict(groups=[torch.ones(1)]), ("groups", "not a list of parameters")),
    (dict(num_groups="2"), ("groups", "str")),
    (dict(process_set=2 ** 40), ("process_set",)),
    (dict(process_set="global"), ("process_set",)),
], ids=lambda v: repr(v) if isinstance(v, dict) else "")
@pytest.mark.filterwarnings("ignore:num_groups is deprecated")
def test_distributed_optimizer_bad_arguments(kwargs, words):
    raises_value_error(lambda: hvd.DistributedOptimizer(_sgd(), **kwargs), *words)


@pytest.mark.parametrize("value", [torch.nn.Linear(2, 2), None, "SGD"],
                         ids=["module", "None", "str"])
def test_distributed_optimizer_of_a_non_optimizer(value):
    raises_value_error(lambda: hvd.DistributedOptimizer(value),
                       "DistributedOptimizer", "torch.optim.Optimizer")


def test_distributed_optimizer_number_kinds_are_accepted():
    # Horovod's examples pass argparse floats and ints; numpy and 0-d
    # tensor counts are ints too.
    opt = hvd.DistributedOptimizer(_sgd(), gradient_predivide_factor=np.float64(2),
                                   backward_passes_per_step=np.int64(2))
    assert opt.backward_passes_per_step == 2
    opt.backward_passes_per_step = torch.tensor(3)
    assert opt.backward_passes_per_step == 3
    raises_value_error(lambda: opt.set_backward_passes_per_step(0.5),
                       "set_backward_passes_per_step", "int >= 1")
    with pytest.raises(ValueError):
        opt.backward_passes_per_step = 0
    assert opt.backward_passes_per_step == 3


def test_broadcast_parameters_bad_prefix_and_pairs():
    params = {"w": torch.ones(2)}
    raises_value_error(lambda: hvd.broadcast_parameters(params, 0, prefix=3),
                       "broadcast_parameters", "prefix", "str")
    raises_value_error(lambda: hvd.broadcast_parameters([("w", torch.ones(2), 1)], 0),
                       "broadcast_parameters", "params[0]", "(name, tensor)")


def test_sync_batch_norm_bad_num_features():
    raises_value_error(lambda: hvd.SyncBatchNorm("3"), "SyncBatchNorm", "num_features")
    raises_value_error(lambda: hvd.SyncBatchNorm(0), "SyncBatchNorm", "num_features")


def test_elastic_sampler_bad_arguments():
    raises_value_error(lambda: hvd.elastic.ElasticSampler(5), "ElasticSampler", "len()")
    raises_value_error(lambda: hvd.elastic.ElasticSampler(range(8), seed="1"),
                       "ElasticSampler", "seed", "int")
    sampler = hvd.elastic.ElasticSampler(range(8), seed=-1)  # torch wraps negative seeds
    raises_value_error(lambda: sampler.set_epoch(2 ** 40), "set_epoch", "epoch")
    raises_value_error(lambda: sampler.set_epoch(1.5), "set_epoch", "epoch")
    raises_value_error(lambda: sampler.record_batch(0, "4"), "record_batch", "batch_size")
    raises_value_error(lambda: sampler.get_indices(-1, 4), "get_indices", "batch_idx")


def test_start_timeline_bad_path():
    raises_value_error(lambda: hvd.start_timeline(None), "start_timeline", "file_path")
    raises_value_error(lambda: hvd.start_timeline(3), "start_timeline", "file_path")
