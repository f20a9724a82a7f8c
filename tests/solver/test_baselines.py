"""Baselines (Ca-ODM, DiP-ODM, DC-ODM, ODM-SVRG) on svmguide1 with its official test set."""

from __future__ import annotations

import lzma
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from solver.baselines import ca_odm, dc_odm, dip_odm, odm_svrg
from solver.core.formulation import ODMParams, primal_objective_linear
from solver.core.kernels import Kernel
from solver.exact.dcd_kernel import kernel_decision, solve_kernel_dual
from solver.linear.dcd_linear import solve_linear_dual

KERNEL = Kernel("rbf", gamma=1.0)
PARAMS = ODMParams(lam=100.0, upsilon=0.5, theta=0.2)


def _read(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with lzma.open(path, "rb") as fh:
        X, y = load_svmlight_file(fh, n_features=4)
    return X.toarray(), np.where(y == y.min(), -1.0, 1.0)


@pytest.fixture(scope="module")
def data(datasets_dir: Path):
    X, y = _read(datasets_dir / "svmguide1.xz")
    Xt, yt = _read(datasets_dir / "svmguide1.t.xz")
    lo, span = X.min(axis=0), np.ptp(X, axis=0)
    X, Xt = (X - lo) / span, (Xt - lo) / span
    rng = np.random.default_rng(0)
    idx = rng.choice(len(y), 1500, replace=False)
    return X[idx], y[idx], Xt, yt


def _acc(X, y, alpha, Xt, yt) -> float:
    f = kernel_decision(X, KERNEL, y * (alpha[:, 0] - alpha[:, 1]), Z=Xt)
    return float(np.mean(np.where(f > 0, 1.0, -1.0) == yt))


@pytest.fixture(scope="module")
def exact_alpha(data) -> np.ndarray:
    X, y, _, _ = data
    return solve_kernel_dual(X, y, KERNEL, PARAMS, tol=1e-6, random_state=0).alpha


def test_exact_reference_accuracy(data, exact_alpha) -> None:
    X, y, Xt, yt = data
    assert _acc(X, y, exact_alpha, Xt, yt) > 0.9


def test_cascade_keeps_support_vectors_and_is_accurate(data, exact_alpha) -> None:
    X, y, Xt, yt = data
    res = ca_odm(X, y, KERNEL, PARAMS, levels=2, tol=1e-4, random_state=0, X_val=Xt,
                 y_val=yt)
    assert res.alpha.shape == (len(y), 2) and [h["level"] for h in res.history] == [2, 1, 0]
    solved = [h["n_rows_solved"] for h in res.history]
    assert solved[0] == len(y) and solved[1] <= solved[0] and solved[2] <= solved[1]
    assert _acc(X, y, res.alpha, Xt, yt) > 0.9
    assert res.history[-1]["val_accuracy"] == pytest.approx(_acc(X, y, res.alpha, Xt, yt))
    # ODM keeps most instances as support vectors, so the root is close to the exact optimum
    assert np.abs(res.alpha - exact_alpha).max() < 0.1 * np.abs(exact_alpha).max()


def test_dip_partitions_follow_kmeans_clusters(data) -> None:
    X, y, Xt, yt = data
    res = dip_odm(X, y, KERNEL, PARAMS, levels=2, n_clusters=8, tol=1e-4, random_state=0)
    assert res.strata is not None and res.strata.max() == 7
    for c in range(8):
        per = np.bincount(res.partitions[res.strata == c], minlength=4)
        assert per.max() - per.min() <= 1
    assert _acc(X, y, res.alpha, Xt, yt) > 0.9


def test_dc_final_solve_reaches_exact_optimum(data, exact_alpha) -> None:
    X, y, Xt, yt = data
    calls: list[float] = []
    res = dc_odm(X, y, KERNEL, PARAMS, levels=2, fanout=3, sample_size=500, tol=1e-6,
                 random_state=0, progress=lambda f, m, r: calls.append(f))
    assert [h["level"] for h in res.history] == [2, 1, 0]
    assert res.history[0]["partitions"] <= 9 and res.history[-1]["partitions"] == 1
    assert calls == pytest.approx([1 / 3, 2 / 3, 1.0])
    np.testing.assert_allclose(res.alpha, exact_alpha, atol=1e-4)
    assert _acc(X, y, res.alpha, Xt, yt) > 0.9


def test_baselines_honour_should_stop(data) -> None:
    X, y, _, _ = data
    for fn in (ca_odm, dc_odm):
        res = fn(X, y, KERNEL, PARAMS, tol=1e-3, random_state=0, should_stop=lambda: True)
        assert res.stopped is True and res.history == []


def test_odm_svrg_converges_to_linear_optimum(data) -> None:
    X, y, Xt, yt = data
    Xb = np.hstack([X, np.ones((len(y), 1))])
    params = ODMParams(lam=10.0, upsilon=0.5, theta=0.2)
    exact = solve_linear_dual(Xb, y, params, tol=1e-7, max_iter=5000)
    p_star = primal_objective_linear(exact.w, Xb, y, params)
    res = odm_svrg(Xb, y, params, epochs=30, tol=1e-12, random_state=0)
    assert primal_objective_linear(res.w, Xb, y, params) - p_star < 1e-8 * abs(p_star)
    again = odm_svrg(Xb, y, params, epochs=3, random_state=0)
    np.testing.assert_array_equal(again.w, odm_svrg(Xb, y, params, epochs=3,
                                                    random_state=0).w)
    acc = np.mean(np.where(np.hstack([Xt, np.ones((len(yt), 1))]) @ res.w > 0, 1, -1) == yt)
    assert acc > 0.7
