"""kolo.torch.DistributedOptimizer on the C++ GradientReducer: one request per
bucket (seen in the timeline), gradients reduced in place, results equal to
the average of plain PyTorch gradients (bitwise on one rank), also with a
custom compressor written in Python, which that reducer calls."""
import json
import os
import resource

import pytest
import torch

import kolo.torch as hvd
from kolo.torch.compression import Compressor

FEATURES, HIDDEN, CLASSES, PER_RANK = 6, 8, 3, 4


def make_model():
    torch.manual_seed(77)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, CLASSES)).double()


def batch(step, rank):
    g = torch.Generator().manual_seed(500 * step + rank)
    return torch.randn(PER_RANK, FEATURES, generator=g, dtype=torch.float64)


def loss_fn(model, x):
    return model(x).pow(2).mean()


def average_of_plain_grads(step):
    """The average over ranks of each rank's plain PyTorch gradients."""
    model = make_model()
    total = None
    for r in range(hvd.size()):
        model.zero_grad()
        loss_fn(model, batch(step, r)).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        total = grads if total is None else [t + g for t, g in zip(total, grads)]
    return [t / hvd.size() for t in total]


def timeline_text(path):
    if hvd.rank() > 0:
        path = path[:-len(".json")] + ".rank%d.json" % hvd.rank()
    with open(path) as f:
        return f.read()


def test_one_request_per_bucket(tmp_path):
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters())
    reducer = opt._kolo_reducer
    assert reducer is not None
    # Backward order: the last layer's gradients come first.
    assert reducer.buckets() == [["2.bias", "2.weight", "0.bias", "0.weight"]]
    base = hvd.broadcast_object(str(tmp_path / "reducer.json"), root_rank=0)
    hvd.start_timeline(base)
    for step in range(3):
        opt.zero_grad()
        loss_fn(model, batch(step, hvd.rank())).backward()
        assert opt._kolo_submitted() == 4  # the hook submitted the whole bucket
        opt.step()
    hvd.stop_timeline()
    assert reducer.requests() == 3
    text = timeline_text(base)
    json.loads(text)
    # The bucket's name, stable across steps; no request per gradient.
    assert "grad.2.bias+3" in text
    assert "grad.0.weight" not in text
    hvd.barrier()


def test_gradients_reduced_in_place_and_equal_plain_average():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters())
    where = None
    for step in range(3):
        opt.zero_grad(set_to_none=False) if step else opt.zero_grad()
        loss_fn(model, batch(step, hvd.rank())).backward()
        before = [p.grad.data_ptr() for p in model.parameters()]
        opt.synchronize()
        after = [p.grad.data_ptr() for p in model.parameters()]
        assert after == before, "gradients were reduced out of place"
        if step > 0:
            # Zeroed in place: backward accumulated straight into the bucket.
            assert before == where
        where = before
        for p, ref in zip(model.parameters(), average_of_plain_grads(step)):
            if hvd.size() == 1:
                assert torch.equal(p.grad, ref)
            else:
                torch.testing.assert_close(p.grad, ref, rtol=1e-12, atol=1e-14)
        with opt.skip_synchronize():
            opt.step()


def arena_ranges():
    """Address ranges of the kolo arenas mapped in this process (its own and its peers')."""
    ranges = []
    with open("/proc/self/maps") as f:
        for line in f:
            if "/memfd:kolo-arena" in line:
                lo, hi = line.split()[0].split("-")
                ranges.append((int(lo, 16), int(hi, 16)))
    return ranges


def test_buckets_live_in_the_arena_the_peers_map():
    """With every rank on this host, the shared-memory plane runs and the
    buckets come from this process's arena (kolo/shareable.h), which the
    peers map: the plane reduces them in place. Alone, or with KOLO_SHM=0,
    there is no arena and the buckets are ordinary memory."""
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters())
    opt.zero_grad()
    loss_fn(model, batch(0, hvd.rank())).backward()
    opt.synchronize()
    ranges = arena_ranges()
    if not ranges and resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
        pytest.skip("an address space limit (ulimit -v): kolo makes no arena")
    if hvd.size() == 1 or hvd.local_size() != hvd.size() or os.environ.get("KOLO_SHM") == "0":
        assert ranges == [], ranges
    else:
        # Ours and one per peer.
        assert len(ranges) == hvd.size(), ranges
        for p in model.parameters():
            assert any(lo <= p.grad.data_ptr() < hi for lo, hi in ranges), "a bucket outside the arena"
    for p, ref in zip(model.parameters(), average_of_plain_grads(0)):
        torch.testing.assert_close(p.grad, ref, rtol=1e-12, atol=1e-14)
    with opt.skip_synchronize():
        opt.step()


class ScaleCompressor(Compressor):
    """A compressor written in Python: the C++ reducer calls it."""

    @staticmethod
    def compress(tensor):
        return tensor * 2.0, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor / 2.0


def test_custom_compressor_goes_through_the_cpp_reducer_one_parameter_at_a_time():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters(),
                                   compression=ScaleCompressor)
    reducer = opt._kolo_reducer
    # As Horovod does: what travels is known only once compress() ran.
    assert sorted(reducer.buckets()) == sorted([name] for name, _ in model.named_parameters())
    opt.zero_grad()
    before = reducer.requests()
    loss_fn(model, batch(0, hvd.rank())).backward()
    assert opt._kolo_submitted() == 4
    assert reducer.requests() - before == 4, "the hooks did not submit each gradient"
    opt.synchronize()
    for p, ref in zip(model.parameters(), average_of_plain_grads(0)):
        torch.testing.assert_close(p.grad, ref, rtol=1e-12, atol=1e-14)
    with opt.skip_synchronize():
        opt.step()


class FlakyCompressor(Compressor):
    """Sends float32 (a dtype of its own); its compress() raises while
    `failing` is set."""
    failing = False

    @staticmethod
    def compress(tensor):
        if FlakyCompressor.failing:
            raise KeyError("the compressor gave up")
        return tensor.float(), tensor.dtype

    @staticmethod
    def decompress(tensor, dtype):
        return tensor.to(dtype)


def test_an_error_in_a_custom_compressor_is_raised_by_step_and_the_next_step_works():
    """Raised inside backward (the C++ hook calls compress), the error comes
    back from step() as the compressor's own exception; the step after it
    reduces as before. Every rank's compressor fails, so nothing is left
    waiting for a peer."""
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters(),
                                   compression=FlakyCompressor, groups=[list(model.parameters())])
    FlakyCompressor.failing = True
    try:
        loss_fn(model, batch(0, hvd.rank())).backward()
        with pytest.raises(KeyError, match="the compressor gave up"):
            opt.step()
    finally:
        FlakyCompressor.failing = False
    opt.zero_grad()
    loss_fn(model, batch(1, hvd.rank())).backward()
    opt.synchronize()
    for p, ref in zip(model.parameters(), average_of_plain_grads(1)):
        assert p.grad.dtype == torch.float64
        torch.testing.assert_close(p.grad, ref, rtol=1e-6, atol=1e-7)
    with opt.skip_synchronize():
        opt.step()


def test_too_many_passes_raises_assertion_from_the_cpp_hook():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    loss_fn(model, batch(0, hvd.rank())).backward()
    try:
        loss_fn(model, batch(0, hvd.rank())).backward()
    except AssertionError as e:
        assert "more than backward_passes_per_step" in str(e), str(e)
    else:
        raise AssertionError("a second backward before step() did not raise")
    opt.synchronize()
