"""DistributedOptimizer: identical parameters on every rank, equal to
single-process training on the union of the ranks' batches (computed on
every rank from the same seeds)."""
import warnings

import pytest
import torch

import kolo.torch as hvd
from conftest import same_on_all_ranks

FEATURES, HIDDEN, CLASSES, PER_RANK = 6, 8, 3, 4

OPTIMIZERS = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
    "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01, momentum=0.5),
    "Adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1),
}


class Net(torch.nn.Module):
    def __init__(self, extra=False):
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, CLASSES)
        self.extra = torch.nn.Linear(HIDDEN, HIDDEN) if extra else None
        self.frozen = torch.nn.Linear(2, 2)
        self.frozen.requires_grad_(False)

    def forward(self, x, use_extra=False):
        h = torch.tanh(self.fc1(x))
        if use_extra:
            h = torch.tanh(self.extra(h))
        return self.fc2(h)


def make_model(extra=False):
    torch.manual_seed(1234)
    return Net(extra).double()


def batch(step, rank, rows=PER_RANK):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(rows, FEATURES, generator=g, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (rows,), generator=g)
    return x, y


def full_batch(step):
    parts = [batch(step, r) for r in range(hvd.size())]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def loss_fn(model, x, y, **kw):
    return torch.nn.functional.cross_entropy(model(x, **kw), y)


def reference(make_opt, steps, clip=None):
    model = make_model()
    opt = make_opt(model.parameters())
    for step in range(steps):
        opt.zero_grad()
        loss_fn(model, *full_batch(step)).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return model


def assert_models_close(model, ref, **tol):
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), msg=name, **tol)


def assert_same_everywhere(model, tag):
    for name, p in model.named_parameters():
        assert same_on_all_ranks(p, "%s.%s" % (tag, name)), name


@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_matches_large_batch_training(opt_name):
    steps = 4
    model = make_model()
    base = OPTIMIZERS[opt_name](model.parameters())
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    assert isinstance(opt, type(base))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for step in range(steps):
        opt.zero_grad()
        loss_fn(model, *batch(step, hvd.rank())).backward()
        opt.step()
    assert_same_everywhere(model, "opt." + opt_name)
    assert_models_close(model, reference(OPTIMIZERS[opt_name], steps), rtol=1e-9, atol=1e-12)
    # The wrapper shares its state with the wrapped optimizer.
    assert base.state is opt.state and len(opt.state) > 0


def test_lr_scheduler_and_state_dict_work_on_the_wrapper():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for step in range(2):
        opt.zero_grad()
        loss_fn(model, *batch(step, hvd.rank())).backward()
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == 0.25
    opt.load_state_dict(opt.state_dict())


def test_unused_parameters_get_reduced_zeros():
    # Only rank 0 uses `extra`: every rank still reduces its gradient.
    steps = 2
    model = make_model(extra=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters())
    for step in range(steps):
        opt.zero_grad()
        loss_fn(model, *batch(step, hvd.rank()), use_extra=hvd.rank() == 0).backward()
        opt.step()
        assert model.extra.weight.grad is not None
    assert_same_everywhere(model, "unused")
    # Reference: rank 0's loss through extra, the others' without, averaged.
    ref = make_model(extra=True)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    for step in range(steps):
        ref_opt.zero_grad()
        total = sum(loss_fn(ref, *batch(step, r), use_extra=r == 0) for r in range(hvd.size()))
        (total / hvd.size()).backward()
        for p in ref.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
        ref_opt.step()
    assert_models_close(model, ref, rtol=1e-9, atol=1e-12)


def test_backward_passes_per_step_sums_local_gradients():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2)
    x, y = batch(0, hvd.rank())
    opt.zero_grad()
    loss_fn(model, x[:2], y[:2]).backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()  # accumulation in progress
    loss_fn(model, x[2:], y[2:]).backward()
    opt.step()
    assert_same_everywhere(model, "bpps")
    # Reference: per rank, the sum of the two half-batch losses; averaged.
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    total = 0
    for r in range(hvd.size()):
        xr, yr = batch(0, r)
        total = total + loss_fn(ref, xr[:2], yr[:2]) + loss_fn(ref, xr[2:], yr[2:])
    (total / hvd.size()).backward()
    ref_opt.step()
    assert_models_close(model, ref, rtol=1e-9, atol=1e-12)


def test_too_many_backward_passes_is_an_error():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = batch(0, hvd.rank())
    loss_fn(model, x, y).backward()
    with pytest.raises(AssertionError, match="more than backward_passes_per_step"):
        loss_fn(model, x, y).backward()
    opt.synchronize()  # every rank submitted every gradient in the first pass


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_compression_stays_close(compression):
    steps = 3
    model = make_model().float()
    make = OPTIMIZERS["SGD"]
    opt = hvd.DistributedOptimizer(make(model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   compression=getattr(hvd.Compression, compression))
    for step in range(steps):
        opt.zero_grad()
        x, y = batch(step, hvd.rank())
        loss_fn(model, x.float(), y).backward()
        opt.step()
        assert model.fc1.weight.grad.dtype == torch.float32
    assert_same_everywhere(model, "compress." + compression)
    ref = reference(make, steps)
    assert_models_close(model.double(), ref, rtol=0, atol=2e-2 if compression == "bf16" else 2e-3)


@pytest.mark.parametrize("groups", [2, "explicit"])
def test_groups(groups):
    steps = 2
    model = make_model()
    if groups == "explicit":
        groups = [[model.fc1.weight, model.fc2.weight], [model.fc1.bias, model.fc2.bias]]
    opt = hvd.DistributedOptimizer(OPTIMIZERS["Adam"](model.parameters()),
                                   named_parameters=model.named_parameters(), groups=groups)
    for step in range(steps):
        opt.zero_grad()
        loss_fn(model, *batch(step, hvd.rank())).backward()
        opt.step()
    assert_models_close(model, reference(OPTIMIZERS["Adam"], steps), rtol=1e-9, atol=1e-12)


def test_sum_op_and_predivide_factor():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1 / hvd.size()),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    opt.zero_grad()
    loss_fn(model, *batch(0, hvd.rank())).backward()
    opt.step()
    assert_models_close(model, reference(lambda ps: torch.optim.SGD(ps, lr=0.1), 1),
                        rtol=1e-9, atol=1e-12)
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   gradient_predivide_factor=float(hvd.size()))
    opt.zero_grad()
    loss_fn(model, *batch(0, hvd.rank())).backward()
    opt.step()
    assert_models_close(model, reference(lambda ps: torch.optim.SGD(ps, lr=0.1), 1),
                        rtol=1e-9, atol=1e-12)


def test_skip_synchronize_clip_then_step():
    steps = 2
    make = lambda ps: torch.optim.SGD(ps, lr=0.5)  # noqa: E731
    model = make_model()
    opt = hvd.DistributedOptimizer(make(model.parameters()),
                                   named_parameters=model.named_parameters())
    for step in range(steps):
        opt.zero_grad()
        loss_fn(model, *batch(step, hvd.rank())).backward()
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        with opt.skip_synchronize():
            opt.step()
    assert_models_close(model, reference(make, steps, clip=0.1), rtol=1e-9, atol=1e-12)
    # step() right after synchronize() without skip_synchronize() warns.
    opt.zero_grad()
    loss_fn(model, *batch(9, hvd.rank())).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    assert any("skip_synchronize" in str(w.message) for w in caught)


def test_zero_grad_between_backward_and_step_is_an_error():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    loss_fn(model, *batch(0, hvd.rank())).backward()
    with pytest.raises(AssertionError, match="before optimizer.step"):
        opt.zero_grad()
    opt.step()
    opt.zero_grad()


def test_step_with_closure():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())

    def closure():
        opt.zero_grad()
        loss = loss_fn(model, *batch(0, hvd.rank()))
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() > 0
    assert_models_close(model, reference(lambda ps: torch.optim.SGD(ps, lr=0.1), 1),
                        rtol=1e-9, atol=1e-12)


def test_name_errors_match_horovod():
    model = make_model()
    named = list(model.named_parameters())
    with pytest.raises(ValueError, match="named_parameters should be a sequence of tuples"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[p for _, p in named])
    with pytest.raises(ValueError, match="Parameter names in named_parameters must be unique. "
                                         "Found duplicates: fc1.weight"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=named + [("fc1.weight", named[0][1])])
    with pytest.raises(ValueError, match="one or more model parameters were not named"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=named[:2])
    with pytest.raises(ValueError, match="LBFGS"):
        hvd.DistributedOptimizer(torch.optim.LBFGS(model.parameters()))
    with pytest.raises(ValueError, match="op must be"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Max)


def test_unnamed_parameters_work():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    opt.zero_grad()
    loss_fn(model, *batch(0, hvd.rank())).backward()
    opt.step()
    assert_same_everywhere(model, "unnamed")


@pytest.mark.parametrize("compression", ["none", "python_compressor"])
def test_a_number_of_groups_splits_as_horovod_does(compression):
    """10 parameters in 4 groups are 3, 3, 2 and 2 (Horovod's split, the one
    the C++ optimizer makes); a group of one stays a group."""
    def make():
        return torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(5)]).double()

    kwargs = {}
    if compression == "python_compressor":
        from kolo.torch.compression import NoneCompressor

        class Identity(NoneCompressor):
            """Not one of the built-in compressions: the reducer calls it."""

        kwargs["compression"] = Identity
    model = make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), groups=4, **kwargs)
    assert [len(g["params"]) for g in opt._kolo_groups] == [3, 3, 2, 2]
    model = make()  # the first optimizer's hooks stay on the first model's parameters
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), groups=12, **kwargs)
    assert [len(g["params"]) for g in opt._kolo_groups] == [1] * 10
    opt.zero_grad()
    model(torch.ones(3, 2, dtype=torch.float64)).sum().backward()
    opt.step()
    for i, p in enumerate(model.parameters()):
        assert same_on_all_ranks(p, "groups_split.%s.%d" % (compression, i))
