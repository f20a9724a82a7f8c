"""Bearer API-key authentication and the shared rate limits.

``current_tenant`` is the FastAPI dependency every protected route uses. It reads
``Authorization: Bearer <key>`` and finds the key by its SHA-256 hash: in this process's key
cache (``app.services.inference.cache``: entries live ``SODM_AUTH_CACHE_SECONDS`` and are dropped in
every API process when the key is revoked), else in the database (on a thread, so the event
loop never waits on it). A request without a valid key counts against its client address's
allowance (401, then 429 once it is used up); a valid key is never refused by its address's
allowance, and its request counts against its key's limit, weighted by the route's cost and
its body's bytes (``app.api.ratelimit``). It returns
the key's ``Tenant`` (a detached copy: read its fields, do not add it to a session). The key
itself is never logged or stored; problems name only what was wrong with it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from fastapi import Request

from app.api.ratelimit import BodyCharge, Decision, body_bytes_read, limiter, route_cost
from app.core.config import get_settings
from app.core.orm import Tenant
from app.core.problems import ProblemError
from app.services.inference import cache
from app.services.tenancy.apikeys import hash_key, looks_like_key, resolve_key

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sodm"'}


def _unauthorized(detail: str, error: str = "invalid_token") -> ProblemError:
    return ProblemError(401, "Unauthorized", detail=detail, type="unauthorized",
                        headers={"WWW-Authenticate": f'Bearer realm="sodm", error="{error}"'})


def bearer_key(request: Request) -> str:
    """The presented key, or a 401 problem when the header is missing or malformed."""
    header = request.headers.get("authorization")
    if not header:
        raise ProblemError(401, "Unauthorized", detail="missing Authorization: Bearer <key>",
                           type="unauthorized", headers=_CHALLENGE)
    scheme, _, key = header.strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or " " in key:
        raise _unauthorized("the Authorization header must be 'Bearer <key>'", "invalid_request")
    return key


def _lookup(key_hash: str, key: str) -> cache.KeyEntry | None:
    from app.core.db import get_read_sessionmaker

    with get_read_sessionmaker()() as session:
        found = resolve_key(session, key)
    if found is None:
        return None
    api_key, tenant = found
    return cache.KeyEntry(api_key.id, key_hash, api_key.prefix, tenant.id, tenant.name,
                          tenant.created_at)


def _lookup_of(key_hash: str, key: str) -> Callable[[], cache.KeyEntry | None]:
    return lambda: _lookup(key_hash, key)


def _too_many(d: Decision, what: str) -> ProblemError:
    return ProblemError(429, "Too many requests",
                        detail=f"rate limit of {d.limit} {what} per minute exceeded; retry in "
                               f"{d.retry_after()} s", type="rate-limited",
                        headers={"Retry-After": d.retry_after(), **d.headers()},
                        retry_after_seconds=int(d.retry_after()))


async def _limit_address(request: Request) -> None:
    """Count a request without a valid key against its client address's allowance; 429
    when it is used up (the caller raises its 401 otherwise)."""
    per_minute = get_settings().rate_limit_anonymous_per_minute
    if per_minute <= 0:
        return
    address = request.client.host if request.client else "unknown"
    d = await limiter().hit("address", address, per_minute, 1)
    request.state.ratelimit = d
    if not d.allowed:
        raise _too_many(d, "requests without a valid key from one address")


async def _charge_key(request: Request, key_id: str) -> None:
    """Admit the request under its key's limit (``app.api.ratelimit``): its route's cost of the
    body bytes read or declared so far, settled after the request against those read."""
    per_minute = get_settings().rate_limit_per_minute
    if per_minute <= 0:
        return
    route = getattr(request.scope.get("route"), "path", request.url.path)
    cost = route_cost(request.method, route)
    length = request.headers.get("content-length", "0")
    declared = int(length) if length.isascii() and length.isdigit() else 0
    estimate = cost.of(max(declared, body_bytes_read(request.scope)))
    d = await limiter().hit("key", key_id, per_minute, estimate)
    request.state.ratelimit = d
    if not d.allowed:
        raise _too_many(d, "cost units for this key")
    request.state.body_charge = BodyCharge(key_id, per_minute, cost,
                                           min(estimate, per_minute))


async def current_tenant(request: Request) -> Tenant:
    """FastAPI dependency: the tenant owning a valid, unrevoked key (else 401, or 429 once
    the client address has used up its allowance for requests without a valid key; 429
    when the key's rate limit has no room for the request)."""
    try:
        key = bearer_key(request)
    except ProblemError:
        await _limit_address(request)
        raise
    key_hash = hash_key(key) if looks_like_key(key) else ""
    entry, due = cache.keys().lookup(key_hash) if key_hash else (None, False)
    if entry is None:
        # looked up whatever the address has spent: its allowance never refuses a valid key
        entry = await cache.key_loader().load(key_hash, _lookup_of(key_hash, key)) \
            if key_hash else None
        if entry is None:
            await _limit_address(request)
            raise _unauthorized("the API key is unknown, malformed or revoked")
    elif due:
        cache.key_loader().refresh(key_hash, _lookup_of(key_hash, key))
    await _charge_key(request, entry.key_id)
    request.state.tenant_id = entry.tenant_id
    request.state.key_prefix = entry.prefix
    return Tenant(id=entry.tenant_id, name=entry.tenant_name,
                  created_at=entry.tenant_created_at)


async def key_still_valid(key: str) -> bool:
    """Whether ``key`` is still a valid, unrevoked key (this process's cache first, which a
    revocation empties in every API process; else the database)."""
    if not looks_like_key(key):
        return False
    key_hash = hash_key(key)
    return await cache.key_loader().get(key_hash, _lookup_of(key_hash, key)) is not None


async def metrics_token(request: Request) -> None:
    """FastAPI dependency of ``/metrics``: the scrape token ``SODM_METRICS_TOKEN`` (not a
    tenant's key); 404 while no token is configured. A wrong or missing token counts
    against the client address's allowance, like a wrong key."""
    token = get_settings().metrics_token
    if not token:
        raise ProblemError(404, "Not Found", detail="metrics are off: set SODM_METRICS_TOKEN",
                           type="about:blank")
    try:
        presented = bearer_key(request)
        if not secrets.compare_digest(presented.encode(), token.encode()):
            raise _unauthorized("wrong metrics scrape token")
    except ProblemError:
        await _limit_address(request)
        raise
