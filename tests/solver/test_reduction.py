"""The support-vector budget: projection onto fewer support vectors, in the estimators, in
build_fitted (the Spark path) and through a model file."""

from __future__ import annotations

import lzma
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file, make_blobs

from solver import ODMClassifier, SODMClassifier
from solver.core.kernels import Kernel, kernel_matrix
from solver.estimators import build_fitted
from solver.exact.reduction import project_support
from solver.io.model_io import dumps, loads

DATA = Path(__file__).resolve().parents[3] / "shared" / "datasets"


@pytest.fixture(scope="module")
def svmguide1():
    with lzma.open(DATA / "svmguide1.xz", "rb") as fh:
        X, y = load_svmlight_file(fh, n_features=4)
    return X.toarray()[::2], y[::2]


def _rkhs_error(K: np.ndarray, c: np.ndarray, keep: np.ndarray, b: np.ndarray) -> float:
    """||f - f_B||_H^2 with f = sum_i c_i k(x_i, .), f_B = sum_j b_j k(x_keep_j, .)."""
    d = -c.copy()
    d[keep] += b
    return float(d @ K @ d)


def test_projection_is_the_closest_function_on_the_kept_rows():
    X, _ = make_blobs(n_samples=200, centers=3, n_features=3, random_state=0)
    kernel = Kernel("rbf", gamma=0.3)
    c = np.random.default_rng(1).normal(size=200)
    keep, b = project_support(X, c[None, :], kernel, 60, seed=4)
    assert keep.shape == (60,) and b.shape == (1, 60) and np.all(np.diff(keep) > 0)
    K = kernel_matrix(kernel, X)
    err = _rkhs_error(K, c, keep, b[0])
    # the orthogonal projection beats keeping the same rows with their own coefficients,
    # and any perturbation of its coefficients
    assert err < _rkhs_error(K, c, keep, c[keep])
    for eps in np.random.default_rng(2).normal(size=(5, 60)) * 1e-3:
        assert err <= _rkhs_error(K, c, keep, b[0] + eps)
    # a function already in the span of the kept rows is reproduced exactly
    c2 = np.zeros(200)
    c2[keep] = c[keep]
    keep2, b2 = project_support(X, c2[None, :], kernel, 60, seed=4)
    np.testing.assert_array_equal(keep2, keep)
    f2 = K[:, keep] @ c[keep]
    np.testing.assert_allclose(K[:, keep] @ b2[0], f2, atol=1e-5 * np.abs(f2).max())


def test_within_the_budget_nothing_changes():
    X = np.random.default_rng(0).random((30, 2))
    c = np.arange(60.0).reshape(2, 30)
    keep, b = project_support(X, c, Kernel("rbf", gamma=1.0), 30, seed=0)
    np.testing.assert_array_equal(keep, np.arange(30))
    np.testing.assert_array_equal(b, c)


@pytest.mark.parametrize("cls", [ODMClassifier, SODMClassifier])
def test_budgeted_model_keeps_its_predictions(svmguide1, cls):
    X, y = svmguide1
    kw = dict(lam=1e3, theta=0.2, random_state=0)
    full = cls(**kw).fit(X, y)
    n_sv = full.support_vectors_.shape[0]
    budget = n_sv // 3
    small = cls(max_support_vectors=budget, **kw).fit(X, y)
    assert small.support_vectors_.shape[0] == budget == small.dual_coef_.shape[1]
    assert set(small.support_) <= set(full.support_)
    np.testing.assert_array_equal(small.n_support_, full.n_support_)
    agree = np.mean(small.predict(X) == full.predict(X))
    assert agree >= 0.97
    assert small.score(X, y) >= full.score(X, y) - 0.01
    # the same budget through build_fitted (how the Spark backend makes its model)
    rebuilt = build_fitted(cls(max_support_vectors=budget, **kw), classes=full.classes_,
                           n_features_in=X.shape[1], scaler_min=full._scaler.min_,
                           scaler_scale=full._scaler.scale_, gamma=full.gamma_,
                           support_vectors=full.support_vectors_, dual_coef=full.dual_coef_,
                           support=full.support_, n_support=full.n_support_)
    np.testing.assert_array_equal(rebuilt.support_, small.support_)
    np.testing.assert_allclose(rebuilt.dual_coef_, small.dual_coef_, rtol=1e-10, atol=1e-12)
    # a model file keeps the reduced model as it is
    back = loads(dumps(small))
    np.testing.assert_array_equal(back.support_, small.support_)
    np.testing.assert_allclose(back.decision_function(X), small.decision_function(X))


def test_budget_must_be_a_positive_int():
    X, y = make_blobs(n_samples=40, centers=2, random_state=0)
    with pytest.raises(ValueError, match="max_support_vectors"):
        ODMClassifier(max_support_vectors=0).fit(X, y)
