"""The answer of ``GET /workers``: worker liveness as counts, and the caller's own jobs."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class WorkersOut(BaseModel):
    """Whether jobs will run: live workers and their job slots (no host names or process
    ids), and the caller's jobs waiting and running (no other tenant's)."""

    live: int = Field(description="workers whose heartbeat is recent (within three "
                                  "SODM_WORKER_HEARTBEAT_SECONDS periods)")
    slots: int = Field(description="jobs the live workers run at once (their pool children)")
    last_seen: datetime | None = Field(description="the newest heartbeat of a live worker")
    queued_jobs: int = Field(description="your jobs waiting for a worker")
    running_jobs: int = Field(description="your jobs running (or being cancelled)")
