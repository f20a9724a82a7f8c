"""Issue 36, nothing left behind: killing the API (SIGKILL, its whole process group: the
forkserver and the parsing child too) mid-upload or mid-parse leaves no file and no row
stuck in ``parsing`` for more than a minute; killing the API alone loses no parse; DELETE
removes a dataset's files, also while it is parsed (the parse stops).

A second uvicorn sweeps (``SODM_REAPER_INTERVAL_SECONDS=1``: its ingest sweep thread), as
any API process or worker does; the victim is another uvicorn on the same database and
data directory."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from app.services.data.process_owner import Owner
from tests.reliability.conftest import one
from tests.reliability.test_ingest_fair import LINES, SlowUpload, _client, _wait_for, _warm

SWEEP_BOUND_SECONDS = 60.0  # "within a minute of the parser's death"


@pytest.fixture(scope="module")
def big() -> bytes:
    """About 120 MB of valid lines from a small gzip: a parse of many seconds."""
    buf = io.BytesIO()
    block = LINES * 20_000
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6) as gz:
        for _ in range(120_000_000 // len(block)):
            gz.write(block)
    return buf.getvalue()


@pytest.fixture
def sweeper(start_api, make_tenant) -> Any:
    server = start_api(SODM_REAPER_INTERVAL_SECONDS="1")
    _warm(server.url, make_tenant)
    return server


def _kill_group(server: Any) -> None:
    os.killpg(server.proc.pid, signal.SIGKILL)  # uvicorn runs in a session of its own
    server.proc.wait(30)


def _data(stack_env: dict[str, str]) -> Path:
    return Path(stack_env["SODM_DATA_DIR"])


def _parsing_in_child(db: Engine, dataset_id: str, api_pid: int) -> int | None:
    """The pid of the child parsing the dataset, once it has taken the row over."""
    owner = Owner.parse(one(db, "select ingest_owner from datasets where id = :i "
                                "and parse_started_at is not null", i=dataset_id))
    return owner.pid if owner is not None and owner.pid != api_pid else None


def _parse_in_flight(start_api, make_tenant, db: Engine, big: bytes) -> tuple[Any, str, str, int]:
    """A fresh API process parsing ``big`` (202): (server, key, dataset id, child pid)."""
    victim = start_api()
    _warm(victim.url, make_tenant)
    _, key = make_tenant()
    with _client(victim.url, key) as c:
        r = c.post("/datasets", params={"wait": 0}, files={"file": ("big.libsvm.gz", big)})
        assert r.status_code == 202, r.text
    dataset_id = r.json()["id"]
    child = _wait_for(lambda: _parsing_in_child(db, dataset_id, victim.proc.pid), 120,
                      "the parse never started")
    return victim, key, dataset_id, child


def test_killed_mid_upload_leaves_no_file(start_api, sweeper, make_tenant, db,
                                          stack_env) -> None:
    """SIGKILL of the group while a body arrives: the upload directory is removed by
    another API process's sweep within a minute; no row."""
    victim = start_api()
    tenant_id, key = make_tenant()
    tmp = _data(stack_env) / "tmp"
    before = set(tmp.glob("upload-*"))
    slow = SlowUpload(victim.url, key, LINES * 1000)
    slow.start()
    try:
        [upload] = _wait_for(lambda: [p for p in set(tmp.glob("upload-*")) - before
                                      if (p / "upload").exists()], 60,
                             "the body never reached disk")
        _kill_group(victim)
        t0 = time.monotonic()
        _wait_for(lambda: not upload.exists(), SWEEP_BOUND_SECONDS,
                  f"{upload} outlived its API process by a minute")
    finally:
        slow.abandon()
    assert time.monotonic() - t0 < SWEEP_BOUND_SECONDS
    assert one(db, "select count(*) from datasets where tenant_id = :t", t=tenant_id) == 0


def test_killed_mid_parse_fails_the_row_and_leaves_no_file(start_api, sweeper, make_tenant,
                                                           db, stack_env, big: bytes) -> None:
    """SIGKILL of the group while the child parses: the row reads failed
    ``ingest-interrupted`` and the upload directory is gone within a minute."""
    victim, key, dataset_id, child = _parse_in_flight(start_api, make_tenant, db, big)
    upload = _data(stack_env) / "tmp" / f"upload-{dataset_id}"
    assert upload.is_dir()
    _kill_group(victim)
    t0 = time.monotonic()
    _wait_for(lambda: not Path(f"/proc/{child}").exists(), 30, "the child outlived SIGKILL")
    with _client(sweeper.url, key) as c:
        body = _wait_for(lambda: (b := c.get(f"/datasets/{dataset_id}").json())["state"]
                         == "failed" and b, SWEEP_BOUND_SECONDS,
                         "the row stayed parsing a minute after its parser died")
        assert body["problem"]["type"].endswith("/ingest-interrupted"), body
        assert body["stored_bytes"] == 0
        _wait_for(lambda: not upload.exists(), SWEEP_BOUND_SECONDS, f"{upload} left behind")
        assert time.monotonic() - t0 < SWEEP_BOUND_SECONDS
        assert not (_data(stack_env) / "datasets" / dataset_id).exists()
        assert c.delete(f"/datasets/{dataset_id}").status_code == 204


def test_the_api_killed_alone_loses_no_parse(start_api, sweeper, make_tenant, db, stack_env,
                                             big: bytes) -> None:
    """SIGKILL to the API process only: its parsing child outlives it, stores the dataset
    and removes its upload directory; the sweep leaves the live child's row alone."""
    victim, key, dataset_id, _ = _parse_in_flight(start_api, make_tenant, db, big)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(30)
    try:
        with _client(sweeper.url, key) as c:
            body = _wait_for(lambda: (b := c.get(f"/datasets/{dataset_id}").json())["state"]
                             != "parsing" and b, 600, "the orphaned child never finished")
        assert body["state"] == "ready", body
        assert body["n_rows"] == 2 * 20_000 * (120_000_000 // (len(LINES) * 20_000))
        _wait_for(lambda: not (_data(stack_env) / "tmp" / f"upload-{dataset_id}").exists(),
                  30, "the child left its upload directory")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim.proc.pid, signal.SIGKILL)  # what is left of its group


def test_delete_removes_the_files_also_while_parsing(start_api, make_tenant, db, stack_env,
                                                     big: bytes) -> None:
    """DELETE of a ready dataset removes ``datasets/{id}``; DELETE while it is parsed
    removes its upload directory, and the parse stops at its next heartbeat (its process
    exits, removing what it wrote meanwhile; no dataset files appear)."""
    server, key, dataset_id, child = _parse_in_flight(start_api, make_tenant, db, big)
    data = _data(stack_env)
    with _client(server.url, key) as c:
        assert c.delete(f"/datasets/{dataset_id}").status_code == 204
        _wait_for(lambda: not Path(f"/proc/{child}").exists(), 60,
                  "the parse of a deleted dataset went on")
        assert c.get(f"/datasets/{dataset_id}").status_code == 404
        r = c.post("/datasets", files={"file": ("s.libsvm", LINES)})
        assert r.status_code == 201, r.text
        ready = r.json()["id"]
        assert (data / "datasets" / ready).is_dir()
        assert c.delete(f"/datasets/{ready}").status_code == 204
        assert not (data / "datasets" / ready).exists()
    assert not (data / "datasets" / dataset_id).exists()
    assert not (data / "tmp" / f"upload-{dataset_id}").exists()
