"""Worker liveness as the API sees it: the heartbeat rows ``worker.lifecycle.liveness`` writes, and
the number of the caller's jobs waiting. A worker is live while its last heartbeat is younger than
three heartbeat periods. A tenant sees counts only (``GET /workers``): no host name, process id
or other tenant's jobs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.orm import Job, JobState, Worker, utcnow
from app.services.cursors import as_utc

STALE_PERIODS = 3


@dataclass(frozen=True)
class WorkerStatus:
    """Liveness as a tenant may see it: counts only, no host names or process ids (those
    stay in the ``workers`` table and the operator's ``/metrics``), and the tenant's jobs."""

    live: list[Worker]
    queued_jobs: int
    running_jobs: int

    def as_dict(self) -> dict[str, Any]:
        seen = [as_utc(w.last_seen) for w in self.live]
        return {"live": len(self.live), "slots": sum(int(w.concurrency or 0) for w in self.live),
                "last_seen": max(seen) if seen else None, "queued_jobs": self.queued_jobs,
                "running_jobs": self.running_jobs}


def live_since() -> datetime:
    """Heartbeats at or after this instant count as live."""
    period = float(get_settings().worker_heartbeat_seconds)
    return utcnow() - timedelta(seconds=STALE_PERIODS * period)


def live_workers(session: Session) -> list[Worker]:
    """Live workers consuming this service's queue, newest first."""
    return list(session.scalars(
        select(Worker).where(Worker.last_seen >= live_since(),
                             Worker.queue == get_settings().celery_queue)
        .order_by(Worker.started_at.desc())))


def status(session: Session, tenant_id: str) -> WorkerStatus:
    """Live workers, and the tenant's jobs waiting / running."""
    counts = dict(session.execute(
        select(Job.state, func.count()).where(Job.tenant_id == tenant_id, Job.state.in_(
            (JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING)))
        .group_by(Job.state)).all())
    return WorkerStatus(live_workers(session), int(counts.get(JobState.QUEUED, 0)),
                        int(counts.get(JobState.RUNNING, 0))
                        + int(counts.get(JobState.CANCELLING, 0)))


NO_WORKER = "no live worker: the job runs when a worker starts (sodm worker)"


def annotate_waiting(session: Session, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set ``waiting`` on the QUEUED jobs of an API answer when no worker is live."""
    queued = [j for j in jobs if j["state"] == JobState.QUEUED]
    if queued and not live_workers(session):
        for j in queued:
            j["waiting"] = NO_WORKER
    return jobs
