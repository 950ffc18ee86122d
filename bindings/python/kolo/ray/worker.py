"""The worker side of kolo.ray: one Ray actor per rank.

The driver creates the actor, asks where it landed (node_info), then calls
setup() once with the rank's identity, the rendezvous address and the job's
secret. setup() puts them into this actor process's own os.environ, where
kolo.torch.init() reads them (the KOLO_* variables of docs/reference/environment.md,
"Identity and rendezvous"); they travel as arguments of that one method call, never
on a command line or in another process's environment. The user's function
then calls hvd.init() as it would under kolorun.

Threading: Ray runs an actor's methods one at a time (max_concurrency 1),
so setup, run, execute and stop never overlap.
"""
import os
import socket
import sys
import types


class KoloWorker:
    """A rank of a kolo.ray job. The executor wraps this class with
    ray.remote(...) and its placement; users reach it through
    RayExecutor.run/execute."""

    def __init__(self):
        self._state = None

    def node_info(self):
        """Where this actor runs: node_id, ip, hostname, pid and the GPU ids
        Ray gave it (strings)."""
        import ray
        ctx = ray.get_runtime_context()
        return {
            "node_id": ctx.get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
        }

    def setup(self, env, executable=None):
        """env: the KOLO_* variables of this rank (identity, rendezvous,
        secret, the driver's tuning variables) and the user's extra ones.
        executable: (cls, args, kwargs) of the state object execute() hands
        to its functions, or None for an empty namespace."""
        os.environ.update({k: str(v) for k, v in env.items()})
        if executable is None:
            self._state = types.SimpleNamespace()
        else:
            cls, args, kwargs = executable
            self._state = cls(*(args or ()), **(kwargs or {}))
        return os.getpid()

    def run(self, fn, args, kwargs):
        """Returns ``fn(*args, **kwargs)``. An exception fails the other ranks'
        pending operations with this rank's error, then propagates."""
        try:
            return fn(*(args or ()), **(kwargs or {}))
        except BaseException as e:
            _fail_peers(e)
            raise

    def execute(self, fn):
        """Returns fn(state), state being the object setup() made. Errors as
        run()."""
        try:
            return fn(self._state)
        except BaseException as e:
            _fail_peers(e)
            raise

    def stop(self):
        """Leaves the job (kolo.torch.shutdown()) if this process joined it."""
        kolo = sys.modules.get("kolo._kolo")
        if kolo is not None and kolo.is_initialized():
            kolo.shutdown()
        return True


def _fail_peers(error):
    """The other ranks' pending and later operations fail with this rank's
    error ("rank R failed: ValueError: ...") instead of waiting for it;
    under kolorun the excepthook does this, but Ray catches the exception
    before any hook sees it."""
    kolo = sys.modules.get("kolo._kolo")
    try:
        if kolo is not None and kolo.is_initialized():
            kolo.abort("%s: %s" % (type(error).__name__, error))
    except Exception:  # the engine may be gone already
        pass
