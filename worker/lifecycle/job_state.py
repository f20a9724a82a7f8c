"""A job's state as the worker that holds its lease sees and writes it: whether to go on
(the lease lost, a cancel asked for), whether its datasets are still there, and the
terminal writes, each conditional on owning ``(worker, attempt)`` (``worker.lifecycle.lease``) and
retried with backoff through a database outage."""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.orm import Dataset, Job, JobState, utcnow
from app.core.problems import ProblemError, scrub_detail
from solver.exceptions import FitCancelled
from worker.lifecycle.lease import ClaimedJob, Heartbeat, owned

log = logging.getLogger(__name__)

COMMIT_RETRIES = 8


class JobLost(Exception):
    """The lease was taken over (reaped); this attempt must stop without writing."""


class DatasetGone(Exception):
    """A dataset of the job was deleted after the job was queued."""


def require_datasets(c: ClaimedJob) -> None:
    """Raise ``DatasetGone`` when a dataset of the job was deleted after it was queued."""
    ids = [i for i in (c.dataset_id, c.test_dataset_id) if i]
    with session_scope() as s:
        live = set(s.scalars(select(Dataset.id).where(Dataset.id.in_(ids),
                                                      Dataset.deleted_at.is_(None))))
    for i in ids:
        if i not in live:
            raise DatasetGone(f"dataset {i} was deleted before the job ran")


def check_going(hb: Heartbeat) -> None:
    """Raise ``JobLost`` once the lease is lost, ``FitCancelled`` once a cancel is asked."""
    if hb.lost.is_set():
        raise JobLost(hb.claim.job_id)
    if hb.cancelled.is_set():
        raise FitCancelled("cancel requested")


def retry_seconds() -> float:
    """How long terminal writes keep retrying through a database outage: the job's lease
    (at least 30 s); past it the lease reaper owns the job's recovery anyway."""
    return max(30.0, float(get_settings().job_lease_seconds))


def with_retries(fn, what: str):
    """Run a DB transaction, retrying transient errors with exponential backoff (at least
    ``COMMIT_RETRIES`` tries, and for up to ``retry_seconds()``)."""
    delay = 0.2
    deadline = time.monotonic() + retry_seconds()
    attempt = 0
    while True:
        try:
            return fn()
        except (OperationalError, DBAPIError) as exc:
            attempt += 1
            if isinstance(exc, IntegrityError) or (
                    attempt >= COMMIT_RETRIES and time.monotonic() + delay > deadline):
                raise
            log.warning("%s failed (%s); retrying in %.1fs", what, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def finish(c: ClaimedJob, state: JobState, *, error: dict | None = None,
           history: list[dict] | None = None,
           from_states: tuple[JobState, ...] = (JobState.RUNNING, JobState.CANCELLING)) -> bool:
    """Conditional terminal write by the owner; False when the job is no longer ours."""
    if error is not None and isinstance(error.get("detail"), str):
        # one place for every failure: no traceback, path or library internals is stored
        error = {**error, "detail": scrub_detail(error["detail"])}
    values: dict[str, Any] = {"state": state, "finished_at": utcnow(), "lease_until": None,
                              "error": error, "progress_message": state.lower()}
    if history is not None:
        values["history"] = history

    def tx() -> bool:
        with session_scope() as s:
            return s.execute(update(Job).where(owned(c.job_id, c.worker, c.attempt),
                                               Job.state.in_(from_states))
                             .values(**values).returning(Job.id)).first() is not None

    return with_retries(tx, f"set {state}")


def problem(kind: str, title: str, detail: str, status: int = 422) -> dict[str, Any]:
    return ProblemError(status, title, scrub_detail(detail), type=kind).body()


def time_limit_problem() -> dict[str, Any]:
    """The problem of a job past ``SODM_JOB_TIME_LIMIT_SECONDS`` (the soft limit in the
    job's own process, or the hard one in the worker's main process)."""
    return problem("time-limit", "Time limit exceeded",
                   f"the job ran longer than {get_settings().job_time_limit_seconds} s", 500)
