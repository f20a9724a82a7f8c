"""Worker faults on the real stack: a SIGKILLed pool child's job runs again at once (its
lease released by the worker's main process) and succeeds exactly once; a job that kills its
worker on every attempt fails after max_attempts; a job whose enqueue was lost is re-sent by
the reconciler."""

from __future__ import annotations

import os
import signal
import time

import httpx
import psutil
import pytest
from sqlalchemy import create_engine, text

from tests.service.jobs_helpers import (
    LONG_ODM,
    SECONDS_ODM,
    submit,
    upload_as,
    wait_job,
    wait_no_delivery,
)


@pytest.fixture(scope="module")
def heart(api_server, tenant, datasets_dir):
    return upload_as(api_server, tenant, datasets_dir, "heart_scale")


@pytest.fixture(scope="module")
def guide(api_server, tenant, datasets_dir):
    """svmguide1: big enough for jobs that run long."""
    return upload_as(api_server, tenant, datasets_dir, "svmguide1")


@pytest.fixture(scope="module")
def db(pg_url):
    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    yield engine
    engine.dispose()


def _kill_running_child(client, worker, job_id: str, attempt: int) -> int:
    """SIGKILL the pool child that runs ``attempt`` of the job; returns its pid."""
    job = wait_job(client, job_id, {"RUNNING"}, timeout=300,
                   pred=lambda j: j["attempt"] == attempt
                   and j["progress"]["message"] == "training")
    pids = [c.pid for c in worker.children()]
    assert len(pids) == 1
    os.kill(pids[0], signal.SIGKILL)
    assert job["attempt"] == attempt
    return pids[0]


def test_whole_worker_killed_new_worker_finishes(client, start_worker, guide, db):
    """SIGKILL the main worker process and its child (kept first in this module, before the
    module's shared worker exists): a new worker's reaper finds the expired lease, re-queues
    and runs the job once more."""
    first = start_worker()
    job = submit(client, {"dataset_id": guide["id"], "algorithm": "odm", "params": SECONDS_ODM,
                          "test_fraction": 0.2, "name": "whole-worker"})
    wait_job(client, job["id"], {"RUNNING"}, timeout=300,
             pred=lambda j: j["progress"]["message"] == "training")
    os.killpg(first.proc.pid, signal.SIGKILL)  # the worker's own process group
    first.proc.wait(timeout=10)
    killed_at = time.monotonic()
    second = start_worker()
    done = wait_job(client, job["id"], timeout=300)
    assert done["state"] == "SUCCEEDED" and done["attempt"] == 2, done
    assert time.monotonic() - killed_at < 240  # lease (4 s) + reaper period + worker start
    with db.connect() as c:
        owner = c.execute(text("select worker from jobs where id = :j"),
                          {"j": job["id"]}).scalar()
        n = c.execute(text("select count(*) from models where job_id = :j"),
                      {"j": job["id"]}).scalar()
    assert n == 1 and owner.endswith(f":{second.children()[0].pid}")


def test_killed_child_retried_and_succeeds_once(client, start_worker, guide, db):
    """The main process releases the dead child's lease as it learns of the death, so the
    requeued message is claimed at once: the second attempt starts long before the lease
    (120 s here) would expire (it used to wait for that expiry and the reaper)."""
    worker = start_worker(SODM_JOB_LEASE_SECONDS="120")
    # a job long enough to be killed mid-fit but short enough to finish on the retry
    job = submit(client, {"dataset_id": guide["id"], "algorithm": "odm", "params": SECONDS_ODM,
                          "test_fraction": 0.2, "name": "killed-once"})
    killed = _kill_running_child(client, worker, job["id"], 1)
    killed_at = time.monotonic()
    wait_job(client, job["id"], {"RUNNING", "SUCCEEDED"}, timeout=120,
             pred=lambda j: j["attempt"] == 2)
    assert time.monotonic() - killed_at < 60, "the retry waited for the lease to expire"
    worker.wait_log(rf"pool child {killed} died running job {job['id']}: .*requeued")
    done = wait_job(client, job["id"], timeout=300)
    assert done["state"] == "SUCCEEDED", done["error"]
    assert done["attempt"] == 2
    assert not psutil.pid_exists(killed) or psutil.Process(killed).status() == "zombie"
    with db.connect() as c:
        n = c.execute(text("select count(*) from models where job_id = :j"),
                      {"j": job["id"]}).scalar()
        worker_col = c.execute(text("select worker from jobs where id = :j"),
                               {"j": job["id"]}).scalar()
    assert n == 1
    assert worker_col.endswith(f":{worker.children()[0].pid}")
    models = client.get("/models", params={"name": "killed-once"}).json()["items"]
    assert [m["id"] for m in models] == [done["model_id"]] and models[0]["version"] == 1


def test_poison_job_fails_after_max_attempts(client, worker, guide, stack_env):
    job = submit(client, {"dataset_id": guide["id"], "algorithm": "odm", "params": LONG_ODM,
                          "test_fraction": 0.2})
    max_attempts = job["max_attempts"]
    for attempt in range(1, max_attempts + 1):
        _kill_running_child(client, worker, job["id"], attempt)
    done = wait_job(client, job["id"], timeout=300)
    assert done["state"] == "FAILED"
    assert done["attempt"] == max_attempts
    assert done["error"]["type"].endswith("/worker-lost")
    # every redelivered message is refused by the claim: once none is left, no attempt more
    wait_no_delivery(stack_env["CELERY_BROKER_URL"], stack_env["SODM_CELERY_QUEUE"], job["id"])
    again = client.get(f"/jobs/{job['id']}").json()
    assert again["state"] == "FAILED" and again["attempt"] == max_attempts


def test_lost_enqueue_is_resent_by_reconciler(client, tenant, start_api, start_worker, heart):
    """The broker is unreachable when the API enqueues: POST /train still answers 202 with a
    QUEUED job (the row is the truth), and a worker's reconciler sends it later."""
    api = start_api(CELERY_BROKER_URL="redis://127.0.0.1:9/0")  # nothing listens there
    with httpx.Client(base_url=api.url, timeout=120,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        r = c.post("/train", json={"dataset_id": heart["id"], "algorithm": "sodm",
                                   "test_fraction": 0.2})
    assert r.status_code == 202 and r.json()["state"] == "QUEUED"
    start_worker(SODM_REQUEUE_AFTER_SECONDS="2")
    done = wait_job(client, r.json()["id"], timeout=300)
    assert done["state"] == "SUCCEEDED" and done["attempt"] == 1
