"""The cores this process may use, and how many API processes ``sodm serve`` / ``sodm run``
start on them by default.

Cores are the CPU affinity set, lowered to the cgroup's CPU quota when one is set (a
container started with ``--cpus 2`` on a 32-core host has 2). One API process per core
serves best: an API process's event loop is the bottleneck of small requests (one core
each, docs/serving.md), and each process's evaluation slots share the cores
(``app.services.inference.batcher``). ``MAX_API_WORKERS`` bounds the default, since every process
keeps its own model cache; ``--workers`` or ``SODM_API_WORKERS`` override it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

MAX_API_WORKERS = 8
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def _quota(path: Path | None = None) -> float | None:
    """Cores allowed by a cgroup v2 CPU quota (``"200000 100000"`` -> 2.0), or None."""
    try:
        quota, period = (path or CGROUP_CPU_MAX).read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None


def available_cores() -> int:
    """The cores this process may run on (affinity, then the cgroup quota), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota = _quota()
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def default_api_workers() -> int:
    """API processes when none are asked for: one per core, at most ``MAX_API_WORKERS``."""
    return min(available_cores(), MAX_API_WORKERS)
