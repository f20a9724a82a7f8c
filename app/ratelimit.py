"""In-process token-bucket rate limiting per API key (``SODM_RATE_LIMIT_PER_MINUTE``).

Each API process keeps its own buckets: the limit is per key per process, which is enough to
stop a runaway client without a shared store.
"""

from __future__ import annotations

import math
import threading
import time


class TokenBuckets:
    """One bucket per key: capacity ``per_minute`` tokens, refilled at ``per_minute/60``/s."""

    def __init__(self, per_minute: int, max_keys: int = 100_000) -> None:
        self.per_minute = per_minute
        self.rate = per_minute / 60.0
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, now: float | None = None) -> float:
        """Take one token; returns 0.0 when allowed, else the seconds until one is available."""
        if self.per_minute <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                if len(self._buckets) > self.max_keys:
                    self._buckets.pop(next(iter(self._buckets)))
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / self.rate


def retry_after_header(wait_seconds: float) -> str:
    return str(max(1, math.ceil(wait_seconds)))
