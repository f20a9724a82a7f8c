"""Resource use of this process and all its descendants (Spark JVM, Python workers, pools),
sampled every ``interval`` seconds: peak total RSS and CPU seconds (user + system).

CPU is summed per pid from its last sample, so a child that exits between two samples loses
at most ``interval`` of CPU; on a shared machine CPU seconds are a steadier measure of work
than wall time.
"""

from __future__ import annotations

import contextlib
import threading

import psutil

__all__ = ["TreeMeter"]


class TreeMeter:
    """``with TreeMeter() as m: ...`` then ``m.peak_rss`` (bytes) and ``m.cpu_seconds``."""

    def __init__(self, interval: float = 0.5) -> None:
        self.proc = psutil.Process()
        self.interval = interval
        self.peak_rss = 0
        self._cpu: dict[int, float] = {}
        self._base: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> dict[int, float]:
        rss, cpu = 0, {}
        for p in [self.proc, *self.proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
                t = p.cpu_times()
                cpu[p.pid] = t.user + t.system
        self.peak_rss = max(self.peak_rss, rss)
        return cpu

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._cpu.update(self._sample())

    @property
    def cpu_seconds(self) -> float:
        return sum(v - self._base.get(pid, 0.0) for pid, v in self._cpu.items())

    def __enter__(self) -> TreeMeter:
        self._base = self._sample()
        self._cpu = dict(self._base)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._cpu.update(self._sample())
