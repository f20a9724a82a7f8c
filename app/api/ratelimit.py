"""Rate limits shared by every API process: the ``limits`` library on Redis, weighted by cost.

Two policies, each a fixed window (a minute; ``SODM_RATE_LIMIT_WINDOW_SECONDS``) counted in
Redis (``SODM_REDIS_URL``, default the broker when it is Redis; kept in the process's memory
in the embedded quick start):

* ``key``: ``SODM_RATE_LIMIT_PER_MINUTE`` cost units per API key (0 turns it off); a
  request costs its route's weight (``ROUTE_COSTS``) plus one unit per ``per_bytes`` of
  body, so a 10,000-row prediction or a dataset upload counts for more than a GET, and no
  request costs more than the whole minute's budget (so every request the other limits
  allow can pass, in a fresh window at worst). It is admitted when the window has room for
  its cost estimated from the body bytes read or declared (``Content-Length``) by then, and
  charged that; after it, the charge is settled against the bytes actually read
  (``RateLimitMiddleware``: chunked bodies pay for their bytes). A refused request is
  charged nothing (``CONDITIONAL_INCR``).
* ``address``: ``SODM_RATE_LIMIT_ANONYMOUS_PER_MINUTE`` requests per client address for
  requests without a valid key (missing, malformed, unknown or revoked); once it is used up
  they are answered 429 instead of 401. Valid keys never use it and are never refused by it:
  a key not yet cached is looked up (one indexed read) whatever its address has spent. The
  address is the TCP peer, or the forwarded one when the peer is in
  ``SODM_TRUSTED_PROXIES`` (``app.cli.uvicorn_options``).

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

from limits import RateLimitItemPerSecond
from limits.aio.strategies import FixedWindowRateLimiter
from prometheus_client import Counter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.config import get_settings

log = logging.getLogger("sodm.ratelimit")

WARN_EVERY_SECONDS = 60  # at most one "store unavailable" line a minute
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
    # the same evaluations in other protocols' formats (app.api.routes.v2,
    # app.api.routes.invocations)
    ("POST", "/v2/models/{name}/infer"): RouteCost(1, per_bytes=100_000),
    ("POST", "/v2/models/{name}/versions/{version}/infer"): RouteCost(1, per_bytes=100_000),
    ("POST", "/models/{name}/invocations"): RouteCost(1, per_bytes=100_000),
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


def route_cost(method: str, route: str) -> RouteCost:
    return ROUTE_COSTS.get((method, route), DEFAULT_COST)


BODY_BYTES = "body_bytes"  # scope["state"] key: the request body's bytes read so far


def body_bytes_read(scope: Scope) -> int:
    """The bytes of the request body the application has received so far
    (``RateLimitMiddleware`` counts them)."""
    return int(scope.get("state", {}).get(BODY_BYTES, 0))


@dataclass(frozen=True)
class BodyCharge:
    """What a key was charged when its request was admitted (the route's cost of the body
    bytes read then or declared by ``Content-Length``, at most ``per_minute``); once the
    request is over it is settled against the bytes actually read (``RateLimitMiddleware``)."""

    identity: str
    per_minute: int
    cost: RouteCost
    charged: int

    def owed(self, body_bytes: int) -> int:
        return min(self.cost.of(body_bytes), self.per_minute) - self.charged


@dataclass(frozen=True)
class Decision:
    """The outcome of one check, with what the RateLimit headers say."""

    policy: str
    allowed: bool
    limit: int
    remaining: int
    reset_seconds: int
    window_seconds: int

    def headers(self) -> dict[str, str]:
        return {"RateLimit-Policy": f'"{self.policy}";q={self.limit};w={self.window_seconds}',
                "RateLimit": f'"{self.policy}";r={self.remaining};t={self.reset_seconds}'}

    def retry_after(self) -> str:
        return str(max(1, self.reset_seconds))


# One count in one round trip (KEYS[1] the window; ARGV: expiry, amount, limit): a positive
# amount is added only while the window's count stays within the limit (0: no limit), so a
# refused request costs nothing; a negative one (a refund) lowers the count, never below 0,
# and keeps the window's expiry. Returns {count, 1 if applied else 0}.
CONDITIONAL_INCR = """
local amount = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local current = tonumber(redis.call("get", KEYS[1]) or "0")
if amount > 0 and limit > 0 and current + amount > limit then
    return {current, 0}
end
if amount < 0 then
    if current <= 0 then
        return {0, 1}
    end
    local left = math.max(current + amount, 0)
    redis.call("set", KEYS[1], left, "KEEPTTL")
    return {left, 1}
end
current = redis.call("incrby", KEYS[1], amount)
if current == amount then
    redis.call("expire", KEYS[1], ARGV[1])
end
return {current, 1}
"""


class _Counting(FixedWindowRateLimiter):
    """``limits``' fixed window counted the way ``CONDITIONAL_INCR`` says, returning the
    window's count and expiry with each count.

    One store round trip per request: the window's expiry is remembered per key in this
    process (an applied count equal to its amount opened the window, so it ends a window
    length from now); it is read from the store only for a window another process opened."""

    def __init__(self, storage: Any) -> None:
        super().__init__(storage)
        self._ends: dict[str, float] = {}

    async def count(self, key: str, expiry: int, amount: int, limit: int) -> tuple[int, bool]:
        """In this process's memory (the embedded quick start): one event loop, and the
        memory storage's calls do not yield, so the check and the count are one step."""
        current = int(await self.storage.get(key))
        if amount > 0 and limit > 0 and current + amount > limit:
            return current, False
        if amount < 0:
            return int(await self.storage.decr(key, -amount)) if current > 0 else 0, True
        return int(await self.storage.incr(key, expiry, amount=amount)), True

    async def hit_counted(self, item: Any, identity: str, amount: int, limit: int
                          ) -> tuple[int, bool, float]:
        """(the window's count, whether ``amount`` was applied, when the window ends)."""
        key = item.key_for(identity)
        count, applied = await self.count(key, item.get_expiry(), amount, limit)
        now = time.time()
        if applied and amount > 0 and count == amount:
            end = now + item.get_expiry()
        else:
            end = self._ends.get(key, 0.0)
            if end <= now:
                end = float(await self.storage.get_expiry(key))
        if len(self._ends) > 100_000:
            self._ends.clear()
        self._ends[key] = end
        return count, applied, end


class _CoalescedCounts(_Counting):
    """On Redis: the counts of concurrent requests travel together. While one round trip is
    in flight, new counts queue; the next round trip sends them all as one pipeline of
    ``CONDITIONAL_INCR`` calls (the same results as one call each), so the Redis cost per
    request falls as concurrency rises. ``round_trips`` counts the round trips made."""

    def __init__(self, storage: Any) -> None:
        super().__init__(storage)
        self._queue: list[tuple[str, int, int, int, asyncio.Future]] = []
        self._sending = False
        self._script = storage.bridge.get_connection().register_script(CONDITIONAL_INCR)
        self.round_trips = 0

    async def count(self, key: str, expiry: int, amount: int, limit: int) -> tuple[int, bool]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.append((key, expiry, amount, limit, fut))
        if not self._sending:
            self._sending = True
            loop.create_task(self._send())
        return await fut

    async def _send(self) -> None:
        bridge = self.storage.bridge
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                self.round_trips += 1
                try:
                    if len(batch) == 1:
                        key, expiry, amount, limit, _ = batch[0]
                        results = [await self._script([bridge.prefixed_key(key)],
                                                      [expiry, amount, limit])]
                    else:
                        pipe = bridge.get_connection().pipeline(transaction=False)
                        for key, expiry, amount, limit, _ in batch:
                            await self._script([bridge.prefixed_key(key)],
                                               [expiry, amount, limit], client=pipe)
                        results = await pipe.execute()
                except Exception as exc:  # noqa: BLE001 - each waiting request fails open
                    for *_, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (*_, fut), (count, applied) in zip(batch, results, strict=True):
                    if not fut.done():
                        fut.set_result((int(count), bool(int(applied))))
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
        self.window = s.rate_limit_window_seconds
        self._warned_at = -math.inf

    async def hit(self, policy: str, identity: str, per_minute: int, cost: int) -> Decision:
        """Count ``cost`` units (at most ``per_minute``: any one request fits an empty
        window) if the window still has room for them; a refused hit counts nothing."""
        return await self._decide(policy, identity, per_minute, min(cost, per_minute))

    async def peek(self, policy: str, identity: str, per_minute: int) -> Decision:
        """The window's state without counting (allowed while a unit is left)."""
        return await self._decide(policy, identity, per_minute, 0)

    async def settle(self, policy: str, identity: str, per_minute: int, amount: int) -> None:
        """Add ``amount`` units (a refund when negative) whatever the window holds: the
        difference between what a request was charged when admitted and what it cost."""
        if amount:
            await self._decide(policy, identity, per_minute, amount, unconditional=True)

    async def _decide(self, policy: str, identity: str, per_minute: int, cost: int,
                      unconditional: bool = False) -> Decision:
        item = RateLimitItemPerSecond(per_minute, self.window)
        try:
            if cost:
                count, applied, reset_at = await self.strategy.hit_counted(
                    item, f"{policy}:{identity}", cost, 0 if unconditional else per_minute)
            else:
                key = item.key_for(f"{policy}:{identity}")
                count, applied = int(await self.storage.get(key)), True
                reset_at = float(await self.storage.get_expiry(key))
        except Exception as exc:  # noqa: BLE001 - fail open, never a 500
            ERRORS.inc()
            now = time.monotonic()
            if now - self._warned_at > WARN_EVERY_SECONDS:
                self._warned_at = now
                log.warning("rate limit store unavailable (%s); requests let through",
                            type(exc).__name__)
            return Decision(policy, True, per_minute, per_minute, self.window, self.window)
        reset = max(0, math.ceil(reset_at - time.time()))
        allowed = applied and (cost > 0 or count < per_minute)
        return Decision(policy, allowed, per_minute, max(0, per_minute - count),
                        min(reset, self.window), self.window)


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


class RateLimitMiddleware:
    """Counts the request body's bytes as the application receives them, adds the RateLimit
    headers of the request's decision (``scope["state"]["ratelimit"]``) to its response
    whatever the route returned, and once the request is over settles its key's charge
    (``scope["state"]["body_charge"]``) against the bytes read: a chunked body pays for its
    bytes, a body cut short is refunded what it did not send."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state[BODY_BYTES] = 0

        async def counting() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                state[BODY_BYTES] += len(message.get("body", b""))
            return message

        try:
            await self.app(scope, counting, _with_headers(scope, send))
        finally:
            charge: BodyCharge | None = state.get("body_charge")
            if charge is not None:
                await limiter().settle("key", charge.identity, charge.per_minute,
                                       charge.owed(state[BODY_BYTES]))
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
