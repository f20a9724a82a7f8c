"""Batch prediction outputs in the store (``predictions/{job id}.parquet``): removal of a
cancelled job's output and the periodic sweep of what no successful job owns. (A worker
writes an output under ``tmp/`` on its own host first: the ``tmp/`` sweep of
``app.services.data.ingest_sweep`` removes what a killed worker left there.)"""

from __future__ import annotations

import logging
import time

from sqlalchemy import select

from app.core.db import session_scope
from app.core.orm import Job, JobState
from app.services.filestore import storage
from app.services.filestore.stale_files import STALE_SECONDS

log = logging.getLogger(__name__)

SUFFIX = ".parquet"
# an output is kept while its job may still need it or serves it
KEEP_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING, JobState.SUCCEEDED)


def remove(job_id: str) -> None:
    """Remove the output of a job that will not succeed (cancelled after its last batch)."""
    storage.prediction_path(job_id).delete()


def sweep(stale_seconds: float = STALE_SECONDS) -> list[str]:
    """Remove outputs older than ``stale_seconds`` whose job is gone, cancelled or failed;
    returns the removed keys."""
    root = storage.predictions_dir()
    cutoff = time.time() - stale_seconds
    found = {o.key.removesuffix(SUFFIX): o.key for o in root.children()
             if o.key.endswith(SUFFIX) and "/" not in o.key
             and (o.mtime is None or o.mtime.timestamp() < cutoff)}
    if not found:
        return []
    with session_scope() as s:
        kept = set(s.scalars(select(Job.id).where(Job.id.in_(list(found)),
                                                  Job.state.in_(KEEP_STATES))))
    removed = [key for job_id, key in found.items() if job_id not in kept]
    for key in removed:
        (root / key).delete()
    if removed:
        log.warning("removed %d prediction outputs no job owns: %s", len(removed),
                    removed[:20])
    return removed
