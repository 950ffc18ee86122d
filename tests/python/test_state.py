"""broadcast_parameters, broadcast_optimizer_state, broadcast_object and
allgather_object."""
import pytest
import torch

import kolo.torch as hvd

from test_optimizer import OPTIMIZERS, batch, loss_fn, make_model


class WithBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.bn = torch.nn.BatchNorm1d(4)


def perturbed(module):
    with torch.no_grad():
        for t in module.state_dict().values():
            if t.is_floating_point():
                t.add_(hvd.rank() + 1)
            else:
                t.add_(hvd.rank())
    return module


def test_broadcast_parameters_state_dict_covers_buffers():
    torch.manual_seed(0)
    model = perturbed(WithBatchNorm())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    torch.manual_seed(0)
    expect = WithBatchNorm()
    with torch.no_grad():
        for t in expect.state_dict().values():
            t.add_(1 if t.is_floating_point() else 0)
    for (k, a), (_, b) in zip(model.state_dict().items(), expect.state_dict().items()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("form", ["named_parameters", "parameters_list"])
def test_broadcast_parameters_other_forms(form):
    torch.manual_seed(0)
    model = perturbed(torch.nn.Linear(3, 2))
    root = hvd.size() - 1
    params = model.named_parameters() if form == "named_parameters" else list(model.parameters())
    hvd.broadcast_parameters(params, root_rank=root)
    torch.manual_seed(0)
    expect = torch.nn.Linear(3, 2)
    for a, b in zip(model.parameters(), expect.parameters()):
        assert torch.equal(a.detach(), b.detach() + root + 1)
    assert model.weight.requires_grad


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_broadcast_optimizer_state_restores_a_fresh_rank_exactly(opt_name):
    make = OPTIMIZERS[opt_name]
    model = make_model()
    opt = make(model.parameters())
    if hvd.rank() == 0:  # root trained a few steps; the others are fresh
        for step in range(3):
            opt.zero_grad()
            loss_fn(model, *batch(step, 0)).backward()
            opt.step()
        opt.param_groups[0]["lr"] *= 0.5  # an option that must travel too
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    root_state = hvd.broadcast_object(opt.state_dict(), root_rank=0, name="check." + opt_name)
    mine = opt.state_dict()
    assert mine["param_groups"] == root_state["param_groups"]
    assert mine["state"].keys() == root_state["state"].keys() and len(mine["state"]) > 0
    for key, state in mine["state"].items():
        for k, v in state.items():
            ref = root_state["state"][key][k]
            if isinstance(v, torch.Tensor):
                assert v.dtype == ref.dtype and torch.equal(v, ref), (key, k)
            else:
                assert v == ref, (key, k)
    # One more identical step keeps every rank identical.
    opt.zero_grad()
    loss_fn(model, *batch(7, 0)).backward()
    opt.step()
    for name, p in model.named_parameters():
        ref = hvd.broadcast(p.detach(), 0, name="after.%s.%s" % (opt_name, name))
        assert torch.equal(p.detach(), ref), name


def test_broadcast_optimizer_state_of_a_distributed_optimizer():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    opt.zero_grad()
    loss_fn(model, *batch(0, hvd.rank())).backward()
    opt.step()
    if hvd.rank() == 0:
        opt.param_groups[0]["lr"] = 0.123
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.123


OBJECTS = [None, 3, "text", b"\x00bytes\x00", {"a": [1, 2.5, (3, "x")], "t": torch.arange(4)},
           list(range(1000))]


@pytest.mark.parametrize("index", range(len(OBJECTS)))
def test_broadcast_object_round_trip(index):
    root = index % hvd.size()
    obj = OBJECTS[index] if hvd.rank() == root else "ignored"
    got = hvd.broadcast_object(obj, root_rank=root)
    expect = OBJECTS[index]
    if isinstance(expect, dict):
        assert got["a"] == expect["a"] and torch.equal(got["t"], expect["t"])
    else:
        assert got == expect


def test_allgather_object_round_trip():
    mine = {"rank": hvd.rank(), "payload": "x" * (hvd.rank() * 100)}
    got = hvd.allgather_object(mine)
    assert got == [{"rank": r, "payload": "x" * (r * 100)} for r in range(hvd.size())]
    assert hvd.allgather_object(hvd.rank(), name="named.gather") == list(range(hvd.size()))
