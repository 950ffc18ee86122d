"""kolo.ray.RayExecutor: a kolo job whose ranks are Ray actors
(horovod.ray.RayExecutor's API).

The driver (the process calling start()) reserves one placement-group
bundle per worker, starts one actor per bundle, derives ranks from the
nodes Ray chose (placement.assign_ranks), serves the job's authenticated
rendezvous store itself (kolo._kolo.StoreServer) and hands each actor its
identity and the job's secret through one actor method call
(KoloWorker.setup). Functions given to run() call hvd.init() themselves,
as under kolorun.

Threading: an executor is driven from one thread.
"""
import os
import secrets
import time

from kolo.ray._ray import require_ray
from kolo.ray import placement
from kolo.ray.worker import KoloWorker

ray = require_ray()
"""The ray module (ImportError naming the install command when missing)."""

# Variables of the driver's environment handed to the workers (tuning and
# logging; never the identity of the driver's own job, if it has one).
_IDENTITY = {
    "KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK",
    "KOLO_CROSS_SIZE", "KOLO_HOSTNAME", "KOLO_RENDEZVOUS_ADDR", "KOLO_RENDEZVOUS_PORT",
    "KOLO_SECRET_KEY", "KOLO_RENDEZVOUS_HOSTED", "KOLO_ELASTIC_WORKER",
}

# How long a stopped worker may take to leave the job before it is killed.
_STOP_GRACE_S = 5.0


class Settings:
    """What horovod.ray's create_settings() returns, for kolo.

    timeout_s: seconds before a silent peer is declared failed (the workers'
    KOLO_TIMEOUT); also bounds how long run() waits for the other ranks
    after one failed. start_timeout: seconds start() waits for Ray to place
    the workers and for them to come up (Horovod's placement_group_timeout_s
    is accepted as its alias). verbose: print the placement on start()."""

    def __init__(self, timeout_s=60, start_timeout=60, verbose=False, env_vars=None):
        self.timeout_s = timeout_s
        self.start_timeout = start_timeout
        self.verbose = verbose
        self.env_vars = dict(env_vars or {})


def _create_settings(timeout_s=60, placement_group_timeout_s=None, start_timeout=None,
                     verbose=False, env_vars=None, ssh_identity_file=None, ssh_str=None,
                     nics=None, **ignored):
    """horovod.ray's create_settings(); ssh and nics are not needed (kolo
    reaches its workers through Ray, and picks the interface that routes to
    the driver's store; set KOLO_IFACE in env_vars to choose one)."""
    start = start_timeout if start_timeout is not None else placement_group_timeout_s
    return Settings(timeout_s=timeout_s, start_timeout=60 if start is None else start,
                    verbose=verbose, env_vars=env_vars)


class WorkerFailedError(RuntimeError):
    """A worker actor died (its process exited or its node left) while a
    function ran on it. rank, node and pid name it."""

    def __init__(self, message, rank, node, pid):
        super().__init__(message)
        self.rank = rank
        self.node = node
        self.pid = pid


class RayExecutor:
    """A kolo job of num_workers Ray actors::

        executor = RayExecutor(settings, num_workers=4, cpus_per_worker=1, use_gpu=False)
        executor.start()
        results = executor.run(train_fn, args=[...])   # rank order
        executor.shutdown()

    num_hosts/num_workers_per_host ask for a fixed shape instead (one node
    per host, STRICT_SPREAD). placement_strategy: "PACK" (default, fill
    nodes first), "SPREAD", "STRICT_PACK" or "STRICT_SPREAD".
    start_timeout overrides settings.start_timeout. resources_per_worker:
    custom Ray resources per worker. min_workers/max_workers make it
    elastic: use ElasticRayExecutor for that."""

    create_settings = staticmethod(_create_settings)

    def __init__(self, settings=None, num_workers=None, num_hosts=None, num_workers_per_host=1,
                 cpus_per_worker=1, use_gpu=False, gpus_per_worker=None,
                 placement_strategy="PACK", start_timeout=None, resources_per_worker=None,
                 use_current_placement_group=False, min_workers=None, max_workers=None):
        if min_workers is not None or max_workers is not None:
            raise ValueError("RayExecutor(min_workers=..., max_workers=...): use "
                             "kolo.ray.ElasticRayExecutor for elastic jobs")
        if use_current_placement_group:
            raise NotImplementedError("use_current_placement_group is not supported; kolo.ray "
                                      "reserves its own placement group")
        self.settings = settings or Settings()
        if num_hosts is not None:
            if num_workers is not None:
                raise ValueError("give num_workers or num_hosts (with num_workers_per_host), not both")
            num_workers = num_hosts * num_workers_per_host
            self._bundle_workers = num_workers_per_host
            placement_strategy = "STRICT_SPREAD"
        else:
            self._bundle_workers = 1
        if not num_workers or num_workers < 1:
            raise ValueError("num_workers must be a positive number of workers, got %r" % (num_workers,))
        if gpus_per_worker and not use_gpu:
            raise ValueError("gpus_per_worker=%s needs use_gpu=True" % gpus_per_worker)
        self.num_workers = int(num_workers)
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = bool(use_gpu)
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.placement_strategy = placement_strategy.upper()
        if self.placement_strategy not in placement.STRATEGIES:
            raise ValueError("placement_strategy %r: expected one of %s"
                             % (placement_strategy, ", ".join(placement.STRATEGIES)))
        self.start_timeout = (self.settings.start_timeout if start_timeout is None
                              else start_timeout)
        self.resources_per_worker = dict(resources_per_worker or {})

        self._pg = None
        self._server = None
        self._workers = []   # actor handles, in rank order
        self._infos = []     # node_info() per worker, in rank order
        self._places = []    # assign_ranks() per worker, in rank order
        self._lost = None    # WorkerFailedError once a worker died

    # -- start --------------------------------------------------------------

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None,
              extra_env_vars=None):
        """Places and starts the workers and sets up the rendezvous; returns
        once every worker is ready (bounded by start_timeout). Raises
        TimeoutError naming the missing resources when Ray cannot place
        them. ``executable_cls(*executable_args, **executable_kwargs)`` is built
        on every worker after its identity is set: the object execute()
        passes to its functions."""
        if self._workers:
            raise RuntimeError("RayExecutor.start(): already started; shutdown() first")
        if not ray.is_initialized():
            ray.init()
        deadline = placement.Deadline(self.start_timeout)
        try:
            self._start(deadline, executable_cls, executable_args, executable_kwargs,
                        extra_env_vars)
        except BaseException:
            self.shutdown()
            raise

    def _bundles(self):
        per_bundle = self._bundle_workers
        bundle = placement.bundles_for(1, self.cpus_per_worker * per_bundle,
                                       self.gpus_per_worker * per_bundle,
                                       {k: v * per_bundle for k, v in self.resources_per_worker.items()})[0]
        return [dict(bundle) for _ in range(self.num_workers // per_bundle)]

    def _start(self, deadline, executable_cls, executable_args, executable_kwargs,
               extra_env_vars):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        bundles = self._bundles()
        self._pg = placement.create_placement_group(ray, bundles, self.placement_strategy,
                                                    deadline.left())
        actor_cls = ray.remote(KoloWorker)
        actors = []
        for i in range(self.num_workers):
            actors.append(actor_cls.options(
                num_cpus=self.cpus_per_worker,
                num_gpus=self.gpus_per_worker,
                resources=self.resources_per_worker or None,
                max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self._pg,
                    placement_group_bundle_index=i // self._bundle_workers),
            ).remote())
        self._workers = actors
        infos = self._get([a.node_info.remote() for a in actors], deadline,
                          "the worker actors to start")
        places = placement.assign_ranks(infos)
        order = sorted(range(len(actors)), key=lambda i: places[i]["rank"])
        gpu_lists = placement.node_gpu_lists(infos, places) if self.use_gpu else None

        # The store: served here, reachable at this node's address.
        secret = secrets.token_hex(32)
        _kolo = store_module()
        self._server = _kolo.StoreServer("", 0, secret)
        addr = ray.util.get_node_ip_address()

        env_base = {k: v for k, v in os.environ.items()
                    if k.startswith("KOLO_") and k not in _IDENTITY}
        env_base.update(self.settings.env_vars)
        env_base.update(extra_env_vars or {})
        env_base.setdefault("KOLO_TIMEOUT", str(self.settings.timeout_s))
        executable = ((executable_cls, executable_args, executable_kwargs)
                      if executable_cls is not None else None)
        calls = []
        for i, actor in enumerate(actors):
            p = places[i]
            env = dict(env_base)
            env.update({
                "KOLO_RANK": p["rank"], "KOLO_SIZE": p["size"],
                "KOLO_LOCAL_RANK": p["local_rank"], "KOLO_LOCAL_SIZE": p["local_size"],
                "KOLO_CROSS_RANK": p["cross_rank"], "KOLO_CROSS_SIZE": p["cross_size"],
                "KOLO_HOSTNAME": infos[i]["ip"],
                "KOLO_RENDEZVOUS_ADDR": addr, "KOLO_RENDEZVOUS_PORT": self._server.port,
                "KOLO_SECRET_KEY": secret,
            })
            if gpu_lists is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpu_lists[i]
            calls.append(actor.setup.remote(env, executable))
        self._get(calls, deadline, "the workers to set up")
        self._workers = [actors[i] for i in order]
        self._infos = [infos[i] for i in order]
        self._places = [places[i] for i in order]
        if self.settings.verbose:
            for rank, info in enumerate(self._infos):
                print("kolo.ray: rank %d on %s (local rank %d, pid %d)"
                      % (rank, info["ip"], self._places[rank]["local_rank"], info["pid"]))

    def _get(self, refs, deadline, what):
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=deadline.left())
        if pending:
            raise TimeoutError("kolo.ray: timed out after %s s (start_timeout) waiting for %s "
                               "(%d of %d ready)" % (self.start_timeout, what, len(ready), len(refs)))
        return ray.get(refs)

    # -- run ----------------------------------------------------------------

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """Runs ``fn(*args, **kwargs)`` on every worker; returns the results in
        rank order. When a worker dies, raises WorkerFailedError naming its
        rank and node; when fn raises on a worker, raises that error (the
        first in time), after the other ranks ended (their kolo operations
        fail within timeout_s) or timeout_s passed. Ctrl-C shuts the
        executor down and re-raises."""
        if callbacks:
            raise NotImplementedError("run(callbacks=...) is not supported")
        return self._gather([w.run.remote(fn, args, kwargs) for w in self._ready()])

    def run_remote(self, fn, args=None, kwargs=None):
        """Starts fn on every worker; returns the Ray object refs (rank order)."""
        return [w.run.remote(fn, args, kwargs) for w in self._ready()]

    def execute(self, fn, callbacks=None):
        """fn(state) on every worker, state being the worker's persistent
        object (executable_cls's instance, or a namespace kept between
        calls); results in rank order."""
        if callbacks:
            raise NotImplementedError("execute(callbacks=...) is not supported")
        return self._gather([w.execute.remote(fn) for w in self._ready()])

    def execute_single(self, fn):
        """fn(state) on rank 0 only."""
        return self._gather([self._ready()[0].execute.remote(fn)])[0]

    def _ready(self):
        if self._lost is not None:
            raise RuntimeError("kolo.ray: this executor lost a worker (%s); shutdown() and "
                               "start() a new one" % self._lost)
        if not self._workers:
            raise RuntimeError("kolo.ray: the executor is not started; call start() first")
        return self._workers

    def worker_info(self):
        """Where each rank runs, in rank order: rank, size, local_rank,
        local_size, cross_rank, cross_size, node (IP), hostname, pid,
        node_id, actor_id, gpu_ids. Empty when not started."""
        out = []
        for worker, info, place in zip(self._workers, self._infos, self._places):
            d = dict(place)
            d.update(node=info["ip"], hostname=info["hostname"], pid=info["pid"],
                     node_id=info["node_id"], actor_id=worker._actor_id.hex(),
                     gpu_ids=info["gpu_ids"])
            out.append(d)
        return out

    def describe(self, rank):
        """"rank R (node IP, pid P)": how errors name a started worker."""
        info = self._infos[rank]
        return "rank %d (node %s, pid %d)" % (rank, info["ip"], info["pid"])

    def _gather(self, refs):
        try:
            return self._wait_all(refs)
        except (KeyboardInterrupt, SystemExit):
            self.shutdown()
            raise

    def _wait_all(self, refs):
        rank_of = {ref: r for r, ref in enumerate(refs)}
        pending = list(refs)
        first = None   # (rank, exception) of the first failure
        after = None   # deadline for the others once one failed
        errors = {}
        while pending:
            timeout = None if after is None else after.left()
            if after is not None and timeout <= 0:
                break
            done, pending = ray.wait(pending, num_returns=1, timeout=timeout)
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    r = rank_of[ref]
                    err = WorkerFailedError(
                        "kolo.ray: worker %s died: %s" % (self.describe(r), _first_line(e)),
                        r, self._infos[r]["ip"], self._infos[r]["pid"])
                    self._lost = err
                    errors[r] = err
                except Exception as e:  # the function raised
                    errors[rank_of[ref]] = e
                else:
                    continue
                if first is None:
                    first = rank_of[ref]
                    after = placement.Deadline(float(self.settings.timeout_s) + 10.0)
        if first is None:
            return ray.get(refs)
        if self._lost is not None and not isinstance(errors[first], WorkerFailedError):
            # A dead worker is the cause the others' errors point to.
            first = self._lost.rank
        err = errors[first]
        if isinstance(err, WorkerFailedError):
            still = [self.describe(rank_of[ref]) for ref in pending]
            if still:
                err.args = (err.args[0] + "; still running: " + ", ".join(still)
                            + " (stopped by shutdown())",)
            raise err
        raise RuntimeError("kolo.ray: %s failed: %s" % (self.describe(first), _first_line(err))) from err

    # -- shutdown -------------------------------------------------------------

    def shutdown(self):
        """Ends the job: every worker leaves kolo (bounded), its actor is
        killed, the placement group removed and the store closed. Safe to
        call twice, and after a failed start()."""
        workers, self._workers = self._workers, []
        if workers:
            stops = [w.stop.remote() for w in workers]
            try:
                ray.wait(stops, num_returns=len(stops), timeout=_STOP_GRACE_S)
            except Exception:
                pass
            for w in workers:
                try:
                    ray.kill(w, no_restart=True)
                except Exception:
                    pass
            _wait_dead(workers, _STOP_GRACE_S * 2)
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group
            try:
                remove_placement_group(self._pg)
            except Exception:
                pass
            self._pg = None
        if self._server is not None:
            self._server.close()
            self._server = None
        self._infos, self._places = [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
        return False


def store_module():
    """kolo._kolo, checked to serve a rendezvous store."""
    from kolo import _kolo
    if not hasattr(_kolo, "StoreServer"):
        raise RuntimeError("kolo.ray: this kolo build has no kolo._kolo.StoreServer (built "
                           "without bindings/python/src/store.cc); rebuild kolo from a checkout "
                           "that has it")
    return _kolo


def _wait_dead(actors, timeout_s):
    """Returns once every actor's process is gone (a method call fails with
    RayActorError), or timeout_s passed."""
    deadline = placement.Deadline(timeout_s)
    alive = list(actors)
    while alive and deadline.left() > 0:
        refs = [a.node_info.remote() for a in alive]
        still = []
        for a, ref in zip(alive, refs):
            try:
                ray.get(ref, timeout=max(0.1, deadline.left()))
                still.append(a)
            except ray.exceptions.RayActorError:
                pass
            except Exception:
                still.append(a)
        alive = still
        if alive:
            time.sleep(0.1)


def _first_line(error):
    cause = getattr(error, "cause", None)  # RayTaskError: the function's own exception
    if isinstance(cause, BaseException):
        return "%s: %s" % (type(cause).__name__, cause)
    text = str(error).strip()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("Traceback") and not line.startswith("ray::"):
            return line
    return text or type(error).__name__
