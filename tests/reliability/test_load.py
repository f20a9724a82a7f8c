"""Lean load test (the full run is ``python -m bench.service_load``, numbers in
docs/reliability.md): concurrent /predict clients for a few seconds get no error, and a
burst of concurrent POST /train submissions ends with every job SUCCEEDED exactly once
(no lost job, no duplicate, one model each). No latency bound here: bench/ reports it."""

from __future__ import annotations

import httpx

from bench.service_load import burst_report, predict_load, train_burst
from tests.fixtures.aio import run_async
from tests.service.jobs_helpers import submit, wait_job

CLIENTS, SECONDS, BURST = 20, 4.0, 20


def test_concurrent_predict_and_training_burst(client: httpx.Client, api_server, tenant,
                                               worker, heart, pg_url) -> None:
    job = wait_job(client, submit(client, {"dataset_id": heart["id"], "algorithm": "sodm",
                                           "params": {"kernel": "rbf"},
                                           "test_fraction": 0.2})["id"])
    assert job["state"] == "SUCCEEDED"
    rows = [[0.1] * heart["n_features"]] * 10
    out = run_async(predict_load(api_server, tenant[1], job["model_id"], rows, CLIENTS,
                                 SECONDS))
    assert out["errors"] == 0 and out["statuses"] == {"200": out["requests"]}, out
    assert out["requests"] >= CLIENTS  # every client got at least one answer

    before = client.get("/jobs", params={"limit": 500}).json()["items"]
    ids = run_async(train_burst(api_server, tenant[1], heart["id"], BURST))
    report = burst_report(client, pg_url, tenant[0], ids, timeout=600)
    assert report["distinct_ids"] == BURST and report["rows"] == BURST
    assert report["tenant_jobs"] == len(before) + BURST  # nothing lost, nothing extra
    assert report["states"] == {"SUCCEEDED": BURST}, report
    assert report["models_per_job"] == {1: BURST}, report
    assert report["max_attempt"] == 1


def test_burst_of_100_submissions_all_accepted(client: httpx.Client, api_server, tenant,
                                               heart, pg_url) -> None:
    """100 concurrent POST /train on one uvicorn process (more than its 40 threadpool tokens
    and 30 pooled connections): all 202, none lost (this was 25-45 % 500s from a pool
    deadlock, see app/core/db.py:releasing). They are cancelled at once (the module's worker may
    have started or finished a few): every job ends in one terminal state, with a model
    exactly when it SUCCEEDED."""
    before = client.get("/jobs", params={"limit": 500}).json()["items"]
    ids = run_async(train_burst(api_server, tenant[1], heart["id"], 100))
    assert len(set(ids)) == 100
    for job_id in ids:
        r = client.post(f"/jobs/{job_id}/cancel")
        assert r.status_code in (200, 202, 409), r.text
    report = burst_report(client, pg_url, tenant[0], ids, timeout=300)
    assert report["rows"] == 100 and report["tenant_jobs"] == len(before) + 100
    assert set(report["states"]) <= {"CANCELLED", "SUCCEEDED"}, report
    n_succeeded = report["states"].get("SUCCEEDED", 0)
    assert report["models_per_job"] == ({0: 100 - n_succeeded, 1: n_succeeded}
                                        if n_succeeded else {0: 100}), report
