"""Held-out evaluation of a fitted classifier: accuracy, balanced accuracy (the mean of the
per-class recalls, also listed), precision, recall, F1, ROC AUC from
decision values, the confusion matrix (original label values), margin statistics, and for a
model with probabilities (Platt) their calibration error (ECE, Brier, reliability bins), and
the served-margin reference of margin monitoring."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import (
    accuracy_score,
    balanced_accuracy_score,
    confusion_matrix,
    f1_score,
    precision_score,
    recall_score,
    roc_auc_score,
    roc_curve,
)

from solver.core.training import jsonable, plain

ROC_MAX_POINTS = 200


def _auc(y: np.ndarray, classes: np.ndarray, F: np.ndarray) -> float | None:
    """Binary: AUC of f(x) for ``classes[1]``; more classes: macro mean of one-vs-rest AUCs."""
    if F.ndim == 1:
        pos = y == classes[1]
        if pos.all() or not pos.any():
            return None
        return float(roc_auc_score(pos, F))
    aucs = []
    for k, c in enumerate(classes):
        pos = y == c
        if pos.any() and not pos.all():
            aucs.append(roc_auc_score(pos, F[:, k]))
    return float(np.mean(aucs)) if aucs else None


def _roc_points(y: np.ndarray, classes: np.ndarray, F: np.ndarray) -> dict[str, Any] | None:
    """Binary ROC curve of f(x) (at most ``ROC_MAX_POINTS`` points, ends kept) for plots."""
    if F.ndim != 1:
        return None
    pos = y == classes[1]
    if pos.all() or not pos.any():
        return None
    fpr, tpr, _ = roc_curve(pos, F)
    if len(fpr) > ROC_MAX_POINTS:
        keep = np.unique(np.linspace(0, len(fpr) - 1, ROC_MAX_POINTS).round().astype(int))
        fpr, tpr = fpr[keep], tpr[keep]
    return {"fpr": [round(float(v), 5) for v in fpr], "tpr": [round(float(v), 5) for v in tpr]}


class HeldOutOutOfRange(ValueError):
    """A held-out row whose decision value is not finite: its finite values (1e308) overflow
    the model's kernel sum. A ``ValueError``, so the job fails with a 422 naming the row,
    not with an internal error (NaN and infinities are not JSON: the metrics could not be
    stored)."""


def _require_finite_decisions(F: np.ndarray, X: Any) -> None:
    bad = ~np.isfinite(F.reshape(F.shape[0], -1)).all(axis=1)
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    row = np.abs(X[i].toarray().ravel() if hasattr(X, "toarray") else np.asarray(X[i]).ravel())
    j = int(np.argmax(row)) if row.size else 0
    raise HeldOutOutOfRange(
        f"the held-out data's decision values are not finite for {int(bad.sum())} row(s), "
        f"first row {i + 1} (its largest value: feature {j + 1} = {float(X[i, j])!r}): the "
        "model's kernel sum overflows float64 on them; scale the test data as the training "
        "data (test_dataset_id / test_fraction)")


def evaluate(est: Any, X: Any, y: np.ndarray, sample_weight: np.ndarray | None = None
             ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(metrics, margin, margin reference)`` of ``est`` on labelled data X, y (original
    label values); the reference is the served-margin summary that live traffic is compared
    with (``app.services.inference.monitoring``). With the held-out rows' ``sample_weight``
    (the request's weight column) ``metrics["weighted"]`` holds the scores weighted by it,
    the ones the CV search ranked by; the others count every row once."""
    from app.services.inference.monitoring import model_theta, reference_of
    from solver.margins import margin_stats

    y = np.asarray(y)
    classes = np.asarray(est.classes_)
    F = np.asarray(est.decision_function(X), dtype=np.float64)
    _require_finite_decisions(F, X)
    idx = (F > 0).astype(np.intp) if F.ndim == 1 else np.argmax(F, axis=1)
    pred = classes[idx]
    labels = np.unique(np.concatenate([classes, np.unique(y)]))
    binary = len(classes) == 2
    avg: dict[str, Any] = ({"average": "binary", "pos_label": classes[1]} if binary
                           else {"average": "macro", "labels": classes})
    metrics: dict[str, Any] = {
        "n_test": int(len(y)),
        "accuracy": float(accuracy_score(y, pred)),
        "balanced_accuracy": float(balanced_accuracy_score(y, pred)) if len(y) else None,
        "recall_per_class": recall_per_class(y, pred, classes),
        "precision": float(precision_score(y, pred, zero_division=0, **avg)),
        "recall": float(recall_score(y, pred, zero_division=0, **avg)),
        "f1": float(f1_score(y, pred, zero_division=0, **avg)),
        "roc_auc": _auc(y, classes, F),
        "roc_curve": _roc_points(y, classes, F),
        "average": "binary" if binary else "macro",
        "positive_label": plain(classes[1]) if binary else None,
        "confusion_matrix": {
            "labels": [plain(v) for v in labels],
            "matrix": confusion_matrix(y, pred, labels=labels).tolist(),
            "rows": "true label", "columns": "predicted label",
        },
    }
    if hasattr(est, "predict_proba") and getattr(est, "platt_", None) is not None:
        from solver.calibration import calibration_scores, platt_probabilities

        metrics["calibration"] = calibration_scores(platt_probabilities(F, est.platt_), y,
                                                    classes)
    if sample_weight is not None:
        metrics["weighted"] = weighted_scores(y, pred, classes, F, sample_weight, avg)
    known = np.isin(y, classes)
    margin: dict[str, Any] = {}
    if known.any():
        Xk = X[np.flatnonzero(known)] if not known.all() else X
        margin = margin_stats(est, Xk, y[known])
    reference = reference_of(F, model_theta(est), "held-out")
    return jsonable(metrics), jsonable(margin), reference


def weighted_scores(y: np.ndarray, pred: np.ndarray, classes: np.ndarray, F: np.ndarray,
                    w: np.ndarray, avg: dict[str, Any]) -> dict[str, Any]:
    """Accuracy, balanced accuracy, precision, recall, F1 and ROC AUC with each held-out row
    counted by its weight (None where the weights are all zero)."""
    w = np.asarray(w, dtype=np.float64)
    total = float(w.sum())
    out: dict[str, Any] = {"weight_sum": total, "n_weighted": int(np.count_nonzero(w))}
    if total <= 0:
        return {**out, **dict.fromkeys(("accuracy", "balanced_accuracy", "precision", "recall",
                                        "f1", "roc_auc"))}
    kw = {"sample_weight": w, "zero_division": 0, **avg}
    auc = None
    if F.ndim == 1:
        pos = y == classes[1]
        if np.any(w[pos] > 0) and np.any(w[~pos] > 0):
            auc = float(roc_auc_score(pos, F, sample_weight=w))
    return {**out, "accuracy": float(accuracy_score(y, pred, sample_weight=w)),
            "balanced_accuracy": float(balanced_accuracy_score(y, pred, sample_weight=w)),
            "precision": float(precision_score(y, pred, **kw)),
            "recall": float(recall_score(y, pred, **kw)),
            "f1": float(f1_score(y, pred, **kw)), "roc_auc": auc}


def recall_per_class(y: np.ndarray, pred: np.ndarray, classes: np.ndarray
                     ) -> list[dict[str, Any]]:
    """Per model class: its held-out rows (``support``) and the share of them predicted as
    it (``recall``, None without rows): what a majority-class model's accuracy hides."""
    out = []
    for c in classes:
        rows = y == c
        n = int(np.count_nonzero(rows))
        out.append({"label": plain(c), "support": n,
                    "recall": float(np.mean(pred[rows] == c)) if n else None})
    return out


def n_support_vectors(est: Any) -> int:
    """Support vectors of a kernel model; instances outside the band of a linear one."""
    sv = getattr(est, "support_vectors_", None)
    if sv is not None:
        return int(sv.shape[0])
    support = getattr(est, "support_", None)
    return int(len(support)) if support is not None else 0
