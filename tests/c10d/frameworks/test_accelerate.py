"""Hugging Face Accelerate on the CPU with kolo: the program makes the
"kolo" group first and Accelerate uses it as it is. (Accelerate itself
accepts only gloo or mpi on the CPU: a backend named in its
InitProcessGroupKwargs is refused.) The training gives gloo's result, and
one process's on the global batch."""
import datetime

import pytest
import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType, InitProcessGroupKwargs

from conftest import (PER_RANK, STEPS, dataset, flat, loss_fn, make_model, make_optimizer,
                      reference, same_on_every_rank, world_size)

TIMEOUT = datetime.timedelta(seconds=60)

# The models gloo trained, kept until the process exits. torch's gloo can
# deadlock when the last reference to its group goes right after a
# collective: the main thread, holding the GIL, drops the DDP model, whose
# reducer holds the group's last reference, and ~ProcessGroupGloo joins its
# worker threads; a worker that is still destroying the finished allgather
# needs the GIL to release that op's Python tensors, and waits for ever
# (both ranks seen so in gdb, torch 2.11). At exit the workers are idle.
_KEPT_UNTIL_EXIT = []


def forget_accelerate():
    """Accelerate keeps one state per process: each test starts afresh."""
    AcceleratorState._reset_state(reset_partial_state=True)


def train(backend):
    """STEPS steps under Accelerate on a `backend` group made first; returns
    the trained parameters, flattened."""
    dist.init_process_group(backend, timeout=TIMEOUT)
    try:
        accelerator = Accelerator(cpu=True)
        assert accelerator.state.distributed_type == DistributedType.MULTI_CPU
        assert accelerator.num_processes == dist.get_world_size()
        assert accelerator.process_index == dist.get_rank()
        model = make_model()
        opt = make_optimizer(model.parameters())
        loader = torch.utils.data.DataLoader(dataset(world_size()), batch_size=PER_RANK)
        model, opt, loader = accelerator.prepare(model, opt, loader)
        assert isinstance(model, torch.nn.parallel.DistributedDataParallel)
        steps = 0
        for x, y in loader:
            opt.zero_grad()
            accelerator.backward(loss_fn(model, x, y))
            opt.step()
            steps += 1
        assert steps == STEPS
        # The group is still the program's: Accelerate made none of its own.
        assert dist.get_backend() == backend
        weights = flat(accelerator.unwrap_model(model))
        gathered = accelerator.gather(weights[None])  # Accelerate's collective, on this group
        assert gathered.shape[0] == dist.get_world_size()
        assert all(torch.equal(row, weights) for row in gathered)
        assert same_on_every_rank(weights)
        if backend == "gloo":
            _KEPT_UNTIL_EXIT.append(model)
        return weights
    finally:
        forget_accelerate()
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def trained():
    return {backend: train(backend) for backend in ("kolo", "gloo")}


def test_a_kolo_group_made_first_trains_as_gloos(trained):
    torch.testing.assert_close(trained["kolo"], trained["gloo"], rtol=1e-12, atol=1e-12)


def test_it_equals_one_process_on_the_global_batch(trained):
    torch.testing.assert_close(trained["kolo"], reference(world_size()), rtol=1e-9, atol=1e-12)


def test_accelerate_refuses_kolo_as_its_own_backend():
    """What the guide tells users to avoid; it changes if Accelerate learns
    other CPU backends."""
    try:
        with pytest.raises(ValueError, match="backend kolo is not available"):
            Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend="kolo")])
        assert not dist.is_initialized()
    finally:
        forget_accelerate()
