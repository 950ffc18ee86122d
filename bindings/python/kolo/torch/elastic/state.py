"""State objects of kolo.torch.elastic (horovod.torch.elastic's API):
TorchState and its handlers; State, ObjectState and HostsUpdatedInterrupt
are kolo.common.elastic's."""
import copy

import torch

from kolo import _kolo
from kolo.common.elastic import HostsUpdatedInterrupt, ObjectState, State  # noqa: F401
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class StateHandler:
    """Saves, restores and syncs one object held by a TorchState."""

    def __init__(self, value):
        self.value = value

    def save(self):
        """Copies value's state in memory."""
        raise NotImplementedError()

    def restore(self):
        """Puts back the copy of the last save() into value."""
        raise NotImplementedError()

    def sync(self):
        """Makes value's state rank 0's on every rank (collective)."""
        raise NotImplementedError()

    def set_value(self, value):
        """Replaces the object (``state.model = new_model``) and saves it."""
        self.value = value
        self.save()


class ModelStateHandler(StateHandler):
    """A torch.nn.Module: its state_dict (parameters and buffers)."""

    def __init__(self, model):
        super().__init__(model)
        self.save()

    def save(self):
        """Deep-copies the module's state_dict."""
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        """Loads the saved state_dict back."""
        self.value.load_state_dict(self._saved)

    def sync(self):
        """broadcast_parameters(state_dict, root_rank=0). Collective."""
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    """A torch.optim optimizer or DistributedOptimizer: its state_dict. A
    DistributedOptimizer's step interrupted by a failure is dropped first."""

    def __init__(self, optimizer):
        super().__init__(optimizer)
        self.save()

    def save(self):
        """Deep-copies the optimizer's state_dict."""
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        """Drops an interrupted step's gradients in flight and loads the
        saved state_dict back."""
        # A step interrupted by a failure left gradients in flight.
        abandon = getattr(self.value, "_kolo_abandon_step", None)
        if abandon is not None:
            abandon()
        self.value.load_state_dict(self._saved)

    def sync(self):
        """broadcast_optimizer_state(optimizer, root_rank=0). Collective."""
        abandon = getattr(self.value, "_kolo_abandon_step", None)
        if abandon is not None:
            abandon()
        broadcast_optimizer_state(self.value, root_rank=0)


class _StateDictHandler(StateHandler):
    """An object with state_dict()/load_state_dict() that every rank holds
    (LR schedulers, samplers): saved by deep copy, synced from rank 0 as one
    object named elastic.<kind>."""

    kind = None

    def __init__(self, value):
        super().__init__(value)
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(),
                                                    name="elastic." + self.kind))


class LRSchedulerStateHandler(_StateDictHandler):
    """A torch.optim LR scheduler: its state_dict, synced from rank 0."""

    kind = "lr_scheduler"


class SamplerStateHandler(_StateDictHandler):
    """An ElasticSampler: its epoch and progress, synced from rank 0."""

    kind = "sampler"


try:
    _LRScheduler = torch.optim.lr_scheduler.LRScheduler
except AttributeError:  # torch < 2.0
    _LRScheduler = torch.optim.lr_scheduler._LRScheduler

_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (_LRScheduler, LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    """The list of (type, StateHandler subclass) pairs TorchState consults,
    first match wins, for its keyword values (as horovod.torch.elastic)."""
    return _handler_registry


def set_handler_registry(registry):
    """Replaces that list; TorchState objects made later use it."""
    global _handler_registry
    _handler_registry = registry


def _get_handler(value):
    for handler_type, handler_cls in _handler_registry:
        if isinstance(value, handler_type):
            return handler_cls(value)
    return None


class TorchState(ObjectState):
    """The state of a PyTorch training process: a model, an optimizer (a
    DistributedOptimizer or any torch.optim optimizer) and keyword values.
    Keyword values that are modules, optimizers, LR schedulers or
    ElasticSamplers get their own handler; the others are picklable values
    exposed as attributes (state.epoch, state.batch, ...).

    Args:
        model (torch.nn.Module): the model (state.model).
        optimizer: the optimizer (state.optimizer).
        **kwargs: more objects and values, by name.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        self._handlers = {}
        values = {}
        for name, value in kwargs.items():
            handler = _get_handler(value)
            if handler is not None:
                self._handlers[name] = handler
            else:
                values[name] = value
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=_kolo.rank, **values)

    def save(self):
        """Saves every handled object and the plain values (commit() calls
        it)."""
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        """Restores every handled object and the plain values to the last
        save()."""
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        """Gives every rank rank 0's model, optimizer state, handled objects
        and values. Collective."""
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def __setattr__(self, name, value):
        if name != "_handlers" and hasattr(self, "_handlers") and name in self._handlers:
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)
