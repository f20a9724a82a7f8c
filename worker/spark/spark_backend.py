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
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from solver.exceptions import FitCancelled

if TYPE_CHECKING:
    from app.services.filestore.object_store import Location

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
    "SparkFailure",
    "spark_failure",
]

_NS = uuid.UUID("6f1c1d2e-5a0b-4c55-9a3e-2b7f3c0d9e11")
_classic_lock = threading.Lock()
# how often a running job's Spark status is sampled (each sample is a few driver calls)
STATUS_SECONDS = 2.0


def _settings(settings: Any | None) -> Any:
    if settings is None:
        from app.core.config import get_settings

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


class _Status:
    """Samples where a job's Spark work runs and how far its current stage is: the fields of
    ``app.schemas.jobs.SparkProgress``. Classic: the driver's status tracker (by job group);
    Connect: the session's progress handler (the server reports each operation's stages)."""

    def __init__(self, spark: Any, job_id: str, session_id: str | None) -> None:
        self.spark, self.tag = spark, job_tag(job_id)
        self.connect = _is_connect(spark)
        self._lock = threading.Lock()
        self._done_jobs: set[int] = set()
        self._done_stages: set[int] = set()
        self._current: tuple[int, int, int] | None = None  # stage, done, total (Connect)
        self.base: dict[str, Any] = {"mode": "connect" if self.connect else "classic",
                                     "session_id": session_id if self.connect else None,
                                     "application_id": None}
        with contextlib.suppress(Exception):  # a locked-down server may refuse to tell
            self.base["application_id"] = (str(spark.conf.get("spark.app.id"))
                                           if self.connect
                                           else str(spark.sparkContext.applicationId))
        if self.connect:
            spark.registerProgressHandler(self._on_progress)

    def close(self) -> None:
        if self.connect:
            with contextlib.suppress(Exception):
                self.spark.removeProgressHandler(self._on_progress)

    def _on_progress(self, stages: Any, inflight_tasks: int, operation_id: Any,
                     done: bool) -> None:
        with self._lock:
            running = None
            for st in stages or ():
                if st.done:
                    self._done_stages.add(int(st.stage_id))
                elif running is None or st.stage_id > running[0]:
                    running = (int(st.stage_id), int(st.num_completed_tasks),
                               int(st.num_tasks))
            self._current = None if done else running

    def sample(self) -> dict[str, Any]:
        current = self._current if self.connect else self._classic_current()
        with self._lock:
            stage, tasks_done, total = current or (None, 0, 0)
            return {**self.base, "stage_id": stage, "tasks_done": tasks_done,
                    "tasks_total": total, "stages_done": len(self._done_stages)}

    def _classic_current(self) -> tuple[int, int, int] | None:
        tracker = self.spark.sparkContext.statusTracker()
        active = set(tracker.getActiveStageIds())
        current = None
        for job in tracker.getJobIdsForGroup(self.tag):
            if job in self._done_jobs:
                continue
            info = tracker.getJobInfo(job)
            if info is None:
                continue
            if info.status != "RUNNING":
                with self._lock:
                    self._done_jobs.add(job)
                    self._done_stages.update(int(s) for s in info.stageIds)
                continue
            for sid in info.stageIds:
                stage = tracker.getStageInfo(sid) if sid in active else None
                if stage is not None and (current is None or sid > current[0]):
                    current = (int(sid), int(stage.numCompletedTasks), int(stage.numTasks))
        return current


class _StopWatcher:
    """Polls ``should_stop`` in a thread and interrupts the job's Spark work when it fires;
    on the same beat hands ``on_status`` the job's Spark status (:class:`_Status`)."""

    def __init__(self, spark: Any, job_id: str, should_stop: Callable[[], bool] | None,
                 poll_seconds: float, status: _Status | None = None,
                 on_status: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.spark, self.job_id, self.should_stop = spark, job_id, should_stop
        self.poll = poll_seconds
        self.status, self.on_status = status, on_status
        self._reported = 0.0
        self.fired = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sodm-spark-stop", daemon=True)

    def __enter__(self) -> _StopWatcher:
        if self.should_stop is not None or self.on_status is not None:
            self._thread.start()
        return self

    def _report(self, every: float = 0.0) -> None:
        if self.status is None or self.on_status is None:
            return
        now = time.monotonic()
        if now - self._reported < every:
            return
        self._reported = now
        try:
            self.on_status(self.status.sample())
        except Exception:  # noqa: BLE001 - a status sample must not fail the job
            log.debug("sampling the Spark status of job %s failed", self.job_id,
                      exc_info=True)

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._report()

    def _run(self) -> None:
        failures = 0
        while not self._done.wait(self.poll):
            self._report(every=STATUS_SECONDS)
            if self.should_stop is None:
                continue
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

    def __init__(self, dataset_dir: Location | str | Path, job_id: str, *,
                 should_stop: Callable[[], bool] | None = None, settings: Any | None = None,
                 session_id: str | None = None, attempt: int = 1,
                 on_session: Callable[[str], None] | None = None,
                 on_status: Callable[[dict[str, Any]], None] | None = None,
                 poll_seconds: float = 0.5) -> None:
        from app.services.filestore.storage import as_location

        self.dataset_dir = as_location(dataset_dir)
        self.on_status = on_status
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
            status = None
            if self.on_status is not None:
                status = _Status(self.spark, self.job_id, self.session_id)
                stack.callback(status.close)
                self.on_status(status.sample())
            self._watcher = stack.enter_context(_StopWatcher(
                self.spark, self.job_id, self.should_stop, self.poll_seconds, status,
                self.on_status))
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
            progress: Callable[[float, str, dict], None] | None = None,
            weight_feature: int | None = None) -> Any:
        """A fitted ``SODMClassifier(**params)`` (``random_state`` is ``seed``) on the
        dataset, or on the row ids ``rows`` only (as the local backend fits ``X[rows]``);
        ``weight_feature``: the stored feature holding the rows' weights (``fit_spark``)."""
        from solver.spark import fit_spark
        from solver.spark.data import RowSubset

        subset = None if rows is None else RowSubset.of(rows, self._n_rows())
        with self._work():
            est = fit_spark(self.spark, self.dataset_dir.uri, params, seed=seed, rows=subset,
                            progress=progress, should_stop=self.stopped,
                            weight_feature=weight_feature)
        if self.stopped():  # the stop came while the last Spark job finished
            raise FitCancelled("cancel requested", history=est.history_)
        return est

    def _n_rows(self) -> int:
        from app.services.filestore import storage

        return int(storage.read_meta(self.dataset_dir)["n_rows"])


def train_on_spark(dataset_dir: Location | str | Path, params: dict[str, Any], seed: int | None,
                   progress: Callable[[float, str, dict], None] | None,
                   should_stop: Callable[[], bool] | None, job_id: str, *,
                   settings: Any | None = None, session_id: str | None = None,
                   attempt: int = 1, rows: Any = None,
                   on_session: Callable[[str], None] | None = None,
                   poll_seconds: float = 0.5, weight_feature: int | None = None) -> Any:
    """One fit in a job of its own (:class:`SparkJob`): a fitted ``SODMClassifier``."""
    with SparkJob(dataset_dir, job_id, should_stop=should_stop, settings=settings,
                  session_id=session_id, attempt=attempt, on_session=on_session,
                  poll_seconds=poll_seconds) as job:
        return job.fit(params, seed, rows=rows, progress=progress,
                       weight_feature=weight_feature)


@dataclass(frozen=True)
class SparkFailure:
    """A Spark-side error in a few words: its kind, the Spark stage it failed in (when Spark
    names one) and the root error's message, never a JVM or Python traceback."""

    kind: str  # what failed: a Spark "job"
    stage: str | None
    reason: str

    def detail(self, step: str, last_stage: int | None = None) -> str:
        """One line: the stage Spark names, else ``last_stage`` (the job's last sampled
        running stage), what the job was doing and the root error."""
        stage = self.stage or (None if last_stage is None else str(last_stage))
        where = f" in stage {stage}" if stage else ""
        return f"Spark {self.kind} failed{where} while {step}: {self.reason}"[:600]


_STAGE = re.compile(r"\bin stage (\d+(?:\.\d+)?)")
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$")


def spark_failure(exc: BaseException) -> SparkFailure | None:
    """The :class:`SparkFailure` of an exception raised by pyspark / py4j (itself or in its
    cause chain), else None. The root error is the innermost ``XxxError: message`` line:
    the Python worker's exception, else the Java one."""
    cur: BaseException | None = exc
    seen: set[int] = set()
    while cur is not None and id(cur) not in seen:
        if type(cur).__module__.split(".")[0] in ("pyspark", "py4j"):
            break
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    else:
        return None
    if cur is None:
        return None
    text = str(cur)
    stage = _STAGE.search(text)
    errors = [m for m in map(_ERROR_LINE.match, text.splitlines()) if m]
    python = [m for m in errors if m.group(1) != "PythonException"
              and not m.group(0).lstrip().startswith(("org.", "java.", "scala."))]
    root = (python or errors or [None])[-1]
    # the message only: problem details name no exception types (app.core.problems.scrub_detail)
    reason = root.group(2).strip() if root is not None \
        else (text.strip().splitlines() or ["the Spark work stopped"])[0]
    return SparkFailure(kind="job", stage=None if stage is None else stage.group(1),
                        reason=reason[:300])
