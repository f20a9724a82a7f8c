"""Alembic migrations on real Postgres (and the embedded SQLite): upgrade from empty,
downgrade/upgrade round trip, no drift between the ORM models and the migrations, and
concurrent ``sodm migrate`` runs serialised by the advisory lock."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, pool
from sqlalchemy.orm import Session

from app.models import Base, Dataset, Tenant
from migrations import alembic_config
from tests.fixtures.stack import REPO_ROOT, create_database

TABLES = {"tenants", "api_keys", "datasets", "jobs", "models", "model_tags", "model_aliases",
          "workers"}


@pytest.fixture
def empty_pg() -> Iterator[str]:
    url, drop = create_database("sodm_mig_")
    try:
        yield url
    finally:
        drop()


def _tables(url: str) -> set[str]:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _diff(url: str) -> list:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return compare_metadata(ctx, Base.metadata)
    finally:
        engine.dispose()


def _current(url: str) -> str | None:
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def test_single_head() -> None:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert len(heads) == 1


def test_upgrade_round_trip_and_no_drift_on_postgres(empty_pg: str) -> None:
    cfg = alembic_config(empty_pg)
    head = ScriptDirectory.from_config(cfg).get_current_head()
    assert _tables(empty_pg) == set()
    command.upgrade(cfg, "head")
    assert _tables(empty_pg) >= TABLES
    assert _current(empty_pg) == head
    assert _diff(empty_pg) == []
    command.check(cfg)  # raises when autogenerate would produce operations
    command.downgrade(cfg, "base")
    assert _tables(empty_pg) <= {"alembic_version"}
    command.upgrade(cfg, "head")
    assert _tables(empty_pg) >= TABLES
    assert _diff(empty_pg) == []


def test_dataset_sizes_past_two_gib_are_stored(empty_pg: str) -> None:
    """``datasets.size_bytes`` is 64-bit: a 5 GiB upload's size round-trips (a 32-bit
    column refuses it with a numeric-out-of-range error)."""
    command.upgrade(alembic_config(empty_pg), "head")
    engine = create_engine(empty_pg, poolclass=pool.NullPool)
    size = 5 * 2**30
    try:
        with Session(engine) as s:
            tenant = Tenant(name="big")
            s.add(tenant)
            s.flush()
            ds = Dataset(tenant_id=tenant.id, name="big", format="csv", n_rows=1,
                         n_features=1, classes={"0": 1}, storage_path="x", size_bytes=size)
            s.add(ds)
            s.commit()
            ds_id = ds.id
        with Session(engine) as s:
            assert s.get(Dataset, ds_id).size_bytes == size
    finally:
        engine.dispose()


def test_round_trip_on_embedded_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sodm.db'}"
    cfg = alembic_config(url)
    command.upgrade(cfg, "head")
    assert _tables(url) >= TABLES
    assert _diff(url) == []
    command.downgrade(cfg, "base")
    assert _tables(url) <= {"alembic_version"}
    command.upgrade(cfg, "head")
    assert _tables(url) >= TABLES


def test_concurrent_migrate_commands_serialise(empty_pg: str) -> None:
    env = {**os.environ, "DATABASE_URL": empty_pg}
    procs = [subprocess.Popen([sys.executable, "-m", "app.cli", "migrate"], cwd=REPO_ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert sum("Running upgrade" in o for o in outs) == 1  # the others found head already
    assert _tables(empty_pg) >= TABLES
    assert _diff(empty_pg) == []
