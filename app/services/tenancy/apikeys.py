"""Tenants and API keys: create, revoke, list, and resolve a presented key.

A key is ``sodm_`` + 32 URL-safe random characters. Only its SHA-256 hex digest is stored
(``ApiKey.key_hash``) together with a short ``prefix`` (the first 12 characters) that names it
in listings and revocation; the clear key is returned once, at creation.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from app.core.orm import ApiKey, Tenant, utcnow

KEY_PREFIX = "sodm_"
KEY_BODY_LEN = 32
PREFIX_LEN = 12
KEY_RE = re.compile(r"^sodm_[A-Za-z0-9_-]{32}$")


@dataclass(frozen=True)
class KeyInfo:
    """A key as listings show it (never the key itself)."""

    id: str
    tenant: str
    prefix: str
    name: str
    created_at: datetime
    revoked_at: datetime | None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    """A fresh random key with exactly 32 URL-safe characters after the ``sodm_`` prefix."""
    body = secrets.token_urlsafe(48)[:KEY_BODY_LEN]
    return KEY_PREFIX + body


def looks_like_key(key: str) -> bool:
    return bool(KEY_RE.match(key))


def get_or_create_tenant(session: Session, name: str) -> Tenant:
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        tenant = Tenant(name=name)
        session.add(tenant)
        session.flush()
    return tenant


def create_key(session: Session, tenant_name: str, key_name: str = "") -> tuple[Tenant, str]:
    """Create (or reuse) the tenant and a new key for it; returns (tenant, clear key).

    The caller commits."""
    tenant = get_or_create_tenant(session, tenant_name)
    key = generate_key()
    session.add(ApiKey(tenant_id=tenant.id, name=key_name, prefix=key[:PREFIX_LEN],
                       key_hash=hash_key(key)))
    session.flush()
    return tenant, key


def revoke_key(session: Session, prefix: str) -> int:
    """Revoke every live key whose prefix starts with ``prefix`` (at least 8 characters, so a
    typo cannot revoke everything); returns how many were revoked. The caller commits; the
    commit then drops the keys from every API process's key cache
    (``app.services.inference.invalidation``)."""
    if len(prefix) < 8:
        raise ValueError("give at least 8 characters of the key prefix")
    rows = session.scalars(select(ApiKey).where(ApiKey.revoked_at.is_(None))).all()
    if looks_like_key(prefix):  # a full key was given: match it by hash
        hits = [k for k in rows if k.key_hash == hash_key(prefix)]
    else:
        hits = [k for k in rows if k.prefix.startswith(prefix)]
    now = utcnow()
    for k in hits:
        k.revoked_at = now
    session.flush()
    hashes = [k.key_hash for k in hits]
    if hashes:  # every API process drops the keys from its cache once this commits
        def published(_session: Session) -> None:
            from app.services.inference import invalidation

            invalidation.publish("keys", hashes=hashes)

        event.listen(session, "after_commit", published, once=True)
    return len(hits)


def list_keys(session: Session, tenant_name: str | None = None) -> list[KeyInfo]:
    stmt = select(ApiKey, Tenant.name).join(Tenant, Tenant.id == ApiKey.tenant_id)
    if tenant_name:
        stmt = stmt.where(Tenant.name == tenant_name)
    stmt = stmt.order_by(ApiKey.created_at, ApiKey.id)
    return [KeyInfo(k.id, t, k.prefix, k.name, k.created_at, k.revoked_at)
            for k, t in session.execute(stmt).all()]


def resolve_key(session: Session, key: str) -> tuple[ApiKey, Tenant] | None:
    """The live key row and its tenant for a presented key, or None (unknown or revoked)."""
    if not looks_like_key(key):
        return None
    row = session.execute(
        select(ApiKey, Tenant).join(Tenant, Tenant.id == ApiKey.tenant_id)
        .where(ApiKey.key_hash == hash_key(key), ApiKey.revoked_at.is_(None))
    ).first()
    return (row[0], row[1]) if row else None
