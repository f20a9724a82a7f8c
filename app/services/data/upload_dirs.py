"""The directory of one upload in flight: ``SODM_DATA_DIR/tmp/upload-{dataset id}/``.

Everything an upload writes before its dataset is stored lives there: the body as it
arrives (``upload``), its decompressed copy (``expanded``), the dataset files being
assembled, and the parse's current limits (``limits.json``). The directory is removed on
every exit path (by the request when the upload never reaches a parser, by the parsing
child when it ends, by the API's watcher when the kernel killed the child) and, when all
of those died too, by the sweep: ``owners`` lists the processes that used it
(``app.services.data.process_owner`` tokens); a directory is an orphan once every owner is known
to be gone, or, where that cannot be told (another host), once nothing in it changed for
``ORPHAN_SECONDS``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from app.core.config import get_settings
from app.services.data import process_owner
from app.services.filestore import storage

log = logging.getLogger(__name__)

PREFIX = "upload-"
OWNERS = "owners"
BODY = "upload"
EXPANDED = "expanded"
LIMITS = "limits.json"
# a directory whose owners cannot be checked from here is an orphan once it is this old
# (its newest file): more than any upload or parse can run without writing
MIN_ORPHAN_SECONDS = 3600.0


def orphan_seconds() -> float:
    return max(MIN_ORPHAN_SECONDS, 2.0 * get_settings().ingest_time_limit_seconds)


@dataclass(frozen=True)
class UploadDir:
    """The directory of the upload that becomes dataset ``dataset_id``."""

    dataset_id: str

    @property
    def path(self) -> Path:
        return storage.tmp_root() / f"{PREFIX}{self.dataset_id}"

    @property
    def body(self) -> Path:
        return self.path / BODY

    @property
    def expanded(self) -> Path:
        return self.path / EXPANDED

    @property
    def limits(self) -> Path:
        return self.path / LIMITS

    @classmethod
    def create(cls, dataset_id: str) -> UploadDir:
        """Make the directory, owned by this process."""
        upload = cls(dataset_id)
        with storage.storage_errors():
            upload.path.mkdir(parents=True)
            upload.add_owner()
        return upload

    def add_owner(self) -> bool:
        """Record this process as an owner (the parsing child, on top of its API process);
        False when the directory is gone (the dataset was deleted before the child ran)."""
        try:
            with open(self.path / OWNERS, "a") as fh:
                fh.write(process_owner.me().token + "\n")
        except FileNotFoundError:
            return False
        return True

    def owners(self) -> list[str]:
        try:
            return (self.path / OWNERS).read_text().split()
        except OSError:
            return []

    def write_limits(self, limits: dict[str, float]) -> None:
        """Record the parse's current limits (the watcher names them if the kernel stops
        the child); best effort."""
        with contextlib.suppress(OSError):
            self.limits.write_text(json.dumps(limits))

    def read_limits(self) -> dict[str, float]:
        try:
            return {k: float(v) for k, v in json.loads(self.limits.read_text()).items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def orphaned(self, now: float | None = None) -> bool:
        """Whether no process can still use this directory (see the module's docstring)."""
        status = [process_owner.alive(t) for t in self.owners()]
        if any(s is True for s in status):
            return False
        if status and all(s is False for s in status):
            return True
        return newest_mtime(self.path) < (now or time.time()) - orphan_seconds()


def newest_mtime(path: Path) -> float:
    """The latest modification time of ``path`` and what is in it (0 when it is gone)."""
    newest = 0.0
    try:
        newest = path.stat().st_mtime
        for p in path.rglob("*"):
            try:
                newest = max(newest, p.stat().st_mtime)
            except OSError:
                continue
    except OSError:
        pass
    return newest


def sweep_tmp() -> list[str]:
    """Remove orphaned upload directories and anything else under ``tmp/`` older than
    ``orphan_seconds`` (a crash's half-removed ``.trash`` directory, files of earlier
    versions); returns the removed names."""
    root = storage.tmp_root()
    now = time.time()
    removed: list[str] = []
    for p in root.iterdir():
        if p.name.startswith(PREFIX) and p.is_dir():
            gone = UploadDir(p.name[len(PREFIX):]).orphaned(now)
        else:
            gone = newest_mtime(p) < now - orphan_seconds()
        if not gone:
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p.name)
    if removed:
        log.warning("removed %d orphaned upload files: %s", len(removed), removed[:20])
    return removed
