"""A probe thread that measures how fast ``/livez`` and another tenant's ``GET /datasets``
answer while a hostile request runs (each must stay under a second)."""

from __future__ import annotations

import threading
import time
from types import TracebackType

import httpx


class Probe:
    """``with Probe(url, other_key) as p: ...``; afterwards ``p.slowest`` (seconds) and
    ``p.count`` (answers measured). Every probe answer must be a 200."""

    def __init__(self, base_url: str, other_key: str) -> None:
        self.base_url = base_url
        self.other_key = other_key
        self.times: list[float] = []
        self.failures: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=30) as c:
            while not self._done.is_set():
                for path, headers in (("/livez", {}), ("/datasets?limit=1", {
                        "Authorization": f"Bearer {self.other_key}"})):
                    t0 = time.perf_counter()
                    status = c.get(path, headers=headers).status_code
                    self.times.append(time.perf_counter() - t0)
                    if status != 200:
                        self.failures.append(f"{path}: {status}")
                time.sleep(0.05)

    def __enter__(self) -> Probe:
        self._thread.start()
        deadline = time.monotonic() + 30
        while len(self.times) < 2 and time.monotonic() < deadline:  # the probe is answering
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None
                 ) -> None:
        self._done.set()
        self._thread.join(30)

    @property
    def slowest(self) -> float:
        return max(self.times, default=float("inf"))

    @property
    def count(self) -> int:
        return len(self.times)

    def check(self, bound: float = 1.0) -> None:
        """At least two answers measured, all 200, the slowest under ``bound`` seconds."""
        assert not self.failures, self.failures
        assert self.count >= 2 and self.slowest < bound, (self.count, self.slowest)
