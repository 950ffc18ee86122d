"""DistributedOptimizer: gradients averaged over ranks while backward runs."""
import contextlib
import warnings

import torch

from kolo import _kolo
from kolo.torch.compression import Compression
from kolo.torch.ops import Average, Sum

_GRAD_PREFIX = "grad."


class _DistributedMixin:
    """Put in front of the wrapped optimizer's class (see DistributedOptimizer).

    State machine per parameter p, reset by synchronize():
      _kolo_delay[p]   backward passes still to accumulate before p's
                       allreduce is enqueued (starts at backward_passes_per_step)
      _kolo_inflight[p] (TensorHandle, compression ctx, tensor sent) once enqueued
    Hooks and synchronize() run on the thread that runs backward/step.
    """

    def _kolo_setup(self, named_parameters, compression, backward_passes_per_step, op,
                    gradient_predivide_factor, groups, sparse_as_dense):
        if op not in (Average, Sum):
            raise ValueError("DistributedOptimizer: op must be kolo.torch.Average or Sum, got %s"
                             % (op,))
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")

        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("noname.%d.%d" % (i, j), p)
                                for i, group in enumerate(self.param_groups)
                                for j, p in enumerate(group["params"])]
        if any(not isinstance(item, tuple) for item in named_parameters):
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
        self._kolo_compression = compression
        self._kolo_passes = backward_passes_per_step
        self._kolo_op = op
        if op == Average:
            self._kolo_scales = (1.0 / gradient_predivide_factor, gradient_predivide_factor)
        else:
            self._kolo_scales = (1.0, 1.0)
        self._kolo_sparse_as_dense = sparse_as_dense
        self._kolo_delay = {p: backward_passes_per_step for p in self._kolo_params}
        self._kolo_inflight = {}
        self._kolo_should_sync = True
        self._kolo_synchronized = False
        self._kolo_setup_groups(groups)
        self._kolo_grad_accs = []
        for p in self._kolo_params:
            # The AccumulateGrad node of p: its post-hook runs once p.grad
            # holds this backward's contribution.
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._kolo_make_hook(p))
            self._kolo_grad_accs.append(acc)  # the node must stay alive

    def _kolo_setup_groups(self, groups):
        """groups: None, a number of groups, or lists of parameters."""
        self._kolo_group_of = {}
        self._kolo_groups = []
        if groups is None or groups == 0:
            return
        if isinstance(groups, int):
            if groups < 0:
                raise ValueError("groups must be a non-negative int or a list of lists of "
                                 "parameters")
            n = len(self._kolo_params)
            k = min(groups, n)
            bounds = [n * i // k for i in range(k + 1)] if k else [0]
            members = [self._kolo_params[bounds[i]:bounds[i + 1]] for i in range(k)]
        else:
            wanted = {p for p in self._kolo_params}
            members = []
            for group in groups:
                group = [p for p in group if p in wanted]
                if group:
                    members.append(group)
        for gid, group in enumerate(members):
            if len(group) < 2:
                continue
            for p in group:
                if p in self._kolo_group_of:
                    raise ValueError("a parameter appears in more than one group")
                self._kolo_group_of[p] = len(self._kolo_groups)
            self._kolo_groups.append({"params": group, "ready": set(), "submitted": False,
                                      "name": "%sgroup.%d" % (_GRAD_PREFIX, gid)})

    def _kolo_make_hook(self, p):
        def hook(*_):
            if self._kolo_delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")
            self._kolo_delay[p] -= 1
            if self._kolo_delay[p] == 0:
                self._kolo_ready(p)
        return hook

    def _kolo_ready(self, p):
        gid = self._kolo_group_of.get(p)
        if gid is None:
            self._kolo_submit([p], None)
            return
        group = self._kolo_groups[gid]
        group["ready"].add(p)
        if len(group["ready"]) == len(group["params"]):
            self._kolo_submit(group["params"], group)

    def _kolo_grad(self, p):
        if p.grad is None:
            # Another rank may have a gradient for p: every rank submits it.
            p.grad = torch.zeros_like(p, memory_format=torch.preserve_format)
        if p.grad.is_sparse:
            if not self._kolo_sparse_as_dense:
                raise ValueError("kolo.torch.DistributedOptimizer: sparse gradients are not "
                                 "supported; pass sparse_as_dense=True")
            p.grad = p.grad.to_dense()
        return p.grad

    def _kolo_submit(self, params, group):
        pre, post = self._kolo_scales
        pairs = [self._kolo_compression.compress(self._kolo_grad(p)) for p in params]
        if group is None:
            (p,), (sent, cctx) = params, pairs[0]
            handle = _kolo.allreduce_async(sent, self._kolo_op, self._kolo_names[p], pre, post,
                                           True)
            self._kolo_inflight[p] = (handle, cctx, sent)
        else:
            handles = _kolo.grouped_allreduce_async([s for s, _ in pairs], self._kolo_op,
                                                    group["name"], pre, post)
            for p, h, (sent, cctx) in zip(params, handles, pairs):
                self._kolo_inflight[p] = (h, cctx, sent)
            group["submitted"] = True

    def synchronize(self):
        """Enqueues the gradients not enqueued yet (zeros for parameters that
        got none), waits for every allreduce and writes the results into
        p.grad. A second call without new gradients is a no-op."""
        for p in self._kolo_params:
            if p in self._kolo_inflight:
                continue
            gid = self._kolo_group_of.get(p)
            if gid is None:
                self._kolo_submit([p], None)
            elif not self._kolo_groups[gid]["submitted"]:
                self._kolo_submit(self._kolo_groups[gid]["params"], self._kolo_groups[gid])
        error = None
        for p, (handle, cctx, sent) in self._kolo_inflight.items():
            try:
                out = handle.wait()
            except Exception as e:  # wait for the rest: the engine writes into them
                error = error or e
                continue
            if out is not p.grad:
                with torch.no_grad():
                    p.grad.copy_(self._kolo_compression.decompress(out, cctx))
        self._kolo_inflight.clear()
        for group in self._kolo_groups:
            group["ready"].clear()
            group["submitted"] = False
        for p in self._kolo_params:
            self._kolo_delay[p] = self._kolo_passes
        self._kolo_synchronized = True
        if error is not None:
            raise error

    def _kolo_abandon_step(self):
        """Forgets the gradients of an interrupted step (elastic training,
        after a peer failure): waits for the allreduces in flight, which end
        with an error once the failed engine stops, and starts clean."""
        for handle, _, _ in self._kolo_inflight.values():
            try:
                handle.wait()
            except Exception:  # noqa: BLE001 (expected: the step failed)
                pass
        self._kolo_inflight.clear()
        for group in self._kolo_groups:
            group["ready"].clear()
            group["submitted"] = False
        for p in self._kolo_params:
            self._kolo_delay[p] = self._kolo_passes
        self._kolo_synchronized = False

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize: call synchronize()
        first (e.g. to clip the averaged gradients), then step()."""
        self._kolo_should_sync = False
        try:
            yield
        finally:
            self._kolo_should_sync = True

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._kolo_should_sync:
            if self._kolo_synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "after optimizer.synchronize(): the gradients are reduced again "
                              "(no-op) but this usually means a missing skip_synchronize().")
            self.synchronize()
        self._kolo_synchronized = False
        super().step()
        return loss

    def _kolo_pending(self):
        return bool(self._kolo_inflight) or any(
            d != self._kolo_passes for d in self._kolo_delay.values())

    def zero_grad(self, *args, **kwargs):
        if self._kolo_pending():
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                "cause a race condition.")
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False):
    """Wraps a torch.optim optimizer so that gradients are reduced over ranks.

    Returns an optimizer of the same class (isinstance holds) sharing the
    wrapped optimizer's param_groups and state: LR schedulers, state_dict()
    and load_state_dict() work on either. A post-hook on every parameter's
    gradient accumulator enqueues that gradient's allreduce as soon as
    backward produced it (after backward_passes_per_step passes, whose
    gradients are summed); step() waits for them all and steps.

    op: Average or Sum. compression: Compression.none, .fp16 or .bf16.
    groups: a number of groups, or lists of parameters, reduced as units
    (num_groups is its deprecated spelling).
    """
    if isinstance(optimizer, _DistributedMixin):
        raise ValueError("the optimizer is already a kolo.torch.DistributedOptimizer")
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("kolo.torch.DistributedOptimizer does not support torch.optim.LBFGS: "
                         "it evaluates its closure several times per step")
    if groups is None and num_groups:
        warnings.warn("num_groups is deprecated: use groups", DeprecationWarning, stacklevel=2)
        groups = num_groups
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedMixin, base), {"__module__": __name__})
    wrapped = cls.__new__(cls)
    # One attribute namespace for both objects: param_groups, state and
    # defaults stay shared even when load_state_dict() replaces them.
    wrapped.__dict__ = optimizer.__dict__
    for patch in ("_patch_step_function", "_hook_for_profile"):  # torch 2.x / 1.13
        if hasattr(wrapped, patch):
            getattr(wrapped, patch)()
            break
    wrapped._kolo_setup(named_parameters, compression, backward_passes_per_step, op,
                        gradient_predivide_factor, groups, sparse_as_dense)
    return wrapped
