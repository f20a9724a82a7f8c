"""Margin distribution statistics of a fitted ODM model on labelled data.

ODM optimizes the margin distribution (mean fixed at 1, small variance, deviations inside the
band ``[1 - theta, 1 + theta]`` free), so these numbers say how well a model achieved that on
held-out data. Margins are ``y_i * f(x_i)`` with ``y_i`` mapped to -1/+1 (``classes_[1]`` is
+1). For more than two classes every one-vs-rest problem contributes its own binary margins
``y_ik f_k(x_i)`` (``y_ik = +1`` iff x_i is of class k), n * n_classes values in all, which is
what each binary ODM was trained to shape. The output is plain JSON (floats, ints, lists).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["margin_stats", "margins", "served_margins"]

_QUANTILES = (("min", 0.0), ("p05", 0.05), ("p25", 0.25), ("p50", 0.5), ("p75", 0.75),
              ("p95", 0.95), ("max", 1.0))


def margins(estimator, X, y) -> np.ndarray:
    """The margins y*f(x) (flattened over one-vs-rest problems for more than two classes)."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError("y must be one-dimensional")
    if y.shape[0] == 0:
        raise ValueError("margin_stats needs at least one sample")
    classes = np.asarray(estimator.classes_)
    idx = np.searchsorted(classes, y)
    idx = np.clip(idx, 0, len(classes) - 1)
    unknown = classes[idx] != y
    if np.any(unknown):
        raise ValueError(f"y holds labels the model does not know: {np.unique(y[unknown])[:5]}")
    F = np.asarray(estimator.decision_function(X), dtype=np.float64)
    if F.shape[0] != y.shape[0]:
        raise ValueError(f"X has {F.shape[0]} rows but y has {y.shape[0]}")
    if F.ndim == 1:
        return np.where(idx == 1, 1.0, -1.0) * F
    Y = np.where(idx[:, None] == np.arange(F.shape[1])[None, :], 1.0, -1.0)
    return (Y * F).ravel()


def margin_stats(estimator, X, y, bins: int = 40) -> dict[str, Any]:
    """Mean, variance, std, quantiles, histogram and the theta band fractions of the margins.

    Returns ``{"n", "n_problems", "mean", "variance", "std", "quantiles": {min, p05, p25, p50,
    p75, p95, max}, "histogram": {"edges", "counts"}, "band": {"theta", "lower", "upper",
    "below", "inside", "above"}}``; ``inside`` counts lower <= margin <= upper.
    """
    if isinstance(bins, bool) or not isinstance(bins, int | np.integer) or bins < 1:
        raise ValueError(f"bins must be a positive int, got {bins!r}")
    m = margins(estimator, X, y)
    n_problems = 1 if len(estimator.classes_) == 2 else len(estimator.classes_)
    theta = getattr(estimator, "theta_", None)  # the fitted value when theta was "auto"
    theta = float(estimator.theta if theta is None else theta)
    lower, upper = 1.0 - theta, 1.0 + theta
    counts, edges = np.histogram(m, bins=int(bins))
    n = m.size
    below = float(np.count_nonzero(m < lower) / n)
    above = float(np.count_nonzero(m > upper) / n)
    return {
        "n": int(n),
        "n_problems": int(n_problems),
        "mean": float(np.mean(m)),
        "variance": float(np.var(m)),
        "std": float(np.std(m)),
        "quantiles": {k: float(np.quantile(m, q)) for k, q in _QUANTILES},
        "histogram": {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]},
        "band": {
            "theta": theta,
            "lower": lower,
            "upper": upper,
            "below": below,
            "inside": float(np.count_nonzero((m >= lower) & (m <= upper)) / n),
            "above": above,
        },
    }


def served_margins(F) -> np.ndarray:
    """The margins ``y_hat * f(x)`` of served predictions, where ``y_hat`` is the predicted
    label (no true label is known when serving): ``|f(x)|`` for two classes (``F`` of shape
    ``(n,)`` or ``(n, 1)``); for more, every one-vs-rest problem's ``y_hat_k f_k(x)`` with
    ``y_hat_k = +1`` for the predicted (argmax) class and -1 otherwise, flattened row by
    row as ``margins`` does. Comparing their distribution on live traffic with the one on
    held-out data shows a drift of the inputs without waiting for labels."""
    F = np.asarray(F, dtype=np.float64)
    if F.ndim == 1 or F.shape[1] == 1:
        return np.abs(F.reshape(-1))
    M = -F
    rows = np.arange(F.shape[0])
    top = np.argmax(F, axis=1)
    M[rows, top] = F[rows, top]
    return M.ravel()
