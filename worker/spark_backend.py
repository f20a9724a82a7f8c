"""Training on Apache Spark from the Celery worker (``backend: "spark"``).

Two ways to reach Spark, chosen by the settings:

* ``SODM_SPARK_REMOTE`` (e.g. ``sc://spark-connect:15002``): Spark Connect. The worker is a
  thin gRPC client; each job attempt gets its own server-side session whose id is
  ``uuid5(job_id:attempt)`` (persist it in ``Job.spark_session_id``) and every operation
  carries the tag ``sodm-job-<job_id>``. The server keeps executing when the client dies, so
  the cancel path, the next attempt and the reaper call ``interrupt_job(job_id, session_id)``,
  which re-attaches to that session and runs ``interruptTag``.
* ``SODM_SPARK_MASTER`` (e.g. ``local[2]`` or ``spark://host:7077``): a classic session whose
  driver JVM lives in this worker process (one per process, reused across jobs). Jobs run in
  the job group ``sodm-job-<job_id>`` (``interruptOnCancel``); a cancel calls
  ``cancelJobGroup``. The driver JVM dies with the worker process, which ends the
  application on the cluster, so there is nothing to interrupt from another process.

While a job trains, a watcher thread polls ``should_stop()`` every ``poll_seconds`` and
interrupts the job's Spark work at once, so a cancel stops running Spark jobs within seconds
rather than at the next level boundary. The training itself is ``solver.spark.fit_spark``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from solver.exceptions import FitCancelled

log = logging.getLogger(__name__)

__all__ = [
    "spark_configured",
    "session_id_for",
    "job_tag",
    "spark_session",
    "train_on_spark",
    "interrupt_job",
    "python_for_spark",
    "SparkJob",
]

_NS = uuid.UUID("6f1c1d2e-5a0b-4c55-9a3e-2b7f3c0d9e11")
_classic_lock = threading.Lock()


def _settings(settings: Any | None) -> Any:
    if settings is None:
        from app.config import get_settings

        settings = get_settings()
    return settings


def spark_configured(settings: Any | None = None) -> bool:
    """True when a Spark Connect URL or a classic master is configured."""
    s = _settings(settings)
    return bool(getattr(s, "spark_remote", None) or getattr(s, "spark_master", None))


def session_id_for(job_id: str, attempt: int = 1) -> str:
    """The Connect session id of one job attempt (deterministic: a retry can recompute it)."""
    return str(uuid.uuid5(_NS, f"{job_id}:{attempt}"))


def job_tag(job_id: str) -> str:
    """The Spark job tag / job group of a job (tags may not contain commas)."""
    return f"sodm-job-{job_id}".replace(",", "_")


def _remote_url(remote: str, session_id: str) -> str:
    base = remote.rstrip("/")
    sep = ";" if "/;" in base else "/;"
    return f"{base}{sep}session_id={session_id}"


def _connect(remote: str, session_id: str):
    """A Spark Connect client session bound to the server-side session ``session_id``.

    Built with the Connect class directly: the generic builder refuses to open a Connect
    session in a process that also holds a classic SparkContext.
    """
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    return ConnectSession.builder.remote(_remote_url(remote, session_id)).create()


def stop_classic_session() -> None:
    """Stop this process's classic session, if any (its JVM gateway stays for reuse)."""
    from pyspark.sql import SparkSession

    with _classic_lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()


def python_for_spark() -> str:
    """The interpreter Spark's Python workers run: the operator's ``PYSPARK_PYTHON``, else this
    worker's own (which has the solver installed), never whatever ``python3`` is on PATH."""
    return os.environ.get("PYSPARK_PYTHON") or sys.executable


def _classic_session(master: str):
    """The process-wide classic session for ``master`` (created on first use)."""
    from pyspark.sql import SparkSession

    with _classic_lock:
        active = SparkSession.getActiveSession()
        if active is not None and active.sparkContext.master != master:
            active.stop()
        # pyspark gives its Python workers $PYSPARK_PYTHON, read when the context starts
        # (default "python3" from PATH); the spark.pyspark.python conf does not reach them
        os.environ["PYSPARK_PYTHON"] = python_for_spark()
        builder = (
            SparkSession.builder.master(master)
            .appName("sodm-worker")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "8")
        )
        if os.environ.get("PYTHONPATH"):
            builder = builder.config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        return builder.getOrCreate()


@contextmanager
def spark_session(settings: Any | None = None, *, job_id: str,
                  session_id: str | None = None) -> Iterator[Any]:
    """A session for one job with its tag / job group set; the tag is removed afterwards.

    Connect: a fresh server-side session ``session_id`` (default: a new uuid), closed at the
    end. Classic: the shared session; the job group is set on the calling thread.
    """
    s = _settings(settings)
    tag = job_tag(job_id)
    if getattr(s, "spark_remote", None):
        sid = session_id or str(uuid.uuid4())
        spark = _connect(s.spark_remote, sid)
        spark.addTag(tag)
        try:
            yield spark
        finally:
            try:
                spark.removeTag(tag)
                spark.stop()
            except Exception:  # noqa: BLE001 - closing a dead channel must not mask errors
                log.warning("closing Spark Connect session %s failed", sid, exc_info=True)
        return
    if not getattr(s, "spark_master", None):
        raise RuntimeError("Spark is not configured: set SODM_SPARK_REMOTE or SODM_SPARK_MASTER")
    spark = _classic_session(s.spark_master)
    sc = spark.sparkContext
    sc.setJobGroup(tag, f"SODM job {job_id}", interruptOnCancel=True)
    sc.addJobTag(tag)
    try:
        yield spark
    finally:
        sc.removeJobTag(tag)
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)


def interrupt_session(spark: Any, job_id: str) -> list[str]:
    """Interrupt every running Spark operation of ``job_id`` in ``spark`` (either mode)."""
    tag = job_tag(job_id)
    if _is_connect(spark):
        return list(spark.interruptTag(tag))
    return _cancel_classic(spark.sparkContext, tag)


def _cancel_classic(sc: Any, tag: str) -> list[str]:
    active = [str(j) for j in sc.statusTracker().getJobIdsForGroup(tag)]
    sc.cancelJobGroup(tag)
    sc.cancelJobsWithTag(tag)
    return active


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def interrupt_job(job_id: str, session_id: str | None, settings: Any | None = None) -> list[str]:
    """Interrupt a job's Spark work from any process (cancel path, retry, reaper).

    Connect: re-attach to the job's server session and ``interruptTag``; returns the ids of
    the interrupted operations. Classic: only the process that owns the driver can cancel
    (and its death ends the application), so this cancels the job group when this process
    holds the active session and otherwise returns ``[]``.
    """
    s = _settings(settings)
    if getattr(s, "spark_remote", None):
        if not session_id:
            return []
        spark = _connect(s.spark_remote, session_id)
        try:
            return list(spark.interruptTag(job_tag(job_id)))
        finally:
            with contextlib.suppress(Exception):
                spark.client.close()
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        return []
    return _cancel_classic(sc, job_tag(job_id))


class _StopWatcher:
    """Polls ``should_stop`` in a thread and interrupts the job's Spark work when it fires."""

    def __init__(self, spark: Any, job_id: str, should_stop: Callable[[], bool] | None,
                 poll_seconds: float) -> None:
        self.spark, self.job_id, self.should_stop = spark, job_id, should_stop
        self.poll = poll_seconds
        self.fired = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sodm-spark-stop", daemon=True)

    def __enter__(self) -> _StopWatcher:
        if self.should_stop is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        failures = 0
        while not self._done.wait(self.poll):
            if not self.fired.is_set():
                try:
                    stop = bool(self.should_stop())
                except Exception:  # noqa: BLE001 - a failing poll must not kill the job
                    log.warning("should_stop() failed", exc_info=True)
                    continue
                if not stop:
                    continue
                self.fired.set()
            # again at every poll until the work ends: a Spark job submitted just after an
            # interrupt (the driver was between two jobs) is not cancelled by it
            try:
                interrupt_session(self.spark, self.job_id)
            except Exception:  # noqa: BLE001
                failures += 1
                if failures == 1:
                    log.warning("interrupting job %s failed", self.job_id, exc_info=True)

    def stopped(self) -> bool:
        return self.fired.is_set() or bool(self.should_stop and self.should_stop())


class SparkJob:
    """One job's work on Spark (context manager): the session with the job's tag / job group,
    the stop watcher, and the fits and scores the job needs, all in that one session.

    ``on_session(session_id)`` is called before any Spark work so the caller can persist the
    Connect session id (``Job.spark_session_id``); a previous attempt's session of the same
    job is interrupted by the caller via ``interrupt_job``. Work raises ``FitCancelled``
    when ``should_stop()`` fires.
    """

    def __init__(self, dataset_dir: str | Path, job_id: str, *,
                 should_stop: Callable[[], bool] | None = None, settings: Any | None = None,
                 session_id: str | None = None, attempt: int = 1,
                 on_session: Callable[[str], None] | None = None,
                 poll_seconds: float = 0.5) -> None:
        self.dataset_dir = Path(dataset_dir)
        self.job_id = job_id
        self.settings = _settings(settings)
        self.session_id = session_id or session_id_for(job_id, attempt)
        self.on_session = on_session
        self.should_stop = should_stop
        self.poll_seconds = poll_seconds
        self._stack = contextlib.ExitStack()
        self.spark: Any = None
        self._watcher: _StopWatcher | None = None

    def __enter__(self) -> SparkJob:
        if self.on_session is not None and getattr(self.settings, "spark_remote", None):
            self.on_session(self.session_id)
        with contextlib.ExitStack() as stack:
            self.spark = stack.enter_context(spark_session(
                self.settings, job_id=self.job_id, session_id=self.session_id))
            self._watcher = stack.enter_context(_StopWatcher(
                self.spark, self.job_id, self.should_stop, self.poll_seconds))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def stopped(self) -> bool:
        return self._watcher is not None and self._watcher.stopped()

    @contextmanager
    def _work(self) -> Iterator[None]:
        """Spark errors after a stop request become ``FitCancelled``."""
        try:
            yield
        except FitCancelled:
            raise
        except Exception as exc:
            if self._watcher is not None and self._watcher.fired.is_set():
                raise FitCancelled("Spark work interrupted by a cancel") from exc
            raise

    def fit(self, params: dict[str, Any], seed: int | None, *, rows: Any = None,
            progress: Callable[[float, str, dict], None] | None = None) -> Any:
        """A fitted ``SODMClassifier(**params)`` (``random_state`` is ``seed``) on the
        dataset, or on the row ids ``rows`` only (as the local backend fits ``X[rows]``)."""
        from solver.spark import fit_spark
        from solver.spark.data import RowSubset

        subset = None if rows is None else RowSubset.of(rows, self._n_rows())
        with self._work():
            est = fit_spark(self.spark, self.dataset_dir, params, seed=seed, rows=subset,
                            progress=progress, should_stop=self.stopped)
        if self.stopped():  # the stop came while the last Spark job finished
            raise FitCancelled("cancel requested", history=est.history_)
        return est

    def _n_rows(self) -> int:
        from app.services import storage

        return int(storage.read_meta(self.dataset_dir)["n_rows"])


def train_on_spark(dataset_dir: str | Path, params: dict[str, Any], seed: int | None,
                   progress: Callable[[float, str, dict], None] | None,
                   should_stop: Callable[[], bool] | None, job_id: str, *,
                   settings: Any | None = None, session_id: str | None = None,
                   attempt: int = 1, rows: Any = None,
                   on_session: Callable[[str], None] | None = None,
                   poll_seconds: float = 0.5) -> Any:
    """One fit in a job of its own (:class:`SparkJob`): a fitted ``SODMClassifier``."""
    with SparkJob(dataset_dir, job_id, should_stop=should_stop, settings=settings,
                  session_id=session_id, attempt=attempt, on_session=on_session,
                  poll_seconds=poll_seconds) as job:
        return job.fit(params, seed, rows=rows, progress=progress)
