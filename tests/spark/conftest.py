"""Spark test helpers: settings objects for each way of reaching Spark."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.core.config import Settings
from worker.spark.spark_backend import stop_classic_session


def settings_for(*, master: str | None = None, remote: str | None = None) -> Settings:
    """Service settings that point the Spark backend at ``master`` or ``remote``."""
    env = {}
    if master:
        env["SODM_SPARK_MASTER"] = master
    if remote:
        env["SODM_SPARK_REMOTE"] = remote
    return Settings(**env)


@pytest.fixture(scope="module")
def local_settings(spark_local_master: str) -> Iterator[Settings]:
    yield settings_for(master=spark_local_master)
    stop_classic_session()


@pytest.fixture(scope="module")
def standalone_settings(spark_standalone: str) -> Iterator[Settings]:
    """Classic sessions against the standalone cluster; stopped before the cluster is."""
    yield settings_for(master=spark_standalone)
    stop_classic_session()


@pytest.fixture(scope="module")
def connect_settings(spark_connect_server: str) -> Settings:
    return settings_for(remote=spark_connect_server)
