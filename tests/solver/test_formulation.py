"""The ODM formulation helpers: parameter validation, objectives, gradients, conventions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from solver.core.formulation import (
    ODMParams,
    dual_gradient,
    dual_objective,
    from_journal_params,
    instance_gradients_linear,
    kkt_violation_from_grad,
    lipschitz_constant,
    primal_gradient_linear,
    primal_objective_linear,
    slacks_from_alpha,
    to_journal_params,
)


def _data(m=40, n=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, n))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"lam": 0.0}, "lam"),
        ({"lam": -1.0}, "lam"),
        ({"lam": math.nan}, "lam"),
        ({"lam": math.inf}, "lam"),
        ({"upsilon": 0.0}, "upsilon"),
        ({"upsilon": -0.5}, "upsilon"),
        ({"upsilon": math.nan}, "upsilon"),
        ({"theta": 1.0}, "theta"),
        ({"theta": -0.1}, "theta"),
        ({"theta": math.inf}, "theta"),
        ({"lam": "1"}, "lam"),
    ],
)
def test_validate_names_the_bad_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ODMParams(**kwargs).validate()


def test_valid_params_and_c():
    p = ODMParams(lam=8.0, upsilon=0.5, theta=0.3).validate()
    assert p.c == pytest.approx(0.49 / 4.0)
    dz, db = p.diag_terms(10)
    assert dz == pytest.approx(10 * p.c * 0.5)
    assert db == pytest.approx(10 * p.c)
    ODMParams(lam=1.0, upsilon=1.0, theta=0.0).validate()


def test_journal_convention_round_trip_and_same_primal():
    p = ODMParams(lam=6.0, upsilon=0.4, theta=0.25)
    j = to_journal_params(p)
    assert j == {"lambda": 3.0, "mu": 0.4, "theta": 0.25}
    assert from_journal_params(j["lambda"], j["mu"], j["theta"]) == p
    # the journal primal (lambda/m) sum (xi^2 + mu eps^2)/(1-theta)^2 equals ours
    X, y = _data()
    w = np.random.default_rng(1).normal(size=X.shape[1])
    gam = y * (X @ w)
    xi = np.maximum(0, 1 - p.theta - gam)
    eps = np.maximum(0, gam - 1 - p.theta)
    journal = 0.5 * w @ w + j["lambda"] / len(y) * np.sum(xi**2 + j["mu"] * eps**2) / (
        1 - p.theta) ** 2
    assert primal_objective_linear(w, X, y, p) == pytest.approx(journal, rel=1e-12)


def test_dual_objective_and_gradient_match_explicit_qp():
    X, y = _data(m=30)
    p = ODMParams(lam=3.0, upsilon=0.6, theta=0.2)
    m = len(y)
    Q = (y[:, None] * y[None, :]) * (X @ X.T)
    c = p.c
    H = np.block([[Q + m * c * p.upsilon * np.eye(m), -Q], [-Q, Q + m * c * np.eye(m)]])
    b = np.r_[(p.theta - 1) * np.ones(m), (p.theta + 1) * np.ones(m)]
    alpha = np.abs(np.random.default_rng(2).normal(size=(m, 2)))
    a = np.r_[alpha[:, 0], alpha[:, 1]]
    expected = 0.5 * a @ H @ a + b @ a
    u = Q @ (alpha[:, 0] - alpha[:, 1])
    assert dual_objective(Q, alpha, p) == pytest.approx(expected, rel=1e-12)
    assert dual_objective(u, alpha, p) == pytest.approx(expected, rel=1e-12)
    g = dual_gradient(u, alpha, p)
    np.testing.assert_allclose(np.r_[g[:, 0], g[:, 1]], H @ a + b, rtol=1e-12, atol=1e-12)


def test_kkt_violation_projects_at_the_bound():
    alpha = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    grad = np.array([[3.0, 0.5], [-0.2, 4.0], [1.0, 0.7]])
    # zeros with positive gradients are optimal; positives need zero gradient
    assert kkt_violation_from_grad(grad, alpha) == pytest.approx(0.7)
    grad[0, 0] = -1.5
    assert kkt_violation_from_grad(grad, alpha) == pytest.approx(1.5)
    assert kkt_violation_from_grad(np.zeros((0, 2)), np.zeros((0, 2))) == 0.0


def test_slacks_from_alpha_closed_form():
    p = ODMParams(lam=2.0, upsilon=0.5, theta=0.5)
    xi, eps = slacks_from_alpha(np.array([[1.0, 0.0], [0.0, 2.0]]), p, m=4)
    np.testing.assert_allclose(xi, [4 * 0.25 / 2.0, 0.0])
    np.testing.assert_allclose(eps, [0.0, 4 * 0.25 * 2.0 / (2.0 * 0.5)])


@pytest.mark.parametrize("sparse", [False, True])
def test_average_instance_gradient_is_the_full_gradient_and_matches_finite_differences(sparse):
    X, y = _data(m=50, n=5, seed=3)
    p = ODMParams(lam=5.0, upsilon=0.3, theta=0.2)
    w = np.random.default_rng(4).normal(size=X.shape[1]) * 0.7
    Xin = sp.csr_matrix(X) if sparse else X
    G = instance_gradients_linear(w, Xin, y, p)
    full = primal_gradient_linear(w, Xin, y, p)
    np.testing.assert_allclose(G.mean(axis=0), full, rtol=1e-12, atol=1e-12)
    # both margin sides must be exercised for the check to mean anything
    gam = y * (X @ w)
    assert np.any(gam < 1 - p.theta) and np.any(gam > 1 + p.theta)
    h = 1e-6
    fd = np.array([
        (primal_objective_linear(w + h * e, X, y, p) - primal_objective_linear(w - h * e, X, y,
                                                                                p)) / (2 * h)
        for e in np.eye(len(w))
    ])
    np.testing.assert_allclose(full, fd, rtol=1e-6, atol=1e-7)
    # a subset of instances
    np.testing.assert_allclose(instance_gradients_linear(w, Xin, y, p, idx=[3, 7]), G[[3, 7]])


def test_m_scale_changes_the_loss_weight():
    X, y = _data(m=20)
    p = ODMParams(lam=4.0, upsilon=0.5, theta=0.1)
    w = np.ones(X.shape[1]) * 0.3
    # lam/(2M) with M = 2m equals lam/2 with M = m
    half = ODMParams(lam=2.0, upsilon=0.5, theta=0.1)
    assert primal_objective_linear(w, X, y, p, m_scale=40) == pytest.approx(
        primal_objective_linear(w, X, y, half))
    np.testing.assert_allclose(primal_gradient_linear(w, X, y, p, m_scale=40),
                               primal_gradient_linear(w, X, y, half))


def test_lipschitz_constant_bounds_instance_gradient_changes():
    X, y = _data(m=30, seed=5)
    p = ODMParams(lam=3.0, upsilon=0.5, theta=0.3)
    lip = lipschitz_constant(X, p)
    assert lip == pytest.approx(1 + 3.0 * np.max(np.sum(X**2, axis=1)) / 0.49)
    assert lipschitz_constant(sp.csr_matrix(X), p) == pytest.approx(lip)
    rng = np.random.default_rng(6)
    for _ in range(20):
        w1, w2 = rng.normal(size=(2, X.shape[1]))
        d = np.linalg.norm(instance_gradients_linear(w1, X, y, p)
                           - instance_gradients_linear(w2, X, y, p), axis=1)
        assert np.all(d <= lip * np.linalg.norm(w1 - w2) * (1 + 1e-12))
