"""Identical rows merged into one weighted row before a kernel solve.

An integer weight k is the same ODM problem as k copies of the row
(:mod:`solver.core.formulation`), and more generally rows identical in features and label
with weights ``c_i`` are one row of weight ``C = sum c_i``: the copies share one margin, so
stationarity (``xi_i = M (1-theta)^2 zeta_i / (lam c_i)``) makes each copy's dual the
merged dual times ``c_i / C``, with the same ``w``, gradients and dual objective (``M``, the
problem's ``m_scale``, is kept). A kernel solve costs O(m^2) kernel values and up to
O(m^3) per factorization, so data with repeated rows (pixel colours, one-hot categories,
quantised readings) solves at a fraction of the cost with the same optimum. Coordinate
descent visits a merged row once per copy in each epoch's random order (``count``): visited
once, a heavy row lags the rows it moves and the solve needs several times the copies'
epochs (``docs/design-notes.md``; ``python -m bench.duplicates``). Rows whose
bytes differ (``0.0`` and ``-0.0``, an explicit zero in a sparse row) are kept apart, which
only forgoes a merge.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["RowGroups", "row_groups"]


@dataclass(frozen=True)
class RowGroups:
    """Groups of identical ``(x, y)`` rows: ``first`` (each group's first row, increasing),
    ``inverse`` (each row's group), ``count`` (each group's rows), ``weight`` (each group's
    summed weight) and ``share`` (each row's weight over its group's)."""

    first: np.ndarray
    inverse: np.ndarray
    count: np.ndarray
    weight: np.ndarray
    share: np.ndarray

    @property
    def size(self) -> int:
        return int(self.first.shape[0])

    def merge(self, alpha: np.ndarray) -> np.ndarray:
        """Per-row duals ``(m, 2)`` summed per group: the merged problem's point."""
        out = np.zeros((self.size, alpha.shape[1]))
        for j in range(alpha.shape[1]):
            out[:, j] = np.bincount(self.inverse, weights=alpha[:, j], minlength=self.size)
        return out

    def expand(self, alpha: np.ndarray) -> np.ndarray:
        """The merged problem's duals ``(groups, 2)`` shared out to the rows by weight."""
        return alpha[self.inverse] * self.share[:, None]

    def digest(self) -> str:
        """Names the grouping (a kernel matrix kept for these merged rows, not others)."""
        return hashlib.blake2b(self.inverse.tobytes(), digest_size=16).hexdigest()


def row_groups(X, y: np.ndarray, sample_weight: np.ndarray | None) -> RowGroups | None:
    """The groups of identical ``(x, y)`` rows of ``X`` (float64 dense or CSR) and ``y``, or
    None when every row is distinct (the solve then runs on the rows as given)."""
    m = int(y.shape[0])
    if m < 2:
        return None
    first, inverse = _sparse_groups(X, y) if sp.issparse(X) else _dense_groups(X, y)
    if first.shape[0] == m:
        return None
    w = np.ones(m) if sample_weight is None else np.asarray(sample_weight, np.float64)
    weight = np.bincount(inverse, weights=w, minlength=first.shape[0])
    count = np.bincount(inverse, minlength=first.shape[0]).astype(np.int64)
    return RowGroups(first, inverse, count, weight, w / weight[inverse])


def _dense_groups(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    Z = np.ascontiguousarray(np.column_stack([X, y]), dtype=np.float64)
    keys = Z.view(np.dtype((np.void, Z.dtype.itemsize * Z.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return _by_first_row(first, inverse.ravel())


def _sparse_groups(X: sp.csr_matrix, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    seen: dict[bytes, int] = {}
    first: list[int] = []
    inverse = np.empty(X.shape[0], dtype=np.int64)
    ptr, idx, val = X.indptr, X.indices, X.data
    for i in range(X.shape[0]):
        lo, hi = ptr[i], ptr[i + 1]
        key = y[i:i + 1].tobytes() + idx[lo:hi].tobytes() + val[lo:hi].tobytes()
        g = seen.setdefault(key, len(first))
        if g == len(first):
            first.append(i)
        inverse[i] = g
    return np.asarray(first, dtype=np.int64), inverse


def _by_first_row(first: np.ndarray, inverse: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Groups renumbered in the order of their first rows (the merged rows keep the rows'
    order, so a problem without copies is the problem as given)."""
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    return first[order].astype(np.int64), rank[inverse].astype(np.int64)
