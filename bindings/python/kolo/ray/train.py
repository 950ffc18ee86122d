"""Ray Train backend for kolo: `KoloConfig` runs a kolo.torch (Horovod-style)
training loop under Ray Train's DataParallelTrainer::

    from ray.train import ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from kolo.ray import KoloConfig

    def train_loop(config):
        import kolo.torch as hvd
        hvd.init()                                   # rendezvous set up by KoloConfig
        ...                                          # DistributedOptimizer, ray.train.report(...)

    DataParallelTrainer(train_loop, backend_config=KoloConfig(),
                        scaling_config=ScalingConfig(num_workers=4)).fit()

How the job finds itself: before the training function starts, the backend
asks every worker for its node, numbers the workers as Ray Train does (world
rank = Ray Train's world rank; local rank = position among the workers on the
same node, in world-rank order; cross rank = the node's index in order of
first appearance), picks a free port on rank 0's node and a fresh random
secret, and sets kolo's torchrun-style identity in each worker process's own
environment (os.environ of that actor only; nothing goes on a command line or
into another process's environment). `hvd.init()` in the training function
then rendezvouses through the authenticated TCP store that rank 0 serves at
KOLO_RENDEZVOUS_ADDR:KOLO_RENDEZVOUS_PORT, as under torchrun.

Works with Ray Train V2 (the default in Ray >= 2.50:
`ray.train.v2.api.data_parallel_trainer.DataParallelTrainer`) and with V1
(`RAY_TRAIN_V2_ENABLED=0`, `ray.train.data_parallel_trainer.DataParallelTrainer`).

Ray Train V2 unpickles the config in its controller actor, so kolo must be
importable there too (it is wherever the workers can import it, on one node).
"""
import logging
import os
import secrets
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, List, Optional, Union

from kolo.ray._ray import INSTALL_HINT, require_ray

ray = require_ray()
"""The ray module (ImportError naming the install command when missing)."""
try:
    from ray.train.backend import Backend, BackendConfig
except ImportError as _error:  # Ray without its [train] extra
    raise ImportError("kolo.ray.KoloConfig needs Ray Train: %s (%s)" % (INSTALL_HINT, _error)) \
        from _error

logger = logging.getLogger(__name__)
"""Where the backend logs (``kolo.ray.train``): the job's layout at start,
engines that did not shut down in time."""

# Variables the backend sets in each worker before the training function runs
# (and removes at shutdown). kolo reads them at hvd.init().
_IDENTITY_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "GROUP_WORLD_SIZE",
                  "KOLO_RENDEZVOUS_ADDR", "KOLO_RENDEZVOUS_PORT", "KOLO_SECRET_KEY")
# Variables kolo's launchers set that would override the torchrun-style
# identity above if a worker inherited them (e.g. a driver started by kolorun).
_FOREIGN_LAUNCH_VARS = ("KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE",
                        "KOLO_CROSS_RANK", "KOLO_CROSS_SIZE", "KOLO_ELASTIC_WORKER",
                        "KOLO_RENDEZVOUS_HOSTED")


@dataclass
class KoloConfig(BackendConfig):
    """Ray Train backend configuration for kolo.torch training loops.

    timeout_s: seconds before a silent peer is declared failed, and the bound
        on rendezvous at hvd.init() (sets KOLO_TIMEOUT in the workers; None
        keeps kolo's default of 60 s or the workers' own KOLO_TIMEOUT).
    nics: the network interfaces kolo's data plane may use (KOLO_IFACE), as a
        name or a set or list of names (horovod.ray's HorovodConfig took a
        set): each worker uses the first of them its node has (a set in
        sorted order). None lets kolo pick the interface that routes to
        rank 0.
    env_vars: further kolo variables (KOLO_FUSION_THRESHOLD, KOLO_LOG_LEVEL,
        ...) set in every worker before the training function starts.
    shutdown_timeout_s: how long the backend waits for the workers' engines
        to shut down when training ends before it gives up with a warning.
    """

    timeout_s: Optional[float] = None
    nics: Optional[Union[str, set, frozenset, list, tuple]] = None
    env_vars: Optional[Dict[str, str]] = None
    shutdown_timeout_s: float = 30.0

    def __post_init__(self):
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError("KoloConfig(timeout_s=%r): expected a positive number of seconds"
                             % (self.timeout_s,))
        self.iface()  # validate early, on the driver
        for key, value in (self.env_vars or {}).items():
            if key in _IDENTITY_VARS or key in _FOREIGN_LAUNCH_VARS:
                raise ValueError("KoloConfig(env_vars=...): %s is set by the backend itself"
                                 % key)
            if not isinstance(value, str):
                raise ValueError("KoloConfig(env_vars=...): the value of %s must be a str, "
                                 "not %r" % (key, value))

    def iface(self) -> Optional[str]:
        """KOLO_IFACE for `nics`: the names separated by commas, or None."""
        if self.nics is None or isinstance(self.nics, str):
            names = [n.strip() for n in (self.nics or "").split(",")]
        elif isinstance(self.nics, (list, tuple)):
            names = list(self.nics)
        else:
            names = sorted(set(self.nics))
        if not any(names):
            return None
        if not all(isinstance(n, str) and n and "," not in n for n in names):
            raise ValueError("KoloConfig(nics=%r): expected interface names such as 'eth0'"
                             % (self.nics,))
        return ",".join(names)

    @property
    def backend_cls(self):
        """KoloBackend (Ray Train's BackendConfig interface)."""
        return KoloBackend

    @property
    def train_func_context(self):
        """A context manager around the training function in each worker:
        with GPUs, makes the worker's own GPU the current CUDA device."""
        return _select_cuda_device

    def to_dict(self) -> Dict:
        """The settings as a dict, for Ray Train's run state (no secret is
        part of the config)."""
        # Ray Train exports this in its run state; the secret is not part of
        # the config, so everything here is safe to show.
        return {"timeout_s": self.timeout_s, "nics": self.iface(),
                "env_vars": dict(self.env_vars or {}),
                "shutdown_timeout_s": self.shutdown_timeout_s}


@contextmanager
def _select_cuda_device():
    """Wraps the training function in each worker: with GPUs, makes the
    worker's own GPU the current CUDA device (the backend shares
    CUDA_VISIBLE_DEVICES among the workers of a node, ordered as the local
    ranks, so cuda:hvd.local_rank() is that same device)."""
    import torch
    if torch.cuda.is_available():
        from ray.train.torch import get_device
        device = get_device()
        if device.type == "cuda":
            torch.cuda.set_device(device)
    yield


def _node_address():
    """Runs in a worker: the address of the node it is on."""
    return ray.util.get_node_ip_address()


def _free_port():
    """Runs in rank 0's worker: a TCP port free on its node now. rank 0
    binds it at hvd.init(); another process could take it in between (the
    same window as torch.distributed's env:// setup under Ray Train)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _set_worker_env(values: Dict[str, str]):
    """Runs in a worker: sets this process's kolo identity. Only this actor's
    os.environ changes (and children it starts later inherit it)."""
    for name in _FOREIGN_LAUNCH_VARS:
        os.environ.pop(name, None)
    os.environ.update(values)


def _shutdown_worker(names: List[str]):
    """Runs in a worker at the end of training: stops kolo's engine if the
    training function left it running, and forgets the job's identity and
    secret."""
    import sys
    hvd = sys.modules.get("kolo.torch")  # never import torch just to shut down
    try:
        if hvd is not None and hvd.is_initialized():
            hvd.shutdown()
    finally:
        for name in names:
            os.environ.pop(name, None)


def layout(nodes: List[str]) -> List[Dict[str, int]]:
    """Ranks of workers given each worker's node, in world-rank order:
    local rank = position among the earlier workers of the same node,
    cross rank = the node's index in order of first appearance. Matches
    Ray Train's local and node ranks for the same order."""
    node_index: Dict[str, int] = {}
    per_node: Dict[str, int] = {}
    for node in nodes:
        node_index.setdefault(node, len(node_index))
        per_node[node] = per_node.get(node, 0) + 1
    seen: Dict[str, int] = {}
    out = []
    for rank, node in enumerate(nodes):
        out.append({"rank": rank, "size": len(nodes), "local_rank": seen.get(node, 0),
                    "local_size": per_node[node], "cross_rank": node_index[node],
                    "cross_size": len(node_index)})
        seen[node] = seen.get(node, 0) + 1
    return out


class KoloBackend(Backend):
    """Sets up kolo's rendezvous for a Ray Train worker group. Ray Train
    calls these hooks from its driver (V1) or controller actor (V2), one
    worker group at a time, never concurrently."""

    # All GPUs of a node's workers are visible to each of them, in local-rank
    # order: kolo's NCCL data plane and Horovod-style
    # torch.cuda.set_device(hvd.local_rank()) both rely on that.
    share_cuda_visible_devices: bool = True

    def on_start(self, worker_group, backend_config: KoloConfig):
        """Before the training function: numbers the workers (layout()),
        picks rank 0's node and a free port there, draws a fresh secret and
        sets each worker's kolo identity in its own os.environ."""
        size = len(worker_group)
        # Ray Train numbers the workers of a node by node address (V2) or node
        # id (V1); the two differ only for several Ray nodes on one address,
        # i.e. on one host, which is what kolo's local ranks describe.
        nodes = worker_group.execute(_node_address)
        ranks = layout(nodes)
        addr = nodes[0]
        port = worker_group.execute_single(0, _free_port) if size > 1 else 0
        secret = secrets.token_hex(32)

        common = {"KOLO_SECRET_KEY": secret}
        if size > 1:
            common["KOLO_RENDEZVOUS_ADDR"] = addr
            common["KOLO_RENDEZVOUS_PORT"] = str(port)
        common.update(_config_env(backend_config))

        pending = []
        for r in ranks:
            values = dict(common)
            values.update({"RANK": str(r["rank"]), "WORLD_SIZE": str(size),
                           "LOCAL_RANK": str(r["local_rank"]),
                           "LOCAL_WORLD_SIZE": str(r["local_size"]),
                           "GROUP_RANK": str(r["cross_rank"]),
                           "GROUP_WORLD_SIZE": str(r["cross_size"])})
            pending.append(worker_group.execute_single_async(r["rank"], _set_worker_env, values))
        ray.get(pending)
        logger.info("kolo: %d workers on %d nodes, rank 0 serves the store at %s:%s", size,
                    ranks[0]["cross_size"], addr, port)

    def on_shutdown(self, worker_group, backend_config: KoloConfig):
        """After training: shuts down the engines the training function left
        running (waiting at most shutdown_timeout_s, then only warning) and
        removes the variables on_start() set."""
        names = sorted(set(_IDENTITY_VARS) | set(_config_env(backend_config)))
        pending = worker_group.execute_async(_shutdown_worker, names)
        ready, not_ready = ray.wait(pending, num_returns=len(pending),
                                    timeout=backend_config.shutdown_timeout_s)
        if not_ready:
            logger.warning("kolo: %d of %d workers did not shut down their engine within %s s",
                           len(not_ready), len(pending), backend_config.shutdown_timeout_s)
        for ref in ready:
            # After a failed rank the others' engines report it again here;
            # the training error itself reaches fit() through Ray Train.
            try:
                ray.get(ref)
            except Exception as error:  # noqa: BLE001
                logger.warning("kolo: a worker's engine shut down with an error: %s", error)


def _config_env(config: KoloConfig) -> Dict[str, str]:
    """The kolo variables a KoloConfig sets in every worker."""
    env = {}
    if config.timeout_s is not None:
        seconds = float(config.timeout_s)
        env["KOLO_TIMEOUT"] = str(int(seconds)) if seconds.is_integer() else repr(seconds)
    if config.iface() is not None:
        env["KOLO_IFACE"] = config.iface()
    env.update(config.env_vars or {})
    return env
