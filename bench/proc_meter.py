"""Resource use of this process and all its descendants (pool workers, fork servers, the Spark
JVM and its Python workers): wall seconds, CPU seconds (user + system) and peak total RSS.

CPU seconds = this process's own ``getrusage`` (exact, all its threads) plus its descendants':
the larger of the per-pid sum of their last psutil samples (taken every ``interval`` seconds,
so a descendant that exits between two samples loses at most ``interval`` of CPU) and the
``RUSAGE_CHILDREN`` growth (exact for descendants that were waited for, e.g. joined pool
workers).  Peak RSS is the largest RSS sum over the tree seen by the sampler.  On a shared
machine CPU seconds are a steadier measure of work than wall time.
"""

from __future__ import annotations

import contextlib
import resource
import threading
import time

import psutil

__all__ = ["TreeMeter"]


def _rusage_cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


class TreeMeter:
    """``with TreeMeter() as m: ...`` then ``m.wall_seconds``, ``m.cpu_seconds``,
    ``m.peak_rss`` (bytes)."""

    def __init__(self, interval: float = 0.1) -> None:
        self.proc = psutil.Process()
        self.interval = interval
        self.peak_rss = 0
        self.wall_seconds = 0.0
        self._desc: dict[int, float] = {}
        self._desc_base: dict[int, float] = {}
        self._self0 = self._self1 = 0.0
        self._children0 = self._children1 = 0.0
        self._t0 = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> dict[int, float]:
        rss, cpu = 0, {}
        with contextlib.suppress(psutil.Error):
            rss += self.proc.memory_info().rss
        for p in self.proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
                t = p.cpu_times()
                cpu[p.pid] = t.user + t.system
        self.peak_rss = max(self.peak_rss, rss)
        return cpu

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._desc.update(self._sample())

    @property
    def children_cpu_seconds(self) -> float:
        sampled = sum(v - self._desc_base.get(pid, 0.0) for pid, v in self._desc.items())
        return max(sampled, self._children1 - self._children0)

    @property
    def cpu_seconds(self) -> float:
        return (self._self1 - self._self0) + self.children_cpu_seconds

    def __enter__(self) -> TreeMeter:
        self._desc_base = self._sample()
        self._desc = dict(self._desc_base)
        self._children0 = _rusage_cpu(resource.RUSAGE_CHILDREN)
        self._self0 = _rusage_cpu(resource.RUSAGE_SELF)
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_seconds = time.perf_counter() - self._t0
        self._self1 = _rusage_cpu(resource.RUSAGE_SELF)
        self._stop.set()
        self._thread.join()
        self._desc.update(self._sample())
        self._children1 = _rusage_cpu(resource.RUSAGE_CHILDREN)
