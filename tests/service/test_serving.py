"""Serving on the real stack (issue 20, and issue 14's shared limiter): micro-batching gives
the unbatched decision values, binary bodies, key and model caches invalidated across two API
processes, the rate limiter shared by two API processes, and metrics added up across the
worker processes of ``sodm serve --workers 2``."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.fixtures.aio import run_async
from tests.fixtures.stack import REPO_ROOT, free_port
from tests.service.jobs_helpers import load_libsvm, submit, upload_as, wait_job


@pytest.fixture(scope="module")
def model(api_server, tenant, datasets_dir, worker) -> dict:
    ds = upload_as(api_server, tenant, datasets_dir, "heart_scale")
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        job = submit(c, {"dataset_id": ds["id"], "algorithm": "sodm",
                         "params": {"kernel": "rbf"}, "seed": 3, "name": "serving"})
        done = wait_job(c, job["id"])
        assert done["state"] == "SUCCEEDED", done["error"]
        return c.get(f"/models/{done['model_id']}").json()


@pytest.fixture(scope="module")
def rows(datasets_dir) -> np.ndarray:
    X, _ = load_libsvm(datasets_dir, "heart_scale", n_features=13)
    return X[:40]


async def _concurrent(url: str, key: str, bodies: list[dict]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits,
                                 headers={"Authorization": f"Bearer {key}"}) as c:
        return await asyncio.gather(*(c.post("/predict", json=b) for b in bodies))


def _batch_counts(url: str, token: str) -> tuple[float, float]:
    """(kernel passes, requests in them) from the server's micro-batching histogram."""
    text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}).text
    count = total = 0.0
    for line in text.splitlines():
        if line.startswith("sodm_predict_batch_requests_count"):
            count = float(line.split()[-1])
        elif line.startswith("sodm_predict_batch_requests_sum"):
            total = float(line.split()[-1])
    return count, total


def test_micro_batching_gives_the_unbatched_decision_values(start_api, tenant, model, rows,
                                                           stack_env):
    """40 concurrent one-row requests on one evaluation thread with a generous wait: they
    are summed in fewer kernel passes than requests, and every answer equals the library's
    decision value of that row alone."""
    server = start_api(SODM_PREDICT_THREADS="1", SODM_PREDICT_BATCH_WAIT_MS="50")
    from app.services.model_registry import model_store

    lib = model_store.load(model["id"], model["file_sha256"])
    alone = np.array([lib.decision_function(r[None, :])[0] for r in rows])
    bodies = [{"model_id": model["id"], "instances": [r.tolist()]} for r in rows]
    responses = run_async(_concurrent(server.url, tenant[1], bodies))
    assert [r.status_code for r in responses] == [200] * len(rows)
    got = np.array([r.json()["decision_values"][0] for r in responses])
    np.testing.assert_allclose(got, alone, rtol=1e-12, atol=1e-12)
    labels = [r.json()["labels"][0] for r in responses]
    assert labels == lib.predict(rows).tolist()
    passes, requests = _batch_counts(server.url, stack_env["SODM_METRICS_TOKEN"])
    assert requests == len(rows) and passes < requests  # some passes served several

    # a client that leaves halfway through its body is no server error (answered 499)
    import socket

    head = (f"POST /predict HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {tenant[1]}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head.encode() + b'{"model_id": "')
    scrape = {"Authorization": f"Bearer {stack_env['SODM_METRICS_TOKEN']}"}
    _until(lambda: 'route="/predict",status="499"' in httpx.get(
        server.url + "/metrics", headers=scrape).text, 10)
    assert "unhandled error" not in server.log_text()


def test_binary_bodies_npy_and_arrow(client, model, rows):
    import pyarrow as pa

    want = client.post("/predict", json={"model_id": model["id"],
                                         "instances": rows.tolist()}).json()
    buf = io.BytesIO()
    np.save(buf, rows.astype(np.float32), allow_pickle=False)
    r = client.post("/predict", params={"model_id": model["id"]}, content=buf.getvalue(),
                    headers={"Content-Type": "application/x-npy"})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["decision_values"], want["decision_values"],
                               rtol=1e-5, atol=1e-6)  # the rows were sent as float32
    table = pa.table({f"f{j}": rows[:, j] for j in range(rows.shape[1])})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    r = client.post("/predict", params={"model": "serving"}, content=sink.getvalue(),
                    headers={"Content-Type": "application/vnd.apache.arrow.stream"})
    assert r.status_code == 200, r.text
    assert r.json() == want

    def problem(resp: httpx.Response, status: int, fragment: str) -> None:
        assert resp.status_code == status, resp.text
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert fragment in resp.text, resp.text

    npy = {"Content-Type": "application/x-npy"}
    objects = io.BytesIO()
    np.save(objects, np.array([[1, "a"]], dtype=object), allow_pickle=True)
    problem(client.post("/predict", params={"model_id": model["id"]},
                        content=objects.getvalue(), headers=npy), 422, "not a .npy")
    cube = io.BytesIO()
    np.save(cube, np.zeros((2, 2, 13)))
    problem(client.post("/predict", params={"model_id": model["id"]},
                        content=cube.getvalue(), headers=npy), 422, "2-D")
    narrow = io.BytesIO()
    np.save(narrow, np.zeros((2, 12)))
    problem(client.post("/predict", params={"model_id": model["id"]},
                        content=narrow.getvalue(), headers=npy), 422, "expects 13")
    bad = io.BytesIO()
    np.save(bad, np.array([[np.nan] * 13]))
    problem(client.post("/predict", params={"model_id": model["id"]}, content=bad.getvalue(),
                        headers=npy), 422, "instances[0][0]")
    problem(client.post("/predict", content=buf.getvalue(), headers=npy), 422, "model_id")
    words = pa.table({"f0": ["a"]})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, words.schema) as writer:
        writer.write_table(words)
    problem(client.post("/predict", params={"model_id": model["id"]},
                        content=sink.getvalue(),
                        headers={"Content-Type": "application/vnd.apache.arrow.stream"}),
            422, "'f0'")
    problem(client.post("/predict", content=b"1,2,3", headers={"Content-Type": "text/csv"}),
            415, "application/x-npy")


def _until(check, seconds: float) -> float:
    """Seconds until ``check()`` is true (fails after ``seconds``)."""
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < seconds, "not within the bound"
        time.sleep(0.05)
    return time.monotonic() - t0


def test_revoked_key_and_deleted_model_leave_every_api_process(start_api, make_tenant, model,
                                                               rows, stack_env, tenant,
                                                               client):
    """Two API processes cache a key and a model row (TTL 300 s, so only the invalidation
    channel can make them forget): revoking the key, and deleting a model through one of
    them, is seen by both within 2 s."""
    from app.core.db import session_scope
    from app.services.tenancy.apikeys import revoke_key

    long_ttl = {"SODM_AUTH_CACHE_SECONDS": "300", "SODM_MODEL_ROW_CACHE_SECONDS": "300"}
    a, b = start_api(**long_ttl), start_api(**long_ttl)
    _, key = make_tenant()
    auth = {"Authorization": f"Bearer {key}"}
    for s in (a, b):
        assert httpx.get(s.url + "/datasets", headers=auth).status_code == 200
    with session_scope() as session:
        assert revoke_key(session, key[:12]) == 1
    for s in (a, b):
        _until(lambda s=s: httpx.get(s.url + "/datasets", headers=auth).status_code == 401, 2)

    # a second model of the tenant, predicted by name on both, then deleted through a
    ds = client.get("/datasets").json()["items"][0]
    job = submit(client, {"dataset_id": ds["id"], "algorithm": "sodm",
                          "params": {"kernel": "linear"}, "name": "short-lived"})
    done = wait_job(client, job["id"])
    assert done["state"] == "SUCCEEDED", done["error"]
    owner = {"Authorization": f"Bearer {tenant[1]}"}
    body = {"model": "short-lived", "instances": [rows[0].tolist()]}
    for s in (a, b):
        assert httpx.post(s.url + "/predict", json=body, headers=owner).status_code == 200
    assert httpx.delete(a.url + f"/models/{done['model_id']}", headers=owner).status_code == 204
    for s in (a, b):
        _until(lambda s=s: httpx.post(s.url + "/predict", json=body,
                                      headers=owner).status_code == 404, 2)


def test_revoked_key_stops_within_the_ttl_without_the_channel(start_api, make_tenant):
    """An API process that cannot hear the invalidation channel (its Redis is unreachable)
    still stops a revoked key once the cached entry's TTL (1 s here) has passed."""
    from app.core.db import session_scope
    from app.services.tenancy.apikeys import revoke_key

    deaf = start_api(SODM_AUTH_CACHE_SECONDS="1",
                     SODM_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    _, key = make_tenant()
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.get(deaf.url + "/datasets", headers=auth).status_code == 200
    with session_scope() as session:
        revoke_key(session, key[:12])
    waited = _until(lambda: httpx.get(deaf.url + "/datasets", headers=auth).status_code == 401,
                    5)
    assert waited <= 1.5 + 0.5


def test_rate_limit_is_shared_weighted_and_has_headers(start_api, make_tenant):
    """One key's allowance is counted once across two API processes; POST /train weighs
    10 units; every answer carries RateLimit/RateLimit-Policy; the refusal has Retry-After."""
    a, b = (start_api(SODM_RATE_LIMIT_PER_MINUTE="14") for _ in range(2))
    _, key = make_tenant()
    auth = {"Authorization": f"Bearer {key}"}
    r = httpx.get(a.url + "/datasets", headers=auth)
    assert r.status_code == 200
    assert r.headers["RateLimit-Policy"] == '"key";q=14;w=60'
    assert r.headers["RateLimit"].startswith('"key";r=13;t=')
    r = httpx.post(b.url + "/train", headers=auth,
                   json={"dataset_id": "nope", "algorithm": "sodm"})
    assert r.status_code in (404, 422) and r.headers["RateLimit"].startswith('"key";r=3;')
    seen = [httpx.get(s.url + "/datasets", headers=auth) for s in (a, b, a, b)]
    assert [x.status_code for x in seen] == [200, 200, 200, 429]
    refused = seen[-1]
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["type"].endswith("/rate-limited")
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["RateLimit"].startswith('"key";r=0;')


def test_requests_without_a_valid_key_are_limited_per_address(start_api, make_tenant):
    server = start_api(SODM_RATE_LIMIT_ANONYMOUS_PER_MINUTE="3")
    _, key = make_tenant()
    good = {"Authorization": f"Bearer {key}"}
    bad = {"Authorization": "Bearer sodm_" + "x" * 32}
    assert httpx.get(server.url + "/datasets", headers=good).status_code == 200
    codes = [httpx.get(server.url + "/datasets", headers=h).status_code
             for h in (bad, {}, bad, bad)]
    assert codes == [401, 401, 401, 429]
    r = httpx.get(server.url + "/datasets", headers=bad)
    assert r.status_code == 429 and r.headers["RateLimit-Policy"] == '"address";q=3;w=60'
    assert int(r.headers["Retry-After"]) >= 1
    # a key already known to this process is not held up by its address's failures
    assert httpx.get(server.url + "/datasets", headers=good).status_code == 200
    assert httpx.get(server.url + "/livez").status_code == 200  # probes are not limited
    # nor is guessing the metrics scrape token
    assert httpx.get(server.url + "/metrics", headers=bad).status_code == 429


def _worker_files_with_livez(metrics_dir: Path) -> int:
    from prometheus_client.mmap_dict import MmapedDict

    busy = 0
    for f in metrics_dir.glob("counter_*.db"):
        for key, value, *_ in MmapedDict.read_all_values_from_file(str(f)):
            if "sodm_http_requests_total" in key and '"/livez"' in key and value > 0:
                busy += 1
                break
    return busy


def test_metrics_add_up_across_serve_workers(stack_env, tmp_path):
    """``sodm serve --workers 2``: requests answered by both processes, and every scrape
    (whichever process answers it) counts all of them."""
    port = free_port()
    metrics_dir = tmp_path / "prom"
    metrics_dir.mkdir()
    env = {**os.environ, **stack_env, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "2", "--no-access-log"],
                            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def live() -> bool:
            try:
                return httpx.get(url + "/livez", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        _until(live, 90)
        sent = 1
        deadline = time.monotonic() + 60
        while _worker_files_with_livez(metrics_dir) < 2:  # new connections spread out
            assert time.monotonic() < deadline, "one process answered everything"
            for _ in range(20):
                assert httpx.get(url + "/livez").status_code == 200
                sent += 1
        scrape = {"Authorization": f"Bearer {stack_env['SODM_METRICS_TOKEN']}"}
        for _ in range(6):
            text = httpx.get(url + "/metrics", headers=scrape).text
            line = next(x for x in text.splitlines() if x.startswith(
                'sodm_http_requests_total{method="GET",route="/livez",status="200"}'))
            assert float(line.split()[-1]) == sent
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()


def test_concurrent_counts_share_round_trips_and_stay_exact(stack_env):
    """60 concurrent hits of one key (limit 40) through one process's limiter: they are
    pipelined together, and the counts are still exactly 1..60, 40 allowed."""
    import uuid

    from app.api import ratelimit

    trips = []

    async def burst() -> list[ratelimit.Decision]:
        ratelimit.reset()
        lim = ratelimit.limiter()
        assert isinstance(lim.strategy, ratelimit._CoalescedCounts)
        who = uuid.uuid4().hex
        out = await asyncio.gather(*(lim.hit("key", who, 40, 1) for _ in range(60)))
        trips.append(lim.strategy.round_trips)
        return out

    decisions = run_async(burst())
    assert 1 <= trips[0] < 60  # the others went in pipelines
    assert sum(d.allowed for d in decisions) == 40
    assert sorted(d.remaining for d in decisions) == [0] * 20 + list(range(40))
    assert all(0 < d.reset_seconds <= 60 for d in decisions)
    ratelimit.reset()
