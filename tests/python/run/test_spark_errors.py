"""kolo.spark.run's errors that need no Spark session: PySpark missing
(real where it is not installed, as in the Debian stage; made missing
otherwise) and no active SparkContext."""
import importlib.util
import sys

import pytest


def work():
    return 1


def test_pyspark_missing_names_the_extra(monkeypatch):
    if importlib.util.find_spec("pyspark") is not None:
        # Installed here: make `import pyspark` fail as it does without it.
        monkeypatch.setitem(sys.modules, "pyspark", None)
    import kolo.spark
    with pytest.raises(ImportError) as info:
        kolo.spark.run(work, num_proc=2)
    assert 'pip install "kolo[spark]"' in str(info.value)
    assert "PySpark" in str(info.value)


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="PySpark is not installed")
def test_no_active_spark_context():
    import kolo.spark
    with pytest.raises(RuntimeError, match="no active SparkContext"):
        kolo.spark.run(work, num_proc=2)


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="PySpark is not installed")
@pytest.mark.parametrize("kwargs", [{"use_mpi": True}, {"extra_mpi_args": "-x FOO"}])
def test_mpi_arguments_are_refused(kwargs):
    import kolo.spark
    with pytest.raises(ValueError, match="not mpirun processes"):
        kolo.spark.run(work, num_proc=2, **kwargs)
