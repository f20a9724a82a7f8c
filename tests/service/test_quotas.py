"""Per-tenant quotas (``app.services.tenancy.quotas``) on the real stack: stored bytes (507), queued
and running jobs (429), open event streams across two API processes (429), and a revoked key
ending its open event streams. No worker consumes this module's jobs: they stay QUEUED."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from tests.service.jobs_helpers import libsvm_bytes


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _upload(url: str, key: str, data: bytes, name: str = "d") -> httpx.Response:
    return httpx.post(url + "/datasets", headers=_auth(key), timeout=60,
                      files={"file": (f"{name}.libsvm", data)},
                      data={"format": "libsvm", "name": name})


def _synthetic(n_rows: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    lines = [f"{1 if i % 2 else -1} 1:{rng.random():.6f} 2:{rng.random():.6f} "
             f"3:{rng.random():.6f}" for i in range(n_rows)]
    return ("\n".join(lines) + "\n").encode()


def _problem(r: httpx.Response, status: int, slug: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["type"].endswith("/" + slug), body
    return body


def test_storage_quota_is_507_for_uploads_and_training(start_api, make_tenant):
    """A 2 MB quota: two 0.71 MB uploads fit (each counts the bytes of its stored files,
    0.6 MB), a 1.07 MB one would pass the quota (507 naming the quota and what is stored, nothing
    stored); another tenant stores freely. Through
    an API process with a 1 MB quota the tenant is at its quota: POST /train (whose model
    needs room) and any upload are 507s."""
    api = start_api(SODM_QUOTA_STORAGE_MB="2")
    _, key = make_tenant()
    first, second = _synthetic(20_000, 1), _synthetic(20_000, 2)
    stored = [_upload(api.url, key, d) for d in (first, second)]
    assert [r.status_code for r in stored] == [201, 201], stored[-1].text
    held = [r.json()["stored_bytes"] for r in stored]
    assert all(0 < n < len(first) for n in held), held  # Parquet files, smaller than text
    big = _synthetic(30_000, 3)
    assert sum(held) + len(big) > 2 << 20 > len(big) and sum(held) >= 1 << 20
    body = _problem(_upload(api.url, key, big), 507, "storage-quota")
    assert body["quota_bytes"] == 2 << 20 and body["used_bytes"] == sum(held)
    assert "SODM_QUOTA_STORAGE_MB" in body["detail"]
    listed = httpx.get(api.url + "/datasets", headers=_auth(key)).json()["items"]
    assert sorted(d["id"] for d in listed) == sorted(r.json()["id"] for r in stored)
    _, other = make_tenant()
    assert _upload(api.url, other, big).status_code == 201

    small = start_api(SODM_QUOTA_STORAGE_MB="1")
    r = httpx.post(small.url + "/train", headers=_auth(key), timeout=60,
                   json={"dataset_id": stored[0].json()["id"], "algorithm": "sodm",
                         "params": {"kernel": "linear"}})
    _problem(r, 507, "storage-quota")
    assert httpx.get(small.url + "/jobs", headers=_auth(key)).json()["items"] == []
    _problem(_upload(small.url, key, b"1 1:1\n-1 1:2\n"), 507, "storage-quota")


def test_active_job_quota_is_429_until_one_ends(start_api, make_tenant, datasets_dir):
    """Two queued jobs are the quota: the third submission is a 429 problem with
    Retry-After (no job row), another tenant is unaffected, and after a cancel the tenant
    may submit again. An idempotent replay of an existing job is not refused."""
    api = start_api(SODM_QUOTA_ACTIVE_JOBS="2")
    _, key = make_tenant()
    ds = _upload(api.url, key, libsvm_bytes(datasets_dir, "heart_scale")).json()
    body = {"dataset_id": ds["id"], "algorithm": "sodm", "params": {"kernel": "linear"}}
    post = lambda k, **h: httpx.post(api.url + "/train", json=body, timeout=60,  # noqa: E731
                                     headers={**_auth(k), **h})
    jobs = [post(key, **{"Idempotency-Key": f"k{i}"}) for i in range(2)]
    assert [r.status_code for r in jobs] == [202, 202]
    refused = post(key)
    got = _problem(refused, 429, "job-quota")
    assert refused.headers["Retry-After"] and got["quota"] == 2 and got["active"] == 2
    listed = httpx.get(api.url + "/jobs", headers=_auth(key)).json()["items"]
    assert len(listed) == 2
    assert post(key, **{"Idempotency-Key": "k0"}).json()["id"] == jobs[0].json()["id"]

    _, other = make_tenant()
    ods = _upload(api.url, other, libsvm_bytes(datasets_dir, "heart_scale")).json()
    r = httpx.post(api.url + "/train", headers=_auth(other), timeout=60,
                   json={**body, "dataset_id": ods["id"]})
    assert r.status_code == 202, r.text

    cancel = httpx.post(api.url + f"/jobs/{jobs[0].json()['id']}/cancel", headers=_auth(key))
    assert cancel.status_code == 200 and cancel.json()["state"] == "CANCELLED"
    assert post(key).status_code == 202


class _Stream:
    """An open ``/jobs/{id}/events`` response, read in this thread (closing a response that
    another thread is reading leaves its connection open)."""

    def __init__(self, url: str, key: str, job_id: str) -> None:
        self.client = httpx.Client(timeout=httpx.Timeout(60, read=30))
        self.cm = self.client.stream("GET", f"{url}/jobs/{job_id}/events", headers=_auth(key))
        self.response = self.cm.__enter__()
        self.lines: list[str] = []
        if self.response.status_code == 200:
            self._lines = self.response.iter_lines()
        else:
            self.response.read()

    def read_until(self, text: str) -> None:
        for line in self._lines:
            self.lines.append(line)
            if line.startswith(text):
                return
        raise AssertionError(f"the stream ended before {text!r}: {self.lines}")

    def read_to_end(self) -> float:
        """Read until the server ends the stream; returns the seconds it took."""
        t0 = time.monotonic()
        for line in self._lines:
            self.lines.append(line)
        return time.monotonic() - t0

    def close(self) -> None:
        self.cm.__exit__(None, None, None)
        self.client.close()


@pytest.fixture
def streams():
    opened: list[_Stream] = []

    def open_(url: str, key: str, job_id: str) -> _Stream:
        s = _Stream(url, key, job_id)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.close()


def _queued_job(url: str, key: str, datasets_dir) -> str:
    ds = _upload(url, key, libsvm_bytes(datasets_dir, "heart_scale")).json()
    r = httpx.post(url + "/train", headers=_auth(key), timeout=60,
                   json={"dataset_id": ds["id"], "algorithm": "sodm",
                         "params": {"kernel": "linear"}})
    assert r.status_code == 202, r.text
    return r.json()["id"]


def _wait(cond, seconds: float) -> float:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < seconds, "not within the bound"
        time.sleep(0.05)
    return time.monotonic() - t0


def test_event_stream_quota_counts_streams_of_every_api_process(start_api, make_tenant,
                                                                datasets_dir, streams):
    """Quota 2: one stream open on each of two API processes, a third on either is a 429
    problem; another tenant opens streams freely; closing one frees its place (at once when
    the server notices the disconnect, at the latest when its claim's TTL runs out)."""
    a, b = start_api(SODM_QUOTA_EVENT_STREAMS="2"), start_api(SODM_QUOTA_EVENT_STREAMS="2")
    _, key = make_tenant()
    job = _queued_job(a.url, key, datasets_dir)
    s1 = streams(a.url, key, job)
    s2 = streams(b.url, key, job)
    assert s1.response.status_code == 200 and s2.response.status_code == 200
    s2.read_until("event: state")
    for server in (a, b):
        r = httpx.get(f"{server.url}/jobs/{job}/events", headers=_auth(key), timeout=30)
        body = _problem(r, 429, "stream-quota")
        assert body["quota"] == 2 and r.headers["Retry-After"]
    _, other = make_tenant()
    ojob = _queued_job(a.url, other, datasets_dir)
    assert streams(b.url, other, ojob).response.status_code == 200
    s1.close()
    from app.services.tenancy.quotas import STREAM_TTL_SECONDS

    _wait(lambda: streams(b.url, key, job).response.status_code == 200,
          STREAM_TTL_SECONDS + 15)


def test_revoked_key_ends_open_event_streams(start_api, make_tenant, datasets_dir, streams):
    """A stream opened with a key ends with an ``error`` event (401 problem) soon after the
    key is revoked, on the process it was revoked through and on another one."""
    from app.core.db import session_scope
    from app.services.tenancy.apikeys import revoke_key

    a, b = start_api(), start_api()
    _, key = make_tenant()
    job = _queued_job(a.url, key, datasets_dir)
    opened = [streams(a.url, key, job), streams(b.url, key, job)]
    for s in opened:
        assert s.response.status_code == 200
        s.read_until("data:")
    with session_scope() as session:
        assert revoke_key(session, key[:12]) == 1
    for s in opened:
        took = s.read_to_end()
        assert "event: error" in s.lines, s.lines
        data = s.lines[s.lines.index("event: error") + 1]
        assert '"status": 401' in data and "revoked" in data
        assert took < 15
