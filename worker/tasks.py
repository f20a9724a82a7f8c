"""Celery tasks. ``train_job(job_id)`` is a doorbell: the job row says what to do."""

from __future__ import annotations

import logging

from worker.celery_app import celery_app
from worker.lease import claim
from worker.runner import run_claimed

log = logging.getLogger(__name__)


@celery_app.task(name="worker.tasks.train_job", acks_late=True, reject_on_worker_lost=True,
                 ignore_result=True)
def train_job(job_id: str) -> str:
    """Claim the job (a duplicate or stale delivery exits) and run it to a terminal state."""
    c = claim(job_id)
    if c is None:
        log.info("job %s not claimable (taken, finished, cancelled or out of attempts)", job_id)
        return "SKIPPED"
    log.info("job %s attempt %d claimed by %s", job_id, c.attempt, c.worker)
    state = run_claimed(c)
    log.info("job %s attempt %d ended %s", job_id, c.attempt, state)
    return state
