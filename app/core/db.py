"""SQLAlchemy engine and session factory (Postgres in production, SQLite for quick start)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, create_engine, event, func
from sqlalchemy.orm import Session, sessionmaker

from app.core.config import get_settings


@lru_cache
def get_engine() -> Engine:
    """One pooled engine per process; ``pool_pre_ping`` survives a database restart."""
    url = get_settings().resolved_database_url
    if url.startswith("sqlite"):
        get_settings().data_dir.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record) -> None:  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def db_now(session: Session) -> Any:
    """The database's clock for lease arithmetic (``now()`` inside the statement on
    Postgres, so every process's leases are measured by one clock whatever its own says;
    SQLite, the single-machine embedded stack, has no usable one: this process's)."""
    if session.get_bind().dialect.name == "postgresql":
        return func.now()
    return datetime.now(UTC)


@lru_cache
def get_sessionmaker() -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


@lru_cache
def get_read_sessionmaker() -> sessionmaker[Session]:
    """Sessions for read-only work on the same pool, in autocommit mode: each SELECT is
    its own statement, with no BEGIN before it and no ROLLBACK when the session closes
    (two round trips fewer per request on the hot ``/predict`` and authentication path)."""
    return sessionmaker(bind=get_engine().execution_options(isolation_level="AUTOCOMMIT"),
                        expire_on_commit=False)


@contextmanager
def session_scope() -> Iterator[Session]:
    """A transaction: commit on success, roll back on error. When the rollback itself fails
    (a command interrupted mid-protocol by a signal-raised exception), the connection is
    dropped and the original exception, not the rollback's, propagates."""
    session = get_sessionmaker()()
    try:
        yield session
        session.commit()
    except BaseException:
        try:
            session.rollback()
        except Exception:  # noqa: BLE001 - the original error is the one that matters
            session.invalidate()
        raise
    finally:
        session.close()


async def get_session() -> AsyncIterator[Session]:
    """FastAPI dependency: one session per request; services commit explicitly, anything
    left uncommitted is rolled back when the request ends (see also ``releasing``).

    Async on purpose: its teardown runs on the event loop, not on a threadpool token."""
    session = get_sessionmaker()()
    try:
        yield session
    finally:
        session.close()


async def get_read_session() -> AsyncIterator[Session]:
    """Like :func:`get_session`, for routes that only read (no commit possible)."""
    session = get_read_sessionmaker()()
    try:
        yield session
    finally:
        session.close()


def releasing(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a sync route endpoint so the request's ``Session`` gives its connection back as
    soon as the endpoint returns (the response body is already plain data).

    FastAPI validates a sync endpoint's response on a threadpool token. Holding a pooled
    connection until then deadlocks a burst: every token is taken by handlers waiting for
    a connection, every connection by requests waiting for a token (measured in
    docs/reliability.md)."""
    if getattr(endpoint, "_releases_session", False):
        return endpoint

    @functools.wraps(endpoint)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return endpoint(*args, **kwargs)
        finally:
            for value in kwargs.values():
                if isinstance(value, Session):
                    value.close()

    wrapper._releases_session = True  # type: ignore[attr-defined]
    return wrapper
