"""Celery tasks. ``train_job(job_id)`` is a doorbell: the job row says what to do.

Every log line of a job's run carries its ``job_id``, ``attempt`` and the ``request_id`` of
the ``POST /train`` that created it (``app.core.logs``); each run updates the worker metrics
(``worker.metrics``)."""

from __future__ import annotations

import logging
import time
from datetime import datetime

from sqlalchemy import select

from app.core.db import session_scope
from app.core.logs import bound
from app.core.orm import Job, JobState, Model, utcnow
from app.services.cursors import as_utc
from worker import metrics, mlflow_tracking
from worker.celery_app import celery_app
from worker.lifecycle.child_loss import ChildLossRequest
from worker.lifecycle.lease import claim
from worker.runner import run_claimed

log = logging.getLogger(__name__)


@celery_app.task(name="worker.tasks.train_job", acks_late=True, reject_on_worker_lost=True,
                 ignore_result=True, Request=ChildLossRequest)
def train_job(job_id: str) -> str:
    """Claim the job (a duplicate or stale delivery exits) and run it to a terminal state."""
    request_id, queued_at = _before_claim(job_id)
    with bound(job_id=job_id, request_id=request_id):
        c = claim(job_id)
        if c is None:
            log.info("job %s not claimable (taken, finished, cancelled or out of attempts)",
                     job_id)
            metrics.JOBS.labels("SKIPPED").inc()
            return "SKIPPED"
        with bound(attempt=c.attempt):
            start = time.monotonic()
            metrics.ATTEMPTS.labels(str(c.attempt)).inc()
            if queued_at is not None:
                metrics.QUEUE_WAIT.observe(max(0.0, (utcnow() - queued_at).total_seconds()))
            log.info("job %s attempt %d claimed by %s", job_id, c.attempt, c.worker)
            state = run_claimed(c)
            log.info("job %s attempt %d ended %s", job_id, c.attempt, state)
            metrics.JOBS.labels(state).inc()
            metrics.JOB_SECONDS.labels(state).observe(time.monotonic() - start)
            if state == JobState.SUCCEEDED:
                _observe_fit(job_id)
            if state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
                mlflow_tracking.job_ended(job_id)  # committed; logged off this thread
            return state


def _before_claim(job_id: str) -> tuple[str | None, datetime | None]:
    """The job's request id and when it was (re)queued: ``enqueued_at``, else creation."""
    with session_scope() as s:
        row = s.execute(select(Job.request_id, Job.enqueued_at, Job.created_at)
                        .where(Job.id == job_id)).first()
    if row is None:
        return None, None
    return row[0], as_utc(row[1] or row[2])


def _observe_fit(job_id: str) -> None:
    with session_scope() as s:
        seconds = s.scalar(select(Model.train_seconds).where(Model.job_id == job_id))
    if seconds is not None:
        metrics.FIT_SECONDS.observe(float(seconds))
