"""Rate limits shared by every API process: the ``limits`` library on Redis, weighted by cost.

Two policies, each a fixed one-minute window counted in Redis (``SODM_REDIS_URL``, default
the broker when it is Redis; kept in the process's memory in the embedded quick start):

* ``key``: ``SODM_RATE_LIMIT_PER_MINUTE`` cost units per API key (0 turns it off); a
  request costs its route's weight (``ROUTE_COSTS``) plus one unit per ``per_bytes`` of
  body, so a 10,000-row prediction or a dataset upload counts for more than a GET;
* ``address``: ``SODM_RATE_LIMIT_ANONYMOUS_PER_MINUTE`` requests per client address for
  requests without a valid key (missing, malformed, unknown or revoked). An address that has
  used its allowance is refused before any key it sends is looked up, so guessing keys is
  slow and costs the database nothing; valid keys never use the address's allowance.

Every limited response carries the IETF draft headers (draft-ietf-httpapi-ratelimit-headers)
``RateLimit-Policy: "key";q=600;w=60`` and ``RateLimit: "key";r=599;t=42`` (remaining units,
seconds until the window resets); a refused request is a 429 problem with ``Retry-After``.
When Redis cannot be reached the limiter lets requests through (logged and counted in
``sodm_rate_limit_errors_total``): an outage of the limiter never becomes an outage of the API.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from limits import RateLimitItemPerMinute
from limits.aio.strategies import FixedWindowRateLimiter
from prometheus_client import Counter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import get_settings

log = logging.getLogger("sodm.ratelimit")

WINDOW_SECONDS = 60
ERRORS = Counter("sodm_rate_limit_errors_total",
                 "Rate-limit checks that could not reach the store (requests let through)")


@dataclass(frozen=True)
class RouteCost:
    """A route's weight: ``base`` units plus one per ``per_bytes`` of request body."""

    base: int = 1
    per_bytes: int = 0

    def of(self, body_bytes: int) -> int:
        extra = body_bytes // self.per_bytes if self.per_bytes else 0
        return self.base + extra


DEFAULT_COST = RouteCost(1)
ROUTE_COSTS: dict[tuple[str, str], RouteCost] = {
    ("POST", "/predict"): RouteCost(1, per_bytes=100_000),
    ("POST", "/train"): RouteCost(10),
    ("POST", "/datasets"): RouteCost(10, per_bytes=1 << 20),
    ("GET", "/jobs/{job_id}/events"): RouteCost(5),
    ("GET", "/models/{model_id}/file"): RouteCost(5),
    ("DELETE", "/datasets/{dataset_id}"): RouteCost(2),
    ("DELETE", "/models/{model_id}"): RouteCost(2),
    ("POST", "/jobs/{job_id}/cancel"): RouteCost(2),
    ("POST", "/webhooks"): RouteCost(5),  # resolves the URL's host
    ("GET", "/models/{model_id}/monitoring"): RouteCost(2),  # reads every API's windows
}


def route_cost(method: str, route: str, body_bytes: int) -> int:
    return ROUTE_COSTS.get((method, route), DEFAULT_COST).of(max(0, body_bytes))


@dataclass(frozen=True)
class Decision:
    """The outcome of one check, with what the RateLimit headers say."""

    policy: str
    allowed: bool
    limit: int
    remaining: int
    reset_seconds: int

    def headers(self) -> dict[str, str]:
        return {"RateLimit-Policy": f'"{self.policy}";q={self.limit};w={WINDOW_SECONDS}',
                "RateLimit": f'"{self.policy}";r={self.remaining};t={self.reset_seconds}'}

    def retry_after(self) -> str:
        return str(max(1, self.reset_seconds))


class _Counting(FixedWindowRateLimiter):
    """``limits``' fixed window, returning the window's count and expiry with the hit.

    One store round trip per request: the window's expiry is remembered per key in this
    process (a hit whose count equals its cost opened the window, so it ends a window length
    from now); it is read from the store only for a window another process opened."""

    def __init__(self, storage: Any) -> None:
        super().__init__(storage)
        self._ends: dict[str, float] = {}

    async def incr(self, key: str, expiry: int, cost: int) -> int:
        return int(await self.storage.incr(key, expiry, amount=cost))

    async def hit_counted(self, item: Any, identity: str, cost: int) -> tuple[int, float]:
        key = item.key_for(identity)
        count = int(await self.incr(key, item.get_expiry(), cost))
        now = time.time()
        if count == cost:
            end = now + item.get_expiry()
        else:
            end = self._ends.get(key, 0.0)
            if end <= now:
                end = float(await self.storage.get_expiry(key))
        if len(self._ends) > 100_000:
            self._ends.clear()
        self._ends[key] = end
        return count, end


class _CoalescedCounts(_Counting):
    """On Redis: the counts of concurrent requests travel together. While one round trip is
    in flight, new counts queue; the next round trip sends them all as one pipeline of
    ``limits``' own increment script (the same keys, expiries and results as one call
    each), so the Redis cost per request falls as concurrency rises."""

    def __init__(self, storage: Any) -> None:
        super().__init__(storage)
        self._queue: list[tuple[str, int, int, asyncio.Future]] = []
        self._sending = False

    async def incr(self, key: str, expiry: int, amount: int) -> int:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.append((key, expiry, amount, fut))
        if not self._sending:
            self._sending = True
            loop.create_task(self._send())
        return await fut

    async def _send(self) -> None:
        bridge = self.storage.bridge
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    if len(batch) == 1:
                        key, expiry, amount, _ = batch[0]
                        counts = [await self.storage.incr(key, expiry, amount=amount)]
                    else:
                        pipe = bridge.get_connection().pipeline(transaction=False)
                        for key, expiry, amount, _ in batch:
                            await bridge.lua_incr_expire([bridge.prefixed_key(key)],
                                                         [expiry, amount], client=pipe)
                        counts = await pipe.execute()
                except Exception as exc:  # noqa: BLE001 - each waiting request fails open
                    for *_, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (*_, fut), count in zip(batch, counts, strict=True):
                    if not fut.done():
                        fut.set_result(int(count))
        finally:
            self._sending = False


class Limiter:
    """The process's limiter (one storage connection pool, one strategy)."""

    def __init__(self) -> None:
        s = get_settings()
        url = s.resolved_redis_url
        prefix = f"sodm:{s.celery_queue}:ratelimit"
        if url is not None:
            from limits.aio.storage import RedisStorage
            from redis.asyncio import BlockingConnectionPool

            # a few connections, waited for: a burst of requests must not open (and pay the
            # setup of) one connection each
            pool = BlockingConnectionPool.from_url(url, max_connections=8, timeout=1,
                                                   socket_timeout=1, socket_connect_timeout=1)
            self.storage: Any = RedisStorage(f"async+{url}", implementation="redispy",
                                             key_prefix=prefix, connection_pool=pool)
        else:
            from limits.aio.storage import MemoryStorage

            self.storage = MemoryStorage()
        self.strategy = _CoalescedCounts(self.storage) if url else _Counting(self.storage)
        self.shared = url is not None
        self._warned_at = -math.inf

    async def hit(self, policy: str, identity: str, per_minute: int, cost: int) -> Decision:
        """Count ``cost`` units; allowed while the window's count stays within the limit."""
        return await self._decide(policy, identity, per_minute, cost)

    async def peek(self, policy: str, identity: str, per_minute: int) -> Decision:
        """The window's state without counting (allowed while a unit is left)."""
        return await self._decide(policy, identity, per_minute, 0)

    async def _decide(self, policy: str, identity: str, per_minute: int, cost: int
                      ) -> Decision:
        item = RateLimitItemPerMinute(per_minute)
        try:
            if cost:
                count, reset_at = await self.strategy.hit_counted(
                    item, f"{policy}:{identity}", cost)
            else:
                key = item.key_for(f"{policy}:{identity}")
                count = int(await self.storage.get(key)) + 1
                reset_at = float(await self.storage.get_expiry(key))
        except Exception as exc:  # noqa: BLE001 - fail open, never a 500
            ERRORS.inc()
            now = time.monotonic()
            if now - self._warned_at > WINDOW_SECONDS:  # at most one line a minute
                self._warned_at = now
                log.warning("rate limit store unavailable (%s); requests let through",
                            type(exc).__name__)
            return Decision(policy, True, per_minute, per_minute, WINDOW_SECONDS)
        reset = max(0, math.ceil(reset_at - time.time()))
        remaining = max(0, per_minute - count + (0 if cost else 1))
        return Decision(policy, count <= per_minute, per_minute, remaining,
                        min(reset, WINDOW_SECONDS))


_limiter: tuple[asyncio.AbstractEventLoop, Limiter] | None = None


def limiter() -> Limiter:
    """This process's limiter, bound to the running event loop (its Redis connections
    and queued counts belong to one loop)."""
    global _limiter
    loop = asyncio.get_running_loop()
    if _limiter is None or _limiter[0] is not loop:
        _limiter = (loop, Limiter())
    return _limiter[1]


def reset() -> None:
    """Forget the limiter (tests change the environment)."""
    global _limiter
    _limiter = None


class RateLimitHeadersMiddleware:
    """Adds the RateLimit headers of the request's decision (``scope["state"]``) to its
    response, whatever the route returned."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        http = scope["type"] == "http"
        await self.app(scope, receive, _with_headers(scope, send) if http else send)


def _with_headers(scope: Scope, send: Send) -> Send:
    async def sender(message: Message) -> None:
        decision = scope.get("state", {}).get("ratelimit")
        if message["type"] == "http.response.start" and decision is not None:
            present = {k.lower() for k, _ in message.get("headers", [])}
            message["headers"] = [*message.get("headers", []), *(
                (k.lower().encode(), v.encode()) for k, v in decision.headers().items()
                if k.lower().encode() not in present)]
        await send(message)

    return sender
