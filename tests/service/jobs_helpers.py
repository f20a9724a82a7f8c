"""Helpers shared by the training-job service tests (upload, submit, poll, read LIBSVM)."""

from __future__ import annotations

import lzma
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sklearn.datasets import load_svmlight_file

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
# the Statlog heart attributes, in heart_scale's column order (CSV / Parquet copies of it)
HEART_NAMES = ["age", "sex", "cp", "trestbps", "chol", "fbs", "restecg", "thalach", "exang",
               "oldpeak", "slope", "ca", "thal"]

# Parameters that keep the exact ODM solver busy for a minute or more on svmguide1 (~3 ms
# per epoch here): a tolerance it never reaches, and an epoch budget that bounds the damage
# if a failed test leaves the job behind.
LONG_ODM = {"kernel": "rbf", "gamma": 10.0, "lam": 1e8, "theta": 0.2, "tol": 1e-12,
            "max_iter": 20_000}
# The same for a few seconds (100 epochs on an 80 % split of svmguide1: about 10 s when the
# machine is idle, most of it in Newton attempts that cannot reach tol 1e-12; longer when it
# is shared).
SECONDS_ODM = {**LONG_ODM, "max_iter": 100}


def libsvm_bytes(datasets_dir: Path, name: str) -> bytes:
    with lzma.open(datasets_dir / f"{name}.xz") as fh:
        return fh.read()


def load_libsvm(datasets_dir: Path, name: str, n_features: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Dense X and integer labels, as the service stores them."""
    with lzma.open(datasets_dir / f"{name}.xz") as fh:
        X, y = load_svmlight_file(fh, n_features=n_features)
    yi = y.astype(np.int64)
    assert np.array_equal(yi, y)
    return X.toarray(), yi


def upload_as(api_server: str, tenant: tuple[str, str], datasets_dir: Path, name: str
              ) -> dict[str, Any]:
    """Upload with a client of its own (for module-scoped dataset fixtures)."""
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        return upload(c, datasets_dir, name)


def upload(client: httpx.Client, datasets_dir: Path, name: str) -> dict[str, Any]:
    r = client.post("/datasets", files={"file": (f"{name}.libsvm",
                                                 libsvm_bytes(datasets_dir, name))},
                    data={"format": "libsvm", "name": name})
    assert r.status_code == 201, r.text
    return r.json()


def submit(client: httpx.Client, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    r = client.post("/train", json=body, headers=headers)
    assert r.status_code in (200, 202), r.text
    assert r.headers["location"] == f"/jobs/{r.json()['id']}"
    return r.json()


def wait_job(client: httpx.Client, job_id: str, states: set[str] | None = None,
             timeout: float = 300.0, pred=None) -> dict[str, Any]:
    """Poll GET /jobs/{id} until its state is in ``states`` (default: terminal)."""
    states = states or TERMINAL
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = client.get(f"/jobs/{job_id}")
        assert r.status_code == 200, r.text
        job = r.json()
        if job["state"] in states and (pred is None or pred(job)):
            return job
        if job["state"] in TERMINAL and job["state"] not in states:
            raise AssertionError(f"job ended {job['state']}: {job.get('error')}")
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still {job.get('state')} after {timeout}s: {job}")


def wait_no_delivery(broker_url: str, queue: str, job_id: str, timeout: float = 120.0) -> None:
    """Wait until no message of ``job_id`` waits in ``queue`` or is in flight (kombu's Redis
    ``unacked`` hash holds every delivered, unacknowledged message). After that no worker can
    start another attempt of the job: the event a "no further attempt" check waits for,
    instead of sleeping for a guess of how long a redelivery takes."""
    import redis

    r = redis.Redis.from_url(broker_url)
    needle = job_id.encode()
    deadline = time.monotonic() + timeout
    try:
        while True:
            waiting = [m for m in r.lrange(queue, 0, -1) if needle in m]
            in_flight = [v for v in r.hvals("unacked") if needle in v]
            if not waiting and not in_flight:
                return
            assert time.monotonic() < deadline, \
                f"job {job_id}: {len(waiting)} queued, {len(in_flight)} unacked after {timeout}s"
            time.sleep(0.1)
    finally:
        r.close()


def train_model(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """Submit a training job, wait for it to succeed and return its model."""
    job = wait_job(client, submit(client, body)["id"])
    assert job["state"] == "SUCCEEDED", job["error"]
    return client.get(f"/models/{job['model_id']}").json()
