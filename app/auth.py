"""Bearer API-key authentication and per-key rate limiting.

``current_tenant`` is the FastAPI dependency every protected route uses. It reads
``Authorization: Bearer <key>``, looks the key's SHA-256 hash up (revoked keys do not match),
takes a token from the key's bucket and returns the key's ``Tenant``. The key itself is never
logged or stored; problems name only what was wrong with it.
"""

from __future__ import annotations

from functools import lru_cache

from fastapi import Request

from app.config import get_settings
from app.db import get_read_sessionmaker
from app.models import Tenant
from app.problems import ProblemError
from app.ratelimit import TokenBuckets, retry_after_header
from app.services.apikeys import resolve_key

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sodm"'}


@lru_cache
def _buckets() -> TokenBuckets:
    return TokenBuckets(get_settings().rate_limit_per_minute)


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


def current_tenant(request: Request) -> Tenant:
    """FastAPI dependency: the tenant owning a valid, unrevoked key (else 401; 429 when the
    key's rate limit is exhausted)."""
    key = bearer_key(request)
    with get_read_sessionmaker()() as session:
        found = resolve_key(session, key)
    if found is None:
        raise _unauthorized("the API key is unknown, malformed or revoked")
    api_key, tenant = found
    wait = _buckets().take(api_key.id)
    if wait > 0:
        raise ProblemError(429, "Too many requests",
                           detail=f"rate limit of {_buckets().per_minute} requests per minute "
                                  "for this key exceeded", type="rate-limited",
                           headers={"Retry-After": retry_after_header(wait)},
                           retry_after_seconds=round(wait, 3))
    request.state.tenant_id = tenant.id
    request.state.key_prefix = api_key.prefix
    return tenant
