"""Models in Postgres: the cost of storing and loading the largest benchmark model.

cod-rna.t's SODM model in docs/benchmarks.md has 171,400 support vectors of 8 features. This
builds a model of exactly that shape from cod-rna.t's own first 171,400 rows (min-max scaled,
seeded random dual coefficients: the bytes have the size and entropy of the real model's),
then, in one command, on a fresh Postgres database migrated by this tree:

* ``dump``: the portable file's bytes (``solver.model_io``) and their size;
* ``insert``: the model row and its ``model_blobs`` row in one transaction;
* ``load from Postgres``: ``model_store.load`` (read, sha256 check, parse) in a cold process
  state, against ``load from a file``: the same checked load from a local file (the layout
  before migration 0011), median of ``--repeats``;
* ``cold /predict``: an API process (``app.cli serve``) started with an empty data
  directory first answers a one-row ``/predict`` of a 10-support-vector model of the same
  shape (the process's first evaluation: its own warm-up), then its first one-row
  ``/predict`` of the big model (the load from Postgres included), then the same request
  warm (median of 20).

    .venv/bin/python -m bench.model_store
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
N_SV, N_FEATURES = 171_400, 8


def model_of(n_sv: int):  # noqa: ANN201 - a fitted SODMClassifier and one row
    """A model of ``n_sv`` support vectors: cod-rna.t's first rows, random coefficients."""
    from sklearn.datasets import load_svmlight_file

    from solver import SODMClassifier
    from solver.estimators import build_fitted

    with lzma.open(DATASETS / "cod-rna.t.xz", "rb") as fh:
        X, _ = load_svmlight_file(fh, n_features=N_FEATURES)
    X = np.asarray(X[:n_sv].toarray())
    lo, hi = X.min(axis=0), X.max(axis=0)
    scale = 1.0 / np.where(hi > lo, hi - lo, 1.0)
    coef = np.random.default_rng(0).standard_normal((1, n_sv))
    return build_fitted(SODMClassifier(kernel="rbf", gamma=1.0), classes=np.array([-1, 1]),
                        n_features_in=N_FEATURES, scaler_min=lo, scaler_scale=scale,
                        gamma=1.0, support_vectors=(X - lo) * scale, dual_coef=coef,
                        n_support=np.array([n_sv])), X[:1]


def timed(f, repeats: int) -> float:  # noqa: ANN001
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from bench.serving import Server, create_database
    from tests.fixtures.stack import reset_app_caches

    est, row = model_of(N_SV)
    small, _ = model_of(10)
    url, drop = create_database()
    work = Path(tempfile.mkdtemp(prefix="sodm-model-store-"))
    os.environ.update(DATABASE_URL=url, SODM_DATA_DIR=str(work / "bench"))
    reset_app_caches()
    out: dict = {"n_support_vectors": N_SV, "n_features": N_FEATURES,
                 "loadavg": list(os.getloadavg())}
    server = None
    try:
        from migrations import upgrade_head

        upgrade_head(url)
        from app.db import session_scope
        from app.models import Dataset, Job, Model
        from app.services import model_store
        from app.services.apikeys import create_key
        from app.services.model_store import ModelBytes
        from solver.model_io import loads

        t0 = time.perf_counter()
        stored = model_store.dump(est)
        out["dump_seconds"] = time.perf_counter() - t0
        out["bytes"] = stored.size

        def insert(tenant_id: str, name: str, model: ModelBytes, n_sv: int) -> str:
            with session_scope() as s:
                ds = Dataset(tenant_id=tenant_id, name="cod-rna.t", format="libsvm",
                             n_rows=n_sv, n_features=N_FEATURES, classes={"-1": 1, "1": 1},
                             storage_path="none", size_bytes=0)
                s.add(ds)
                s.flush()
                job = Job(tenant_id=tenant_id, dataset_id=ds.id, algorithm="sodm",
                          state="SUCCEEDED", params={}, request={})
                s.add(job)
                s.flush()
                m = Model(tenant_id=tenant_id, job_id=job.id, dataset_id=ds.id, name=name,
                          version=1, algorithm="sodm", n_features=N_FEATURES,
                          classes=[-1, 1], n_support_vectors=n_sv,
                          file_sha256=model.sha256, file_bytes=model.size)
                s.add(m)
                s.flush()
                s.add(model_store.blob(m.id, model))
                return m.id

        with session_scope() as s:
            tenant, key = create_key(s, "bench")
            tenant_id = tenant.id
        small_id = insert(tenant_id, "small", model_store.dump(small), 10)
        t0 = time.perf_counter()
        mid = insert(tenant_id, "big", stored, N_SV)
        out["insert_seconds"] = time.perf_counter() - t0
        path = work / "big.sodm"
        path.write_bytes(stored.data)

        def from_file() -> None:
            data = path.read_bytes()
            assert hashlib.sha256(data).hexdigest() == stored.sha256
            loads(data)

        out["load_from_file_seconds"] = timed(from_file, args.repeats)
        out["load_from_postgres_seconds"] = timed(
            lambda: model_store.load(mid, stored.sha256), args.repeats)
        out["postgres_over_file"] = (out["load_from_postgres_seconds"]
                                     / out["load_from_file_seconds"])

        import httpx

        env = {**os.environ, "SODM_DATA_DIR": str(work / "api"),
               "SODM_RATE_LIMIT_PER_MINUTE": "0"}
        server = Server(REPO, env, 1, work / "api.log")
        server.wait_live()
        body = {"model_id": mid, "instances": row.tolist()}
        auth = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=300) as c:
            t0 = time.perf_counter()
            first = c.post("/predict", json={"model_id": small_id, "instances": row.tolist()})
            out["first_predict_of_the_process_seconds"] = time.perf_counter() - t0
            assert first.status_code == 200, first.text
            t0 = time.perf_counter()
            r = c.post("/predict", json=body)
            out["cold_predict_seconds"] = time.perf_counter() - t0
            assert r.status_code == 200, r.text
            expected = est.decision_function(row)[0]
            assert abs(r.json()["decision_values"][0] - expected) < 1e-9 * max(1, abs(expected))
            out["warm_predict_seconds"] = timed(lambda: c.post("/predict", json=body), 20)
    finally:
        if server is not None:
            server.stop()
        reset_app_caches()
        drop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
