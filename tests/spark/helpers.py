"""Helpers of the Spark service tests: a three-class dataset, model comparison."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from threadpoolctl import threadpool_limits

from solver import SODMClassifier
from tests.service.jobs_helpers import load_libsvm

CLASSES = ("neg", "pos-a", "pos-b")
# Spark's Python workers run BLAS on one thread (OMP_NUM_THREADS = the task's cores); the
# kernel solver's Newton steps round differently with more threads (~1e-6 relative, as
# n_jobs=1 and n_jobs=2 do locally), so the local references run on one thread too.
ONE_BLAS_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1"}


def local_fit(params: dict[str, Any], seed: int, X: Any, y: np.ndarray) -> SODMClassifier:
    """The local backend's model, BLAS on one thread like Spark's Python workers."""
    with threadpool_limits(1, user_api="blas"):
        return SODMClassifier(**params, random_state=seed).fit(X, y)


def three_classes(datasets_dir: Path, name: str = "heart_scale"
                  ) -> tuple[np.ndarray, np.ndarray]:
    """A binary dataset (heart_scale) with string labels in three classes (the larger
    label split by row parity)."""
    X, y = load_libsvm(datasets_dir, name)
    idx = np.where(y == y.min(), 0, np.where(np.arange(len(y)) % 2 == 0, 1, 2))
    return X, np.asarray(CLASSES)[idx]


def upload_three_classes(client: httpx.Client, datasets_dir: Path,
                         name: str = "heart_scale") -> dict[str, Any]:
    """:func:`three_classes` uploaded as CSV (header ``f0..``, ``label``)."""
    X, y = three_classes(datasets_dir, name)
    buf = io.StringIO()
    buf.write(",".join([f"f{j}" for j in range(X.shape[1])] + ["label"]) + "\n")
    for row, label in zip(X, y, strict=True):
        buf.write(",".join(repr(float(v)) for v in row) + f",{label}\n")
    r = client.post("/datasets", files={"file": ("three.csv", buf.getvalue().encode())},
                    data={"format": "csv", "name": f"{name}-three"})
    assert r.status_code == 201, r.text
    return r.json()


def assert_same_model(client: httpx.Client, spark_job: dict[str, Any],
                      local_job: dict[str, Any], X: np.ndarray) -> dict[str, Any]:
    """The Spark job's model equals the local one: held-out metrics, support count, labels
    and decision values (within 1e-6 relative) on ``X``; returns the Spark model."""
    ms = client.get(f"/models/{spark_job['model_id']}").json()
    ml = client.get(f"/models/{local_job['model_id']}").json()
    assert ms["backend"] == "spark" and ml["backend"] == "local"
    assert ms["classes"] == ml["classes"]
    assert ms["n_support_vectors"] == ml["n_support_vectors"]
    a, b = ms["metrics"], ml["metrics"]
    assert a["held_out"] is True and a["n_test"] == b["n_test"]
    for key in ("accuracy", "precision", "recall", "f1", "confusion_matrix"):
        assert a[key] == b[key], key
    if b["roc_auc"] is not None:
        assert abs(a["roc_auc"] - b["roc_auc"]) <= 1e-12
    ps, pl = (client.post("/predict", json={"model_id": m["id"], "instances": X.tolist()})
              for m in (ms, ml))
    assert ps.status_code == 200 and pl.status_code == 200, (ps.text, pl.text)
    fs = np.asarray(ps.json()["decision_values"])
    fl = np.asarray(pl.json()["decision_values"])
    assert np.max(np.abs(fs - fl)) <= 1e-6 * np.max(np.abs(fl))
    assert ps.json()["labels"] == pl.json()["labels"]
    return ms
