"""kolo.run: horovod.run for kolo. Runs a Python function on every rank of
a kolorun job and returns the results in rank order.

    import kolo

    def train(lr):
        import kolo.torch as hvd
        hvd.init()
        ...
        return hvd.rank()

    print(kolo.run(train, args=(0.1,), num_proc=2))     # [0, 1]

The function, its arguments and the results travel (pickled with
cloudpickle) over kolo's authenticated rendezvous store, served by the
calling process with a fresh secret per job; the ranks get its secret in
their environment from kolorun, never on a command line. See
docs/running/kolo-run.md.
"""
import os
import shutil
import socket
import subprocess
import sys
import warnings

from kolo.runner._job import FunctionJob, RankError, RemoteTraceback  # noqa: F401

__all__ = ["run", "RankError", "RemoteTraceback"]


def _kolorun():
    """The kolorun binary: the one inside an installed kolo package
    (kolo/bin/kolorun), else the build tree's (PYTHONPATH=<build>/python),
    else the first on PATH."""
    import kolo
    here = os.path.dirname(os.path.abspath(kolo.__file__))
    candidates = [os.path.join(here, "bin", "kolorun")]
    try:
        from kolo.runner import _kolorun_path
        candidates.append(_kolorun_path.KOLORUN)
    except ImportError:
        pass
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    found = shutil.which("kolorun")
    if found:
        return found
    raise RuntimeError("kolo.run: the kolorun launcher was not found (looked at %s and on PATH); "
                       "reinstall kolo (pip install --no-build-isolation <kolo checkout>) or "
                       "build the kolorun target" % ", ".join(candidates))


def _host_names(hosts, hostfile):
    names = []
    if hosts:
        for item in str(hosts).split(","):
            if item.strip():
                names.append(item.strip().rsplit(":", 1)[0] if item.count(":") == 1
                             else item.strip())
    if hostfile:
        try:
            with open(hostfile) as f:
                for line in f:
                    line = line.split("#", 1)[0].strip()
                    if line:
                        names.append(line.split()[0].split(":")[0])
        except OSError as e:
            raise ValueError("kolo.run: cannot read hostfile %r: %s" % (hostfile, e)) from e
    return names


def _is_local(host):
    if host in ("localhost", "::1") or host.startswith("127."):
        return True
    try:
        addr = socket.gethostbyname(host)
    except OSError:
        return False
    if addr.startswith("127."):
        return True
    me = {socket.gethostname(), socket.getfqdn()}
    if host in me:
        return True
    try:
        return addr in {socket.gethostbyname(h) for h in me}
    except OSError:
        return False


def _count(name, value, minimum=1):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError("kolo.run: %s must be an integer >= %d, got %r" % (name, minimum, value))
    return value


def _notice(text):
    print("kolo.run: " + text, file=sys.stderr)


def _kolorun_has(kolorun, flag):
    try:
        out = subprocess.run([kolorun, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return flag in out.stdout + out.stderr


def run(func, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None,
        slots=None, reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        host_discovery_script=None, start_timeout=None, ssh_port=None, ssh_identity_file=None,
        disable_cache=None, output_filename=None, verbose=None, use_gloo=None, use_mpi=None,
        mpi_args=None, network_interface=None, network_interfaces=None, executable=None,
        np=None, min_np=None, max_np=None):
    """Runs ``func(*args, **kwargs)`` on every rank of a kolorun job and
    returns the results as a list in rank order (horovod.run).

    func calls ``kolo.torch.init()`` itself, as a script under kolorun
    would. It is pickled with cloudpickle (lambdas and closures work; a
    function of an importable module is imported by name on the ranks,
    which also search the caller's ``sys.path``).

    Arguments, as horovod.run's:

    - num_proc: ranks (default 1; ``np`` is its deprecated alias).
    - hosts ("host1:2,host2:4") or hostfile ("host slots=N" lines): where
      they run (default: this machine). Remote hosts start over ssh
      (ssh_port, ssh_identity_file).
    - min_num_proc / max_num_proc (``min_np`` / ``max_np``),
      host_discovery_script, slots, reset_limit, cooldown_range: an
      elastic job (kolorun's --min-np, --max-np, --host-discovery-script,
      --slots, --reset-limit, --blacklist-cooldown-range); the results are
      those of ranks 0 .. min_num_proc-1 of the final world, as in Horovod.
    - start_timeout: seconds for the ranks to start and meet (kolorun's
      --start-timeout; default 30 or HOROVOD_START_TIMEOUT).
    - use_gloo / use_mpi: kolorun --gloo / --mpi; mpi_args: extra mpirun
      arguments (with use_mpi only).
    - network_interface (comma-separated) or network_interfaces (a list):
      the interfaces kolo may use (kolorun --network-interfaces): each host
      uses the first of them it has.
    - output_filename: a folder for each rank's stdout and stderr.
    - verbose: kolorun --verbose.
    - executable: the Python interpreter of the ranks (default
      sys.executable).
    - disable_cache: accepted; kolo.run caches no host checks, so it has
      nothing to disable (a one-line notice says so).

    Errors: when a rank raises, kolorun stops the other ranks (their
    pending kolo operations fail at once with that rank's error; the rest
    are stopped by signal) and run() raises that rank's exception, its
    traceback attached as ``__cause__`` (a RemoteTraceback naming rank and
    host; RankError when the exception does not unpickle here). A rank
    that dies without raising gives a RuntimeError naming kolorun's exit
    status. Bad arguments raise ValueError before anything starts.
    """
    if np is not None:
        warnings.warn("kolo.run(np=...) is deprecated, use num_proc", DeprecationWarning,
                      stacklevel=2)
        if num_proc is not None and num_proc != np:
            raise ValueError("kolo.run: num_proc=%r and its deprecated alias np=%r disagree"
                             % (num_proc, np))
        num_proc = np
    if min_np is not None:
        warnings.warn("kolo.run(min_np=...) is deprecated, use min_num_proc",
                      DeprecationWarning, stacklevel=2)
        min_num_proc = min_np if min_num_proc is None else min_num_proc
    if max_np is not None:
        warnings.warn("kolo.run(max_np=...) is deprecated, use max_num_proc",
                      DeprecationWarning, stacklevel=2)
        max_num_proc = max_np if max_num_proc is None else max_num_proc
    if network_interface:
        if network_interfaces:
            raise ValueError("kolo.run: give network_interface or network_interfaces, not both")
        network_interfaces = [n.strip() for n in str(network_interface).split(",") if n.strip()]
    if isinstance(network_interfaces, str):
        network_interfaces = [n.strip() for n in network_interfaces.split(",") if n.strip()]
    if not callable(func):
        raise ValueError("kolo.run: func must be callable, got %r" % (func,))
    if isinstance(args, (str, bytes)) or not hasattr(args, "__iter__"):
        raise ValueError("kolo.run: args must be a tuple or list of positional arguments, "
                         "got %r" % (args,))
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ValueError("kolo.run: kwargs must be a dict, got %r" % (kwargs,))
    if hosts is not None and hostfile is not None:
        raise ValueError("kolo.run: give hosts or hostfile, not both")
    if use_gloo and use_mpi:
        raise ValueError("kolo.run: use_gloo and use_mpi cannot both be set")
    if mpi_args and not use_mpi:
        raise ValueError("kolo.run: mpi_args=%r needs use_mpi=True (they are mpirun's "
                         "arguments)" % (mpi_args,))

    num_proc = _count("num_proc", num_proc)
    min_num_proc = _count("min_num_proc", min_num_proc)
    max_num_proc = _count("max_num_proc", max_num_proc)
    slots = _count("slots", slots)
    reset_limit = _count("reset_limit", reset_limit, minimum=0)
    elastic = bool(host_discovery_script) or min_num_proc is not None or max_num_proc is not None
    if not elastic:
        for name, value in (("slots", slots), ("reset_limit", reset_limit),
                            ("cooldown_range", cooldown_range)):
            if value is not None:
                raise ValueError(
                    "kolo.run: %s applies to elastic jobs only; give min_num_proc, "
                    "max_num_proc or host_discovery_script too" % name)
        num_proc = num_proc or 1
    else:
        if num_proc is None:
            num_proc = min_num_proc
        if min_num_proc is None:
            min_num_proc = num_proc
        if num_proc is None:
            raise ValueError("kolo.run: an elastic job needs num_proc or min_num_proc")
        if max_num_proc is not None and max_num_proc < min_num_proc:
            raise ValueError("kolo.run: max_num_proc=%d is below min_num_proc=%d"
                             % (max_num_proc, min_num_proc))
    if cooldown_range is not None:
        try:
            lo, hi = (float(x) for x in cooldown_range)
        except (TypeError, ValueError):
            raise ValueError("kolo.run: cooldown_range must be (min_seconds, max_seconds), "
                             "got %r" % (cooldown_range,)) from None
        if not 0 <= lo <= hi:
            raise ValueError("kolo.run: cooldown_range=%r: need 0 <= min <= max"
                             % (cooldown_range,))
    if start_timeout is not None and (isinstance(start_timeout, bool) or
                                      not isinstance(start_timeout, (int, float)) or
                                      start_timeout <= 0):
        raise ValueError("kolo.run: start_timeout must be a positive number of seconds, got %r"
                         % (start_timeout,))
    if disable_cache:
        _notice("disable_cache: kolo caches no host checks, so there is nothing to disable")

    kolorun = _kolorun()
    cmd = [kolorun, "-np", str(num_proc)]
    if hosts:
        cmd += ["-H", str(hosts)]
    if hostfile:
        cmd += ["--hostfile", str(hostfile)]
    if elastic:
        cmd += ["--min-np", str(min_num_proc)]
        if max_num_proc is not None:
            cmd += ["--max-np", str(max_num_proc)]
        if host_discovery_script:
            cmd += ["--host-discovery-script", str(host_discovery_script)]
        if slots is not None:
            cmd += ["--slots", str(slots)]
        if reset_limit is not None:
            cmd += ["--reset-limit", str(reset_limit)]
        if cooldown_range is not None:
            cmd += ["--blacklist-cooldown-range", str(cooldown_range[0]), str(cooldown_range[1])]
    if start_timeout is not None:
        cmd += ["--start-timeout", str(start_timeout)]
    elif os.environ.get("HOROVOD_START_TIMEOUT"):
        cmd += ["--start-timeout", os.environ["HOROVOD_START_TIMEOUT"]]
    if ssh_port is not None:
        cmd += ["--ssh-port", str(_count("ssh_port", ssh_port))]
    if ssh_identity_file:
        cmd += ["--ssh-identity-file", str(ssh_identity_file)]
    if output_filename:
        cmd += ["--output-filename", str(output_filename)]
    if verbose:
        cmd += ["--verbose"]
    if use_gloo:
        cmd += ["--gloo"]
    if use_mpi:
        cmd += ["--mpi"]
    if mpi_args:
        if not _kolorun_has(kolorun, "--mpi-args"):
            raise ValueError("kolo.run: mpi_args needs a kolorun with --mpi-args (this one, %s, "
                             "has none); pass mpirun's settings through its environment "
                             "(OMPI_MCA_* variables) instead" % kolorun)
        cmd += ["--mpi-args", str(mpi_args)]
    if network_interfaces:
        cmd += ["--network-interfaces", ",".join(network_interfaces)]

    names = _host_names(hosts, hostfile)
    local = not host_discovery_script and all(_is_local(h) for h in names)
    job = FunctionJob(func, args, kwargs, bind="127.0.0.1" if local else "")
    try:
        env = dict(os.environ)
        # The ranks reach this store at kolorun's rendezvous address (the
        # address of this host that kolorun chose for each of them).
        env["KOLO_RUN_PORT"] = str(job.port)
        env["KOLO_RUN_SECRET"] = job.secret
        if start_timeout is not None:
            env["KOLO_RUN_FETCH_TIMEOUT"] = str(start_timeout)
        import kolo
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(kolo.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(
            [package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        # By name: kolorun (and mpirun under --mpi) hands the values to
        # remote ranks through their environment, never as arguments.
        for name in ("KOLO_RUN_PORT", "KOLO_RUN_SECRET", "KOLO_RUN_FETCH_TIMEOUT", "PYTHONPATH"):
            if name in env:
                cmd += ["-x", name]
        cmd += [executable or sys.executable, "-m", "kolo.runner.task"]
        proc = subprocess.Popen(cmd, env=env)
        try:
            rc = proc.wait()
        except BaseException:  # Ctrl-C: kolorun got SIGINT too and stops the ranks
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
        job.raise_failure("kolo.run")
        if rc != 0:
            raise RuntimeError(
                "kolo.run: kolorun exited with status %d and no rank reported an exception "
                "(a rank was killed or exited by itself, or the job did not start: see the "
                "output above)" % rc)
        return job.results(min_num_proc if elastic else num_proc)
    finally:
        job.close()
