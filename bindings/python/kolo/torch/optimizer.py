"""DistributedOptimizer: gradients averaged over ranks while backward runs.

The gradients go through kolo's C++ GradientReducer (_kolo_torch.GradientReducer,
adapters/torch/src/reducer.cc), the one the C++ DistributedOptimizer uses:
hooks registered in C++ on the gradient accumulators, buckets of gradients
submitted as one request each, reduced in place (p.grad becomes a view of its
bucket). A custom Compressor (not Compression.none/fp16/bf16) is called by
that reducer too: each parameter (or group) then travels as what its
compress() made of it, and comes back through its decompress().
"""
import contextlib
import warnings

import torch

from kolo import _kolo, _kolo_torch
from kolo.torch.compression import Compression
from kolo.torch._args import _check_compression, _count, _kind, _scale, _sid
from kolo.torch.ops import Adasum, Average, ReduceOp, Sum
from kolo.torch.process_sets import global_process_set

_GRAD_PREFIX = "grad."
# The compressors the C++ reducer implements, by their wire dtype.
_WIRE = {Compression.none: "none", Compression.fp16: "fp16", Compression.bf16: "bf16"}
# Gradients are bucketed up to this many bytes on the wire (as DDP's
# bucket_cap_mb); explicit groups are buckets of their own.
BUCKET_BYTES = 25 << 20


class _DistributedMixin:
    """Put in front of the wrapped optimizer's class (see DistributedOptimizer).

    The gradients belong to _kolo_reducer (the C++ GradientReducer: its
    hooks count the backward passes, submit the buckets and keep the state
    of the step). With op=Adasum the hooks only count passes: step() reduces
    the update the wrapped optimizer made (see _kolo_adasum_step).
    """

    def _kolo_setup(self, named_parameters, compression, backward_passes_per_step, op,
                    gradient_predivide_factor, groups, sparse_as_dense, process_set):
        fn = "DistributedOptimizer"
        if not isinstance(op, ReduceOp) or op not in (Average, Sum, Adasum):
            raise ValueError("kolo.torch.DistributedOptimizer: op must be kolo.torch.Average, "
                             "Sum or Adasum, got %r" % (op,))
        gradient_predivide_factor = _scale(gradient_predivide_factor, fn,
                                           "gradient_predivide_factor")
        if not gradient_predivide_factor > 0 or gradient_predivide_factor == float("inf"):
            raise ValueError("kolo.torch.DistributedOptimizer: gradient_predivide_factor must be "
                             "a finite number > 0, got %r" % (gradient_predivide_factor,))
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        backward_passes_per_step = _count(backward_passes_per_step, fn,
                                          "backward_passes_per_step")
        _check_compression(compression, fn)
        set_id = _sid(process_set)

        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            if (isinstance(named_parameters, (str, bytes, torch.Tensor))
                    or not hasattr(named_parameters, "__iter__")):
                raise ValueError("kolo.torch.DistributedOptimizer: named_parameters must be "
                                 "model.named_parameters() or a list of (name, parameter) "
                                 "tuples, got %s" % type(named_parameters).__name__)
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("noname.%d.%d" % (i, j), p)
                                for i, group in enumerate(self.param_groups)
                                for j, p in enumerate(group["params"])]
        if any(not isinstance(item, tuple) or len(item) != 2 for item in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                             "usually produced by model.named_parameters().")
        seen, dups = set(), []
        for name, _ in named_parameters:
            if name in seen and name not in dups:
                dups.append(name)
            seen.add(name)
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. "
                             "Found duplicates: %s" % ", ".join(dups))
        named_ids = {id(p) for _, p in named_parameters}
        unnamed = [id(p) for p in all_params if id(p) not in named_ids]
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters "
                             "were not named. Python object ids: %s"
                             % ", ".join(str(i) for i in unnamed))

        names = {id(p): name for name, p in named_parameters}
        self._kolo_params = [p for p in all_params if p.requires_grad]
        self._kolo_names = {p: _GRAD_PREFIX + names[id(p)] for p in self._kolo_params}
        # Horovod's attribute (parameter -> name); some Horovod programs read it.
        self._parameter_names = {p: names[id(p)] for p in all_params}
        self._kolo_compression = compression
        self._kolo_passes = backward_passes_per_step
        self._kolo_op = op
        # Gradients are reduced among the set's ranks; outside it the
        # optimizer steps on local gradients (as Horovod's does).
        self._kolo_set = set_id
        set_ranks = _kolo.process_set_ranks(self._kolo_set)
        self._kolo_member = _kolo.rank() in set_ranks
        # Horovod's delta optimizer; on one rank Horovod uses the ordinary
        # optimizer (an Adasum of one tensor is that tensor).
        self._kolo_delta = op == Adasum and len(set_ranks) > 1 and self._kolo_member
        if op == Average:
            self._kolo_scales = (1.0 / gradient_predivide_factor, gradient_predivide_factor)
        else:
            self._kolo_scales = (1.0, 1.0)
        self._kolo_sparse_as_dense = sparse_as_dense
        self._kolo_should_sync = True
        self._kolo_synchronized = False
        self._kolo_setup_groups(groups)
        index = {p: i for i, p in enumerate(self._kolo_params)}
        # On one rank Adasum is the identity: a Sum of one contribution.
        rop = Sum if op == Adasum and not self._kolo_delta else op
        wire = _WIRE.get(compression)
        compress, decompress = (None, None) if wire is not None else _through(compression)
        self._kolo_reducer = _kolo_torch.GradientReducer(
            [(names[id(p)], p) for p in self._kolo_params], backward_passes_per_step, rop,
            wire or "none", gradient_predivide_factor,
            [[index[p] for p in g["params"]] for g in self._kolo_groups], _GRAD_PREFIX,
            sparse_as_dense, self._kolo_set, BUCKET_BYTES, compress, decompress)

    def _kolo_setup_groups(self, groups):
        """groups: None, a number of groups, or lists of parameters; sets
        _kolo_groups, one {"params": [...]} per unit the reducer reduces
        whole."""
        self._kolo_groups = []
        if groups is None or (isinstance(groups, int) and not isinstance(groups, bool)
                              and groups == 0):
            return
        bad = ("kolo.torch.DistributedOptimizer: groups must be an int >= 0 or a list of "
               "lists of parameters, got %s")
        if isinstance(groups, int) and not isinstance(groups, bool):
            if groups < 0:
                raise ValueError(bad % groups)
            # Horovod's split (10 in 4: 3, 3, 2, 2), the one the C++
            # optimizer makes too.
            members = [[self._kolo_params[i] for i in group]
                       for group in _kolo.split_into_groups(len(self._kolo_params), groups)]
        else:
            if (isinstance(groups, (str, bytes, bool, torch.Tensor))
                    or not hasattr(groups, "__iter__")):
                raise ValueError(bad % _kind(groups))
            groups = list(groups)
            if any(isinstance(g, (str, bytes, torch.Tensor)) or not hasattr(g, "__iter__")
                   for g in groups):
                raise ValueError(bad % "a list with an item that is not a list of parameters")
            wanted = {p for p in self._kolo_params}
            members = []
            for group in groups:
                group = [p for p in group if p in wanted]
                if group:
                    members.append(group)
        grouped = set()
        for group in members:
            # A group of one is reduced on its own, as Horovod's are, not
            # bucketed with the ungrouped parameters.
            if any(p in grouped for p in group):
                raise ValueError("a parameter appears in more than one group")
            grouped.update(group)
        self._kolo_groups = [{"params": group} for group in members]

    def synchronize(self):
        """Enqueues the gradients not enqueued yet (zeros for parameters that
        got none), waits for every allreduce and writes the results into
        p.grad. A second call without new gradients is a no-op. With
        op=Adasum it does nothing: step() reduces the update."""
        if self._kolo_delta:
            return
        self._kolo_reducer.synchronize()
        self._kolo_synchronized = True

    def _kolo_abandon_step(self):
        """Forgets the gradients of an interrupted step (elastic training,
        after a peer failure): waits for the allreduces in flight, which end
        with an error once the failed engine stops, and starts clean."""
        self._kolo_reducer.reset_step()
        self._kolo_synchronized = False

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize: call synchronize()
        first (e.g. to clip the averaged gradients), then step()."""
        if self._kolo_delta:
            raise AssertionError("Skipping synchronization is not supported when using Adasum "
                                 "optimizer.")
        self._kolo_should_sync = False
        try:
            yield
        finally:
            self._kolo_should_sync = True

    def _kolo_adasum_step(self):
        """Horovod's delta optimizer: each parameter takes the wrapped
        optimizer's local step, the change is combined over ranks with
        Adasum, and the parameter becomes its value before the step plus that
        combination. Parameters without a gradient step on zeros, so every
        rank submits every parameter. torch's step hooks run once, around
        all of it (see DistributedOptimizer).

        The step itself is kolo::torch::adasum_delta_step, the C++
        optimizer's; this passes it the names and the compressor's compress
        and decompress (none for Compression.none). A failed reduction
        leaves every parameter as it was before the step."""
        compress, decompress = (None, None) if self._kolo_compression is Compression.none \
            else _through(self._kolo_compression)
        try:
            _kolo_torch.adasum_delta_step(
                self._kolo_params, [self._kolo_names[p] for p in self._kolo_params],
                self._kolo_local_step, compress, decompress, self._kolo_set)
        finally:
            self._kolo_restart_passes()

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._kolo_delta:
            self._kolo_hooked_adasum_step()
            return loss
        if self._kolo_should_sync:
            if self._kolo_synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "after optimizer.synchronize(): the gradients are reduced again "
                              "(no-op) but this usually means a missing skip_synchronize().")
            self.synchronize()
        self._kolo_synchronized = False
        super().step()  # the wrapped class's step: torch's hooks and profiler record, once
        return loss

    # torch.optim.Optimizer wraps its class's step with the step hooks and the
    # profiler's record (torch 2.x: _patch_step_function, 1.13:
    # _hook_for_profile) unless that step is marked hooked. This step runs
    # them through the wrapped class's step (or, with Adasum,
    # _kolo_hooked_adasum_step): marked so that torch does not run them twice.
    step.hooked = True

    def _kolo_hooked_adasum_step(self):
        """_kolo_adasum_step inside torch's step hooks and profiler record
        (set per class by DistributedOptimizer)."""
        self._kolo_adasum_step()

    def _kolo_local_step(self):
        """The wrapped optimizer's update, without torch's step hooks where
        _kolo_hooked_adasum_step runs them (set per class by
        DistributedOptimizer)."""
        super().step()

    # Horovod's public attributes of a DistributedOptimizer.
    @property
    def backward_passes_per_step(self):
        return self._kolo_passes

    @backward_passes_per_step.setter
    def backward_passes_per_step(self, passes):
        self.set_backward_passes_per_step(passes)

    def set_backward_passes_per_step(self, passes):
        """Changes backward_passes_per_step (and restarts the count of the
        passes accumulated for the current step), as in Horovod."""
        passes = _count(passes, "DistributedOptimizer.set_backward_passes_per_step",
                        "backward_passes_per_step")
        self._kolo_passes = passes
        self._kolo_reducer.set_backward_passes_per_step(passes)

    @property
    def op(self):
        return self._kolo_op

    @property
    def sparse_as_dense(self):
        return self._kolo_sparse_as_dense

    @property
    def gradient_predivide_factor(self):
        pre, _ = self._kolo_scales
        return 1.0 / pre

    def load_state_dict(self, *args, **kwargs):
        """The wrapped optimizer's load_state_dict; like Horovod's, it also
        forgets the gradients accumulated for a step not taken yet."""
        self._kolo_reducer.reset_step()
        self._kolo_synchronized = False
        self._kolo_should_sync = True
        return super().load_state_dict(*args, **kwargs)

    def _kolo_restart_passes(self):
        self._kolo_reducer.clear_passes()

    def _kolo_submitted(self):
        """Gradients whose reduction was enqueued since the last synchronize()."""
        return self._kolo_reducer.submitted()

    def _kolo_pending(self):
        return self._kolo_reducer.pending()

    def zero_grad(self, *args, **kwargs):
        if self._kolo_pending():
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                "cause a race condition.")
        return super().zero_grad(*args, **kwargs)


def _through(compression):
    """compress(i, tensor) and decompress(i, reduced) for the C++ reducer
    and Adasum step (i: the parameter's index): a Horovod Compressor's
    compress(tensor) -> (sent, ctx) and decompress(reduced, ctx), each
    parameter's ctx kept between the two."""
    contexts = {}

    def compress(i, tensor):
        sent, contexts[i] = compression.compress(tensor)
        return sent

    def decompress(i, reduced):
        return compression.decompress(reduced, contexts.pop(i))
    return compress, decompress


def _adasum_hooks(base):
    """The Adasum step's methods for a class over base: torch's step hooks
    and profiler record (torch 2.x's Optimizer.profile_hook_step, the wrapper
    base.step got) around the whole delta step, so that post-hooks see the
    combined parameters, and base's own step without them inside it. In
    torch 1.13, which has no hooks and no public wrapper, the defaults stay:
    the profiler records the local update."""
    hook = getattr(torch.optim.Optimizer, "profile_hook_step", None)
    local = getattr(base.step, "__wrapped__", None)
    if hook is None or local is None or not getattr(base.step, "hooked", False):
        return {}
    return {"_kolo_hooked_adasum_step": hook(_DistributedMixin._kolo_adasum_step),
            "_kolo_local_step": local}


def _retarget_scheduler_step(wrapped, cls):
    """An LR scheduler made before the wrapping replaced the optimizer's step
    on the instance (torch.optim.lr_scheduler counts the optimizer's steps
    so): a wrapper bound to the unwrapped class's step, which would skip the
    reduction on every step() of the shared attribute namespace. It becomes
    the same bookkeeping around this class's step. Any other replacement is
    refused rather than silently left to skip the reduction."""
    patched = wrapped.__dict__.get("step")
    if patched is None:
        return
    counts = getattr(patched, "_with_counter", False)  # torch 1.13 - 2.1
    flags = getattr(patched, "_wrapped_by_lr_sched", False)  # torch 2.2 and later
    if not counts and not flags:
        raise ValueError(
            "kolo.torch.DistributedOptimizer: the optimizer's step was replaced on the "
            "instance (optimizer.step = %r), so step() would not reduce the gradients; wrap "
            "the optimizer first and replace step afterwards, if at all" % (patched,))

    def step(*args, **kwargs):
        if counts:
            wrapped._step_count = getattr(wrapped, "_step_count", 0) + 1
        if flags:
            wrapped._opt_called = True
        return cls.step(wrapped, *args, **kwargs)

    step._with_counter = counts
    step._wrapped_by_lr_sched = flags
    step.__wrapped__ = cls.step
    wrapped.__dict__["step"] = step


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch.optim optimizer so that gradients are reduced over ranks.

    Returns an optimizer of the same class (isinstance holds) sharing the
    wrapped optimizer's param_groups and state: LR schedulers, state_dict()
    and load_state_dict() work on either. kolo's C++ gradient reducer hooks
    every parameter's gradient accumulator and groups the gradients into
    buckets (up to 25 MiB, in the order backward produces them); a bucket is
    enqueued as one allreduce as soon as backward produced all of its
    gradients (after backward_passes_per_step passes, whose gradients are
    summed). Gradients are reduced in place: p.grad becomes an alias of its
    region of the bucket. step() waits for the buckets and steps.
    torch's step hooks (register_step_pre_hook and register_step_post_hook,
    on the optimizer or global) run once per step(): the pre-hooks once the
    gradients are reduced, the post-hooks after the update.

    op: Average, Sum or Adasum (Horovod's delta optimizer: step() applies the
    wrapped optimizer locally and combines the parameter changes with Adasum;
    synchronize() is then a no-op and skip_synchronize() raises; the step
    hooks run around the local step and the combination: the post-hooks see
    the combined parameters).
    compression: Compression.none, .fp16 or .bf16. groups: a number of
    groups, or lists of parameters, reduced as units (num_groups is its
    deprecated spelling). Sparse gradients (nn.Embedding(sparse=True)) are
    reduced by allgather of their indices and values, or as dense tensors
    with sparse_as_dense=True. process_set: the ranks that reduce gradients
    together; on other ranks the optimizer steps on local gradients.

    Raises ValueError (naming the argument) for an optimizer that is not a
    torch.optim.Optimizer, a backward_passes_per_step that is not an int >= 1,
    a gradient_predivide_factor that is not a number > 0, and an op,
    compression, groups, named_parameters or process_set of the wrong kind.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError("kolo.torch.DistributedOptimizer: optimizer must be a "
                         "torch.optim.Optimizer (such as torch.optim.SGD(model.parameters(), "
                         "lr=...)), got %s" % _kind(optimizer))
    if isinstance(optimizer, _DistributedMixin):
        raise ValueError("the optimizer is already a kolo.torch.DistributedOptimizer")
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("kolo.torch.DistributedOptimizer does not support torch.optim.LBFGS: "
                         "it evaluates its closure several times per step")
    if groups is None and num_groups:
        warnings.warn("num_groups is deprecated: use groups", DeprecationWarning, stacklevel=2)
        groups = num_groups
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedMixin, base),
               {"__module__": __name__, **_adasum_hooks(base)})
    wrapped = cls.__new__(cls)
    # One attribute namespace for both objects: param_groups, state and
    # defaults stay shared even when load_state_dict() replaces them.
    wrapped.__dict__ = optimizer.__dict__
    _retarget_scheduler_step(wrapped, cls)
    wrapped._kolo_setup(named_parameters, compression, backward_passes_per_step, op,
                        gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return wrapped
