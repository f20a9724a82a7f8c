"""Following a job from request to worker, on a real uvicorn and a real Celery worker that
share a Prometheus multiprocess directory and log JSON: the job's log lines are found by its
request id in both processes, the worker's metrics appear in the API's one scrape, and the
worker's heartbeat shows in /readyz and /workers."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.jobs_helpers import submit, upload, wait_job

METRICS_TOKEN = "scrape-token-for-the-test"


def _json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON records of a log, less a last line still being written."""
    out = []
    for line in text[:text.rfind("\n") + 1].splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def _value(scrape: str, name: str, labels: str = "") -> float | None:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+-]+)$", scrape, re.M)
    return float(m.group(1)) if m else None


def _sample(scrape: str, name: str, labels: str = "") -> float:
    value = _value(scrape, name, labels)
    assert value is not None, f"{name}{labels} not in the scrape"
    return value


def _scrape_once_counted(client: httpx.Client, name: str, timeout: float = 30.0) -> str:
    """The API's scrape once ``name`` is at least 1: the worker counts a job after it
    commits the job's state, so the scrape right after SUCCEEDED may not hold it yet."""
    deadline = time.monotonic() + timeout
    while True:
        scrape = client.get("/metrics",
                            headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
        if (_value(scrape, name) or 0) >= 1 or time.monotonic() > deadline:
            return scrape
        time.sleep(0.2)


@pytest.fixture(scope="module")
def observed(tmp_path_factory, start_api_module, start_worker_module, tenant
             ) -> tuple[Any, Any, httpx.Client]:
    shared = {"SODM_LOG_FORMAT": "json", "SODM_METRICS_TOKEN": METRICS_TOKEN,
              "PROMETHEUS_MULTIPROC_DIR": str(tmp_path_factory.mktemp("prometheus")),
              "SODM_WORKER_HEARTBEAT_SECONDS": "1"}
    api = start_api_module(**shared)
    worker = start_worker_module(**shared)
    with httpx.Client(base_url=api.url, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        yield api, worker, c


def test_a_jobs_log_lines_are_found_by_its_request_id_in_both_processes(
        observed, datasets_dir: Path) -> None:
    api, worker, client = observed
    ds = upload(client, datasets_dir, "heart_scale")
    theirs = "follow-me-0001"
    job = submit(client, {"dataset_id": ds["id"], "algorithm": "odm"},
                 **{"X-Request-ID": theirs})
    rid = job["request_id"]  # the API's own id; the caller's is logged beside it
    assert rid and rid != theirs
    done = wait_job(client, job["id"], timeout=180)
    assert done["state"] == "SUCCEEDED", done["error"]

    api_lines = [r for r in _json_lines(api.log_text()) if r.get("request_id") == rid]
    assert any(r.get("path") == "/train" and r.get("status") == 202
               and r.get("client_request_id") == theirs for r in api_lines), \
        api.log_text()[-3000:]
    worker_lines = _json_lines(worker.wait_log(
        re.escape(f"job {job['id']} attempt 1 ended SUCCEEDED")))
    by_rid = [r for r in worker_lines if r.get("request_id") == rid]
    events = " | ".join(r["event"] for r in by_rid)
    assert "claimed" in events and "ended SUCCEEDED" in events, events
    for r in worker_lines:  # every line of the job's run carries the three ids
        if r.get("job_id") == job["id"] and "attempt" in r:
            assert r["request_id"] == rid and r["attempt"] == 1, r
    assert all(r["job_id"] == job["id"] for r in by_rid)
    assert all(r.get("level") and r.get("timestamp") for r in by_rid)


def test_worker_metrics_and_liveness_in_the_apis_one_scrape(observed, datasets_dir) -> None:
    api, worker, client = observed
    ready = client.get("/readyz").json()
    assert ready["workers"] == {"live": 1}
    status = client.get("/workers").json()
    assert status["live"] == 1 and status["workers"][0]["pid"] == worker.proc.pid
    ds = upload(client, datasets_dir, "heart_scale")
    job = submit(client, {"dataset_id": ds["id"], "algorithm": "odm"})
    assert wait_job(client, job["id"], timeout=180)["state"] == "SUCCEEDED"
    scrape = _scrape_once_counted(client, "sodm_worker_fit_seconds_count")
    assert _sample(scrape, "sodm_worker_jobs_total", '{outcome="SUCCEEDED"}') >= 1
    assert _sample(scrape, "sodm_worker_attempts_total", '{attempt="1"}') >= 1
    assert _sample(scrape, "sodm_worker_job_duration_seconds_count",
                   '{outcome="SUCCEEDED"}') >= 1
    assert _sample(scrape, "sodm_worker_queue_wait_seconds_count") >= 1
    assert _sample(scrape, "sodm_worker_fit_seconds_count") >= 1
    assert _sample(scrape, "sodm_workers_live") == 1
    assert _sample(scrape, "sodm_job_leases") == 0
    assert _sample(scrape, "sodm_http_requests_total",
                   '{method="POST",route="/train",status="202"}') >= 1
