"""Idempotent submission: the same Idempotency-Key and body return the same job (also when
sent concurrently), the same key with another body is a 422 problem, keys are per tenant."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.service.jobs_helpers import upload_as, wait_job


@pytest.fixture(scope="module")
def heart(api_server, tenant, datasets_dir):
    return upload_as(api_server, tenant, datasets_dir, "heart_scale")


def test_same_key_same_job(client, worker, heart):
    key = str(uuid.uuid4())
    body = {"dataset_id": heart["id"], "algorithm": "sodm", "params": {"kernel": "rbf"},
            "test_fraction": 0.2, "seed": 4}
    first = client.post("/train", json=body, headers={"Idempotency-Key": key})
    assert first.status_code == 202
    job_id = first.json()["id"]
    again = client.post("/train", json=body, headers={"Idempotency-Key": key})
    assert again.status_code in (200, 202)
    assert again.json()["id"] == job_id and again.headers["location"] == f"/jobs/{job_id}"
    # a retry after completion still answers the same job, and nothing new ran
    done = wait_job(client, job_id)
    assert done["state"] == "SUCCEEDED"
    late = client.post("/train", json=body, headers={"Idempotency-Key": key}).json()
    assert late["id"] == job_id and late["state"] == "SUCCEEDED"
    jobs = client.get("/jobs", params={"limit": 500}).json()["items"]
    assert sum(1 for j in jobs if j["request"] == done["request"]) == 1

    # same key, different body: 422 problem
    r = client.post("/train", json={**body, "seed": 5}, headers={"Idempotency-Key": key})
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["type"].endswith("/idempotency-key-reused")

    # without a key, every POST is a new job
    a = client.post("/train", json=body).json()["id"]
    b = client.post("/train", json=body).json()["id"]
    assert a != b
    for job_id in (a, b):  # leave no queued work behind for other modules' workers
        assert wait_job(client, job_id)["state"] == "SUCCEEDED"


def test_concurrent_duplicates_make_one_job(client, api_server, make_tenant, worker, heart):
    key = str(uuid.uuid4())
    body = {"dataset_id": heart["id"], "algorithm": "odm", "params": {"kernel": "linear"},
            "test_fraction": 0.3, "seed": 11}
    headers = {**client.headers, "Idempotency-Key": key}

    def post(_: int) -> httpx.Response:
        return httpx.post(f"{api_server}/train", json=body, headers=headers, timeout=60)

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(post, range(8)))
    assert all(r.status_code in (200, 202) for r in responses), [r.text for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    done = wait_job(client, responses[0].json()["id"])
    assert done["state"] == "SUCCEEDED" and done["attempt"] == 1

    # the key belongs to the tenant: another tenant's identical key is independent, and it
    # cannot use this tenant's dataset
    _, other_key = make_tenant()
    r = httpx.post(f"{api_server}/train", json=body, timeout=60,
                   headers={"Authorization": f"Bearer {other_key}", "Idempotency-Key": key})
    assert r.status_code == 404
