"""Training rows taken in fixed blocks: the statistics a fit needs of all of them, and the
rows a hyperparameter search reads, without holding every row at once.

A backend whose rows live elsewhere (a Spark job's worker reads them from the stored file)
gets the same numbers as the in-memory estimator from the same blocks: ``BLOCK_ROWS``
consecutive training rows each, the last one shorter. Every statistic is combined block by
block in row order, so the two paths agree to the bit (the search's choices then agree):

- the min-max scaler: per-feature minimum and maximum (exact in any order);
- the variance of all scaled entries (``gamma="scale"``): each block's mean and centred sum
  of squares, two-pass within the block like ``np.var``, merged by Chan, Golub & LeVeque's
  pairwise update (one block gives ``np.var`` itself);
- the mean nonzeros per scaled row (the search's cost model).

:func:`scan` makes the two passes over a block source (the scaler needs the first);
:class:`LazyRows` hands the search those statistics and reads only the rows it asks for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solver.core.preprocessing import MinMaxScaler

__all__ = ["BLOCK_ROWS", "EntryMoments", "RowStats", "LazyRows", "blocks_of", "scan"]

BLOCK_ROWS = 16_384

Matrix = np.ndarray | sp.csr_matrix


@dataclass
class EntryMoments:
    """Count, mean and centred sum of squares of all entries seen (implicit zeros of CSR
    included), merged block by block."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, X: Matrix, w: np.ndarray | None = None) -> None:
        """Merge the entries of ``X`` (each row counted ``w_i`` times when given; then
        ``count`` is a weighted count)."""
        n = X.shape[0] * X.shape[1]
        if n == 0:
            return
        if w is not None:
            n, mean, m2 = _weighted_entry_moments(X, np.asarray(w, dtype=np.float64))
            if n <= 0:
                return
        elif sp.issparse(X):
            data = X.data
            mean = float(data.sum()) / n
            m2 = float(((data - mean) ** 2).sum()) + (n - data.size) * mean * mean
        else:
            mean = float(X.sum()) / n
            m2 = float(((X - mean) ** 2).sum())
        if self.count == 0:
            self.count, self.mean, self.m2 = n, mean, m2
            return
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.count * n / total
        self.count = total

    @property
    def variance(self) -> float:
        return self.m2 / self.count if self.count else 0.0


def _weighted_entry_moments(X: Matrix, w: np.ndarray) -> tuple[float, float, float]:
    """Weighted count, mean and centred sum of squares of all entries of X (row i counted
    ``w_i`` times)."""
    d = X.shape[1]
    count = float(w.sum()) * d
    if count <= 0:
        return 0.0, 0.0, 0.0
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        mean = float(np.dot(w[rows], X.data)) / count
        nnz = np.diff(X.indptr)
        m2 = float(np.dot(w[rows], (X.data - mean) ** 2)) \
            + float(np.dot(w, d - nnz)) * mean * mean
    else:
        mean = float(w @ X.sum(axis=1)) / count
        m2 = float(w @ ((X - mean) ** 2).sum(axis=1))
    return count, mean, m2


@dataclass(frozen=True)
class RowStats:
    """What a fit needs of all its training rows: their number and feature count, the
    scaler (None without scaling), the variance of all scaled entries and the mean nonzeros
    per scaled row."""

    n_rows: int
    n_features: int
    scaler: MinMaxScaler | None
    variance: float
    width: float


def blocks_of(X: Matrix, block_rows: int = BLOCK_ROWS) -> Iterator[Matrix]:
    """``X`` in consecutive blocks of ``block_rows`` rows (one empty block for no rows)."""
    n = X.shape[0]
    for start in range(0, max(n, 1), block_rows):
        yield X[start:start + block_rows]


def _nnz(X: Matrix) -> int:
    return int(X.nnz) if sp.issparse(X) else int(np.count_nonzero(X))


def scan(blocks: Callable[[], Iterable[Matrix]], *, scale: bool = True,
         weights: np.ndarray | None = None) -> RowStats:
    """The statistics of the rows that ``blocks()`` yields (called once per pass, each time
    the same blocks in the same order): a range pass when ``scale``, then a moments pass
    over the scaled blocks (the variance weighted by the rows' ``weights`` when given, as
    ``solver.core.training.weighted_variance``)."""
    scaler = None
    if scale:
        lo = hi = None
        for X in blocks():
            if X.shape[0] == 0:
                continue
            b_lo, b_hi = MinMaxScaler.column_range(X)
            lo = b_lo if lo is None else np.minimum(lo, b_lo)
            hi = b_hi if hi is None else np.maximum(hi, b_hi)
        if lo is not None:
            scaler = MinMaxScaler.from_range(lo, hi)
    moments = EntryMoments()
    n_rows = nnz = 0
    n_features = 0
    for X in blocks():
        n_features = X.shape[1]
        Xs = scaler.transform(X) if scaler is not None and X.shape[0] else X
        moments.add(Xs, None if weights is None else weights[n_rows:n_rows + Xs.shape[0]])
        n_rows += Xs.shape[0]
        nnz += _nnz(Xs)
    return RowStats(n_rows, n_features, scaler, moments.variance, nnz / max(1, n_rows))


class LazyRows:
    """Scaled training rows read on demand: ``stats`` of all ``stats.n_rows`` rows (a
    :class:`RowStats`, or a function that scans them, called on first use) and
    ``read(positions)``, the raw rows at sorted training positions (0-based, in that
    order). ``rows_read`` counts what was read."""

    def __init__(self, stats: RowStats | Callable[[], RowStats],
                 read: Callable[[np.ndarray], Matrix]) -> None:
        self._stats = stats
        self._read = read
        self.rows_read = 0

    @property
    def stats(self) -> RowStats:
        if not isinstance(self._stats, RowStats):
            self._stats = self._stats()
        return self._stats

    @property
    def shape(self) -> tuple[int, int]:
        return self.stats.n_rows, self.stats.n_features

    def load(self, positions: np.ndarray) -> Matrix:
        """The scaled rows at ``positions`` (sorted, distinct)."""
        X = self._read(positions)
        if X.shape[0] != len(positions):
            raise ValueError(f"read {X.shape[0]} rows for {len(positions)} positions")
        self.rows_read += X.shape[0]
        scaler = self.stats.scaler
        return scaler.transform(X) if scaler is not None and X.shape[0] else X
