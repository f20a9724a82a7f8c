"""The worker's main process when a pool child dies while it runs a job: the job's lease is
released at once, so the job runs again within seconds, not after its lease expires.

Celery's main process learns of the death first: billiard reports ``WorkerLostError`` to the
task's request (a SIGKILL, the kernel's OOM killer, a crash), or ``TimeLimitExceeded`` after
it killed the child at the hard time limit; with ``reject_on_worker_lost`` it then puts the
message back on the queue. The row still held the dead child's lease, so the claim of that
redelivery refused it and the job waited for the reaper to find the lease expired (lease +
reaper period: 67 s with the defaults). ``ChildLossRequest.on_failure`` releases the lease
before Celery requeues the message, conditional on the row still being the dead child's
(``worker = host:pid``): RUNNING -> QUEUED (the attempt counts toward ``max_attempts``; out of
attempts -> FAILED worker-lost), CANCELLING -> CANCELLED; past the hard time limit -> FAILED
time-limit (running it again would meet the same limit). A release that fails (database
down) leaves the job to the reaper, as before.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery.worker.request import Request
from sqlalchemy import and_, update

from app.core.db import session_scope
from app.core.orm import Job, JobState, utcnow
from worker.lifecycle.job_state import time_limit_problem
from worker.lifecycle.reaper import interrupt_spark, release_lost

log = logging.getLogger(__name__)


def release_dead_child(job_id: str, pid: int, *, timed_out: bool = False) -> dict[str, list]:
    """Release ``job_id`` held by this host's pool child ``pid``, which is dead; returns the
    ids per outcome (``requeued``, ``failed``, ``cancelled``, ``timed_out``)."""
    owner = f"{socket.gethostname()}:{pid}"
    lost: list[tuple[str, str]] = []
    now = utcnow()
    with session_scope() as session:
        mine = and_(Job.id == job_id, Job.worker == owner)
        out: dict[str, list] = {"timed_out": []}
        if timed_out:
            out["timed_out"] = [row[0] for row in session.execute(
                update(Job).where(mine, Job.state == JobState.RUNNING)
                .values(state=JobState.FAILED, finished_at=now, lease_until=None,
                        error=time_limit_problem(), progress_message="failed (time limit)")
                .returning(Job.id, Job.spark_session_id))]
        out.update(release_lost(session, mine, now, "its worker process died", lost))
    for lost_id, session_id in lost:
        interrupt_spark(lost_id, session_id)
    return out


class ChildLossRequest(Request):
    """The request class of ``worker.tasks.train_job``: releases the job of a pool child
    that died (see the module docstring) before Celery's own handling requeues it."""

    def on_failure(self, exc_info: Any, send_failed_event: bool = True,
                   return_ok: bool = False) -> Any:
        exc = getattr(exc_info.exception, "exc", exc_info.exception)  # ExceptionWithTraceback
        if isinstance(exc, WorkerLostError | TimeLimitExceeded) and self.worker_pid:
            job_id = str(self.args[0]) if self.args else self.id
            try:
                out = release_dead_child(job_id, int(self.worker_pid),
                                         timed_out=isinstance(exc, TimeLimitExceeded))
                log.warning("pool child %s died running job %s: %s", self.worker_pid, job_id,
                            {k: v for k, v in out.items() if v} or "not its job any more")
            except Exception:  # noqa: BLE001 - the reaper recovers the lease when it expires
                log.warning("could not release job %s of dead pool child %s", job_id,
                            self.worker_pid, exc_info=True)
        return super().on_failure(exc_info, send_failed_event=send_failed_event,
                                  return_ok=return_ok)
