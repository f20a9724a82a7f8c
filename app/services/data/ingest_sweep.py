"""The sweep of what uploads leave behind when the processes handling them die.

Run by every API process (a thread, every ``SODM_REAPER_INTERVAL_SECONDS``) and by every
worker's reaper (``worker.lifecycle.reaper``); each step is conditional, so concurrent sweepers
agree:

* rows: parsing rows whose owner is gone are failed ``ingest-interrupted``
  (``datasets.fail_stuck``: at once when the owner died on this machine, else once its
  heartbeat is ``datasets.STALE_SECONDS`` old), and their files removed;
* ``tmp/``: upload directories no live process owns, and anything else older than
  ``upload_dirs.orphan_seconds`` (``upload_dirs.sweep_tmp``);
* ``datasets/`` (every ``DATASET_DIRS_EVERY_SECONDS``): directories of datasets that are
  deleted, failed or gone (a crash between the soft delete and the removal, or between
  the rename into place and the row's update).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from sqlalchemy import select

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.orm import Dataset, DatasetState
from app.services.data import dataset_catalog as datasets
from app.services.data import upload_dirs
from app.services.filestore import storage

log = logging.getLogger(__name__)

DATASET_DIRS_EVERY_SECONDS = 600.0
DATASET_DIR_MIN_AGE_SECONDS = 60.0  # a directory just renamed into place waits for its row
_BATCH = 1000


def sweep_rows() -> list[str]:
    """Fail the parses whose owner is gone and remove their files; returns their ids."""
    with session_scope() as s:
        failed = datasets.fail_stuck(s)
    for dataset_id in failed:
        datasets.remove_files(dataset_id)
    return failed


def sweep_dataset_dirs() -> list[str]:
    """Remove the files of ``datasets/{id}`` whose row is not ready or parsing (deleted,
    failed, gone) and whose newest file is older than ``DATASET_DIR_MIN_AGE_SECONDS``."""
    cutoff = time.time() - DATASET_DIR_MIN_AGE_SECONDS
    newest: dict[str, float] = {}
    for obj in storage.datasets_root().children():
        name = obj.key.split("/", 1)[0]
        stamp = obj.mtime.timestamp() if obj.mtime is not None else time.time()
        newest[name] = max(newest.get(name, 0.0), stamp)
    found = [name for name, stamp in newest.items() if stamp < cutoff]
    removed = []
    for i in range(0, len(found), _BATCH):
        batch = found[i:i + _BATCH]
        with session_scope() as s:
            live = set(s.scalars(select(Dataset.id).where(
                Dataset.id.in_(batch), Dataset.deleted_at.is_(None),
                Dataset.state.in_((DatasetState.READY, DatasetState.PARSING)))))
        for name in batch:
            if name not in live:
                with contextlib.suppress(OSError, ValueError):  # not an id: not ours
                    storage.remove_dataset_files(name)
                    removed.append(name)
    if removed:
        log.warning("removed %d dataset directories no dataset owns: %s", len(removed),
                    removed[:20])
    return removed


def sweep_once(dataset_dirs: bool = False) -> dict[str, list[str]]:
    """One pass (rows and ``tmp/``; ``datasets/`` too when asked); the ids and names per
    step, for logs and tests."""
    out = {"failed": sweep_rows(), "tmp": upload_dirs.sweep_tmp()}
    if dataset_dirs:
        out["dataset_dirs"] = sweep_dataset_dirs()
    return out


class _Thread:
    """The API process's sweeper."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="sodm-ingest-sweep")
        self.thread.start()

    def _loop(self) -> None:
        interval = max(0.2, float(get_settings().reaper_interval_seconds))
        next_dirs = time.monotonic()
        while not self.stop.wait(interval):
            try:
                dirs = time.monotonic() >= next_dirs
                if dirs:
                    next_dirs = time.monotonic() + DATASET_DIRS_EVERY_SECONDS
                sweep_once(dataset_dirs=dirs)
            except Exception:  # noqa: BLE001 - the database may be restarting; next time
                log.warning("ingest sweep failed", exc_info=True)


_lock = threading.Lock()
_current: _Thread | None = None


def start_thread() -> None:
    global _current
    with _lock:
        if _current is None:
            _current = _Thread()


def stop_thread() -> None:
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None:
        current.stop.set()
