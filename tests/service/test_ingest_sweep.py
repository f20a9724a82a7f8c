"""The sweep of abandoned uploads (``app.services.data.ingest_sweep``) on the session's real
Postgres and data directory: which upload directories, ``tmp/`` leftovers, dataset
directories and parsing rows it takes, and which it must leave alone (a live owner, an
owner it cannot check whose files are fresh, a stored or parsing dataset)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from app.core.db import session_scope
from app.core.orm import Dataset, DatasetState, Tenant, utcnow
from app.services.data import dataset_catalog as datasets
from app.services.data import ingest_process, ingest_sweep, process_owner, upload_dirs
from app.services.data.upload_dirs import UploadDir


def _dead_token() -> str:
    """The token of a process of this machine that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        me = process_owner.me()
        stat = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[-1].split()
        token = f"{me.boot}.{me.pidns}.{proc.pid}.{stat[19]}"
        assert process_owner.alive(token) is True
    finally:
        proc.kill()
        proc.wait()
    assert process_owner.alive(token) is False
    return token


def _foreign_token() -> str:
    me = process_owner.me()
    return f"{'e' * 32}.{me.pidns}.{me.pid}.{me.start}"


def _age(path: Path, seconds: float) -> None:
    """Set the modification times of ``path`` and what is in it ``seconds`` back."""
    old = time.time() - seconds
    for p in [path, *path.rglob("*")]:
        os.utime(p, (old, old))


@pytest.fixture
def upload(stack_env: dict[str, str]) -> Iterator[Callable[[list[str] | None], UploadDir]]:
    made: list[UploadDir] = []

    def make(owners: list[str] | None) -> UploadDir:
        u = UploadDir(str(uuid.uuid4()))
        u.path.mkdir(parents=True)
        (u.path / "upload").write_bytes(b"1 1:1\n")
        if owners is not None:
            (u.path / upload_dirs.OWNERS).write_text("".join(t + "\n" for t in owners))
        made.append(u)
        return u

    yield make
    for u in made:
        u.remove()


def test_sweep_tmp_takes_orphans_only(upload, stack_env: dict[str, str]) -> None:
    """Removed: a directory whose owners are all dead here, one whose owner cannot be
    checked and whose newest file is older than ``orphan_seconds``, a stale leftover of
    another kind. Kept: a live owner (also beside a dead one), an unknown owner with fresh
    files, a directory without its owners file yet, a fresh leftover."""
    dead, me, foreign = _dead_token(), process_owner.me().token, _foreign_token()
    old = upload_dirs.orphan_seconds() + 60
    gone = [upload([dead]), upload([foreign]), upload([dead, dead])]
    _age(gone[1].path, old)
    kept = [upload([me]), upload([dead, me]), upload([foreign]), upload(None)]
    tmp = Path(stack_env["SODM_DATA_DIR"]) / "tmp"
    stale, fresh = tmp / f"{uuid.uuid4().hex}.trash", tmp / f"{uuid.uuid4().hex}.upload"
    stale.mkdir()
    (stale / "x").write_bytes(b"x")
    _age(stale, old)
    fresh.write_bytes(b"x")
    try:
        removed = set(upload_dirs.sweep_tmp())
        assert {u.path.name for u in gone} | {stale.name} <= removed
        assert not any(u.path.exists() for u in gone) and not stale.exists()
        assert all(u.path.is_dir() for u in kept) and fresh.exists()
        assert not {u.path.name for u in kept} & removed
    finally:
        fresh.unlink(missing_ok=True)


def _row(tenant_id: str, state: DatasetState, owner: str | None = None,
         deleted: bool = False) -> str:
    with session_scope() as s:
        ds = datasets.begin_dataset(s, s.get(Tenant, tenant_id), filename="x.libsvm",
                                    fmt="libsvm", name=None, sha256="", size_bytes=6)
        s.execute(update(Dataset).where(Dataset.id == ds.id).values(
            state=state, ingest_owner=owner or ds.ingest_owner,
            deleted_at=utcnow() if deleted else None))
        return ds.id


def _forget(*ids: str) -> None:
    """Soft-delete the rows a test made (the session's tenant lists its datasets)."""
    with session_scope() as s:
        s.execute(update(Dataset).where(Dataset.id.in_(ids)).values(deleted_at=utcnow()))


def _dataset_dir(stack_env: dict[str, str], dataset_id: str, age: float) -> Path:
    d = Path(stack_env["SODM_DATA_DIR"]) / "datasets" / dataset_id
    d.mkdir(parents=True)
    (d / "data.parquet").write_bytes(b"PAR1")
    _age(d, age)
    return d


def test_sweep_dataset_dirs_takes_those_of_no_live_dataset(tenant, stack_env) -> None:
    """``datasets/{id}`` of a deleted, a failed or a missing row goes; of a ready or a
    parsing row, or younger than a minute, stays."""
    t = tenant[0]
    age = ingest_sweep.DATASET_DIR_MIN_AGE_SECONDS + 30
    ready, parsing = _row(t, DatasetState.READY), _row(t, DatasetState.PARSING)
    deleted, failed = _row(t, DatasetState.READY, deleted=True), _row(t, DatasetState.FAILED)
    missing, young = str(uuid.uuid4()), str(uuid.uuid4())
    dirs = {i: _dataset_dir(stack_env, i, age) for i in (ready, parsing, deleted, failed,
                                                         missing)}
    dirs[young] = _dataset_dir(stack_env, young, 0)
    removed = set(ingest_sweep.sweep_dataset_dirs())
    assert {deleted, failed, missing} <= removed
    assert not {ready, parsing, young} & removed
    assert all(dirs[i].is_dir() for i in (ready, parsing, young))
    assert not any(dirs[i].exists() for i in (deleted, failed, missing))
    _forget(ready, parsing, deleted, failed)
    for i in (ready, parsing, young):
        datasets.remove_files(i)


def test_sweep_rows_fails_the_dead_owners_parses_and_removes_their_files(
        tenant, stack_env) -> None:
    """A parsing row whose owner died here is failed ``ingest-interrupted`` (holding no
    bytes) and its upload directory and dataset directory are removed; a live owner's row
    and directory are left alone."""
    t = tenant[0]
    dead = _dead_token()
    stuck, live = _row(t, DatasetState.PARSING, owner=dead), _row(t, DatasetState.PARSING)
    dirs = []
    for i in (stuck, live):
        u = UploadDir(i)
        u.path.mkdir(parents=True)
        (u.path / upload_dirs.OWNERS).write_text((dead if i == stuck
                                                 else process_owner.me().token) + "\n")
        dirs.append(u.path)
    half = _dataset_dir(stack_env, stuck, 0)  # renamed into place, the row not yet ready
    assert stuck in ingest_sweep.sweep_rows()
    with session_scope() as s:
        row = s.get(Dataset, stuck)
        assert row.state == DatasetState.FAILED and row.stored_bytes == 0
        assert row.problem["type"].endswith("/ingest-interrupted")
        assert s.get(Dataset, live).state == DatasetState.PARSING
    assert not dirs[0].exists() and not half.exists() and dirs[1].is_dir()
    _forget(stuck, live)
    datasets.remove_files(live)


def test_the_watcher_of_a_killed_parse_names_the_limit_over_a_sweep_that_came_first(
        tenant) -> None:
    """A child killed by its CPU limit is dead at once, so a sweep may fail its row
    ``ingest-interrupted`` before the child's watcher records why it died: the watcher's
    problem (the limit, a 413) then replaces the sweep's 503, and only that one; without
    ``over_interrupted`` a failed row keeps its problem."""
    t = tenant[0]
    limit = ingest_process.limit_problem(-signal.SIGXCPU).body()
    swept, other = _row(t, DatasetState.PARSING, owner=_dead_token()), _row(
        t, DatasetState.PARSING)
    assert swept in ingest_sweep.sweep_rows()
    assert datasets.mark_failed(swept, limit) is False  # not parsing any more
    assert datasets.mark_failed(swept, limit, over_interrupted=True) is True
    assert datasets.mark_failed(other, {"type": "about:blank", "status": 422}) is True
    assert datasets.mark_failed(other, limit, over_interrupted=True) is False
    with session_scope() as s:
        row = s.get(Dataset, swept)
        assert row.state == DatasetState.FAILED and row.problem == limit
        assert row.problem["status"] == 413 and row.problem["type"].endswith("/ingest-cpu-limit")
        assert s.get(Dataset, other).problem == {"type": "about:blank", "status": 422}
    _forget(swept, other)


def test_a_parse_child_of_a_deleted_upload_stops_quietly(upload) -> None:
    """DELETE may remove the upload directory before its parse child starts: the child's
    ``add_owner`` says so (False) instead of raising, and the child returns."""
    u = upload(["someone"])
    assert u.add_owner() is True
    assert u.owners() == ["someone", process_owner.me().token]
    u.remove()
    assert u.add_owner() is False and not u.path.exists()
