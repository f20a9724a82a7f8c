"""SODM Algorithm 2 (DSVRG on the linear ODM primal) against the exact linear dual solver."""

from __future__ import annotations

import lzma
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from solver.core.formulation import (
    ODMParams,
    instance_gradients_linear,
    primal_gradient_linear,
    primal_objective_linear,
)
from solver.linear.dcd_linear import solve_linear_dual
from solver.linear.dsvrg import default_partitions, full_gradient, sodm_linear, svrg_inner

PARAMS = ODMParams(lam=10.0, upsilon=0.5, theta=0.2)


@pytest.fixture(scope="module")
def guide(datasets_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    with lzma.open(datasets_dir / "svmguide1.xz", "rb") as fh:
        X, y = load_svmlight_file(fh, n_features=4)
    X = X.toarray()
    X = (X - X.min(axis=0)) / np.ptp(X, axis=0)
    X = np.hstack([X, np.ones((X.shape[0], 1))])  # bias column, as the estimator appends
    return X, np.where(y == y.min(), -1.0, 1.0)


def test_converges_to_exact_linear_optimum(guide) -> None:
    X, y = guide
    for params in (PARAMS, ODMParams(lam=1000.0, upsilon=0.3, theta=0.4)):
        exact = solve_linear_dual(X, y, params, tol=1e-7, max_iter=5000)
        p_star = primal_objective_linear(exact.w, X, y, params)
        res = sodm_linear(X, y, params, n_partitions=4, n_strata=10, epochs=40, tol=1e-12,
                          random_state=0)
        p = primal_objective_linear(res.w, X, y, params)
        assert p - p_star < 1e-8 * abs(p_star)
        np.testing.assert_allclose(res.w, exact.w, rtol=1e-4, atol=1e-5)
        objs = [h["objective"] for h in res.history]
        assert objs[-1] <= objs[0]


def test_full_gradient_is_average_of_instance_gradients(guide) -> None:
    X, y = guide[0][:500], guide[1][:500]
    w = np.random.default_rng(0).normal(size=X.shape[1]) * 3
    mean_inst = instance_gradients_linear(w, X, y, PARAMS).mean(axis=0)
    np.testing.assert_allclose(full_gradient(X, y, w, PARAMS), mean_inst, atol=1e-10)
    xw = X @ w
    np.testing.assert_allclose(full_gradient(X, y, w, PARAMS, xw), mean_inst, atol=1e-10)
    np.testing.assert_allclose(full_gradient(sp.csr_matrix(X), y, w, PARAMS), mean_inst,
                               atol=1e-10)
    np.testing.assert_allclose(primal_gradient_linear(w, X, y, PARAMS), mean_inst, atol=1e-10)


def test_lazy_inner_loop_equals_explicit_svrg_steps(guide) -> None:
    X, y = guide[0][:300], guide[1][:300]
    rng = np.random.default_rng(1)
    w_t = rng.normal(size=X.shape[1])
    h = full_gradient(X, y, w_t, PARAMS)
    orders = [rng.permutation(150), 150 + rng.permutation(150)]
    eta = 0.01
    w = w_t.copy()
    for o in orders:
        for i in o:
            gi = instance_gradients_linear(w, X, y, PARAMS, idx=[i])[0]
            gt = instance_gradients_linear(w_t, X, y, PARAMS, idx=[i])[0]
            w = w - eta * (gi - gt + h)
    lazy, stopped = svrg_inner(X, y, w_t, h, orders, eta, PARAMS)
    np.testing.assert_allclose(lazy, w, rtol=1e-9, atol=1e-10)
    lazy_sp, _ = svrg_inner(sp.csr_matrix(X), y, w_t, h, orders, eta, PARAMS)
    np.testing.assert_allclose(lazy_sp, w, rtol=1e-9, atol=1e-10)
    assert stopped is False


def test_sparse_equals_dense_and_reproducible(guide) -> None:
    X, y = guide[0][:1000], guide[1][:1000]
    kw = dict(n_partitions=4, n_strata=8, epochs=5, random_state=3)
    a = sodm_linear(X, y, PARAMS, **kw)
    b = sodm_linear(sp.csr_matrix(X), y, PARAMS, **kw)
    c = sodm_linear(X, y, PARAMS, **kw)
    np.testing.assert_allclose(a.w, b.w, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(a.w, c.w)
    np.testing.assert_array_equal(a.partitions, b.partitions)
    sizes = np.bincount(a.partitions)
    assert sizes.max() - sizes.min() <= 1


def test_history_callbacks_and_stop(guide) -> None:
    X, y = guide[0][:1000], guide[1][:1000]
    Xv, yv = guide[0][1000:1500], guide[1][1000:1500]
    calls: list[tuple[float, str, dict]] = []
    res = sodm_linear(X, y, PARAMS, epochs=4, tol=1e-15, random_state=0, X_val=Xv, y_val=yv,
                      progress=lambda f, m, r: calls.append((f, m, r)))
    assert [c[0] for c in calls] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert [h["epoch"] for h in res.history] == [1, 2, 3, 4]
    for h in res.history:
        assert set(h) >= {"epoch", "objective", "grad_norm", "seconds", "val_accuracy"}
        assert 0.5 < h["val_accuracy"] <= 1.0
    assert res.history[-1]["grad_norm"] < res.history[0]["grad_norm"]
    polls = {"n": 0}

    def stop() -> bool:
        polls["n"] += 1
        return polls["n"] > 3

    st = sodm_linear(X, y, PARAMS, epochs=50, tol=1e-15, random_state=0, should_stop=stop)
    assert st.stopped is True and len(st.history) < 50
    assert np.all(np.isfinite(st.w))


def test_rejects_bad_step_size(guide) -> None:
    X, y = guide[0][:100], guide[1][:100]
    with pytest.raises(ValueError, match="step_size"):
        sodm_linear(X, y, PARAMS, step_size=1.5)


def test_default_partitions_keep_at_least_2000_rows() -> None:
    from solver.linear.dsvrg import DEFAULT_PARTITIONS, MIN_PARTITION_ROWS

    assert default_partitions(0) == default_partitions(3089) == 1  # svmguide1: plain SVRG
    assert default_partitions(2 * MIN_PARTITION_ROWS) == 2
    assert default_partitions(8844) == 4  # phishing
    assert default_partitions(10**6) == DEFAULT_PARTITIONS


def test_relative_gradient_tolerance_ends_the_epochs(guide) -> None:
    X, y = guide
    g0 = float(np.linalg.norm(full_gradient(X, y, np.zeros(X.shape[1]), PARAMS)))
    loose = sodm_linear(X, y, PARAMS, epochs=60, tol=1e-2, random_state=0)
    tight = sodm_linear(X, y, PARAMS, epochs=60, tol=1e-9, random_state=0)
    assert loose.converged and tight.converged
    assert len(loose.history) >= 2  # it stops at the first epoch meeting the tolerance
    assert loose.history[-1]["grad_norm"] <= 1e-2 * g0 < loose.history[-2]["grad_norm"]
    assert tight.history[-1]["grad_norm"] <= 1e-9 * g0
    assert len(loose.history) < len(tight.history)
    # the first epochs are the same computation
    assert loose.history[0]["objective"] == tight.history[0]["objective"]
