"""kolo.spark's tests: real PySpark in local mode, one Spark session per
master setting (module-scoped, parametrized: pytest runs every test of one
master before starting the next session), and a watchdog per test: past
TEST_TIMEOUT_S every thread's traceback is printed and the process exits,
which ctest reports as a failure."""
import faulthandler
import os
import sys

import pytest

TEST_TIMEOUT_S = 240


@pytest.fixture(autouse=True)
def _watchdog():
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module", params=["local[2]", "local[3]"])
def spark(request):
    from pyspark.sql import SparkSession
    # Spark's Python workers and TorchDistributor's torchrun inherit this
    # environment (PYTHONPATH with the kolo package).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # TorchDistributor pickles the training function by reference: its
    # torchrun processes import it from this folder, as a user's would
    # import it from their project.
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if here not in path:
        os.environ["PYTHONPATH"] = os.pathsep.join([here] + [p for p in path if p])
    session = (SparkSession.builder.master(request.param)
               .appName("kolo-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
