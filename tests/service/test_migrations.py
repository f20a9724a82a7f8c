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

from app.core.orm import Base, Dataset, Tenant
from migrations import alembic_config
from tests.fixtures.stack import REPO_ROOT, create_database, reset_app_caches

TABLES = {"tenants", "api_keys", "datasets", "jobs", "models", "model_blobs", "model_tags",
          "model_aliases", "workers"}


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


def _old_layout_model(conn, tenant: str, n: int, rel: str, sha: str) -> str:
    """A model row of the layout before 0011 (its bytes in a file named by ``file_path``)."""
    from sqlalchemy import text

    ids = {k: f"{k[0]}{n:035d}" for k in ("dataset", "job", "model")}
    conn.execute(text(
        "INSERT INTO datasets (id, tenant_id, name, format, n_rows, n_features, classes, "
        "sparse, storage_path, size_bytes, sha256, created_at) VALUES (:d, :t, 'd', 'csv', 1, "
        "1, '{}', false, 'x', 1, '', now())"), {"d": ids["dataset"], "t": tenant})
    conn.execute(text(
        "INSERT INTO jobs (id, tenant_id, dataset_id, algorithm, backend, params, request, "
        "state, progress_fraction, progress_message, history, attempt, max_attempts, "
        "created_at, updated_at) VALUES (:j, :t, :d, 'odm', 'local', '{}', '{}', "
        "'SUCCEEDED', 1, '', '[]', 1, 3, now(), now())"),
        {"j": ids["job"], "t": tenant, "d": ids["dataset"]})
    conn.execute(text(
        "INSERT INTO models (id, tenant_id, job_id, dataset_id, name, version, algorithm, "
        "backend, params, metrics, margin, n_features, classes, n_support_vectors, "
        "train_seconds, file_path, file_sha256, created_at) VALUES (:m, :t, :j, :d, 'm', :n, "
        "'odm', 'local', '{}', '{}', '{}', 2, '[0, 1]', 1, 0, :p, :s, now())"),
        {"m": ids["model"], "t": tenant, "j": ids["job"], "d": ids["dataset"], "n": n,
         "p": rel, "s": sha})
    return ids["model"]


def test_0011_moves_model_files_into_postgres_and_back(empty_pg: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Upgrading past 0011 copies each old-layout model file whose bytes match its sha256
    into ``model_blobs`` (a missing or altered file is not copied) and drops ``file_path``;
    the model then loads from Postgres alone. Downgrading writes the bytes back."""
    import hashlib

    import numpy as np
    from sqlalchemy import text

    from app.core.config import get_settings
    from solver import ODMClassifier
    from solver.io.model_io import dumps

    monkeypatch.setenv("SODM_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    cfg = alembic_config(empty_pg)
    command.upgrade(cfg, "0010")
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.1, 0.9], [0.9, 0.2]])
    data = dumps(ODMClassifier(kernel="linear").fit(X, [0, 1, 0, 1]))
    sha = hashlib.sha256(data).hexdigest()
    (tmp_path / "models").mkdir()
    engine = create_engine(empty_pg, poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO tenants (id, name, created_at) "
                              "VALUES ('t1', 'one', now())"))
            good = _old_layout_model(conn, "t1", 1, "models/good.sodm", sha)
            altered = _old_layout_model(conn, "t1", 2, "models/altered.sodm", sha)
            missing = _old_layout_model(conn, "t1", 3, "models/missing.sodm", sha)
        (tmp_path / "models" / "good.sodm").write_bytes(data)
        (tmp_path / "models" / "altered.sodm").write_bytes(data[:-1] + b"x")
        command.upgrade(cfg, "head")
        with engine.connect() as conn:
            stored = dict(conn.execute(text("SELECT model_id, data FROM model_blobs")).all())
        assert set(stored) == {good} and bytes(stored[good]) == data
        assert "file_path" not in {c["name"] for c in inspect(engine).get_columns("models")}
        assert _diff(empty_pg) == []
        monkeypatch.setenv("DATABASE_URL", empty_pg)
        reset_app_caches()
        from app.services.model_registry import model_store

        assert model_store.load(good, sha).predict(X).tolist() == [0, 1, 0, 1]
        for gone in (altered, missing):
            with pytest.raises(Exception, match="no stored file"):
                model_store.load(gone, sha)
        (tmp_path / "models" / "good.sodm").unlink()
        command.downgrade(cfg, "0010")
        assert (tmp_path / "models" / f"{good}.sodm").read_bytes() == data
        with engine.connect() as conn:
            paths = dict(conn.execute(text("SELECT id, file_path FROM models")).all())
        assert paths[good] == f"models/{good}.sodm"
    finally:
        engine.dispose()
        monkeypatch.undo()
        reset_app_caches()
