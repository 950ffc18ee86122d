"""A rank of a kolo.run job: ``python -m kolo.runner.task``, started by
kolorun with the job's store in its environment (KOLO_RUN_PORT and
KOLO_RUN_SECRET; the store's host is kolorun's, KOLO_RENDEZVOUS_ADDR, the
address kolorun chose for this rank to reach it; kolorun passes the environment to local
ranks directly and to remote ones on the remote shell's standard input,
never on a command line). The secret is removed from the environment
before the function runs, so processes it starts do not inherit it.

Exit status: 0 after posting the result, 1 after posting the exception.
"""
import os
import sys
import traceback


def main():
    try:
        addr = os.environ.pop("KOLO_RUN_ADDR", None) or os.environ["KOLO_RENDEZVOUS_ADDR"]
        port = os.environ.pop("KOLO_RUN_PORT")
        secret = os.environ.pop("KOLO_RUN_SECRET")
    except KeyError as e:
        sys.exit("kolo.runner.task: %s is not set; this module is started by kolo.run(), "
                 "not by hand" % e)
    timeout = float(os.environ.pop("KOLO_RUN_FETCH_TIMEOUT", "60"))
    from kolo.runner import _job
    store = _job.connect(addr, port, secret, timeout)
    ok, value = _job.execute(store, fetch_timeout=timeout)
    if not ok:
        traceback.print_exception(type(value), value, value.__traceback__, file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        # Not sys.exit: the engine's orderly shutdown would wait for peers
        # that are failing or being stopped; this rank's error has reached
        # them (abort) and the driver (the store) already.
        os._exit(1)
    store.close()
    # Leave the job in order (as a script's hvd.shutdown() or Horovod's
    # atexit would): under --mpi, MPI_Finalize runs only then.
    kolo = sys.modules.get("kolo._kolo")
    if kolo is not None and kolo.is_initialized():
        kolo.shutdown()


if __name__ == "__main__":
    main()
