"""kolo.ray.ElasticRayExecutor: an elastic kolo job on Ray
(horovod.ray.ElasticRayExecutor's API).

The driver plays kolorun's elastic driver (launcher/elastic_world.cc) over
the same store protocol (kolo/elastic_world.h): every worker is a Ray actor
started with a worker id; kolo.torch.init() in it announces itself in the
store and waits for a world listing it; the driver forms worlds from the
workers that are ready (survivors first, so rank 0 holds the state), tells
the members of a broken world which rank died (their operations fail at
once), and issues a notice when new workers can join, so that the world
re-forms at the next state.commit(). New workers are started whenever the
cluster has room for one, up to max_workers.

Threading: run() drives everything on the calling thread.
"""
import os
import secrets
import time

from kolo.ray._ray import require_ray
from kolo.ray import placement
from kolo.ray.executor import Settings, WorkerFailedError, _IDENTITY, _first_line, store_module
from kolo.ray.worker import KoloWorker

ray = require_ray()
"""The ray module (ImportError naming the install command when missing)."""

_POLL_S = 0.05


def _create_settings(min_num_proc=1, max_num_proc=None, reset_limit=None, elastic_timeout=600,
                     timeout_s=30, start_timeout=60, verbose=False, env_vars=None, **ignored):
    """horovod.ray.ElasticRayExecutor.create_settings()."""
    s = Settings(timeout_s=timeout_s, start_timeout=start_timeout, verbose=verbose,
                 env_vars=env_vars)
    s.min_workers, s.max_workers = min_num_proc, max_num_proc
    s.reset_limit, s.elastic_timeout = reset_limit, elastic_timeout
    return s


class _Worker:
    def __init__(self, wid, actor):
        self.id = wid
        self.actor = actor
        self.info = None
        self.info_ref = actor.node_info.remote()
        self.run_ref = None
        self.ready_after = -1   # elastic/ready/<id>: -1 until it announced itself
        self.reason = ""
        self.world = 0
        self.rank = -1
        self.exited = False
        self.result = None
        self.error = None

    def waiting(self):
        return self.ready_after >= 0 and self.ready_after >= self.world

    def describe(self):
        where = "node %s, pid %s" % (self.info["ip"], self.info["pid"]) if self.info else "starting"
        rank = "rank %d of world %d, " % (self.rank, self.world) if self.rank >= 0 else ""
        return "worker %d (%s%s)" % (self.id, rank, where)


class ElasticRayExecutor:
    """An elastic kolo job on Ray: between min_workers and max_workers
    actors, each running worker_fn (which calls hvd.init() and a function
    decorated with hvd.elastic.run)::

        executor = ElasticRayExecutor(settings, min_workers=2, max_workers=4)
        executor.start()
        results = executor.run(worker_fn)   # the last world's results, rank order

    When a worker dies, the others go on in a smaller world from their last
    commit; when Ray has room for another worker (up to max_workers), it is
    started and joins at the next commit. Below min_workers for
    elastic_timeout seconds the job ends with an error."""

    create_settings = staticmethod(_create_settings)

    def __init__(self, settings=None, min_workers=None, max_workers=None, cpus_per_slot=1,
                 use_gpu=False, gpus_per_slot=None, env_vars=None, override_discovery=True,
                 cpus_per_worker=None, gpus_per_worker=None, reset_limit=None,
                 elastic_timeout=None):
        self.settings = settings or _create_settings()
        self.min_workers = min_workers or getattr(self.settings, "min_workers", None) or 1
        self.max_workers = (max_workers or getattr(self.settings, "max_workers", None)
                            or self.min_workers)
        if self.max_workers < self.min_workers:
            raise ValueError("max_workers (%d) < min_workers (%d)" % (self.max_workers, self.min_workers))
        self.cpus = cpus_per_worker if cpus_per_worker is not None else cpus_per_slot
        self.use_gpu = bool(use_gpu)
        gpus = gpus_per_worker if gpus_per_worker is not None else gpus_per_slot
        self.gpus = (gpus or 1) if use_gpu else 0
        self.env_vars = dict(env_vars or {})
        self.reset_limit = reset_limit if reset_limit is not None else getattr(self.settings, "reset_limit", None)
        self.elastic_timeout = (elastic_timeout if elastic_timeout is not None
                                else getattr(self.settings, "elastic_timeout", 600))
        self._server = None
        self._secret = None
        self._addr = None
        self._workers = []
        self._next_id = 0
        self._world = 0
        self._world_size = 0
        self._notice = 0
        self._noticed = False
        self._broken_at = None
        self._below_min_since = None
        self._resets = 0
        self._last_grow = 0.0
        self.events = []   # (time.time(), text) of what the driver did: worlds, failures

    def start(self):
        """Serves the job's store; workers start in run()."""
        if not ray.is_initialized():
            ray.init()
        _kolo = store_module()
        self._secret = secrets.token_hex(32)
        self._server = _kolo.StoreServer("", 0, self._secret)
        self._addr = ray.util.get_node_ip_address()

    # -- workers ----------------------------------------------------------------

    def _room(self):
        free = ray.available_resources()
        return (free.get("CPU", 0.0) >= self.cpus - 1e-9
                and (not self.gpus or free.get("GPU", 0.0) >= self.gpus - 1e-9))

    def _spawn(self, fn, args, kwargs):
        actor = ray.remote(KoloWorker).options(num_cpus=self.cpus, num_gpus=self.gpus,
                                                max_restarts=0).remote()
        w = _Worker(self._next_id, actor)
        self._next_id += 1
        env = {k: v for k, v in os.environ.items() if k.startswith("KOLO_") and k not in _IDENTITY}
        env.update(self.settings.env_vars)
        env.update(self.env_vars)
        env.setdefault("KOLO_TIMEOUT", str(self.settings.timeout_s))
        env.update({"KOLO_ELASTIC_WORKER": w.id, "KOLO_RENDEZVOUS_ADDR": self._addr,
                    "KOLO_RENDEZVOUS_PORT": self._server.port, "KOLO_SECRET_KEY": self._secret})
        w.env = env
        w.args = (fn, args, kwargs)
        self._workers.append(w)
        return w

    def _launch(self, w):
        """Once the actor reported its node: identity, then the function."""
        w.info = ray.get(w.info_ref)
        env = dict(w.env, KOLO_HOSTNAME=w.info["ip"])
        if self.use_gpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(w.info["gpu_ids"])
        w.actor.setup.remote(env, None)
        w.run_ref = w.actor.run.remote(*w.args)

    def _alive(self):
        return [w for w in self._workers if not w.exited]

    def _say(self, text):
        self.events.append((time.time(), text))
        if self.settings.verbose:
            print("kolo.ray elastic: " + text, flush=True)

    # -- run ----------------------------------------------------------------------

    def run(self, worker_fn, args=None, kwargs=None, callbacks=None):
        """Runs worker_fn on every worker until one returns (the job is then
        finishing: the members of the last world finish too); returns their
        results in rank order. Raises when the job cannot go on (below
        min_workers for elastic_timeout, no survivor holds the state, the
        reset limit). Ctrl-C stops everything and re-raises."""
        if callbacks:
            raise NotImplementedError("run(callbacks=...) is not supported")
        if self._server is None:
            raise RuntimeError("kolo.ray: call start() first")
        try:
            return self._run(worker_fn, args, kwargs)
        finally:
            self._stop_workers()

    def _run(self, fn, args, kwargs):
        deadline = placement.Deadline(self.settings.start_timeout)
        free = ray.available_resources()
        fit = int(free.get("CPU", 0.0) // self.cpus) if self.cpus else self.max_workers
        if self.gpus:
            fit = min(fit, int(free.get("GPU", 0.0) // self.gpus))
        for _ in range(min(self.max_workers, max(self.min_workers, fit))):
            self._spawn(fn, args, kwargs)
        finishing = None
        while True:
            now = time.monotonic()
            self._poll_started(deadline)
            self._read_readiness()
            finishing = self._reap(finishing)
            if finishing is not None:
                members = [w for w in self._workers if w.world == self._world and w.rank >= 0]
                if all(w.exited for w in members):
                    failed = [w for w in members if w.error is not None]
                    if failed:
                        raise failed[0].error
                    return [w.result for w in sorted(members, key=lambda w: w.rank)]
            else:
                self._manage_world(now)
                self._grow(fn, args, kwargs, now)
            time.sleep(_POLL_S)

    def _poll_started(self, deadline):
        for w in self._workers:
            if w.info is None and not w.exited:
                ready, _ = ray.wait([w.info_ref], timeout=0)
                if ready:
                    try:
                        self._launch(w)
                    except ray.exceptions.RayActorError as e:
                        w.exited, w.error = True, e
                elif self._world == 0 and deadline.left() <= 0:
                    raise TimeoutError("kolo.ray: worker %d did not start within %s s "
                                       "(start_timeout)" % (w.id, self.settings.start_timeout))

    def _read_readiness(self):
        for w in self._workers:
            if w.exited:
                continue
            key = "elastic/ready/%d" % w.id
            if self._server.check(key):
                value = int(self._server.get(key, 5.0))
                if value != w.ready_after:
                    reason_key = "elastic/reason/%d" % w.id
                    if self._server.check(reason_key):
                        w.reason = self._server.get(reason_key, 5.0).decode()
                    w.ready_after = value

    def _reap(self, finishing):
        running = [w for w in self._workers if w.run_ref is not None and not w.exited]
        if not running:
            return finishing
        done, _ = ray.wait([w.run_ref for w in running], num_returns=len(running), timeout=0)
        done = set(done)
        for w in running:
            if w.run_ref not in done:
                continue
            w.exited = True
            member = self._world > 0 and w.world == self._world
            try:
                w.result = ray.get(w.run_ref)
            except ray.exceptions.RayActorError as e:
                w.error = WorkerFailedError("kolo.ray: %s died: %s" % (w.describe(), _first_line(e)),
                                            w.rank, w.info["ip"] if w.info else "?",
                                            w.info["pid"] if w.info else -1)
            except Exception as e:
                w.error = RuntimeError("kolo.ray: %s failed: %s" % (w.describe(), _first_line(e)))
                w.error.__cause__ = e
            if finishing is not None:
                continue
            if w.error is None and (member or self._world == 0):
                finishing = w
                self._server.set("elastic/finished", ("%s finished" % w.describe()).encode())
                self._say("%s finished; the job is ending" % w.describe())
                for other in self._alive():
                    if other.world != self._world or self._world == 0:
                        ray.kill(other.actor, no_restart=True)
                continue
            self._say("%s exited" % w.describe() if w.error is None else str(w.error))
            if member and not w.waiting():
                self._server.publish_lost_rank(self._world, w.rank, "%s died (seen by kolo.ray)"
                                               % w.describe())
            if member and self._broken_at is None:
                self._broken_at = time.monotonic()
        return finishing

    def _members(self):
        return [w for w in self._alive() if self._world > 0 and w.world == self._world]

    def _manage_world(self, now):
        if self._world == 0:
            started = [w for w in self._alive()]
            if not started or any(not w.waiting() for w in started):
                return
            if len(started) >= self.min_workers:
                self._form_world(now)
            else:
                self._check_below_min(len(started), now)
            return
        current = self._members()
        any_left = len(current) < self._world_size or any(w.waiting() for w in current)
        if any_left and self._broken_at is None:
            self._broken_at = now
        hang = float(self.settings.timeout_s) + 5.0
        if self._broken_at is not None and now - self._broken_at > hang:
            for w in current:
                if not w.waiting():
                    self._say("%s did not leave its broken world within %g s: killed" % (w.describe(), hang))
                    ray.kill(w.actor, no_restart=True)
        if (self._broken_at is not None or self._noticed) and all(w.waiting() for w in current):
            self._form_world(now)
            return
        if self._broken_at is not None or self._noticed:
            return
        joining = [w for w in self._alive() if w.world == 0 and w.waiting()]
        starting = [w for w in self._alive() if w.ready_after < 0]
        if joining and not starting and self._world_size < self.max_workers:
            self._notice += 1
            self._noticed = True
            self._server.set("elastic/notice", str(self._notice).encode())
            self._say("world %d re-forms at its next commit: workers %s ready to join"
                      % (self._world, ",".join(str(w.id) for w in joining)))

    def _check_below_min(self, have, now):
        if self._below_min_since is None:
            self._below_min_since = now
        if now - self._below_min_since > self.elastic_timeout:
            raise RuntimeError("kolo.ray: waited %g s (elastic_timeout) for at least %d ready "
                               "workers (min_workers) but had %d" % (self.elastic_timeout,
                                                                       self.min_workers, have))

    def _form_world(self, now):
        candidates = [w for w in self._alive() if w.waiting()]
        survivors = [w for w in candidates if self._world > 0 and w.world == self._world]
        if self._world > 0 and not survivors:
            raise RuntimeError("kolo.ray: no worker of world %d is left, so no one holds the "
                               "training state" % self._world)
        if len(candidates) < self.min_workers:
            self._check_below_min(len(candidates), now)
            return
        if self._world > 0 and self.reset_limit is not None and self._resets >= self.reset_limit:
            raise RuntimeError("kolo.ray: world %d broke, but the job already re-formed %d times "
                               "(reset_limit)" % (self._world, self._resets))
        self._below_min_since = None
        survivors.sort(key=lambda w: w.rank)
        new = sorted((w for w in candidates if w not in survivors), key=lambda w: w.id)
        chosen = (survivors + new)[:self.max_workers]
        places = placement.assign_ranks([w.info for w in chosen])
        version = self._world + 1
        members = sorted(
            ((w.id, w.info["ip"], p["rank"], p["local_rank"], p["local_size"], p["cross_rank"],
              p["cross_size"]) for w, p in zip(chosen, places)), key=lambda m: m[2])
        _kolo = store_module()
        self._server.set("elastic/world/%d" % version,
                         _kolo.encode_world(version, self._notice, members).encode())
        self._server.set("elastic/world", str(version).encode())
        for w, p in zip(chosen, places):
            w.world, w.rank = version, p["rank"]
        since = ""
        if self._noticed:
            since = ", after the notice"
        elif self._broken_at is not None:
            since = ", %.3f s after world %d broke" % (now - self._broken_at, self._world)
        self._say("world %d: %d ranks (workers %s)%s" % (
            version, len(chosen), ",".join(str(w.id) for w in sorted(chosen, key=lambda w: w.rank)), since))
        if self._world > 0:
            self._resets += 1
        self._world, self._world_size = version, len(chosen)
        self._noticed = False
        self._broken_at = None

    def _grow(self, fn, args, kwargs, now):
        if now - self._last_grow < 1.0:
            return
        self._last_grow = now
        # Ray's free resources count an actor only once it is placed.
        if any(w.info is None for w in self._alive()):
            return
        if len(self._alive()) < self.max_workers and self._room():
            w = self._spawn(fn, args, kwargs)
            self._say("started worker %d: the cluster has room" % w.id)

    # -- stop ---------------------------------------------------------------------

    def _stop_workers(self):
        alive = [w for w in self._workers if not w.exited or w.error is None]
        stops = [w.actor.stop.remote() for w in alive if w.info is not None]
        if stops:
            try:
                ray.wait(stops, num_returns=len(stops), timeout=5.0)
            except Exception:
                pass
        for w in self._workers:
            try:
                ray.kill(w.actor, no_restart=True)
            except Exception:
                pass
        self._workers = []

    def worker_info(self):
        """Live workers: id, world, rank, node, pid."""
        return [{"id": w.id, "world": w.world, "rank": w.rank,
                 "node": w.info["ip"] if w.info else None,
                 "pid": w.info["pid"] if w.info else None} for w in self._alive()]

    def shutdown(self):
        """Stops every worker and closes the job's store. Safe to call twice."""
        self._stop_workers()
        if self._server is not None:
            self._server.close()
            self._server = None
