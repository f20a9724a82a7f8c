"""Fixtures of the reliability tests: stoppable TCP proxies in front of the shared Postgres
and Redis (so an outage is simulated for the processes behind the proxy only), a direct
database engine for assertions, and the shared datasets uploaded once per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from tests.fixtures.services import postgres, redis_server
from tests.reliability.proxy import TcpProxy
from tests.service.jobs_helpers import upload_as


def _proxy(host: str, port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(host, port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def pg_proxy() -> Iterator[TcpProxy]:
    """A proxy to the tests' Postgres server."""
    yield from _proxy(postgres().host, postgres().port)


@pytest.fixture
def redis_proxy() -> Iterator[TcpProxy]:
    """A proxy to the tests' Redis server."""
    yield from _proxy(redis_server().host, redis_server().port)


def via(url: str, proxy: TcpProxy, _port: int | None = None) -> str:
    """``url`` with the proxied server's address replaced by the proxy's."""
    host, port = proxy.target
    assert f"{host}:{port}" in url, url
    return url.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}", 1)


@pytest.fixture(scope="module")
def db(pg_url: str) -> Iterator[Engine]:
    engine = create_engine(pg_url)
    yield engine
    engine.dispose()


def one(db: Engine, sql: str, **params: Any) -> Any:
    with db.connect() as c:
        return c.execute(text(sql), params).scalar()


@pytest.fixture(scope="module")
def heart(api_server, tenant, datasets_dir) -> dict[str, Any]:
    return upload_as(api_server, tenant, datasets_dir, "heart_scale")


@pytest.fixture(scope="module")
def guide(api_server, tenant, datasets_dir) -> dict[str, Any]:
    """svmguide1: big enough for jobs that run for seconds."""
    return upload_as(api_server, tenant, datasets_dir, "svmguide1")
