"""Job ownership: the conditional claim, the heartbeat thread and cancel detection.

A claim is one ``UPDATE jobs SET state='RUNNING', attempt=attempt+1, ... WHERE id=:id AND
(state='QUEUED' OR (state='RUNNING' AND lease_until < now)) AND attempt < max_attempts
RETURNING`` - at most one worker gets a row, so a duplicate delivery exits. The owner is
``(worker, attempt)``: every later write of the runner is conditional on it, so a worker whose
lease was reaped can never overwrite the next attempt.
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update

from app.core.config import get_settings
from app.core.db import db_now, session_scope
from app.core.orm import Job, JobState, utcnow
from app.core.problems import ProblemError
from worker.lifecycle.history import MAX_TICKS, is_level, thin

log = logging.getLogger(__name__)

ACTIVE = (JobState.RUNNING, JobState.CANCELLING)


def worker_id() -> str:
    """``host:pid`` of the process that runs the job (the pool child)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class SearchPlan:
    """A grid search of the request: the grid and the number of CV folds."""

    grid: dict[str, list[Any]]
    folds: int


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker needs of a job it claimed; ``(worker, attempt)`` is the ownership that
    every later write is conditional on."""

    job_id: str
    attempt: int
    worker: str
    tenant_id: str
    dataset_id: str
    test_dataset_id: str | None
    algorithm: str
    backend: str
    params: dict[str, Any]
    model_name: str
    seed: int
    test_fraction: float
    search: SearchPlan | None
    class_weight: str | dict[str, float] | None = None  # the request's (labels as text)
    weight_column: str | None = None

    @classmethod
    def from_row(cls, row: Any, worker: str) -> ClaimedJob:
        """From the claim's ``RETURNING`` row (the request body holds seed, split, search)."""
        req = dict(row["request"] or {})
        search = req.get("search")
        return cls(job_id=row["id"], attempt=int(row["attempt"]), worker=worker,
                   tenant_id=row["tenant_id"], dataset_id=row["dataset_id"],
                   test_dataset_id=row["test_dataset_id"], algorithm=row["algorithm"],
                   backend=row["backend"], params=dict(row["params"] or {}),
                   model_name=row["model_name"], seed=int(req.get("seed") or 0),
                   test_fraction=float(req.get("test_fraction") or 0.2),
                   search=SearchPlan(dict(search["grid"]), int(search.get("folds") or 3))
                   if search else None, class_weight=req.get("class_weight"),
                   weight_column=req.get("weight_column"))


def owned(job_id: str, claim_worker: str, attempt: int):
    """The WHERE clause that a write by the owner of ``(worker, attempt)`` needs."""
    return and_(Job.id == job_id, Job.worker == claim_worker, Job.attempt == attempt)


def claim(job_id: str) -> ClaimedJob | None:
    """Claim a QUEUED (or lease-expired RUNNING) job; None when someone else has it, it is
    finished or cancelled. A job out of attempts is failed here (poison job)."""
    s = get_settings()
    me = worker_id()
    with session_scope() as session:
        now = db_now(session)
        row = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.attempt < Job.max_attempts,
                   or_(Job.state == JobState.QUEUED,
                       and_(Job.state == JobState.RUNNING, Job.lease_until < now)))
            .values(state=JobState.RUNNING, attempt=Job.attempt + 1, worker=me,
                    lease_until=now + timedelta(seconds=s.job_lease_seconds),
                    started_at=now, error=None, progress_message="starting")
            .returning(Job.id, Job.attempt, Job.tenant_id, Job.dataset_id,
                       Job.test_dataset_id, Job.algorithm, Job.backend, Job.params,
                       Job.request, Job.model_name)
        ).mappings().first()
        if row is not None:
            return ClaimedJob.from_row(row, me)
        fail_if_out_of_attempts(session, job_id)
    return None


def fail_if_out_of_attempts(session, job_id: str) -> bool:
    """QUEUED with ``attempt >= max_attempts`` -> FAILED (every attempt died)."""
    res = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.state == JobState.QUEUED, Job.attempt >= Job.max_attempts)
        .values(state=JobState.FAILED, finished_at=utcnow(), lease_until=None,
                error=poison_problem(), progress_message="failed")
        .returning(Job.id)).first()
    return res is not None


def poison_problem(attempts: int | None = None) -> dict[str, Any]:
    detail = "the job's worker died or lost its lease on every attempt"
    if attempts:
        detail += f" ({attempts} attempts)"
    return ProblemError(500, "Worker lost", detail, type="worker-lost").body()


@dataclass
class _ProgressState:
    fraction: float = 0.0
    message: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    ticks: int = 0  # records in history that are not per-level ones
    spark: dict[str, Any] | None = None
    last_stage: int | None = None  # the last running Spark stage seen in a sample
    dirty: bool = False


class Heartbeat(threading.Thread):
    """Extends the lease, flushes progress (best effort) and watches for CANCELLING.

    ``cancelled`` is set when the row says CANCELLING; ``lost`` when the row is no longer ours
    (the reaper took it after a long stall): the runner then stops without writing.
    """

    def __init__(self, c: ClaimedJob) -> None:
        super().__init__(name=f"heartbeat-{c.job_id}", daemon=True)
        self.claim = c
        self.cancelled = threading.Event()
        self.lost = threading.Event()
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._progress = _ProgressState()
        s = get_settings()
        self.interval = max(0.05, float(s.job_heartbeat_seconds))
        self.lease = timedelta(seconds=s.job_lease_seconds)
        self._context = contextvars.copy_context()  # the job's log context (app.core.logs)

    # ----------------------------------------------------------- called by the runner
    def should_stop(self) -> bool:
        return self.cancelled.is_set() or self.lost.is_set()

    def report(self, fraction: float, message: str, record: dict | None = None) -> None:
        """Record progress; the heartbeat thread writes it soon (never raises)."""
        with self._lock:
            self._progress.fraction = float(min(max(fraction, 0.0), 1.0))
            self._progress.message = str(message)[:2000]
            if record:
                hist = self._progress.history
                hist.append(record)
                if not is_level(record):
                    self._progress.ticks += 1
                    if self._progress.ticks > 2 * MAX_TICKS:  # amortised: thin in batches
                        hist[:] = thin(hist)
                        self._progress.ticks = sum(not is_level(r) for r in hist)
            self._progress.dirty = True
        self._wake.set()

    def report_spark(self, status: dict[str, Any]) -> None:
        """Record the Spark job's status (``app.schemas.jobs.SparkProgress`` fields)."""
        with self._lock:
            if status.get("stage_id") is not None:
                self._progress.last_stage = int(status["stage_id"])
            if status != self._progress.spark:
                self._progress.spark = dict(status)
                self._progress.dirty = True

    def spark_stage(self) -> int | None:
        """The last running Spark stage sampled (``report_spark``), if any."""
        with self._lock:
            return self._progress.last_stage

    def message(self) -> str:
        """The latest progress message (what the job is doing now)."""
        with self._lock:
            return self._progress.message

    def history(self) -> list[dict[str, Any]]:
        with self._lock:
            return thin(self._progress.history)

    def stop(self) -> None:
        self._stop_event.set()
        self._wake.set()
        self.join(timeout=10)

    # ------------------------------------------------------------------- the thread
    def run(self) -> None:
        self._context.run(self._loop)

    def _loop(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.beat()
            except Exception:  # noqa: BLE001 - a failed beat must not fail the job
                log.warning("heartbeat of job %s failed", self.claim.job_id, exc_info=True)
            self._wake.wait(self.interval)
            self._wake.clear()

    def beat(self) -> None:
        values: dict[str, Any] = {}
        with self._lock:
            p = self._progress
            flushing = p.dirty
            if flushing:
                values.update(progress_fraction=p.fraction, progress_message=p.message,
                              history=thin(p.history))
                if p.spark is not None:
                    values["spark_progress"] = dict(p.spark)
                p.dirty = False
        try:
            self._write(values)
        except Exception:
            if flushing:
                with self._lock:
                    self._progress.dirty = True  # try again at the next beat
            raise

    def _write(self, values: dict[str, Any]) -> None:
        c = self.claim
        with session_scope() as session:
            values = {**values, "lease_until": db_now(session) + self.lease}
            row = session.execute(
                update(Job).where(owned(c.job_id, c.worker, c.attempt), Job.state.in_(ACTIVE))
                .values(**values).returning(Job.state)).first()
            if row is None:
                cur = session.execute(select(Job.state, Job.worker, Job.attempt)
                                      .where(Job.id == c.job_id)).first()
                if cur is not None and JobState(cur.state).terminal \
                        and (cur.worker, cur.attempt) == (c.worker, c.attempt):
                    self._stop_event.set()  # this attempt's own terminal write came first
                    return
                log.warning("job %s is no longer ours (state %s); stopping", c.job_id,
                            cur.state if cur is not None else "deleted")
                self.lost.set()
            elif row[0] == JobState.CANCELLING:
                self.cancelled.set()


def hand_back_children() -> list[str]:
    """Graceful shutdown of a worker's main process: its pool children's RUNNING jobs go back
    to QUEUED without using up an attempt, then are re-sent. Returns the job ids.

    Conditional on ``worker`` being one of this process's children, so it never touches
    another worker's job; a failure is logged (the lease reaper then recovers the jobs).
    """
    import psutil
    from sqlalchemy import case

    try:
        owners = [f"{socket.gethostname()}:{c.pid}"
                  for c in psutil.Process().children(recursive=False)]
        if not owners:
            return []
        with session_scope() as session:
            ids = list(session.scalars(
                update(Job).where(Job.state == JobState.RUNNING, Job.worker.in_(owners))
                .values(state=JobState.QUEUED, worker=None, lease_until=None, enqueued_at=None,
                        attempt=case((Job.attempt > 0, Job.attempt - 1), else_=0),
                        progress_message="handed back (worker shutting down)")
                .returning(Job.id)))
    except Exception:  # noqa: BLE001 - the lease reaper recovers the jobs instead
        log.warning("could not hand back running jobs at shutdown", exc_info=True)
        return []
    from app.services.job_queue.training_jobs import enqueue

    for job_id in ids:
        enqueue(job_id)
    if ids:
        log.warning("worker shutting down: handed back jobs %s", ids)
    return ids
