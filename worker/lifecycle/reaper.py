"""Reaper and reconciler, run every ``SODM_REAPER_INTERVAL_SECONDS`` in each worker's main
process.

* RUNNING jobs whose lease expired (their worker died or stalled): back to QUEUED and
  re-enqueued while attempts remain, else FAILED with a worker-lost problem. An expired
  CANCELLING job becomes CANCELLED.
* QUEUED jobs whose doorbell was lost (``enqueued_at``, or ``created_at`` when never sent,
  older than ``SODM_REQUEUE_AFTER_SECONDS``) are sent again, with a doubling interval for
  jobs that simply wait in a long queue; the claim makes duplicates harmless.
* Every pass: uploads whose parser died (their rows failed ``ingest-interrupted``, their
  files and orphaned upload directories removed: ``app.services.data.ingest_sweep``).
* Every ``SWEEP_EVERY_SECONDS``: local model files no model needs (cache copies of deleted
  models, old-layout files whose bytes are in Postgres:
  ``app.services.model_registry.model_store.sweep``), stale prediction outputs and dataset
  directories no live dataset owns (``ingest_sweep``) are removed.
All transitions are conditional UPDATEs, so concurrent reapers in several workers agree.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, or_, select, update

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.orm import Job, JobState, utcnow
from app.services.data import ingest_sweep
from app.services.job_queue import prediction_files, task_client
from app.services.model_registry import model_store
from worker.lifecycle.lease import db_now, poison_problem

log = logging.getLogger(__name__)

SWEEP_EVERY_SECONDS = 600.0  # stale local files (model_store.sweep, prediction_files.sweep)
RESEND_BACKOFF_CAP = 10  # the longest re-send interval, in SODM_REQUEUE_AFTER_SECONDS

_thread: threading.Thread | None = None
_stop = threading.Event()


def reap_once() -> dict[str, list[str]]:
    """One pass; returns the ids per action (for logs and tests)."""
    s = get_settings()
    now = utcnow()
    out: dict[str, list[str]] = {"requeued": [], "failed": [], "cancelled": [], "resent": []}
    with session_scope() as session:
        # expiry by the database's clock, the one the leases were written with
        expired = and_(Job.lease_until.is_not(None), Job.lease_until < db_now(session))
        lost: list[tuple[str, str]] = []  # (job id, Spark Connect session) to interrupt
        out.update(release_lost(session, expired, now, "the worker was lost", lost))
        out["resent"] = _resend_due(session, now, float(s.requeue_after_seconds))
    for job_id, session_id in lost:
        interrupt_spark(job_id, session_id)
    for job_id in out["requeued"] + out["resent"]:
        _send(job_id)
    if any(out.values()):
        log.warning("reaper: %s", {k: v for k, v in out.items() if v})
    return out


def release_lost(session, lost_clause, now: datetime, why: str,
                 lost: list[tuple[str, str]]) -> dict[str, list[str]]:
    """The jobs ``lost_clause`` selects lost their worker: CANCELLING -> CANCELLED, RUNNING
    -> QUEUED while attempts remain (the attempt used counts), else FAILED worker-lost.
    Returns their ids per outcome; ``lost`` gains the (job, Spark session) pairs whose
    Spark work the caller should interrupt. ``why`` goes into the progress message."""
    out = {"cancelled": _ids(lost, session.execute(
        update(Job).where(Job.state == JobState.CANCELLING, lost_clause)
        .values(state=JobState.CANCELLED, finished_at=now, lease_until=None,
                progress_message=f"cancelled ({why})")
        .returning(Job.id, Job.spark_session_id)))}
    out["failed"] = _ids(lost, session.execute(
        update(Job).where(Job.state == JobState.RUNNING, lost_clause,
                          Job.attempt >= Job.max_attempts)
        .values(state=JobState.FAILED, finished_at=now, lease_until=None,
                error=poison_problem(), progress_message=f"failed ({why})")
        .returning(Job.id, Job.spark_session_id)))
    out["requeued"] = _ids(lost, session.execute(
        update(Job).where(Job.state == JobState.RUNNING, lost_clause,
                          Job.attempt < Job.max_attempts)
        .values(state=JobState.QUEUED, lease_until=None, worker=None, enqueued_at=now,
                progress_message=f"requeued ({why})")
        .returning(Job.id, Job.spark_session_id)))
    return out


def _resend_due(session, now: datetime, period: float) -> list[str]:
    """Mark QUEUED jobs whose doorbell is due again; returns their ids.

    A job waiting behind long jobs is legitimately QUEUED for a long time, so the interval
    between re-sends doubles (the time since creation, at least ``period``, at most
    ``RESEND_BACKOFF_CAP`` periods): a lost message is re-sent after ``period``, while a long
    queue gets a logarithmic number of (harmless) duplicate messages.
    """
    stale = now - timedelta(seconds=period)
    rows = session.execute(
        select(Job.id, Job.created_at, Job.enqueued_at).where(
            Job.state == JobState.QUEUED,
            or_(Job.enqueued_at < stale,
                and_(Job.enqueued_at.is_(None), Job.created_at < stale)))).all()
    due = []
    for job_id, created_at, enqueued_at in rows:
        if enqueued_at is not None:
            waited = (_aware(enqueued_at) - _aware(created_at)).total_seconds()
            wait = min(max(period, waited), RESEND_BACKOFF_CAP * period)
            if (now - _aware(enqueued_at)).total_seconds() < wait:
                continue
        hit = session.execute(
            update(Job).where(Job.id == job_id, Job.state == JobState.QUEUED,
                              Job.enqueued_at.is_not_distinct_from(enqueued_at))
            .values(enqueued_at=now).returning(Job.id)).first()
        if hit is not None:  # another worker's reaper did not take it first
            due.append(job_id)
    return due


def _aware(ts: datetime) -> datetime:
    """SQLite hands back naive UTC timestamps."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _ids(lost: list[tuple[str, str]], result) -> list[str]:
    ids = []
    for job_id, session_id in result:
        ids.append(job_id)
        if session_id:
            lost.append((job_id, session_id))
    return ids


def interrupt_spark(job_id: str, session_id: str) -> None:
    """A dead worker's Spark Connect work keeps running server-side: interrupt its tag."""
    try:
        from worker.spark.spark_backend import interrupt_job

        interrupt_job(job_id, session_id)
    except Exception:  # noqa: BLE001 - best effort; the next attempt interrupts again
        log.info("could not interrupt Spark work of job %s", job_id)


def _send(job_id: str) -> None:
    try:
        task_client.send_train(job_id)
    except Exception as exc:  # noqa: BLE001 - the next pass re-sends (enqueued_at ages again)
        log.warning("re-enqueue of %s failed (%s)", job_id, type(exc).__name__)


def _loop() -> None:
    interval = max(0.2, float(get_settings().reaper_interval_seconds))
    next_sweep = time.monotonic()
    while not _stop.wait(interval):
        try:
            reap_once()
            full = time.monotonic() >= next_sweep
            ingest_sweep.sweep_once(dataset_dirs=full)
            if full:
                next_sweep = time.monotonic() + SWEEP_EVERY_SECONDS
                model_store.sweep()
                prediction_files.sweep()
        except Exception:  # noqa: BLE001 - the database may be restarting; try next time
            log.warning("reaper pass failed", exc_info=True)


def start_reaper_thread() -> None:
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    _thread = threading.Thread(target=_loop, name="sodm-reaper", daemon=True)
    _thread.start()


def stop_reaper_thread() -> None:
    _stop.set()
