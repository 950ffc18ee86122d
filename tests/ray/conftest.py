"""Shared by the kolo.ray tests: a local Ray cluster per test module and a
watchdog per test.

A module sets RAY_NUM_CPUS (default 4: logical CPUs, so 3 one-CPU workers
fit on this 2-core machine) and uses the `ray_cluster` fixture. Each test is
bounded by TEST_TIMEOUT_S (or @pytest.mark.timeout_s(N)): past it, every
thread's traceback is printed and the process exits, which ctest reports as
a failure.
"""
import faulthandler
import os
import sys

import pytest

TEST_TIMEOUT_S = 180


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout_s(n): this test's watchdog, in seconds")


@pytest.fixture(autouse=True)
def _watchdog(request):
    marker = request.node.get_closest_marker("timeout_s")
    seconds = marker.args[0] if marker else TEST_TIMEOUT_S
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def ray_cluster(request):
    import ray
    num_cpus = getattr(request.module, "RAY_NUM_CPUS", 4)
    # Workers inherit this process's environment (the local raylet is its
    # child), PYTHONPATH with the kolo package included.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=num_cpus, include_dashboard=False, object_store_memory=200 * 1024 * 1024,
             logging_level="WARNING", log_to_driver=True)
    try:
        yield ray
    finally:
        ray.shutdown()


def kolo_segments():
    """kolo's shared-memory segments now in /dev/shm."""
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("kolo-")}
    except FileNotFoundError:
        return set()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has exited: it is waiting for its parent only.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
