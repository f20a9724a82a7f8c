"""Model files on disk: the durable write, the checked read and the sweep of leftovers.

``write`` puts a model file in place atomically (a uniquely named temporary dot-file in the
same directory, fsynced, renamed, then the directory fsynced). ``sweep`` (run by the reaper)
removes what no model row owns: temporary files older than ``STALE_SECONDS`` (a worker died
while writing) and finished files without a live model row (the job was cancelled or lost
after writing, or the model was deleted) older than the same age, so a file whose commit is
still being retried is never taken. ``read_checked`` loads a model only when the file's
bytes have the sha256 stored with its row (a 500 ``model-file-corrupt`` problem otherwise).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from sqlalchemy import select

from app.config import get_settings
from app.db import session_scope
from app.models import Model
from app.problems import ProblemError
from app.services.stale_files import STALE_SECONDS, stale_files
from app.services.stale_files import remove as remove_files

log = logging.getLogger(__name__)

SUFFIX = ".sodm"


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(est: Any, path: Path) -> tuple[str, int]:
    """Save ``est`` (a portable estimator) at ``path`` durably; returns (sha256, size)."""
    from app.services.storage import atomic_write_bytes
    from solver.model_io import dumps

    data = dumps(est)
    atomic_write_bytes(path, data)  # a uniquely named temporary file, fsynced, renamed
    fsync_dir(path.parent)
    return hashlib.sha256(data).hexdigest(), len(data)


def read_checked(path: Path, sha256: str, model_id: str) -> Any:
    """The fitted estimator of a model file whose bytes match ``sha256`` (rows written
    before the hash was stored have none: not checked)."""
    from solver.model_io import loads

    data = path.read_bytes()
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        log.error("model file of %s does not match its stored sha256", model_id)
        raise ProblemError(500, "Model file corrupt",
                           detail=f"the file of model {model_id} does not match the checksum "
                                  "stored when it was trained; it is not loaded",
                           type="model-file-corrupt")
    return loads(data)


def remove(path: Path) -> None:
    """Remove a model file that no row will own (a cancelled job's)."""
    path.unlink(missing_ok=True)


def sweep(models_dir: Path | None = None, stale_seconds: float = STALE_SECONDS) -> list[str]:
    """Remove stale temporary files and model files without a live row; returns the
    removed file names."""
    directory = models_dir or Path(get_settings().data_dir) / "models"
    found = stale_files(directory, SUFFIX, stale_seconds)
    orphans: list[Path] = []
    if found.finished:
        with session_scope() as s:
            live = set(s.scalars(select(Model.id).where(Model.id.in_(list(found.finished)),
                                                        Model.deleted_at.is_(None))))
        orphans = [p for mid, p in found.finished.items() if mid not in live]
    return remove_files(found.temps + orphans, "model files no model owns")
