"""Grid search with stratified k-fold cross-validation (accuracy), cancellable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import KFold, StratifiedKFold

from app.services.jobs import grid_points
from solver.exceptions import FitCancelled


def _folds(y: np.ndarray, k: int, seed: int):
    _, counts = np.unique(y, return_counts=True)
    if counts.min() >= k:
        return StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(
            np.zeros(len(y)), y)
    return KFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(y)))


def grid_search(est: Any, X: Any, y: np.ndarray, grid: dict[str, list[Any]], folds: int,
                seed: int, progress: Callable[[float, str], None],
                should_stop: Callable[[], bool]) -> dict[str, Any]:
    """Mean CV accuracy of every grid point; returns ``{best_params, results, folds}``."""
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
            cand = clone(est).set_params(**point)
            cand.fit(X[tr], y[tr], should_stop=should_stop)
            scores.append(float(cand.score(X[va], y[va])))
            done += 1
            progress(done / total, f"grid search {done}/{total}")
        results.append({"params": point, "mean_accuracy": float(np.mean(scores)),
                        "std_accuracy": float(np.std(scores)), "fold_accuracy": scores})
    best = max(results, key=lambda r: r["mean_accuracy"])
    return {"best_params": best["params"], "best_mean_accuracy": best["mean_accuracy"],
            "folds": folds, "results": results}
