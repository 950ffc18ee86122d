"""kolo.torch.elastic: elastic training, as horovod.torch.elastic.

Usage::

    import kolo.torch as hvd            # was: import horovod.torch as hvd
    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        ...
        state.commit()

    train(state)

Start it with ``kolorun -np N --min-np M --max-np X --host-discovery-script
S python train.py`` (or ``-H``/``--hostfile`` for a fixed set of hosts).
"""
from kolo.common.elastic import run, worker_id, world_version  # noqa: F401
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.elastic.state import (  # noqa: F401
    HostsUpdatedInterrupt,
    ObjectState,
    State,
    TorchState,
    get_handler_registry,
    set_handler_registry,
)


__all__ = [
    "ElasticSampler",
    "HostsUpdatedInterrupt",
    "ObjectState",
    "State",
    "TorchState",
    "run",
    "worker_id",
    "world_version",
]
