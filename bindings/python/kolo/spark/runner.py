"""kolo.spark.run: horovod.spark.run on kolo.

The driver (the process calling run()) serves kolo's rendezvous store
(kolo._kolo.StoreServer, a fresh secret per job) and starts one Spark
barrier stage of num_proc tasks. Each task learns every task's host
(BarrierTaskContext.allGather), derives its rank the same way on every
task (the tasks of a host get consecutive ranks; hosts in the order of
their first task), sets the KOLO_* identity and the store's address and
secret in its Python worker's environment for the duration of the task,
and runs the function (kolo.runner._job.execute), which calls
kolo.torch.init() itself. Results and failures travel over the store.

The secret reaches the tasks inside the task closure, which Spark ships
to its executors over its own RPC (as Horovod's key does), never on a
command line; enable Spark's RPC authentication and encryption
(spark.authenticate, spark.network.crypto.enabled) on shared clusters.

Threading: run() drives the Spark job from a helper thread and watches
the store from the calling thread.
"""
import logging
import os
import socket
import sys
import threading
import time

from kolo.runner import _job

INSTALL_HINT = 'pip install "kolo[spark]"  (or: pip install pyspark)'

_log = logging.getLogger("kolo.spark")

# KOLO_* variables a task sets for the function and restores afterwards.
_IDENTITY = ("KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK",
             "KOLO_CROSS_SIZE", "KOLO_HOSTNAME", "KOLO_RENDEZVOUS_ADDR", "KOLO_RENDEZVOUS_PORT",
             "KOLO_SECRET_KEY")


def require_pyspark():
    """The pyspark module; ImportError naming the install command when it
    is missing."""
    try:
        import pyspark
    except ImportError as e:
        raise ImportError("kolo.spark needs PySpark, which is not installed for %s: %s (%s)"
                          % (sys.executable, INSTALL_HINT, e)) from e
    return pyspark


def _notice(text):
    print("kolo.spark.run: " + text, file=sys.stderr)


def task_slots(sc):
    """How many tasks the application can run at once, as (slots, how it
    was counted), or (None, why) when it cannot tell."""
    conf = sc.getConf()
    task_cpus = int(conf.get("spark.task.cpus", "1"))
    master = sc.master or ""
    if master.startswith("local"):
        spec = master[len("local"):]
        if spec in ("", "[]"):
            cores = 1
        else:
            inner = spec.strip("[]").split(",")[0].strip()
            cores = (os.cpu_count() or 1) if inner == "*" else int(inner)
        return cores // task_cpus, "master %s, spark.task.cpus=%d" % (master, task_cpus)
    try:
        infos = sc._jsc.sc().statusTracker().getExecutorInfos()
        executors = max(0, len(infos) - 1)  # the driver is listed too
    except Exception as e:  # pragma: no cover - depends on the cluster manager
        return None, "could not list executors (%s)" % e
    cores = conf.get("spark.executor.cores")
    if cores is None or executors == 0:
        return None, "%d executors registered, spark.executor.cores %s" % (
            executors, "unset" if cores is None else cores)
    return executors * int(cores) // task_cpus, "%d executors x spark.executor.cores=%s, " \
        "spark.task.cpus=%d" % (executors, cores, task_cpus)


def placement(hosts):
    """hosts: each task's host, by partition. Returns one identity dict per
    partition: the tasks of a host get consecutive ranks, hosts in the
    order of their first task (so partition 0 is rank 0)."""
    order = []
    for h in hosts:
        if h not in order:
            order.append(h)
    by_host = {h: [p for p, x in enumerate(hosts) if x == h] for h in order}
    out = [None] * len(hosts)
    rank = 0
    for cross_rank, h in enumerate(order):
        for local_rank, p in enumerate(by_host[h]):
            out[p] = {"KOLO_RANK": rank, "KOLO_SIZE": len(hosts),
                      "KOLO_LOCAL_RANK": local_rank, "KOLO_LOCAL_SIZE": len(by_host[h]),
                      "KOLO_CROSS_RANK": cross_rank, "KOLO_CROSS_SIZE": len(order),
                      "KOLO_HOSTNAME": h}
            rank += 1
    return out


def _make_task(addr, port, secret, env, timeout):
    """The barrier stage's function (pickled by Spark, run on executors)."""

    def task(_rows):
        from pyspark import BarrierTaskContext
        ctx = BarrierTaskContext.get()
        partition = ctx.partitionId()
        hosts = ctx.allGather(socket.gethostname())
        identity = placement(hosts)[partition]
        rank = identity["KOLO_RANK"]
        store = _job.connect(addr, port, secret, timeout)
        store.add(_job.PREFIX + "started", 1)
        new = {k: str(v) for k, v in identity.items()}
        new.update({"KOLO_RENDEZVOUS_ADDR": addr, "KOLO_RENDEZVOUS_PORT": str(port),
                    "KOLO_SECRET_KEY": secret})
        new.update({k: str(v) for k, v in (env or {}).items()})
        saved = {k: os.environ.get(k) for k in new}
        os.environ.update(new)
        try:
            ok, _ = _job.execute(store, rank=rank, fetch_timeout=timeout)
        finally:
            # Spark reuses its Python workers: leave the job and give the
            # worker its environment back.
            kolo = sys.modules.get("kolo._kolo")
            try:
                if kolo is not None and kolo.is_initialized():
                    kolo.shutdown()
            except Exception:  # a failed job's engine may refuse an orderly end
                pass
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            store.close()
        yield rank, ok

    return task


def _timeout_s():
    for name in ("KOLO_TIMEOUT", "HOROVOD_GLOO_TIMEOUT_SECONDS"):
        try:
            return float(os.environ[name])
        except (KeyError, ValueError):
            pass
    return 60.0


def run(fn, args=(), kwargs={}, num_proc=None, start_timeout=None, use_mpi=None, use_gloo=None,
        extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
        prefix_output_with_timestamp=False, executable=None):
    """Runs ``fn(*args, **kwargs)`` as num_proc Spark tasks that form one
    kolo job, and returns the results in rank order (horovod.spark.run).

    fn calls ``kolo.torch.init()`` itself. It runs inside the Spark
    executors' Python workers (one barrier-mode task per rank), so a
    SparkSession (SparkContext) must be active in this process.

    - num_proc: ranks (default: spark.default.parallelism). The cluster
      must run that many tasks at once; fewer task slots is a ValueError
      naming both numbers.
    - start_timeout: seconds for every task to start and register (default
      HOROVOD_SPARK_START_TIMEOUT, else 600); past it the Spark job is
      cancelled and TimeoutError says how many started.
    - env: variables set in each task's environment while fn runs (KOLO_*
      settings such as KOLO_TIMEOUT included).
    - nics: the network interfaces kolo may use (KOLO_IFACE): each rank uses
      the first of them its host has.
    - verbose: 0 quiet, 1 (default) one log line, 2 also the placement.
    - use_gloo: accepted (kolo's controller over TCP is the only one here).
      use_mpi / extra_mpi_args: ValueError; the ranks are Spark tasks, not
      mpirun processes.
    - stdout, stderr, prefix_output_with_timestamp: accepted with a notice:
      the ranks' output stays in the executors' logs (in local mode, this
      process's console).
    - executable: accepted with a notice: Spark starts its workers' Python
      (PYSPARK_PYTHON).

    Errors: when fn raises on a rank, the other ranks' kolo operations
    fail at once with that rank's error; run() waits for their tasks
    (bounded by KOLO_TIMEOUT, then the Spark job is cancelled) and raises
    the first rank's exception with its traceback as ``__cause__``
    (kolo.runner.RemoteTraceback). No active SparkContext, or PySpark
    missing, is a clear error before anything starts.
    """
    pyspark = require_pyspark()
    if use_mpi or extra_mpi_args:
        raise ValueError("kolo.spark.run: use_mpi/extra_mpi_args are not supported: the ranks are "
                         "Spark tasks, not mpirun processes (kolo runs its own TCP controller "
                         "between them; leave use_mpi unset)")
    if not callable(fn):
        raise ValueError("kolo.spark.run: fn must be callable, got %r" % (fn,))
    if stdout is not None or stderr is not None or prefix_output_with_timestamp:
        _notice("stdout/stderr/prefix_output_with_timestamp: the ranks' output stays in the "
                "Spark executors' logs (in local mode, this console)")
    if executable is not None and executable != sys.executable:
        _notice("executable=%s: Spark starts its workers' Python; set PYSPARK_PYTHON instead"
                % executable)
    sc = pyspark.SparkContext._active_spark_context
    if sc is None:
        raise RuntimeError("kolo.spark.run: no active SparkContext in this process; start one "
                           "first (SparkSession.builder...getOrCreate())")
    if num_proc is None:
        num_proc = sc.defaultParallelism
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError("kolo.spark.run: num_proc must be a positive int, got %r" % (num_proc,))
    slots, how = task_slots(sc)
    if slots is not None and slots < num_proc:
        raise ValueError(
            "kolo.spark.run: num_proc=%d needs %d task slots at once (barrier execution mode "
            "starts every rank together), but this Spark application has %d (%s). Lower "
            "num_proc, or give Spark more cores (e.g. master local[%d], more executors or "
            "spark.executor.cores)" % (num_proc, num_proc, slots, how, num_proc))
    if start_timeout is None:
        start_timeout = float(os.environ.get("HOROVOD_SPARK_START_TIMEOUT", "600"))
    env = dict(env or {})
    if nics:
        # Each rank uses the first of them its host has (a set in sorted order).
        nics = [nics] if isinstance(nics, str) else (
            list(nics) if isinstance(nics, (list, tuple)) else sorted(nics))
        env.setdefault("KOLO_IFACE", ",".join(nics))
    if verbose and verbose >= 1:
        _log.info("kolo.spark.run: running %d processes", num_proc)

    local = (sc.master or "").startswith("local")
    addr = "127.0.0.1" if local else sc.getConf().get("spark.driver.host")
    job = _job.FunctionJob(fn, args, kwargs, bind="127.0.0.1" if local else "")
    group = "kolo.spark.run.%d.%d" % (os.getpid(), job.port)
    outcome = {}

    def spark_job():
        try:
            sc.setJobGroup(group, "kolo.spark.run: %d ranks" % num_proc, interruptOnCancel=True)
            rdd = sc.parallelize(range(num_proc), num_proc).barrier()
            outcome["ranks"] = rdd.mapPartitions(
                _make_task(addr, job.port, job.secret, env, float(start_timeout))).collect()
        except BaseException as e:  # noqa: B902 - reported by the calling thread
            outcome["error"] = e

    thread = threading.Thread(target=spark_job, name="kolo.spark.run", daemon=True)
    try:
        thread.start()
        _wait(thread, job, sc, group, num_proc, float(start_timeout), slots, how)
        job.raise_failure("kolo.spark.run")
        if "error" in outcome:
            raise RuntimeError("kolo.spark.run: the Spark job failed: %s"
                               % _first_line(outcome["error"])) from outcome["error"]
        if verbose and verbose >= 2:
            _notice("ranks by partition: %s" % outcome.get("ranks"))
        return job.results(num_proc)
    except BaseException:
        sc.cancelJobGroup(group)
        thread.join(30)
        raise
    finally:
        job.close()


def _wait(thread, job, sc, group, num_proc, start_timeout, slots, how):
    """Returns once the Spark job ended. TimeoutError (after cancelling it)
    when the tasks did not all start within start_timeout; after a rank
    failed, gives the others KOLO_TIMEOUT (+10 s) to end, then cancels."""
    started_by = time.monotonic() + start_timeout
    failed_at = None
    while thread.is_alive():
        thread.join(0.2)
        if not thread.is_alive():
            break
        now = time.monotonic()
        started = job.count("started")
        if started < num_proc and now > started_by:
            sc.cancelJobGroup(group)
            thread.join(30)
            raise TimeoutError(
                "kolo.spark.run: %d of %d tasks started within start_timeout=%g s. Barrier "
                "execution mode needs %d task slots at once; this application has %s (%s)"
                % (started, num_proc, start_timeout, num_proc,
                   "?" if slots is None else slots, how))
        if failed_at is None and job.count("errors") > 0:
            failed_at = now
        if failed_at is not None and now - failed_at > _timeout_s() + 10:
            sc.cancelJobGroup(group)
            thread.join(30)
            return


def _first_line(error):
    text = str(error).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__
