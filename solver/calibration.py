"""Probabilities for ODM models: Platt scaling on held-out decision values, and its scores.

``probability=True`` on an estimator makes ``fit`` call ``fit_platt``: the same estimator
(the chosen hyperparameters, ``probability`` off) is fitted on ``folds - 1`` folds of a
stratified k-fold split of the training rows and scores the held-out fold, so every training
row gets a decision value from a model that never saw it (as LIBSVM's ``-b 1`` does); Platt's
sigmoid ``P(y = +1 | f) = 1 / (1 + exp(A f + B))`` is then fitted to those values by
maximum likelihood with Platt's smoothed targets ``(N+ + 1) / (N+ + 2)`` and
``1 / (N- + 2)`` (Platt 1999; Lin, Lin & Weng 2007). The model used for prediction is the
one fitted on all rows. More than two classes: one sigmoid per one-vs-rest problem, the
row normalized to sum 1.

``calibration_scores`` reports the expected calibration error (top-label confidence against
accuracy in equal-width bins) and the Brier score on labelled data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["PLATT_FOLDS", "fit_sigmoid", "fit_platt", "platt_probabilities",
           "calibration_scores"]

PLATT_FOLDS = 3
ECE_BINS = 10


def fit_sigmoid(f: np.ndarray, positive: np.ndarray) -> tuple[float, float]:
    """Platt's ``(A, B)`` for decision values ``f`` and boolean targets ``positive``."""
    from scipy.optimize import minimize

    f = np.asarray(f, dtype=np.float64).ravel()
    pos = np.asarray(positive, dtype=bool).ravel()
    n_pos = float(pos.sum())
    n_neg = float(len(pos) - n_pos)
    t = np.where(pos, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    scale = max(float(np.std(f)), 1e-12)  # optimize in standardized units, then map back
    g = f / scale

    def loss(ab: np.ndarray) -> tuple[float, np.ndarray]:
        z = ab[0] * g + ab[1]  # P(+) = 1 / (1 + exp(z))
        # -[t log P + (1 - t) log(1 - P)] = t log(1 + e^z) + (1 - t) log(1 + e^-z)
        val = float(np.sum(t * np.logaddexp(0.0, z) + (1.0 - t) * np.logaddexp(0.0, -z)))
        p = 0.5 * (1.0 - np.tanh(0.5 * z))  # 1 / (1 + e^z), stable
        r = t - p  # d loss / d z
        return val, np.array([float(np.dot(r, g)), float(np.sum(r))])

    b0 = np.log((n_neg + 1.0) / (n_pos + 1.0))
    res = minimize(loss, np.array([0.0, b0]), jac=True, method="L-BFGS-B",
                   options={"maxiter": 500, "gtol": 1e-10})
    a, b = (float(v) for v in res.x)
    return a / scale, b


def _problem_targets(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """``[n, n_problems]`` booleans: ``y == classes[1]`` for two classes, else per class."""
    if len(classes) == 2:
        return (y == classes[1])[:, None]
    return y[:, None] == classes[None, :]


def fit_platt(est: Any, X, y: np.ndarray, *, seed: int, folds: int = PLATT_FOLDS,
              should_stop: Callable[[], bool] | None = None,
              sample_weight: np.ndarray | None = None) -> np.ndarray:
    """``[n_problems, 2]`` Platt parameters ``(A, B)`` of a fitted estimator ``est`` from
    out-of-fold decision values of clones fitted on the other folds of ``X, y`` (with their
    rows' ``sample_weight``; the clones apply ``class_weight`` themselves)."""
    from sklearn.base import clone
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(y)
    classes = np.asarray(est.classes_)
    _, counts = np.unique(y, return_counts=True)
    k = int(min(folds, counts.min()))
    if k < 2:
        raise ValueError("probability=True needs at least two training rows of every class "
                         "(the sigmoid is fitted on held-out folds)")
    resolved = {"probability": False}
    for name in ("lam", "theta"):
        if getattr(est, name) == "auto":
            resolved[name] = float(getattr(est, f"{name}_"))
    if getattr(est, "gamma", None) == "auto":
        resolved["gamma"] = float(est.gamma_)
    F = np.zeros((len(y), 1 if len(classes) == 2 else len(classes)))
    split = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed % (2**31 - 1))
    for tr, va in split.split(np.zeros(len(y)), y):
        part = clone(est).set_params(**resolved)
        part.fit(X[tr], y[tr], None if sample_weight is None else sample_weight[tr],
                 should_stop=should_stop)
        f = np.asarray(part.decision_function(X[va]), dtype=np.float64)
        part_classes = np.asarray(part.classes_)
        if len(part_classes) != len(classes):
            raise ValueError("a class is missing from a calibration fold")
        F[va] = f[:, None] if f.ndim == 1 else f
    T = _problem_targets(y, classes)
    return np.array([fit_sigmoid(F[:, j], T[:, j]) for j in range(F.shape[1])])


def platt_probabilities(F: np.ndarray, platt: np.ndarray) -> np.ndarray:
    """Class probabilities ``[n, n_classes]`` from decision values (``[n]`` or
    ``[n, n_classes]``) and Platt parameters ``[n_problems, 2]``."""
    F = np.asarray(F, dtype=np.float64)
    F2 = F[:, None] if F.ndim == 1 else F
    z = F2 * platt[None, :, 0] + platt[None, :, 1]
    p = 0.5 * (1.0 - np.tanh(0.5 * z))
    if F.ndim == 1:
        return np.column_stack([1.0 - p[:, 0], p[:, 0]])
    return p / np.maximum(p.sum(axis=1, keepdims=True), 1e-300)


def calibration_scores(P: np.ndarray, y: np.ndarray, classes: np.ndarray,
                       bins: int = ECE_BINS) -> dict[str, Any]:
    """Expected calibration error, Brier score and the reliability bins of probabilities
    ``P`` (``[n, n_classes]``) on true labels ``y``.

    ECE: rows binned by their top probability (``bins`` equal-width bins on [0, 1]), the
    row-weighted mean of |accuracy - mean confidence| per bin. Brier: two classes, the mean
    of ``(P(classes[1]) - 1[y = classes[1]])^2``; more classes, the mean over rows of the
    squared distance to the one-hot label (the multi-class Brier score).
    """
    y = np.asarray(y)
    classes = np.asarray(classes)
    onehot = (y[:, None] == classes[None, :]).astype(np.float64)
    if len(classes) == 2:
        brier = float(np.mean((P[:, 1] - onehot[:, 1]) ** 2))
    else:
        brier = float(np.mean(np.sum((P - onehot) ** 2, axis=1)))
    conf = P.max(axis=1)
    correct = classes[np.argmax(P, axis=1)] == y
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.floor(conf * bins).astype(np.int64), 0, bins - 1)  # [k/b, (k+1)/b)
    ece = 0.0
    table = []
    for b in range(bins):
        m = which == b
        if not m.any():
            continue
        acc, cf = float(correct[m].mean()), float(conf[m].mean())
        ece += m.mean() * abs(acc - cf)
        table.append({"lower": float(edges[b]), "upper": float(edges[b + 1]),
                      "n": int(m.sum()), "accuracy": acc, "confidence": cf})
    return {"method": "platt", "ece": float(ece), "brier": brier, "bins": bins,
            "n": int(len(y)), "reliability": table}
