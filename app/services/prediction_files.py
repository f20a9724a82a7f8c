"""Batch prediction outputs on disk (``predictions/{job id}.parquet``): removal of a
cancelled job's output and the periodic sweep of what no successful job owns."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from sqlalchemy import select

from app.db import session_scope
from app.models import Job, JobState
from app.services import storage
from app.services.model_files import STALE_SECONDS, TEMP_PREFIX

log = logging.getLogger(__name__)
SUFFIX = ".parquet"
# an output is kept while its job may still need it or serves it
KEEP_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING, JobState.SUCCEEDED)


def remove(job_id: str) -> None:
    """Remove the output of a job that will not succeed (cancelled after its last batch)."""
    storage.prediction_path(job_id).unlink(missing_ok=True)


def sweep(directory: Path | None = None, stale_seconds: float = STALE_SECONDS) -> list[str]:
    """Remove stale temporary outputs (a killed worker's) and outputs whose job is gone,
    cancelled or failed; returns the removed file names."""
    directory = directory or storage.predictions_dir()
    if not directory.is_dir():
        return []
    cutoff = time.time() - stale_seconds
    temps, outputs = [], {}
    for p in directory.iterdir():
        try:
            if not p.is_file() or p.stat().st_mtime > cutoff:
                continue
        except FileNotFoundError:
            continue
        if p.name.startswith(TEMP_PREFIX):
            temps.append(p)
        elif p.name.endswith(SUFFIX):
            outputs[p.name[: -len(SUFFIX)]] = p
    orphans: list[Path] = []
    if outputs:
        with session_scope() as s:
            kept = set(s.scalars(select(Job.id).where(Job.id.in_(list(outputs)),
                                                      Job.state.in_(KEEP_STATES))))
        orphans = [p for job_id, p in outputs.items() if job_id not in kept]
    removed = []
    for p in temps + orphans:
        p.unlink(missing_ok=True)
        removed.append(p.name)
    if removed:
        log.warning("removed %d prediction outputs no job owns: %s", len(removed), removed[:20])
    return removed
