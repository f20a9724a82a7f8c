"""Request ids, worker liveness and the waiting notice, through the in-process API on the
real Postgres: every answer carries ``X-Request-ID`` (the caller's when acceptable), the job
keeps it, ``/workers`` and ``/readyz`` count the workers whose heartbeat is recent, and a
QUEUED job says when no live worker will take it."""

from __future__ import annotations

import io
import json
import lzma
import uuid
from datetime import timedelta
from pathlib import Path

from sqlalchemy import delete

from app.config import get_settings
from app.db import session_scope
from app.models import Job, Worker, utcnow
from app.services.workers import NO_WORKER


def test_every_answer_carries_a_request_id(api, api_as) -> None:
    mine = api.get("/datasets", headers={"X-Request-ID": "trace-42.a:b"})
    assert mine.status_code == 200 and mine.headers["x-request-id"] == "trace-42.a:b"
    fresh = {api.get("/datasets").headers["x-request-id"] for _ in range(2)}
    assert len(fresh) == 2 and all(len(r) == 32 for r in fresh)
    bad = api.get("/datasets", headers={"X-Request-ID": "has spaces and {braces}"})
    assert bad.headers["x-request-id"] != "has spaces and {braces}"
    # problem answers too: 401 without a key, 404, 422
    assert api_as(None).get("/datasets", headers={"X-Request-ID": "r401"}).headers[
        "x-request-id"] == "r401"
    assert api.get("/jobs/" + str(uuid.uuid4()), headers={"X-Request-ID": "r404"}).headers[
        "x-request-id"] == "r404"


def test_queued_job_says_no_live_worker_until_one_beats(api, api_as, make_tenant,
                                                        datasets_dir: Path,
                                                        private_queue: str) -> None:
    text = lzma.decompress((datasets_dir / "heart_scale.xz").read_bytes())
    ds = api.post("/datasets", files={"file": ("heart", io.BytesIO(text))},
                  data={"format": "libsvm"}).json()
    r = api.post("/train", json={"dataset_id": ds["id"], "algorithm": "odm"},
                 headers={"X-Request-ID": "train-req-1"})
    assert r.status_code == 202 and r.headers["x-request-id"] == "train-req-1"
    job = r.json()
    assert job["request_id"] == "train-req-1"
    assert api.get(f"/jobs/{job['id']}").json()["waiting"] == NO_WORKER
    status = api.get("/workers").json()
    assert status["live"] == 0 and status["queued_jobs"] >= 1
    other = api_as(make_tenant()[1]).get("/workers").json()  # another tenant's jobs: not theirs
    assert other["queued_jobs"] == 0 and other["running_jobs"] == 0
    assert api.get("/readyz").json()["workers"] == {"live": 0}

    period = get_settings().worker_heartbeat_seconds
    with session_scope() as s:  # a heartbeat row as worker.liveness writes it
        s.add(Worker(id="host-a:1", hostname="host-a", pid=1, queue=private_queue,
                     concurrency=2, started_at=utcnow(), last_seen=utcnow()))
    try:
        assert api.get(f"/jobs/{job['id']}").json()["waiting"] is None
        status = api.get("/workers").json()
        assert status["live"] == 1 and status["slots"] == 2 and status["last_seen"]
        # counts only: no host name or process id reaches a tenant
        assert "host-a" not in json.dumps(status) and set(status) == {
            "live", "slots", "last_seen", "queued_jobs", "running_jobs"}
        assert api.get("/readyz").json()["workers"] == {"live": 1}
        with session_scope() as s:  # three periods without a beat: dead
            s.get(Worker, "host-a:1").last_seen = utcnow() - timedelta(seconds=3.5 * period)
        assert api.get("/workers").json()["live"] == 0
        listed = api.get("/jobs", params={"state": "QUEUED"}).json()["items"]
        assert next(j for j in listed if j["id"] == job["id"])["waiting"] == NO_WORKER
    finally:
        with session_scope() as s:
            s.execute(delete(Worker).where(Worker.id == "host-a:1"))
            s.get(Job, job["id"]).state = "CANCELLED"


def test_access_lines_name_the_request_and_can_be_turned_off(caplog) -> None:
    """One ``sodm.access`` line per request with its id; none with access logs off
    (``SODM_ACCESS_LOG=0``, what ``sodm serve --no-access-log`` sets)."""
    import logging

    from fastapi.testclient import TestClient

    from app.logs import configure
    from app.main import create_app

    app = create_app()
    try:
        with caplog.at_level(logging.INFO, logger="sodm.access"), TestClient(app) as c:
            c.get("/livez", headers={"X-Request-ID": "access-on"})
            configure(access=False)
            c.get("/livez", headers={"X-Request-ID": "access-off"})
    finally:
        configure()
    lines = [r for r in caplog.records if r.name == "sodm.access"]
    assert "access-on" in caplog.text and "access-off" not in caplog.text, caplog.text
    assert len(lines) == 1
