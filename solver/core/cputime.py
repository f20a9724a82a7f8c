"""CPU seconds of this process and all its descendants (solver pools, fork servers).

``tree_cpu_seconds()`` sums user + system time of this process and of every live descendant,
each with its ``children_*`` times (children it has waited for). A process that exited and
was reaped inside the tree is then counted once, in its parent's ``children_*``, so the
difference of two readings is the CPU the tree spent in between (all threads included),
whether the work ran inline, in a process pool or in a pool that outlives the fit.
"""

from __future__ import annotations

import contextlib

import psutil

__all__ = ["tree_cpu_seconds", "CpuClock"]


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process tree so far (see the module docstring)."""
    me = psutil.Process()
    total = 0.0
    procs = [me]
    with contextlib.suppress(psutil.Error):
        procs += me.children(recursive=True)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


class CpuClock:
    """``with CpuClock() as c: ...`` then ``c.seconds``: CPU of the process tree inside."""

    def __init__(self) -> None:
        self._start = 0.0
        self.seconds = 0.0

    def __enter__(self) -> CpuClock:
        self._start = tree_cpu_seconds()
        return self

    def elapsed(self) -> float:
        """CPU seconds since the block started (while still inside it)."""
        return tree_cpu_seconds() - self._start

    def __exit__(self, *exc: object) -> None:
        self.seconds = self.elapsed()
