"""The sweep shared by the reaper's file cleanups (model files, prediction outputs): the
stale files of a directory split into temporary ones and finished ones by id, and their
removal with one log line."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

TEMP_PREFIX = "."  # the atomic writers' temporary dot-files
STALE_SECONDS = 3600.0


@dataclass
class StaleFiles:
    """Files of one directory older than the cutoff: temporary ones, and finished ones by
    the id their name carries (``{id}{suffix}``)."""

    temps: list[Path] = field(default_factory=list)
    finished: dict[str, Path] = field(default_factory=dict)


def stale_files(directory: Path, suffix: str,
                stale_seconds: float = STALE_SECONDS) -> StaleFiles:
    out = StaleFiles()
    if not directory.is_dir():
        return out
    cutoff = time.time() - stale_seconds
    for p in directory.iterdir():
        try:
            if not p.is_file() or p.stat().st_mtime > cutoff:
                continue
        except FileNotFoundError:
            continue
        if p.name.startswith(TEMP_PREFIX):
            out.temps.append(p)
        elif p.name.endswith(suffix):
            out.finished[p.name[: -len(suffix)]] = p
    return out


def remove(paths: list[Path], what: str) -> list[str]:
    """Unlink ``paths``; returns their names (logged once as ``what``)."""
    removed = []
    for p in paths:
        p.unlink(missing_ok=True)
        removed.append(p.name)
    if removed:
        log.warning("removed %d %s: %s", len(removed), what, removed[:20])
    return removed
