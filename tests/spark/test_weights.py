"""class_weight on Spark (local[2]): the rows carry their weights, and the model is the local
backend's with the same weights (kernel and linear, gamma "scale" included); the "auto"
search's weighted statistics from stored rows match the matrix's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from solver import SODMClassifier
from tests.fixtures.spark import write_dataset
from tests.spark.helpers import local_fit
from tests.spark.test_train import (
    KERNEL_PARAMS,
    LINEAR_PARAMS,
    SEED,
    _rel_diff,
    _stored,
    fit_both,
)
from worker.spark.spark_backend import train_on_spark

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("params", [
    {**KERNEL_PARAMS, "class_weight": "balanced"},
    {**KERNEL_PARAMS, "class_weight": {1: 3.0}},
    {**LINEAR_PARAMS, "class_weight": "balanced"},
], ids=["kernel-balanced", "kernel-dict", "linear-balanced"])
def test_class_weight_matches_local_backend(params, local_settings, spark_dataset: Path
                                            ) -> None:
    local, est, X, y = fit_both(params, spark_dataset, local_settings, "train-weights")
    f_local = local.decision_function(X)
    assert _rel_diff(f_local, est.decision_function(X)) <= 1e-6
    assert est.fit_info_["weights"]["class_weight"] == local.fit_info_["weights"][
        "class_weight"]
    assert est.fit_info_["weights"]["sum"] == pytest.approx(
        local.fit_info_["weights"]["sum"], rel=1e-12)
    # and the weights changed the model
    plain = local_fit({k: v for k, v in params.items() if k != "class_weight"}, SEED, X, y)
    assert _rel_diff(f_local, plain.decision_function(X)) > 1e-3


def test_class_weight_gamma_scale(local_settings, spark_dataset: Path) -> None:
    """gamma="scale" with weights: the variance of the scaled entries weighted by the rows'
    class weights, as the local fit computes it (to rounding)."""
    params = {**KERNEL_PARAMS, "gamma": "scale", "class_weight": "balanced"}
    local, est, X, y = fit_both(params, spark_dataset, local_settings, "train-weights-scale")
    assert est.gamma_ == pytest.approx(local.gamma_, rel=1e-12)
    unweighted = local_fit({**params, "class_weight": None}, SEED, X, y)
    assert abs(unweighted.gamma_ - local.gamma_) > 1e-6 * local.gamma_
    assert _rel_diff(local.decision_function(X), est.decision_function(X)) <= 1e-4


def test_auto_search_on_stored_rows_is_weighted(spark_dataset: Path) -> None:
    """The Spark job's "auto" search (``worker.spark.spark_auto``: stored rows scanned, weighted
    by class_weight) gives the record the local fit's search gives."""
    from solver import SODMClassifier
    from worker.spark import spark_auto

    X, y = _stored(spark_dataset)
    est = SODMClassifier(kernel="rbf", lam="auto", class_weight="balanced", random_state=SEED)
    params = {"kernel": "rbf", "lam": "auto"}
    info = spark_auto.choose(est, spark_dataset, None, y, params,
                             progress=lambda f, m: None, should_stop=lambda: False)
    local = SODMClassifier(kernel="rbf", lam="auto", class_weight="balanced",
                           random_state=SEED).choose_auto(X, y)
    assert info["cv_score"] == local["cv_score"] == "balanced_accuracy"
    assert info["gamma_scale"] == pytest.approx(local["gamma_scale"], rel=1e-12)
    assert info["chosen"] == pytest.approx(local["chosen"], rel=1e-9)
    assert [r["mean_accuracy"] for r in info["cv_table"]] == pytest.approx(
        [r["mean_accuracy"] for r in local["cv_table"]], rel=1e-9)



@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_weight_column_matches_local_backend(layout, local_settings, spark_dataset: Path,
                                             tmp_path: Path) -> None:
    """A stored feature as the rows' weights (a request's weight_column): Spark takes it out
    of the features (a dense column, or sparse entries with the later indices shifted) and
    the model is the local fit's on the other columns with those weights (rows of weight 0
    left out: the worker passes the others as ``rows``)."""
    X, y = _stored(spark_dataset)
    w = np.random.default_rng(3).integers(0, 4, size=len(y)).astype(float)
    j = 2
    if layout == "dense":
        full = np.column_stack([X[:, :2], w, X[:, 2:]])
    else:  # wide and sparse: features before and after the weight, one far after it
        lil = sp.lil_matrix((len(y), 1200))
        lil[:, :2], lil[:, 3:5], lil[:, 1100] = X[:, :2], X[:, 2:4], X[:, 1:2]
        lil[:, 2] = w[:, None]
        full = lil.tocsr()
    stored = write_dataset(tmp_path / layout, full, y)
    params = {**KERNEL_PARAMS, "class_weight": "balanced"}
    est = train_on_spark(stored, params, SEED, None, None, f"train-wcol-{layout}",
                         settings=local_settings, rows=np.flatnonzero(w > 0),
                         weight_feature=j)
    Xk = full[:, np.flatnonzero(np.arange(full.shape[1]) != j)]
    ref = SODMClassifier(**params, random_state=SEED)
    with threadpool_limits(1, user_api="blas"):  # as Spark's Python workers
        ref.fit(Xk, y, sample_weight=w)
    assert est.n_features_in_ == ref.n_features_in_ == full.shape[1] - 1
    assert _rel_diff(ref.decision_function(Xk), est.decision_function(Xk)) <= 1e-6
    assert est.fit_info_["weights"]["sum"] == pytest.approx(
        ref.fit_info_["weights"]["sum"], rel=1e-12)
