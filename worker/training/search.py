"""Grid search with stratified k-fold cross-validation (accuracy), cancellable.

The folds, the grid order and the choice of the best point are the same for every backend;
only ``fit_score(point, train, validation)`` differs: the local backend fits and scores
``X[train]`` / ``X[validation]`` in this process (:func:`local_fit_score`), the Spark
backend runs each fold's fit as Spark jobs and scores the fold's rows here
(:func:`spark_fit_score`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.model_selection import KFold, StratifiedKFold

from app.services.job_queue.training_jobs import grid_points
from solver.exceptions import FitCancelled

# (grid point, training row positions, validation row positions) -> validation accuracy
FitScore = Callable[[dict[str, Any], np.ndarray, np.ndarray], float]


def _folds(y: np.ndarray, k: int, seed: int):
    _, counts = np.unique(y, return_counts=True)
    if counts.min() >= k:
        return StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(
            np.zeros(len(y)), y)
    return KFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(y)))


def local_fit_score(est: Any, X: Any, y: np.ndarray, should_stop: Callable[[], bool],
                    sample_weight: np.ndarray | None = None) -> FitScore:
    """Fit ``clone(est)`` with the point on ``X[train]`` (their ``sample_weight``), score it
    on ``X[validation]``: accuracy weighted by their ``sample_weight``, balanced accuracy
    when the estimator has a ``class_weight`` (``solver.auto.search.CVWeights``)."""
    from solver.auto.search import CVWeights

    weights = CVWeights(score=sample_weight,
                        balanced=getattr(est, "class_weight", None) is not None)

    def fit_score(point: dict[str, Any], tr: np.ndarray, va: np.ndarray) -> float:
        cand = clone(est).set_params(**point)
        cand.fit(X[tr], y[tr], None if sample_weight is None else sample_weight[tr],
                 should_stop=should_stop)
        return weights.fold_score(y[va], cand.predict(X[va]), va)

    return fit_score


def drop_feature(X: Any, j: int) -> Any:
    """``X`` without feature ``j`` (dense or CSR)."""
    keep = np.flatnonzero(np.arange(X.shape[1]) != j)
    return X[:, keep] if sp.issparse(X) else np.ascontiguousarray(X[:, keep])


def spark_fit_score(spark_job: Any, params: dict[str, Any], seed: int | None,
                    train_rows: np.ndarray | None, y_train: np.ndarray,
                    weight_feature: int | None = None,
                    sample_weight: np.ndarray | None = None) -> FitScore:
    """The fold step on Spark (``worker.spark.spark_backend.SparkJob``): the fold's fit is Spark
    jobs over its training rows (``train_rows``: the job's training row ids, None for every
    row); its validation rows, one fold at a time like the held-out rows, are read here and
    scored with the fitted model, as the local backend scores ``X_train[va]``; with a weight
    column (``weight_feature``, the training rows' ``sample_weight``) the fits take it out of
    the features and the folds are scored as ``local_fit_score`` scores them."""
    from app.services.filestore import storage
    from solver.auto.search import CVWeights

    ids = np.arange(len(y_train)) if train_rows is None else np.asarray(train_rows)
    base = {k: v for k, v in params.items() if k != "random_state"}
    weights = CVWeights(score=sample_weight, balanced=base.get("class_weight") is not None)

    def fit_score(point: dict[str, Any], tr: np.ndarray, va: np.ndarray) -> float:
        cand = spark_job.fit({**base, **point}, seed, rows=ids[tr],
                             weight_feature=weight_feature)
        X_va, _ = storage.load_rows(spark_job.dataset_dir, ids[va])
        if weight_feature is not None:
            X_va = drop_feature(X_va, weight_feature)
        return weights.fold_score(y_train[va], cand.predict(X_va), va)

    return fit_score


def grid_search(y: np.ndarray, grid: dict[str, list[Any]], folds: int, seed: int,
                fit_score: FitScore, progress: Callable[[float, str], None],
                should_stop: Callable[[], bool]) -> dict[str, Any]:
    """Mean CV accuracy of every grid point; returns ``{best_params, results, folds}``.
    Row positions index ``y`` (ascending, as scikit-learn's splitters give them)."""
    points = grid_points(grid)
    splits = list(_folds(y, folds, seed))
    total = len(points) * len(splits)
    done = 0
    results = []
    for point in points:
        scores = []
        for tr, va in splits:
            if should_stop():
                raise FitCancelled("cancelled during grid search")
            scores.append(float(fit_score(point, tr, va)))
            done += 1
            progress(done / total, f"grid search {done}/{total}")
        results.append({"params": point, "mean_accuracy": float(np.mean(scores)),
                        "std_accuracy": float(np.std(scores)), "fold_accuracy": scores})
    best = max(results, key=lambda r: r["mean_accuracy"])
    return {"best_params": best["params"], "best_mean_accuracy": best["mean_accuracy"],
            "folds": folds, "results": results}
