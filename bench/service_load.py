"""Service load benchmark on the real stack (Postgres, Redis, uvicorn, a Celery worker), all
on 127.0.0.1, with a Python asyncio + httpx load generator (no wrk on this machine):

* /predict: ``--clients`` concurrent clients for ``--seconds`` with 1-row and 1000-row
  requests on a model with ~10,000 support vectors (SODM on 25 % of ijcnn1):
  p50/p99 latency, requests/s, rows/s, errors; first one client sending 1-row requests back
  to back (the cost of one request), then 50 clients closed loop (saturation), then 1-row
  requests open loop at each of ``--rates`` total requests/s (latency at a given load);
* a burst of ``--burst`` POST /train submissions: every one answered 202, then every job
  ends SUCCEEDED with exactly one model (no lost, no duplicated job);
* upload throughput of a ``--upload-mb`` MB LIBSVM file (POST /datasets, 201);
* time from POST /train to RUNNING on an idle worker (client-observed and server-side).

    .venv/bin/python -m bench.service_load                 # the full run (docs/reliability.md)
    .venv/bin/python -m bench.service_load --seconds 5 --burst 20 --upload-mb 5

It starts its own stack (a fresh database, one uvicorn process, one worker with two pool
children) with the helpers of tests/fixtures and prints one JSON document. The lean version
is tests/reliability/test_load.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import lzma
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
TINY_JOB = {"algorithm": "sodm", "params": {"kernel": "linear"}, "test_fraction": 0.2}


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


async def predict_load(base: str, key: str, model_id: str, rows: list[list[float]],
                       clients: int, seconds: float, rate: float | None = None
                       ) -> dict[str, Any]:
    """``clients`` tasks POST the same body for ``seconds``.

    ``rate=None``: closed loop, each client sends its next request as soon as the last one is
    answered (saturation: latency = clients / throughput). ``rate`` (requests/s over all
    clients): open loop like wrk2, client ``i`` has its requests scheduled every
    ``clients / rate`` s (staggered), and latency counts from the *scheduled* time, so a
    server that falls behind is charged for the wait (no coordinated omission)."""
    body = json.dumps({"model_id": model_id, "instances": rows}).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    latencies: list[float] = []
    codes: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120,
                                 limits=limits) as c:
        start = time.perf_counter()
        stop = start + seconds
        interval = clients / rate if rate else 0.0

        async def client(i: int) -> None:
            due = start + i * interval / clients
            while (due if rate else time.perf_counter()) < stop:
                if rate:
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                t0 = due if rate else time.perf_counter()
                due += interval
                try:
                    r = await c.post("/predict", content=body)
                    codes[str(r.status_code)] += 1
                    if r.status_code == 200:
                        latencies.append(time.perf_counter() - t0)
                except httpx.HTTPError as exc:
                    codes[type(exc).__name__] += 1

        await asyncio.gather(*(client(i) for i in range(clients)))
        elapsed = time.perf_counter() - start
    ok = len(latencies)
    return {"rows_per_request": len(rows), "clients": clients, "offered_rate": rate,
            "seconds": round(elapsed, 2),
            "requests": sum(codes.values()), "errors": sum(codes.values()) - ok,
            "statuses": dict(codes), "p50_ms": round(1000 * _pct(latencies, 50), 2),
            "p99_ms": round(1000 * _pct(latencies, 99), 2),
            "requests_per_s": round(ok / elapsed, 1),
            "rows_per_s": round(ok * len(rows) / elapsed, 1)}


async def train_burst(base: str, key: str, dataset_id: str, n: int) -> list[str]:
    """``n`` concurrent POST /train (each its own Idempotency-Key); returns the job ids."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120,
                                 limits=httpx.Limits(max_connections=n)) as c:
        async def one(i: int) -> httpx.Response:
            return await c.post("/train", json={"dataset_id": dataset_id, **TINY_JOB,
                                                "seed": i},
                                headers={"Idempotency-Key": f"burst-{uuid.uuid4().hex}"})

        responses = await asyncio.gather(*(one(i) for i in range(n)))
    bad = [(r.status_code, r.text[:200]) for r in responses if r.status_code != 202]
    if bad:
        raise RuntimeError(f"{len(bad)} submissions not accepted: {bad[:3]}")
    return [r.json()["id"] for r in responses]


def wait_jobs(client: httpx.Client, ids: list[str], timeout: float) -> dict[str, dict]:
    """Poll until every job is terminal; returns the final job objects."""
    deadline = time.monotonic() + timeout
    done: dict[str, dict] = {}
    while time.monotonic() < deadline and len(done) < len(ids):
        for job_id in ids:
            if job_id not in done:
                job = client.get(f"/jobs/{job_id}").json()
                if job["state"] in TERMINAL:
                    done[job_id] = job
        time.sleep(0.5)
    if len(done) < len(ids):
        raise RuntimeError(f"{len(ids) - len(done)} jobs not terminal after {timeout}s")
    return done


def burst_report(client: httpx.Client, database_url: str, tenant_id: str, ids: list[str],
                 timeout: float) -> dict[str, Any]:
    """Wait for the burst and count jobs and models in Postgres: no lost, no duplicate."""
    from sqlalchemy import create_engine, text

    t0 = time.perf_counter()
    done = wait_jobs(client, ids, timeout)
    drained = time.perf_counter() - t0
    engine = create_engine(database_url)
    try:
        with engine.connect() as c:
            rows = c.execute(text(
                "select j.id, j.state, j.attempt, count(m.id) from jobs j left join models m "
                "on m.job_id = j.id where j.id = any(:ids) group by j.id"), {"ids": ids}).all()
            tenant_jobs = c.execute(text("select count(*) from jobs where tenant_id = :t"),
                                    {"t": tenant_id}).scalar()
    finally:
        engine.dispose()
    states = Counter(r[1] for r in rows)
    return {"submitted": len(ids), "distinct_ids": len(set(ids)), "rows": len(rows),
            "tenant_jobs": tenant_jobs, "states": dict(states),
            "models_per_job": dict(Counter(r[3] for r in rows)),
            "max_attempt": max(r[2] for r in rows), "seconds_to_drain": round(drained, 1),
            "api_states": dict(Counter(j["state"] for j in done.values()))}


def libsvm_file(path: Path, megabytes: float, n_features: int = 50, seed: int = 0) -> int:
    """Write a random two-class LIBSVM file of about ``megabytes``; returns its size."""
    rng = np.random.default_rng(seed)
    target = int(megabytes * (1 << 20))
    written = 0
    with open(path, "w") as fh:
        while written < target:
            X = rng.normal(size=(2000, n_features))
            y = np.where(X[:, 0] + 0.5 * rng.normal(size=2000) > 0, 1, -1)
            lines = [f"{lab} " + " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row))
                     for lab, row in zip(y, X, strict=True)]
            chunk = "\n".join(lines) + "\n"
            fh.write(chunk)
            written += len(chunk)
    return path.stat().st_size


def upload_throughput(base: str, key: str, megabytes: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "load.libsvm"
        size = libsvm_file(path, megabytes)
        with open(path, "rb") as fh, httpx.Client(base_url=base, timeout=1800, headers={
                "Authorization": f"Bearer {key}"}) as c:
            t0 = time.perf_counter()
            r = c.post("/datasets?wait=300", files={"file": ("load.libsvm", fh)},
                       data={"format": "libsvm"})  # 201 once parsed (not 202 after 10 s)
            seconds = time.perf_counter() - t0
    if r.status_code != 201:
        raise RuntimeError(f"upload failed: {r.status_code} {r.text[:300]}")
    return {"bytes": size, "rows": r.json()["n_rows"], "seconds": round(seconds, 2),
            "mb_per_s": round(size / (1 << 20) / seconds, 1), "dataset_id": r.json()["id"]}


def time_to_running(client: httpx.Client, dataset_id: str, n: int) -> dict[str, Any]:
    """Submit ``n`` jobs one at a time on an idle worker; POST -> first RUNNING observed
    (polling every 10 ms) and the server's started_at - created_at."""
    from datetime import datetime

    observed, server = [], []
    for i in range(n):
        t0 = time.perf_counter()
        job = client.post("/train", json={"dataset_id": dataset_id, **TINY_JOB,
                                          "seed": 1000 + i}).json()
        while True:
            j = client.get(f"/jobs/{job['id']}").json()
            if j["state"] != "QUEUED":
                observed.append(time.perf_counter() - t0)
                break
            time.sleep(0.01)
        j = wait_jobs(client, [job["id"]], 300)[job["id"]]
        server.append((datetime.fromisoformat(j["started_at"])
                       - datetime.fromisoformat(j["created_at"])).total_seconds())
    return {"jobs": n, "observed_median_ms": round(1000 * statistics.median(observed), 1),
            "observed_max_ms": round(1000 * max(observed), 1),
            "server_median_ms": round(1000 * statistics.median(server), 1)}


def upload_libsvm(client: httpx.Client, name: str) -> dict[str, Any]:
    data = lzma.decompress((DATASETS / f"{name}.xz").read_bytes())
    r = client.post("/datasets?wait=300", files={"file": (f"{name}.libsvm", data)},
                    data={"format": "libsvm", "name": name})
    r.raise_for_status()
    return r.json()


def big_model(client: httpx.Client, dataset: str, test_fraction: float
              ) -> tuple[dict[str, Any], np.ndarray]:
    """SODM (rbf) on a shared dataset; returns (model, 1000 random rows). The default,
    ijcnn1 with 25 % for training (12,498 rows), gives ~10,000 support vectors."""
    ds = upload_libsvm(client, dataset)
    job = client.post("/train", json={"dataset_id": ds["id"], "algorithm": "sodm",
                                      "params": {"kernel": "rbf"},
                                      "test_fraction": test_fraction,
                                      "name": f"load-{dataset}"}).json()
    job = wait_jobs(client, [job["id"]], 3600)[job["id"]]
    if job["state"] != "SUCCEEDED":
        raise RuntimeError(f"training failed: {job['error']}")
    model = client.get(f"/models/{job['model_id']}").json()
    rows = np.random.default_rng(0).random((1000, ds["n_features"]))
    return model, rows


# ------------------------------------------------------------------------------ the stack
class Stack:
    """A fresh database, one uvicorn process and one worker (tests/fixtures helpers)."""

    def __init__(self, workdir: Path, concurrency: int) -> None:
        from migrations import upgrade_head
        from tests.fixtures.stack import REDIS_URL, ApiServer, create_database, reset_app_caches
        from tests.fixtures.worker import WorkerProcess

        self.url, self._drop = create_database("sodm_load_")
        upgrade_head(self.url)
        self.env = {"DATABASE_URL": self.url,
                    "CELERY_BROKER_URL": f"{REDIS_URL}/{random.randint(1, 15)}",
                    "SODM_DATA_DIR": str(workdir / "data"),
                    "SODM_CELERY_QUEUE": f"sodm-load-{uuid.uuid4().hex[:10]}",
                    "SODM_RATE_LIMIT_PER_MINUTE": "0"}
        os.environ.update(self.env)
        reset_app_caches()
        env = {**os.environ, **self.env}
        self.api = ApiServer(env, workdir / "uvicorn.log")
        self.api.wait_live()
        self.worker = WorkerProcess(env, workdir / "worker.log", concurrency)
        self.worker.wait_ready()
        from app.core.db import session_scope
        from app.services.tenancy.apikeys import create_key

        with session_scope() as s:
            tenant, self.key = create_key(s, "load")
            self.tenant_id = tenant.id

    def close(self) -> None:
        self.worker.stop()
        self.api.stop()
        from tests.fixtures.stack import reset_app_caches

        reset_app_caches()
        self._drop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="per /predict scenario")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rates", type=float, nargs="*", default=[25.0, 50.0, 100.0],
                    help="open-loop 1-row runs at these total requests/s (after the closed loop)")
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--upload-mb", type=float, default=100.0)
    ap.add_argument("--to-running", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=2, help="worker pool children")
    ap.add_argument("--dataset", default="ijcnn1", help="shared dataset of the /predict model")
    ap.add_argument("--test-fraction", type=float, default=0.75)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    out: dict[str, Any] = {"args": vars(args), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="sodm-load-") as tmp:
        stack = Stack(Path(tmp), args.concurrency)
        try:
            with httpx.Client(base_url=stack.api.url, timeout=300,
                              headers={"Authorization": f"Bearer {stack.key}"}) as c:
                t0 = time.perf_counter()
                model, rows = big_model(c, args.dataset, args.test_fraction)
                out["model"] = {"id": model["id"], "n_support_vectors":
                                model["n_support_vectors"], "n_features": model["n_features"],
                                "train_seconds": round(time.perf_counter() - t0, 1)}
                print(json.dumps(out["model"]), file=sys.stderr)
                # one client, back to back: the end-to-end cost of one request
                out["predict_sequential"] = asyncio.run(predict_load(
                    stack.api.url, stack.key, model["id"], rows[:1].tolist(), 1,
                    min(args.seconds, 10.0)))
                out["predict"] = [asyncio.run(predict_load(
                    stack.api.url, stack.key, model["id"], rows[:k].tolist(), args.clients,
                    args.seconds)) for k in (1, 1000)]
                out["predict_paced"] = [asyncio.run(predict_load(
                    stack.api.url, stack.key, model["id"], rows[:1].tolist(), args.clients,
                    args.seconds, rate)) for rate in args.rates]
                print(json.dumps(out["predict"] + out["predict_paced"]), file=sys.stderr)
                heart = upload_libsvm(c, "heart_scale")
                out["to_running"] = time_to_running(c, heart["id"], args.to_running)
                ids = asyncio.run(train_burst(stack.api.url, stack.key, heart["id"],
                                              args.burst))
                out["burst"] = burst_report(c, stack.url, stack.tenant_id, ids, 3600)
                print(json.dumps(out["burst"]), file=sys.stderr)
                out["upload"] = upload_throughput(stack.api.url, stack.key, args.upload_mb)
        finally:
            stack.close()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
