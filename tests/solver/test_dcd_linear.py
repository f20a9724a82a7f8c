"""LIBLINEAR-style linear ODM solver: exactness, limits of the model, engineering options."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from solver.core.formulation import ODMParams, primal_gradient_linear, primal_objective_linear
from solver.core.kernels import Kernel
from solver.exact.dcd_kernel import solve_kernel_dual
from solver.linear.dcd_linear import linear_kkt_violation, solve_linear_dual

TOL = 1e-9


def _data(m=120, n=8, seed=0, density=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, n))
    if density is not None:
        X[rng.random(X.shape) > density] = 0.0
    y = np.where(X @ rng.normal(size=n) + 0.5 * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("newton", [True, False], ids=["newton", "dual-cd"])
@pytest.mark.parametrize("params", [ODMParams(lam=4.0, upsilon=0.3, theta=0.2),
                                    ODMParams(lam=300.0, upsilon=0.8, theta=0.5)])
def test_strong_duality_and_agreement_with_kernel_solver(params, newton):
    X, y = _data()
    res = solve_linear_dual(X, y, params, tol=TOL, random_state=0, max_iter=20_000,
                            newton=newton)
    assert (res.n_iter == 0 < res.newton_steps) if newton else res.newton_steps == 0
    assert res.converged and res.kkt_violation <= TOL
    np.testing.assert_allclose(res.w, X.T @ (y * (res.alpha[:, 0] - res.alpha[:, 1])),
                               atol=1e-10)
    p = primal_objective_linear(res.w, X, y, params)
    assert p == pytest.approx(-res.objective, rel=1e-8)
    # the primal gradient vanishes at the recovered w
    assert np.linalg.norm(primal_gradient_linear(res.w, X, y, params)) < 1e-6
    kr = solve_kernel_dual(X, y, Kernel("linear"), params, tol=TOL, random_state=1,
                           max_iter=20_000)
    assert kr.objective == pytest.approx(res.objective, rel=1e-9)
    np.testing.assert_allclose(kr.alpha, res.alpha, atol=1e-6)
    assert np.all(res.alpha[:, 0] * res.alpha[:, 1] == 0)
    assert linear_kkt_violation(X, y, params, res.alpha) <= 10 * TOL


@pytest.mark.parametrize("newton", [True, False], ids=["newton", "dual-cd"])
def test_ridge_regression_closed_form(newton):
    X, y = _data(m=80, n=5, seed=1)
    lam = 7.0
    res = solve_linear_dual(X, y, ODMParams(lam=lam, upsilon=1.0, theta=0.0), tol=1e-11,
                            newton=newton)
    # min 1/2||w||^2 + lam/(2M) ||Xw - y||^2
    w = np.linalg.solve(np.eye(X.shape[1]) * len(y) / lam + X.T @ X, X.T @ y)
    np.testing.assert_allclose(res.w, w, atol=1e-8)


@pytest.mark.parametrize("newton", [True, False], ids=["newton", "dual-cd"])
@pytest.mark.parametrize("theta", [0.0, 0.3])
def test_vanishing_upsilon_is_the_squared_hinge_svm(theta, newton):
    X, y = _data(m=100, n=6, seed=2)
    lam = 5.0
    M = len(y)
    res = solve_linear_dual(X, y, ODMParams(lam=lam, upsilon=1e-10, theta=theta), tol=1e-10,
                            max_iter=100_000, newton=newton)
    assert np.all(res.alpha[:, 1] < 1e-9)
    # 1/2||w||^2 + lam/(2M(1-theta)^2) sum max(0, 1-theta-y w.x)^2; with v = w/(1-theta) this
    # is (1-theta)^2 [1/2||v||^2 + C sum max(0, 1 - y v.x)^2] with C = lam/(2M(1-theta)^2)
    C = lam / (2 * M * (1 - theta) ** 2)
    svc = LinearSVC(loss="squared_hinge", dual=True, fit_intercept=False, C=C, tol=1e-10,
                    max_iter=1_000_000).fit(X, y)
    np.testing.assert_allclose(res.w, (1 - theta) * svc.coef_.ravel(), rtol=1e-6, atol=1e-8)


def test_csr_equals_dense():
    X, y = _data(m=150, n=30, seed=3, density=0.2)
    params = ODMParams(lam=20.0, upsilon=0.5, theta=0.2)
    d = solve_linear_dual(X, y, params, tol=TOL, random_state=0, newton=False)
    s = solve_linear_dual(sp.csr_matrix(X), y, params, tol=TOL, random_state=0, newton=False)
    np.testing.assert_allclose(s.alpha, d.alpha, atol=1e-12)
    np.testing.assert_allclose(s.w, d.w, atol=1e-12)
    assert s.n_iter == d.n_iter


def test_warm_start_and_shrinking_reach_the_same_optimum():
    X, y = _data(m=200, n=10, seed=4)
    params = ODMParams(lam=50.0, upsilon=0.5, theta=0.3)
    ref = solve_linear_dual(X, y, params, tol=TOL, random_state=0, shrinking=False,
                            newton=False)
    shr = solve_linear_dual(X, y, params, tol=TOL, random_state=0, shrinking=True,
                            newton=False)
    np.testing.assert_allclose(shr.alpha, ref.alpha, atol=1e-8)
    warm = solve_linear_dual(X, y, params, tol=TOL, random_state=2,
                             alpha0=np.random.default_rng(0).random((200, 2)), newton=False)
    assert warm.converged
    np.testing.assert_allclose(warm.alpha, ref.alpha, atol=1e-8)
    np.testing.assert_allclose(warm.w, ref.w, atol=1e-8)
    again = solve_linear_dual(X, y, params, tol=1e-6, alpha0=ref.alpha, newton=False)
    assert again.n_iter == 1


def test_should_stop_and_convergence_warning():
    X, y = _data(m=300, n=10, seed=5)
    params = ODMParams(lam=1e5, upsilon=0.5, theta=0.1)
    res = solve_linear_dual(X, y, params, tol=1e-12, should_stop=lambda: True, newton=False)
    assert res.stopped and not res.converged and res.n_iter == 1
    np.testing.assert_allclose(res.w, X.T @ (y * (res.alpha[:, 0] - res.alpha[:, 1])),
                               atol=1e-8)
    with pytest.warns(ConvergenceWarning):
        res = solve_linear_dual(X, y, params, tol=1e-12, max_iter=2, newton=False)
    assert not res.converged and not res.stopped


@pytest.mark.parametrize("lam", [50.0, 1e4, 1e6])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_newton_finishes_what_coordinate_descent_cannot(lam, sparse):
    # the primal finite Newton solve: a few steps to the exact optimum whatever lam; dual CD
    # needs ~4e4 epochs at lam = 1e4 here and does not converge at 1e6 in 1e5 epochs
    X, y = _data(m=200, n=10, seed=4, density=0.5 if sparse else None)
    Xin = sp.csr_matrix(X) if sparse else X
    params = ODMParams(lam=lam, upsilon=0.5, theta=0.3)
    res = solve_linear_dual(Xin, y, params, tol=1e-9, random_state=0)
    assert res.converged and res.n_iter == 0 and 0 < res.newton_steps <= 10
    assert linear_kkt_violation(X, y, params, res.alpha) <= 1e-9
    assert np.all(res.alpha >= 0) and np.all(res.alpha[:, 0] * res.alpha[:, 1] == 0)
    # strong duality: the primal objective at w equals minus the dual objective
    assert primal_objective_linear(res.w, X, y, params) == pytest.approx(-res.objective,
                                                                         rel=1e-9)
    if lam == 50.0:
        cd = solve_linear_dual(X, y, params, tol=1e-10, random_state=0, newton=False)
        np.testing.assert_allclose(res.alpha, cd.alpha, atol=1e-8)
    # warm-started from its own optimum it returns at once
    again = solve_linear_dual(Xin, y, params, tol=1e-9, alpha0=res.alpha)
    assert again.newton_steps <= 2 and again.converged


def test_many_features_use_coordinate_descent():
    from solver.linear.dcd_linear import _NEWTON_MAX_FEATURES

    X, y = _data(m=40, n=_NEWTON_MAX_FEATURES + 1, seed=6, density=0.01)
    res = solve_linear_dual(sp.csr_matrix(X), y, ODMParams(lam=10.0), tol=1e-8)
    assert res.newton_steps == 0 and res.n_iter > 0 and res.converged


@pytest.mark.parametrize(("params", "kwargs", "name"), [
    (ODMParams(lam=-2.0), {}, "lam"),
    (ODMParams(upsilon=0.0), {}, "upsilon"),
    (ODMParams(theta=-0.5), {}, "theta"),
    (ODMParams(), {"tol": -1.0}, "tol"),
    (ODMParams(), {"max_iter": 0}, "max_iter"),
])
def test_bad_arguments(params, kwargs, name):
    X, y = _data(m=10)
    with pytest.raises(ValueError, match=name):
        solve_linear_dual(X, y, params, **kwargs)


def test_newton_updates_its_hessian_by_the_rows_that_changed_side(monkeypatch, datasets_dir):
    # svmguide1: after the first step fewer rows change side than lie outside the band, so
    # the d x d Hessian is updated by those rows instead of rebuilt; the optimum is the same
    import lzma

    from sklearn.datasets import load_svmlight_file

    import solver.linear.newton_linear as nl

    with lzma.open(datasets_dir / "svmguide1.xz", "rb") as fh:
        X, y = load_svmlight_file(fh, n_features=4)
    X = X.toarray()
    X = np.hstack([(X - X.min(axis=0)) / np.ptp(X, axis=0), np.ones((X.shape[0], 1))])
    y = np.where(y == y.min(), -1.0, 1.0)
    rows: list[int] = []
    gram = nl._weighted_gram
    monkeypatch.setattr(nl, "_weighted_gram",
                        lambda X, idx, wts: rows.append(idx.size) or gram(X, idx, wts))
    params = ODMParams(lam=1000.0, upsilon=0.5, theta=0.8)
    res = solve_linear_dual(X, y, params, tol=1e-9, random_state=0)
    assert res.converged and res.n_iter == 0 and res.newton_steps >= 3
    assert rows[0] == len(y) and min(rows[1:]) < len(y) // 10
    cd = solve_linear_dual(X, y, params, tol=1e-9, random_state=0, newton=False,
                           max_iter=100_000)
    np.testing.assert_allclose(res.w, cd.w, rtol=1e-7, atol=1e-8)
