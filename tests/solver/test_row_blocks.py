"""Statistics of training rows taken block by block (``solver.core.row_blocks``): the same
numbers, to the bit, as the in-memory estimator computes from the whole matrix."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from solver.core.preprocessing import MinMaxScaler
from solver.core.row_blocks import BLOCK_ROWS, LazyRows, blocks_of, scan
from solver.core.training import overall_variance


def _dense(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 5)) * [1.0, 10.0, 0.1, 3.0, 1.0] + [0.0, 5.0, -2.0, 0.0, 1e3]


def _sparse(n: int) -> sp.csr_matrix:
    X = sp.random(n, 40, density=0.05, format="csr", random_state=1)
    X.data = X.data * 4 - 1  # negative minima: scaling shifts those columns
    return X


def test_one_block_is_numpy_variance_and_many_agree_with_it():
    small = _dense(1000)
    assert overall_variance(small) == np.var(small)
    big = _dense(3 * BLOCK_ROWS + 7)
    assert overall_variance(big) == pytest.approx(np.var(big), rel=1e-12)
    S = _sparse(2 * BLOCK_ROWS + 11)
    assert overall_variance(S) == pytest.approx(np.var(S.toarray()), rel=1e-12)


@pytest.mark.parametrize("make", [_dense, _sparse], ids=["dense", "sparse"])
def test_scan_gives_the_in_memory_statistics_to_the_bit(make):
    X = make(2 * BLOCK_ROWS + 123)
    stats = scan(lambda: blocks_of(X))
    scaler = MinMaxScaler.fit(X)
    Xs = scaler.transform(X)
    assert np.array_equal(stats.scaler.min_, scaler.min_)
    assert np.array_equal(stats.scaler.scale_, scaler.scale_)
    assert stats.variance == overall_variance(Xs)
    nnz = Xs.nnz if sp.issparse(Xs) else np.count_nonzero(Xs)
    assert stats.width == nnz / X.shape[0]
    assert (stats.n_rows, stats.n_features) == X.shape
    raw = scan(lambda: blocks_of(X), scale=False)
    assert raw.scaler is None and raw.variance == overall_variance(X)


def test_lazy_rows_scale_what_they_read():
    X = _dense(500)
    stats = scan(lambda: blocks_of(X))
    rows = LazyRows(stats, lambda p: X[p])
    picked = np.array([3, 10, 499])
    assert np.array_equal(rows.load(picked), stats.scaler.transform(X[picked]))
    assert rows.rows_read == 3 and rows.shape == X.shape
    short = LazyRows(stats, lambda p: X[p[:-1]])
    with pytest.raises(ValueError, match="read 2 rows for 3"):
        short.load(picked)
