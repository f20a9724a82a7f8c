"""Batch prediction outputs on disk (``predictions/{job id}.parquet``): removal of a
cancelled job's output and the periodic sweep of what no successful job owns."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from app.db import session_scope
from app.models import Job, JobState
from app.services import storage
from app.services.stale_files import STALE_SECONDS, stale_files
from app.services.stale_files import remove as remove_files

SUFFIX = ".parquet"
# an output is kept while its job may still need it or serves it
KEEP_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING, JobState.SUCCEEDED)


def remove(job_id: str) -> None:
    """Remove the output of a job that will not succeed (cancelled after its last batch)."""
    storage.prediction_path(job_id).unlink(missing_ok=True)


def sweep(directory: Path | None = None, stale_seconds: float = STALE_SECONDS) -> list[str]:
    """Remove stale temporary outputs (a killed worker's) and outputs whose job is gone,
    cancelled or failed; returns the removed file names."""
    found = stale_files(directory or storage.predictions_dir(), SUFFIX, stale_seconds)
    orphans: list[Path] = []
    if found.finished:
        with session_scope() as s:
            kept = set(s.scalars(select(Job.id).where(Job.id.in_(list(found.finished)),
                                                      Job.state.in_(KEEP_STATES))))
        orphans = [p for job_id, p in found.finished.items() if job_id not in kept]
    return remove_files(found.temps + orphans, "prediction outputs no job owns")
