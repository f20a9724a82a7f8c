"""Probabilities (``probability=True``, ``solver.calibration``): Platt's sigmoid recovered from
data drawn from it, fitted on held-out decision values (not the training rows), class
probabilities, the calibration scores, and model files."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs, make_classification

from solver import ODMClassifier, SODMClassifier
from solver.calibration import (
    calibration_scores,
    fit_platt,
    fit_sigmoid,
    platt_probabilities,
)
from solver.io.model_io import dumps, loads


def test_sigmoid_recovers_its_parameters():
    rng = np.random.default_rng(0)
    f = rng.normal(0, 2, 20000)
    a, b = -1.7, 0.4
    y = rng.random(f.size) < 1 / (1 + np.exp(a * f + b))
    a_fit, b_fit = fit_sigmoid(f, y)
    assert a_fit == pytest.approx(a, abs=0.08) and b_fit == pytest.approx(b, abs=0.08)


def test_sigmoid_on_separable_values_stays_finite():
    """Platt's smoothed targets keep A finite when the values separate the classes."""
    f = np.r_[np.linspace(-3, -1, 50), np.linspace(1, 3, 50)]
    A, B = fit_sigmoid(f, f > 0)
    assert np.isfinite(A) and np.isfinite(B) and A < 0
    p = 1 / (1 + np.exp(A * 3 + B))
    assert 0.9 < p < 1.0  # close to the smoothed target (51/52), not 1


def test_probabilities_binary_and_multiclass():
    F = np.array([-2.0, 0.0, 2.0])
    P = platt_probabilities(F, np.array([[-1.0, 0.0]]))
    np.testing.assert_allclose(P[:, 1], 1 / (1 + np.exp(-F)))
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    F3 = np.array([[2.0, -1.0, -3.0], [0.0, 0.0, 0.0]])
    P3 = platt_probabilities(F3, np.array([[-1.0, 0.0]] * 3))
    np.testing.assert_allclose(P3.sum(axis=1), 1.0)
    assert P3[0].argmax() == 0 and P3[1] == pytest.approx([1 / 3] * 3)


def test_calibration_scores_by_hand():
    classes = np.array([0, 1])
    P = np.array([[0.1, 0.9], [0.2, 0.8], [0.6, 0.4], [0.5, 0.5]])
    y = np.array([1, 0, 0, 1])
    s = calibration_scores(P, y, classes)
    assert s["brier"] == pytest.approx(np.mean([0.01, 0.64, 0.16, 0.25]))
    # top-label confidences 0.9 (right), 0.8 (wrong), 0.6 (right), 0.5 (class 0: wrong)
    assert s["ece"] == pytest.approx((abs(1 - 0.9) + abs(0 - 0.8) + abs(1 - 0.6)
                                      + abs(0 - 0.5)) / 4)
    assert sum(b["n"] for b in s["reliability"]) == 4


def test_platt_uses_held_out_values_not_training_rows():
    """A narrow kernel fits its training rows almost perfectly: a sigmoid fitted on those
    decision values would be far steeper than one fitted on held-out values."""
    X, y = make_classification(600, 6, n_informative=3, flip_y=0.15, random_state=0)
    est = ODMClassifier(gamma=5.0, lam=1e4, random_state=0, probability=True).fit(X, y)
    a_held_out = est.platt_[0, 0]
    a_train = fit_sigmoid(est.decision_function(X), y == 1)[0]
    assert a_held_out < 0 and abs(a_train) > 1.5 * abs(a_held_out)
    again = fit_platt(est, X, y, seed=int(est.fit_info_["seed"]))
    np.testing.assert_allclose(again, est.platt_)


def test_estimator_probabilities_are_calibrated_and_saved():
    X, y = make_classification(2000, 8, n_informative=4, flip_y=0.1, random_state=1)
    est = SODMClassifier(probability=True, random_state=0).fit(X[:1200], y[:1200])
    P = est.predict_proba(X[1200:])
    assert P.shape == (800, 2)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    s = calibration_scores(P, y[1200:], est.classes_)
    assert s["ece"] < 0.06 and s["brier"] < 0.15
    info = est.fit_info_["calibration"]
    assert info["method"] == "platt" and info["folds"] == 3 and info["cpu_seconds"] > 0
    back = loads(dumps(est))
    np.testing.assert_array_equal(back.predict_proba(X[1200:]), P)


def test_multiclass_probabilities_and_no_proba_by_default():
    X, y = make_blobs(n_samples=300, centers=3, cluster_std=2.0, random_state=4)
    est = ODMClassifier(probability=True, random_state=0).fit(X, y)
    P = est.predict_proba(X)
    assert P.shape == (300, 3) and est.platt_.shape == (3, 2)
    assert np.mean(P.argmax(axis=1) == y) > 0.8
    assert not hasattr(ODMClassifier().fit(X, y), "predict_proba")
    auto = ODMClassifier(lam="auto", probability=True, random_state=0).fit(X, y)
    assert auto.predict_proba(X).shape == (300, 3)
