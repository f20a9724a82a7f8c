"""Identical rows merged before a kernel solve (solver/exact/duplicates.py): the groups, and
the same optimum as the rows solved one by one, from fewer rows."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification

from solver.core.formulation import ODMParams
from solver.core.kernels import Kernel, kernel_decision
from solver.exact.dcd_kernel import solve_kernel_dual
from solver.exact.duplicates import row_groups
from solver.exact.kernel_memo import KernelMemo


def _with_copies(n: int = 120, copies: int = 60, seed: int = 0):
    """Rows of which ``copies`` repeat earlier ones (some with the other label)."""
    X, y = make_classification(n_samples=n, n_features=4, n_informative=3, n_redundant=0,
                               random_state=seed)
    y = np.where(y == 1, 1.0, -1.0)
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, size=copies)
    X2, y2 = np.vstack([X, X[src]]), np.concatenate([y, y[src]])
    y2[n:n + 5] = -y2[n:n + 5]          # five copies of a row with the other label
    order = rng.permutation(len(y2))
    return X2[order], y2[order]


@pytest.mark.parametrize("sparse", [False, True])
def test_groups_are_the_identical_rows_with_the_same_label(sparse):
    X = np.array([[1.0, 0.0], [2.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 3.0], [2.0, 0.0]])
    y = np.array([1.0, 1.0, 1.0, -1.0, -1.0, 1.0])
    w = np.array([1.0, 2.0, 3.0, 1.0, 1.0, 0.5])
    g = row_groups(sp.csr_matrix(X) if sparse else X, y, w)
    assert g is not None
    # groups in the order of their first rows; row 3 has another label than rows 0 and 2
    np.testing.assert_array_equal(g.first, [0, 1, 3, 4])
    np.testing.assert_array_equal(g.inverse, [0, 1, 0, 2, 3, 1])
    np.testing.assert_allclose(g.weight, [4.0, 2.5, 1.0, 1.0])
    np.testing.assert_allclose(g.share, [0.25, 0.8, 0.75, 1.0, 1.0, 0.2])
    alpha = np.arange(12.0).reshape(6, 2)
    np.testing.assert_allclose(g.merge(alpha), [[4, 6], [12, 14], [6, 7], [8, 9]])
    assert row_groups(X[[0, 1, 3, 4]], y[[0, 1, 3, 4]], None) is None


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("lam", [10.0, 1e5])
def test_merged_solve_is_the_optimum_of_the_rows(sparse, weighted, lam):
    """Merged or not, the same dual objective, decision values and per-row duals (copies of
    one row share its dual by weight), from fewer rows."""
    X, y = _with_copies()
    w = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y)) if weighted else None
    Xs = sp.csr_matrix(X) if sparse else X
    params, kernel = ODMParams(lam=lam, theta=0.3), Kernel("rbf", gamma=0.5)
    kw = dict(tol=1e-10, max_iter=50000, random_state=0, sample_weight=w)
    merged = solve_kernel_dual(Xs, y, kernel, params, **kw)
    plain = solve_kernel_dual(Xs, y, kernel, params, merge_duplicates=False, **kw)
    groups = row_groups(X, y, w)
    assert merged.rows_solved == groups.size < plain.rows_solved == len(y)
    assert merged.converged and plain.converged
    assert merged.objective == pytest.approx(plain.objective, rel=1e-8)
    fm = kernel_decision(X, kernel, y * (merged.alpha[:, 0] - merged.alpha[:, 1]))
    fp = kernel_decision(X, kernel, y * (plain.alpha[:, 0] - plain.alpha[:, 1]))
    np.testing.assert_allclose(fm, fp, atol=1e-7 * np.abs(fp).max())
    np.testing.assert_allclose(merged.alpha, plain.alpha, atol=1e-6 * np.abs(plain.alpha).max())


def test_a_warm_start_is_merged_into_the_groups():
    """Per-row duals given as the start are summed per group: the optimum given back starts
    the merged problem at its optimum."""
    X, y = _with_copies()
    params, kernel = ODMParams(lam=100.0, theta=0.3), Kernel("rbf", gamma=0.5)
    kw = dict(tol=1e-8, max_iter=50000, random_state=0, newton=False)
    cold = solve_kernel_dual(X, y, kernel, params, **kw)
    warm = solve_kernel_dual(X, y, kernel, params, alpha0=cold.alpha, **kw)
    assert cold.n_iter > 10 and warm.n_iter == 1
    assert warm.objective == pytest.approx(cold.objective, rel=1e-12)


def test_a_kept_kernel_matrix_serves_only_the_same_grouping():
    """Two problems on the same rows whose labels group them differently (one-vs-rest) under
    one memo key: each solve gets the matrix of its own merged rows."""
    X, y = _with_copies()
    y2 = y.copy()
    y2[: len(y) // 2] *= -1.0
    params, kernel = ODMParams(lam=100.0, theta=0.3), Kernel("rbf", gamma=0.5)
    kw = dict(tol=1e-10, max_iter=50000, random_state=0)
    memo = KernelMemo(64 << 20)
    for labels in (y, y2, y):
        kept = solve_kernel_dual(X, labels, kernel, params, kernel_memo=memo.slot("fold"), **kw)
        alone = solve_kernel_dual(X, labels, kernel, params, **kw)
        assert kept.objective == pytest.approx(alone.objective, rel=1e-12)
    assert memo.computed == 2 and memo.hits == 1


def test_a_merged_row_is_updated_as_often_as_its_copies():
    """A row of many copies comes once per copy in an epoch's order: updated once per epoch,
    heavy rows lag the rest and coordinate descent needs about twice the copies' epochs."""
    X, y = make_classification(n_samples=150, n_features=4, n_informative=3, n_redundant=0,
                               random_state=0)
    y = np.where(y == 1, 1.0, -1.0)
    src = np.random.default_rng(0).integers(0, 30, size=450)   # 30 rows, ~15 copies each
    X2, y2 = np.vstack([X, X[src]]), np.concatenate([y, y[src]])
    params, kernel = ODMParams(lam=1000.0, theta=0.3), Kernel("rbf", gamma=0.5)
    kw = dict(tol=1e-6, max_iter=50000, random_state=0, newton=False)
    plain = solve_kernel_dual(X2, y2, kernel, params, merge_duplicates=False, **kw)
    merged = solve_kernel_dual(X2, y2, kernel, params, **kw)
    assert merged.rows_solved == 150
    assert merged.n_iter <= 1.2 * plain.n_iter
