"""margin_stats against a direct numpy computation, JSON output, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from solver import ODMClassifier
from solver.margins import margin_stats


@pytest.fixture(scope="module")
def binary_model():
    X, y = make_blobs(n_samples=150, centers=[[0, 0], [2.5, 2.5]], random_state=7)
    labels = np.where(y == 1, "yes", "no")
    est = ODMClassifier(kernel="rbf", theta=0.3, random_state=0).fit(X, labels)
    return est, X, labels


def _plain(obj) -> bool:
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in obj.items())
    if isinstance(obj, list):
        return all(_plain(v) for v in obj)
    return type(obj) in (int, float)


def test_binary_stats_match_numpy(binary_model):
    est, X, labels = binary_model
    stats = margin_stats(est, X, labels, bins=25)
    m = np.where(labels == "yes", 1.0, -1.0) * est.decision_function(X)
    assert stats["n"] == len(X) and stats["n_problems"] == 1
    assert stats["mean"] == pytest.approx(m.mean(), rel=1e-12)
    assert stats["variance"] == pytest.approx(m.var(), rel=1e-12)
    assert stats["std"] == pytest.approx(m.std(), rel=1e-12)
    q = stats["quantiles"]
    expected = np.quantile(m, [0, 0.05, 0.25, 0.5, 0.75, 0.95, 1])
    got = [q[k] for k in ("min", "p05", "p25", "p50", "p75", "p95", "max")]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    counts, edges = np.histogram(m, bins=25)
    assert stats["histogram"]["counts"] == counts.tolist()
    np.testing.assert_allclose(stats["histogram"]["edges"], edges, rtol=1e-12)
    band = stats["band"]
    assert band["theta"] == 0.3
    assert band["lower"] == pytest.approx(0.7) and band["upper"] == pytest.approx(1.3)
    assert band["below"] == pytest.approx(np.mean(m < 0.7))
    assert band["above"] == pytest.approx(np.mean(m > 1.3))
    assert band["inside"] == pytest.approx(np.mean((m >= 0.7) & (m <= 1.3)))
    assert band["below"] + band["inside"] + band["above"] == pytest.approx(1.0)
    # the ODM fit pulls the training margins towards 1
    assert 0.5 < stats["mean"] < 1.5


def test_output_is_plain_json(binary_model):
    est, X, labels = binary_model
    stats = margin_stats(est, X, labels)
    assert _plain(stats)
    assert json.loads(json.dumps(stats, allow_nan=False)) == stats
    assert len(stats["histogram"]["counts"]) == 40
    assert sum(stats["histogram"]["counts"]) == len(X)


def test_multiclass_pools_one_vs_rest_margins():
    X, y = make_blobs(n_samples=90, centers=[[0, 0], [3, 0], [0, 3]], random_state=8)
    est = ODMClassifier(kernel="linear", random_state=0).fit(X, y)
    stats = margin_stats(est, X, y, bins=10)
    F = est.decision_function(X)
    Y = np.where(y[:, None] == np.arange(3)[None, :], 1.0, -1.0)
    m = (Y * F).ravel()
    assert stats["n"] == 270 and stats["n_problems"] == 3
    assert stats["mean"] == pytest.approx(m.mean(), rel=1e-12)
    assert stats["histogram"]["counts"] == np.histogram(m, bins=10)[0].tolist()


def test_errors(binary_model):
    est, X, labels = binary_model
    with pytest.raises(ValueError, match="labels the model does not know"):
        margin_stats(est, X, np.where(labels == "yes", "yes", "maybe"))
    with pytest.raises(ValueError, match="bins"):
        margin_stats(est, X, labels, bins=0)
    with pytest.raises(ValueError, match="rows"):
        margin_stats(est, X, labels[:-1])
    with pytest.raises(ValueError, match="at least one sample"):
        margin_stats(est, X[:0], labels[:0])
