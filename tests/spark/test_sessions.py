"""Sessions against the three ways of reaching Spark: each runs a Python UDF that imports the
solver on the executors, and a running job is interrupted within seconds."""

from __future__ import annotations

import threading
import time

import pandas as pd
import pytest

from worker.spark.spark_backend import (
    interrupt_job,
    job_tag,
    session_id_for,
    spark_configured,
    spark_session,
)

from .conftest import settings_for

pytestmark = pytest.mark.spark


def _kernel_diag_sum(spark) -> float:
    """Sum of an RBF kernel diagonal computed by ``solver.core.kernels`` inside executors."""

    def udf(batches):
        import numpy as np

        from solver.core.kernels import Kernel, kernel_diag

        for pdf in batches:
            X = pdf[["id"]].to_numpy(dtype=np.float64)
            yield pd.DataFrame({"d": kernel_diag(Kernel("rbf", gamma=0.5), X)})

    rows = spark.range(0, 40, numPartitions=4).mapInPandas(udf, "d double").collect()
    return sum(r["d"] for r in rows)


def _sleepy_job(spark, seconds: float = 120.0) -> None:
    def udf(batches):
        import time as _t

        for pdf in batches:
            _t.sleep(seconds)
            yield pdf

    spark.range(0, 4, numPartitions=2).mapInPandas(udf, "id long").collect()


def test_spark_configured() -> None:
    assert not spark_configured(settings_for())
    assert spark_configured(settings_for(master="local[2]"))
    assert spark_configured(settings_for(remote="sc://127.0.0.1:15002"))


def test_session_ids_are_deterministic_per_attempt() -> None:
    assert session_id_for("j1", 1) == session_id_for("j1", 1)
    assert session_id_for("j1", 1) != session_id_for("j1", 2)
    assert "," not in job_tag("a,b")


@pytest.mark.parametrize("kind", ["local", "standalone", "connect"])
def test_udf_imports_solver(kind: str, request: pytest.FixtureRequest) -> None:
    settings = request.getfixturevalue(f"{kind}_settings")
    with spark_session(settings, job_id=f"udf-{kind}") as spark:
        assert _kernel_diag_sum(spark) == pytest.approx(40.0)


@pytest.mark.parametrize("kind", ["local", "connect"])
def test_interrupt_stops_running_work(kind: str, request: pytest.FixtureRequest) -> None:
    """A job sleeping 120 s in its UDFs is interrupted by ``interrupt_job`` from another
    session (Connect: a re-attached client) and the query fails within seconds."""
    settings = request.getfixturevalue(f"{kind}_settings")
    job = f"cancel-{kind}"
    sid = session_id_for(job, 1)
    errors: list[BaseException] = []
    started = threading.Event()
    finished = threading.Event()
    holder: dict = {}

    def run() -> None:
        # tags / job groups belong to the thread that runs the work, as in the worker
        try:
            with spark_session(settings, job_id=job, session_id=sid) as spark:
                holder["spark"] = spark
                started.set()
                _sleepy_job(spark)
        except BaseException as exc:  # noqa: BLE001 - the interrupt is expected
            errors.append(exc)
        finally:
            started.set()
            finished.set()

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(120)
    interrupted: list[str] = []
    deadline = time.monotonic() + 90
    while not interrupted and time.monotonic() < deadline and not finished.is_set():
        time.sleep(1.0)
        interrupted = interrupt_job(job, sid, settings)
    t0 = time.monotonic()
    assert finished.wait(60), "the interrupted job is still running"
    thread.join()
    assert interrupted, "nothing was interrupted"
    assert errors, "the job finished instead of being interrupted"
    assert time.monotonic() - t0 < 30
    if kind == "local":
        assert holder["spark"].sparkContext.statusTracker().getActiveJobsIds() == []


def test_a_failing_udf_becomes_a_short_failure(local_settings) -> None:
    """A Python error inside an executor's UDF, as pyspark raises it (a JVM stack and the
    Python worker's traceback), is told as its stage and the error's last line."""
    from worker.spark.spark_backend import spark_failure

    def udf(batches):
        for pdf in batches:
            if len(pdf):
                raise ValueError("boom in row batch")
            yield pdf

    with spark_session(local_settings, job_id="fails") as spark, \
            pytest.raises(Exception) as info:
        spark.range(0, 8, numPartitions=2).mapInPandas(udf, "id long").collect()
    assert "Traceback" in str(info.value)  # what the short form leaves out
    failure = spark_failure(info.value)
    assert failure is not None and failure.reason == "boom in row batch"
    # pyspark keeps the Python error, not the stage: the job's last sampled stage says it
    stage = failure.stage or "4"
    detail = failure.detail("level 1", last_stage=4)
    assert detail == f"Spark job failed in stage {stage} while level 1: boom in row batch"
    assert "Traceback" not in detail and "Error" not in detail
    assert spark_failure(ValueError("not Spark")) is None
