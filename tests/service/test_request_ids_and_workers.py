"""Request ids, worker liveness and the waiting notice, through the in-process API on the
real Postgres: every answer carries ``X-Request-ID`` (one the API made; the caller's is only
logged, as ``client_request_id``), the job keeps it, ``/workers`` and ``/readyz`` count the
workers whose heartbeat is recent, and a QUEUED job says when no live worker will take it."""

from __future__ import annotations

import io
import json
import lzma
import uuid
from datetime import timedelta
from pathlib import Path

from sqlalchemy import delete

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.orm import Job, Worker, utcnow
from app.services.job_queue.worker_status import NO_WORKER


def test_every_answer_carries_a_request_id_of_our_own(api, api_as, caplog) -> None:
    """Every answer's ``X-Request-ID`` is a fresh id the API made, never the caller's (one
    tenant cannot make its lines or jobs carry another's id); the caller's acceptable
    ``X-Request-ID`` is logged beside it as ``client_request_id``."""
    import logging

    with caplog.at_level(logging.INFO, logger="sodm.access"):
        mine = api.get("/datasets", headers={"X-Request-ID": "trace-42.a:b"})
    assert mine.status_code == 200
    ours = mine.headers["x-request-id"]
    assert ours != "trace-42.a:b" and len(ours) == 32
    line = next(r for r in caplog.records if r.name == "sodm.access"
                and r.sodm_fields.get("client_request_id") == "trace-42.a:b")
    assert f"request_id={ours}" in line.getMessage()
    fresh = {api.get("/datasets").headers["x-request-id"] for _ in range(2)}
    assert len(fresh) == 2 and all(len(r) == 32 for r in fresh)
    bad = api.get("/datasets", headers={"X-Request-ID": "has spaces and {braces}"})
    assert bad.headers["x-request-id"] != "has spaces and {braces}"
    # problem answers too: 401 without a key, 404, 422
    for r in (api_as(None).get("/datasets", headers={"X-Request-ID": "r401"}),
              api.get("/jobs/" + str(uuid.uuid4()), headers={"X-Request-ID": "r404"})):
        assert r.status_code in (401, 404) and len(r.headers["x-request-id"]) == 32


def test_another_tenants_request_id_is_never_recorded(api, api_as, make_tenant,
                                                      datasets_dir: Path,
                                                      private_queue: str) -> None:
    """Tenant B sends tenant A's request id as its own X-Request-ID: B's job and log lines
    get an id of their own; A's id stays A's."""
    text = lzma.decompress((datasets_dir / "heart_scale.xz").read_bytes())
    ds = api.post("/datasets", files={"file": ("heart", io.BytesIO(text))},
                  data={"format": "libsvm"}).json()
    a = api.post("/train", json={"dataset_id": ds["id"], "algorithm": "odm"})
    rid_a = a.headers["x-request-id"]
    assert a.status_code == 202 and a.json()["request_id"] == rid_a
    other = api_as(make_tenant()[1])
    b = other.post("/train", json={"dataset_id": ds["id"], "algorithm": "odm"},
                   headers={"X-Request-ID": rid_a})
    assert b.status_code == 404  # not B's dataset, and B's answer is not A's id
    assert b.headers["x-request-id"] != rid_a
    ds_b = other.post("/datasets", files={"file": ("heart", io.BytesIO(text))},
                      data={"format": "libsvm"}, headers={"X-Request-ID": rid_a}).json()
    job_b = other.post("/train", json={"dataset_id": ds_b["id"], "algorithm": "odm"},
                       headers={"X-Request-ID": rid_a})
    assert job_b.status_code == 202
    assert job_b.json()["request_id"] == job_b.headers["x-request-id"] != rid_a
    with session_scope() as s:
        for job_id in (a.json()["id"], job_b.json()["id"]):
            s.get(Job, job_id).state = "CANCELLED"


def test_queued_job_says_no_live_worker_until_one_beats(api, api_as, make_tenant,
                                                        datasets_dir: Path,
                                                        private_queue: str) -> None:
    text = lzma.decompress((datasets_dir / "heart_scale.xz").read_bytes())
    ds = api.post("/datasets", files={"file": ("heart", io.BytesIO(text))},
                  data={"format": "libsvm"}).json()
    r = api.post("/train", json={"dataset_id": ds["id"], "algorithm": "odm"},
                 headers={"X-Request-ID": "train-req-1"})
    assert r.status_code == 202
    job = r.json()
    assert job["request_id"] == r.headers["x-request-id"] != "train-req-1"
    assert api.get(f"/jobs/{job['id']}").json()["waiting"] == NO_WORKER
    status = api.get("/workers").json()
    assert status["live"] == 0 and status["queued_jobs"] >= 1
    other = api_as(make_tenant()[1]).get("/workers").json()  # another tenant's jobs: not theirs
    assert other["queued_jobs"] == 0 and other["running_jobs"] == 0
    assert api.get("/readyz").json()["workers"] == {"live": 0}

    period = get_settings().worker_heartbeat_seconds
    with session_scope() as s:  # a heartbeat row as worker.lifecycle.liveness writes it
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

    from app.core.logs import configure
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
