"""Models in Postgres: the cost of storing and loading the largest benchmark model.

cod-rna.t's SODM model in docs/benchmarks.md has about 171,400 support vectors of 8 features
(171,399 in its latest run). This builds a model of 171,400 from cod-rna.t's own first
171,400 rows (min-max scaled, seeded random dual coefficients: the bytes have the size and
entropy of the real model's), then, in one command, on a fresh Postgres database migrated
by this tree:

* ``dump``: the portable file's bytes (``solver.io.model_io``) and their size;
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from bench.serving import Server, create_database
    from bench.storage_backends import median_seconds
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
        from app.core.db import session_scope
        from app.services.model_registry import model_store
        from app.services.tenancy.apikeys import create_key
        from solver.io.model_io import loads
        from tests.service.model_rows import dataset_row, register_model

        t0 = time.perf_counter()
        stored = model_store.dump(est)
        out["dump_seconds"] = time.perf_counter() - t0
        out["bytes"] = stored.size

        with session_scope() as s:
            tenant, key = create_key(s, "bench")
            tenant_id = tenant.id
        small_id = register_model(tenant_id, dataset_row(tenant_id, 10, N_FEATURES), small,
                                  "small")
        rows = dataset_row(tenant_id, N_SV, N_FEATURES)
        t0 = time.perf_counter()
        mid = register_model(tenant_id, rows, est, "big")  # dumped again, then inserted
        out["dump_and_insert_seconds"] = time.perf_counter() - t0
        path = work / "big.sodm"
        path.write_bytes(stored.data)

        def from_file() -> None:
            data = path.read_bytes()
            assert hashlib.sha256(data).hexdigest() == stored.sha256
            loads(data)

        out["load_from_file_seconds"] = median_seconds(from_file, args.repeats)
        out["load_from_postgres_seconds"] = median_seconds(
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
            out["warm_predict_seconds"] = median_seconds(lambda: c.post("/predict", json=body), 20)
    finally:
        if server is not None:
            server.stop()
        reset_app_caches()
        drop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
