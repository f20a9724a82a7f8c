"""SODM trained on Spark (local[2], a standalone master with two workers, a Spark Connect
server) over a stored real dataset matches the local backend with the same seed, and a
cancelled Spark training stops within seconds."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from solver import SODMClassifier
from solver.exceptions import FitCancelled
from solver.io.model_io import load_model, save_model
from tests.spark.helpers import local_fit
from worker.spark.spark_backend import train_on_spark

pytestmark = pytest.mark.spark

# A numeric gamma: the distributed run then repeats the local arithmetic exactly (see
# test_gamma_scale_close_to_local_backend for gamma="scale").
KERNEL_PARAMS = {"kernel": "rbf", "gamma": 3.0, "levels": 2, "n_strata": 6, "lam": 1000.0}
LINEAR_PARAMS = {"kernel": "linear", "n_partitions": 3, "n_strata": 4, "epochs": 3,
                 "lam": 100.0}
SEED = 7


def _stored(dataset: Path) -> tuple[np.ndarray, np.ndarray]:
    """The dataset as the local backend sees it (features f0.. and the original labels)."""
    df = pd.read_parquet(dataset / "data.parquet").sort_values("row_id")
    cols = [c for c in df.columns if c.startswith("f")]
    return df[cols].to_numpy(dtype=np.float64), df["label"].to_numpy()


def _rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(a)))


def fit_both(params: dict, dataset: Path, settings, name: str
             ) -> tuple[SODMClassifier, SODMClassifier, np.ndarray, np.ndarray]:
    """The local backend's model and Spark's for the same request: ``(local, spark, X, y)``."""
    X, y = _stored(dataset)
    local = local_fit(params, SEED, X, y)
    est = train_on_spark(dataset, params, SEED, None, None, name, settings=settings)
    return local, est, X, y


@pytest.fixture(scope="module")
def local_kernel_model(spark_dataset: Path) -> SODMClassifier:
    X, y = _stored(spark_dataset)
    return local_fit(KERNEL_PARAMS, SEED, X, y)


@pytest.fixture
def small_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The working copy in 4 partitions of 100 rows: the results must not depend on it."""
    monkeypatch.setattr("solver.spark.fit.ROWS_PER_PARTITION", 100)


@pytest.mark.parametrize("kind", ["local", "standalone", "connect"])
def test_kernel_sodm_matches_local_backend(kind: str, request: pytest.FixtureRequest,
                                           spark_dataset: Path, local_kernel_model,
                                           tmp_path: Path, small_partitions) -> None:
    settings = request.getfixturevalue(f"{kind}_settings")
    seen: list[tuple[float, str, dict]] = []
    est = train_on_spark(spark_dataset, KERNEL_PARAMS, SEED,
                         lambda f, m, r: seen.append((f, m, r)), None, f"train-{kind}",
                         settings=settings)
    X, y = _stored(spark_dataset)
    f_local = local_kernel_model.decision_function(X)
    f_spark = est.decision_function(X)
    assert _rel_diff(f_local, f_spark) <= 1e-6
    np.testing.assert_array_equal(est.support_, local_kernel_model.support_)
    assert est.score(X, y) == local_kernel_model.score(X, y)
    assert [round(f, 6) for f, _, _ in seen] == [0.5, 1.0]
    # one level driver: the same records (and messages) as the local run's
    same = ("level", "partitions", "partition_size", "n_sv", "n_iter", "converged",
            "skipped_partitions", "factorizations", "factor_work", "converged_early")
    assert [{k: r[k] for k in same} for _, _, r in seen] == \
        [{k: r[k] for k in same} for r in local_kernel_model.history_]
    assert any(r["factorizations"] for r in local_kernel_model.history_)  # Newton work counted
    for (_, _, r), loc in zip(seen, local_kernel_model.history_, strict=True):
        assert r["objective"] == pytest.approx(loc["objective"], rel=1e-9)
        assert r["backend"] == "spark"
    assert [m.split(", KKT")[0] for _, m, _ in seen] == ["level 2: 4 partitions of <= 100 rows",
                                                         "level 1: 2 partitions of <= 200 rows"]
    assert est.fit_info_["backend"] == "spark"
    path = tmp_path / "m.sodm"
    save_model(est, path)
    np.testing.assert_array_equal(load_model(path).decision_function(X), f_spark)


def test_landmarks_from_a_candidate_sample_match_the_local_backend(
        local_settings, spark_dataset: Path, small_partitions) -> None:
    # about 150 of the 400 rows are landmark candidates: Spark collects that sample and
    # selects in the driver (one job); partitions, model and decision values match the local
    # backend, and differ from the all-rows selection (so the sample is really used)
    params = {**KERNEL_PARAMS, "landmark_candidates": 150}
    local, est, X, y = fit_both(params, spark_dataset, local_settings, "train-candidates")
    f_local = local.decision_function(X)
    assert _rel_diff(f_local, est.decision_function(X)) <= 1e-6
    np.testing.assert_array_equal(est.support_, local.support_)
    everyone = local_fit({**params, "landmark_candidates": 400}, SEED, X, y)
    assert _rel_diff(f_local, everyone.decision_function(X)) > 1e-6


def test_row_subset_matches_local_fit_on_those_rows(local_settings, spark_dataset: Path,
                                                    small_partitions) -> None:
    """``rows``: Spark trains on those rows only, renumbered as the local ``X[rows]`` (row
    identity drives the partitions), so the model is the local one on the same rows."""
    X, y = _stored(spark_dataset)
    rows = np.sort(np.random.default_rng(1).choice(len(y), 300, replace=False))
    local = local_fit(KERNEL_PARAMS, SEED, X[rows], y[rows])
    est = train_on_spark(spark_dataset, KERNEL_PARAMS, SEED, None, None, "train-rows",
                         settings=local_settings, rows=rows)
    assert est.fit_info_["n_train"] == 300
    assert _rel_diff(local.decision_function(X), est.decision_function(X)) <= 1e-6
    np.testing.assert_array_equal(est.support_, local.support_)


def test_gamma_scale_close_to_local_backend(local_settings, spark_dataset: Path) -> None:
    """gamma="scale" uses the variance of all scaled entries: the distributed sum differs from
    ``np.var`` by rounding (~1e-16 relative), which can move the local solvers' stopping
    points; the decision values then agree to the solver tolerance, not to 1e-6."""
    X, y = _stored(spark_dataset)
    params = {**KERNEL_PARAMS, "gamma": "scale"}
    local = local_fit(params, SEED, X, y)
    est = train_on_spark(spark_dataset, params, SEED, None, None, "train-scale",
                         settings=local_settings)
    assert est.gamma_ == pytest.approx(local.gamma_, rel=1e-12)
    assert _rel_diff(local.decision_function(X), est.decision_function(X)) <= 1e-4
    assert np.mean(est.predict(X) == local.predict(X)) >= 0.995


def test_linear_dsvrg_matches_local_backend(local_settings, spark_dataset: Path,
                                            small_partitions) -> None:
    X, y = _stored(spark_dataset)
    local = local_fit(LINEAR_PARAMS, SEED, X, y)
    epochs: list[int] = []
    est = train_on_spark(spark_dataset, LINEAR_PARAMS, SEED,
                         lambda f, m, r: epochs.append(r["epoch"]), None, "train-linear",
                         settings=local_settings)
    assert _rel_diff(local.decision_function(X), est.decision_function(X)) <= 1e-6
    assert epochs == [1, 2, 3]
    np.testing.assert_array_equal(est.n_support_, local.n_support_)


@pytest.mark.parametrize("kind", ["local", "connect"])
def test_cancel_stops_spark_training(kind: str, request: pytest.FixtureRequest,
                                     spark_dataset: Path) -> None:
    """``should_stop`` turning true while Spark jobs run: the running work is interrupted
    (the watcher thread) and ``FitCancelled`` is raised within seconds, no job left."""
    settings = request.getfixturevalue(f"{kind}_settings")
    flag = threading.Event()
    threading.Timer(4.0, flag.set).start()
    # one local solve that never meets its tolerance: still running at 4 s, for minutes
    params = {"kernel": "rbf", "gamma": 10.0, "lam": 1e8, "tol": 1e-16, "max_iter": 200_000,
              "levels": 0}
    t0 = time.monotonic()
    with pytest.raises(FitCancelled):
        train_on_spark(spark_dataset, params, SEED, None, flag.is_set, f"cancel-train-{kind}",
                       settings=settings, poll_seconds=0.2)
    assert flag.is_set()
    assert time.monotonic() - t0 < 60
    if kind == "local":
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        assert sc is not None and list(sc.statusTracker().getActiveJobsIds()) == []
        assert _cache_is_empty()


def _cache_is_empty() -> bool:
    """Whether this process's classic session holds no cached DataFrame."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    return bool(spark._jsparkSession.sharedState().cacheManager().isEmpty())


def test_level_outputs_are_not_left_cached(local_settings, spark_dataset: Path) -> None:
    """Each level's output is cached while the next level reads it and dropped after; the
    last one once the support vectors are collected (a long-lived session must not fill
    up job after job)."""
    levels: list[int] = []
    train_on_spark(spark_dataset, KERNEL_PARAMS, SEED, lambda f, m, r: levels.append(r["level"]),
                   None, "train-cache", settings=local_settings)
    assert levels == [2, 1]
    assert _cache_is_empty()


def _write_sparse(directory: Path, X: np.ndarray, y: np.ndarray) -> Path:
    """The storage contract's sparse layout (row_id, label, indices, values)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    idx = [np.flatnonzero(r).astype(np.int32) for r in X]
    vals = [r[i] for r, i in zip(X, idx, strict=True)]
    pq.write_table(pa.table({"row_id": pa.array(np.arange(len(y), dtype=np.int64)),
                             "label": pa.array(y),
                             "indices": pa.array(idx, type=pa.list_(pa.int32())),
                             "values": pa.array(vals, type=pa.list_(pa.float64()))}),
                   directory / "data.parquet", row_group_size=128)
    (directory / "meta.json").write_text(json.dumps(
        {"layout": "sparse", "n_features": int(X.shape[1]), "label_type": "int"}))
    return directory


def test_sparse_layout_matches_local_csr_fit(local_settings, spark_dataset: Path,
                                             tmp_path: Path) -> None:
    import scipy.sparse as sp

    X, y = _stored(spark_dataset)
    X = X.copy()
    X[::3, 1] = 0.0  # real implicit zeros
    sparse_dir = _write_sparse(tmp_path / "sparse", X, y)
    local = local_fit(KERNEL_PARAMS, SEED, sp.csr_matrix(X), y)
    est = train_on_spark(sparse_dir, KERNEL_PARAMS, SEED, None, None, "train-sparse",
                         settings=local_settings)
    assert est.fit_info_["sparse_input"] is True
    assert _rel_diff(local.decision_function(X), est.decision_function(X)) <= 1e-6


def _three_classes(y: np.ndarray) -> np.ndarray:
    """svmguide1's label 1 split in two by row parity: a third class."""
    y3 = np.asarray(y).copy()
    y3[(y3 == 1) & (np.arange(len(y3)) % 2 == 0)] = 2
    return y3


@pytest.mark.parametrize("params", [KERNEL_PARAMS, LINEAR_PARAMS], ids=["kernel", "linear"])
def test_one_vs_rest_matches_local_backend(params: dict, local_settings, spark_dataset: Path,
                                           tmp_path: Path) -> None:
    """Three classes: one binary problem per class, each its own Spark jobs, with the local
    backend's seeds; the model (support union, coefficients, w) equals the local one."""
    from tests.fixtures.spark import write_dataset

    X, y = _stored(spark_dataset)
    y3 = _three_classes(y)
    three = write_dataset(tmp_path / "three", X, y3)
    local = local_fit(params, SEED, X, y3)
    seen: list[str] = []
    est = train_on_spark(three, params, SEED, lambda f, m, r: seen.append(m), None,
                         "train-3", settings=local_settings)
    np.testing.assert_array_equal(est.classes_, [0, 1, 2])
    F_local, F_spark = local.decision_function(X), est.decision_function(X)
    assert F_spark.shape == (len(y3), 3)
    assert _rel_diff(F_local, F_spark) <= 1e-6
    np.testing.assert_array_equal(est.support_, local.support_)
    np.testing.assert_array_equal(est.n_support_, local.n_support_)
    assert est.fit_info_["n_problems"] == 3
    assert [(r["problem"], r["class"]) for r in est.history_] == \
        [(r["problem"], r["class"]) for r in local.history_]
    assert seen[0].startswith("class 0 (1/3): ") and seen[-1].startswith("class 2 (3/3): ")
