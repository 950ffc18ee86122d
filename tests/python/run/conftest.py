"""kolo.run's tests run in one driver process (not under kolorun); each
test is bounded by a watchdog: past TEST_TIMEOUT_S every thread's
traceback is printed and the process exits, which ctest reports as a
failure."""
import faulthandler
import sys

import pytest

TEST_TIMEOUT_S = 150


@pytest.fixture(autouse=True)
def _watchdog():
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()
