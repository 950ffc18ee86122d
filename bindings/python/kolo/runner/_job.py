"""A function job over kolo's authenticated store: the pieces kolo.run and
kolo.spark.run share.

The driver serves the store (kolo._kolo.StoreServer, HMAC-SHA256
challenge keyed by a fresh secret per job) and puts the pickled function
there; each worker connects with the secret (StoreClient), runs the
function and puts back its result, or its exception and traceback. The
secret reaches workers through their environment or an in-process call,
never a command line.

Keys (all under "kolo.run/"): "func" (paths, func, args, kwargs), 
"result/<rank>", "errors" (a counter: the order in which ranks failed),
"error/<n>" (the n-th failure: rank, host, traceback text) and
"error/<n>.exc" (its exception, when it pickles).
Values above the store's frame limit travel in chunks (put_blob/get_blob).

Threading: a FunctionJob is driven from one thread.
"""
import io
import os
import pickle
import secrets
import socket
import sys
import traceback

try:  # as Horovod: cloudpickle ships lambdas, closures and __main__'s functions
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - depends on the environment
    _pickler = None

PREFIX = "kolo.run/"
# The store's frames are bounded (64 MiB); larger values go in chunks.
_CHUNK = 32 << 20


def dumps(obj):
    if _pickler is None:
        raise ImportError("kolo.run and kolo.spark.run ship the function with cloudpickle, "
                          "which is not installed for %s: pip install cloudpickle"
                          % sys.executable)
    buf = io.BytesIO()
    _pickler.dump(obj, buf, protocol=pickle.HIGHEST_PROTOCOL)
    return buf.getvalue()


def put_blob(store, key, data):
    """Stores bytes under key in chunks; the count is written last, so a
    reader that sees it sees every chunk."""
    chunks = [data[i:i + _CHUNK] for i in range(0, len(data), _CHUNK)] or [b""]
    for i, chunk in enumerate(chunks):
        store.set("%s%s/%d" % (PREFIX, key, i), chunk)
    store.set(PREFIX + key, str(len(chunks)).encode())


def get_blob(store, key, timeout):
    """The bytes put under key; waits up to timeout seconds for them."""
    n = int(store.get(PREFIX + key, timeout))
    return b"".join(store.get("%s%s/%d" % (PREFIX, key, i), timeout) for i in range(n))


def has_blob(store, key):
    return store.check(PREFIX + key)


class RemoteTraceback(Exception):
    """The traceback of the rank whose exception kolo.run or kolo.spark.run
    re-raises: set as that exception's ``__cause__``, so it prints above
    the driver's own traceback. ``rank`` and ``host`` name where it ran;
    ``text`` is the formatted traceback."""

    def __init__(self, rank, host, text):
        super().__init__(rank, host, text)
        self.rank = rank
        self.host = host
        self.text = text

    def __str__(self):
        return "rank %s on %s raised:\n%s" % (self.rank, self.host, self.text.rstrip())


class RankError(RuntimeError):
    """A rank raised an exception that could not be brought back to the
    driver as itself (not picklable); the message holds its traceback.
    ``rank``, ``host`` and ``text`` as in RemoteTraceback."""

    def __init__(self, message, rank=None, host=None, text=None):
        super().__init__(message)
        self.rank = rank
        self.host = host
        self.text = text


class FunctionJob:
    """The driver's side: serves the store with a fresh secret and holds
    the pickled function. ``bind``: the address the store listens on
    ("127.0.0.1" when every worker is on this host, "" for every
    interface)."""

    def __init__(self, func, args, kwargs, bind="127.0.0.1"):
        self.secret = secrets.token_hex(32)
        self._server = _store_module("StoreServer").StoreServer(bind, 0, self.secret)
        self.port = self._server.port
        try:
            # sys.path travels with the function: a worker appends the
            # entries it lacks, so functions of modules the driver imported
            # from its own path (tests, notebooks' folders) unpickle there.
            put_blob(self._server, "func", dumps((list(sys.path), func, tuple(args or ()),
                                                  dict(kwargs or {}))))
        except BaseException:
            self.close()
            raise

    def count(self, name):
        """The counter name (e.g. "errors": how many ranks failed so far)."""
        return self._server.add(PREFIX + name, 0)

    def failure(self):
        """The first failure recorded by a rank, as (rank, host, exception
        or None, traceback text), or None."""
        if self.count("errors") == 0:
            return None
        try:
            rank, host, text = pickle.loads(get_blob(self._server, "error/1", 10.0))
        except Exception as e:  # the rank died while writing its report
            return None, "?", None, "(its report did not arrive: %s)\n" % e
        exc = None
        if has_blob(self._server, "error/1.exc"):
            try:
                exc = pickle.loads(get_blob(self._server, "error/1.exc", 10.0))
            except Exception:  # its class does not exist here
                exc = None
        return rank, host, exc, text

    def raise_failure(self, what):
        """Raises the first rank's exception with its traceback attached
        (RankError when it could not be unpickled); returns when no rank
        recorded one. what: who ran the ranks, for the message."""
        failure = self.failure()
        if failure is None:
            return
        rank, host, exc, text = failure
        remote = RemoteTraceback(rank, host, text)
        if isinstance(exc, BaseException):
            raise exc from remote
        last = text.strip().splitlines()[-1] if text.strip() else "an exception"
        raise RankError("%s: rank %s on %s raised %s\n%s" % (what, rank, host, last, text),
                        rank, host, text)

    def results(self, ranks, timeout=10.0):
        """The results of ranks 0..ranks-1, in rank order; RuntimeError
        naming the ranks that posted none."""
        missing = [r for r in range(ranks) if not has_blob(self._server, "result/%d" % r)]
        if missing:
            raise RuntimeError("no result from rank(s) %s: they ended without returning from "
                               "the function" % ", ".join(map(str, missing)))
        return [pickle.loads(get_blob(self._server, "result/%d" % r, timeout))
                for r in range(ranks)]

    def close(self):
        if self._server is not None:
            self._server.close()
            self._server = None


# Shown as kolo.runner.RemoteTraceback / RankError in tracebacks.
RemoteTraceback.__module__ = RankError.__module__ = "kolo.runner"


# ---- worker side ------------------------------------------------------------------


def _current_rank():
    """This process's rank: the running engine's, else the launcher's."""
    kolo = sys.modules.get("kolo._kolo")
    if kolo is not None and kolo.is_initialized():
        return kolo.rank()
    for name in ("KOLO_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return None


def _fail_peers(error):
    """The other ranks' pending and later operations fail with this rank's
    error instead of waiting for it (kolo.torch's excepthook does this for
    scripts; here the exception is caught before any hook sees it)."""
    kolo = sys.modules.get("kolo._kolo")
    try:
        if kolo is not None and kolo.is_initialized():
            kolo.abort("%s: %s" % (type(error).__name__, error))
    except Exception:  # the engine may be gone already
        pass


def _store_module(name):
    """kolo._kolo, checked to have the store class name."""
    from kolo import _kolo
    if not hasattr(_kolo, name):
        raise RuntimeError("this kolo build has no kolo._kolo.%s (bindings/python/src/store.cc); "
                           "rebuild kolo from a checkout that has it" % name)
    return _kolo


def connect(addr, port, secret, timeout):
    """A StoreClient of the job's store (timeout: seconds to keep trying)."""
    return _store_module("StoreClient").StoreClient(addr, int(port), secret, float(timeout))


def execute(store, rank=None, fetch_timeout=60.0):
    """Runs the job's function in this process and posts the outcome.
    rank: this worker's rank when known before the function runs (Spark);
    None: asked after it returns (the engine's, else the launcher's).
    Returns (ok, value): the function's result, or the exception it raised
    after recording it (the caller then ends this worker)."""
    paths, func, args, kwargs = pickle.loads(get_blob(store, "func", fetch_timeout))
    for p in paths:
        if p and p not in sys.path and os.path.isdir(p):
            sys.path.append(p)
    try:
        result = func(*args, **kwargs)
    except BaseException as e:  # noqa: B902 - every failure goes back to the driver
        text = traceback.format_exc()
        me = rank if rank is not None else _current_rank()
        record(store, me, e, text)
        _fail_peers(e)
        return False, e
    me = rank if rank is not None else _current_rank()
    if me is None:
        error = RuntimeError(
            "the function returned on a worker whose rank is unknown: in an elastic job it "
            "must return while kolo is initialized (call hvd.shutdown() after it, not in it)")
        record(store, None, error, "RuntimeError: %s\n" % error)
        return False, error
    put_blob(store, "result/%d" % me, dumps(result))
    return True, result


def record(store, rank, error, text):
    """Posts this worker's failure; the driver re-raises the first one."""
    n = store.add(PREFIX + "errors", 1)
    try:
        put_blob(store, "error/%d.exc" % n, dumps(error))
    except Exception:  # an exception that does not pickle travels as text only
        pass
    put_blob(store, "error/%d" % n, pickle.dumps((rank, socket.gethostname(), text)))
