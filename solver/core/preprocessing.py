"""Preprocessing that lives inside a model: min-max feature scaling and binary label encoding.

The SODM paper normalizes every feature to [0, 1] before training; doing it inside the
estimator (fitted on the training data only) means a saved model applies exactly the same
transform at prediction time. Sparse CSR input stays sparse whenever the shift is zero,
which is the usual case for non-negative sparse data (every column with an implicit zero has
minimum 0, so only the scale changes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["MinMaxScaler", "encode_binary", "append_constant"]


@dataclass
class MinMaxScaler:
    """Per-feature affine map ``x -> (x - min) * scale`` onto [0, 1] on the training data.

    ``scale = 1 / (max - min)``; a constant feature (max == min) gets ``scale = 1`` so it maps
    to 0 on the training data instead of dividing by zero. New data outside the training
    range is not clipped (it maps outside [0, 1]), like scikit-learn's MinMaxScaler.
    """

    min_: np.ndarray
    scale_: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray | sp.csr_matrix) -> MinMaxScaler:
        """Learn the per-feature minimum and range of ``X`` (implicit zeros of CSR count)."""
        return cls.from_range(*cls.column_range(X))

    @staticmethod
    def column_range(X: np.ndarray | sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        """Per-feature minimum and maximum of ``X`` (implicit zeros of CSR count)."""
        if sp.issparse(X):
            lo = np.asarray(X.min(axis=0).toarray()).ravel().astype(np.float64)
            hi = np.asarray(X.max(axis=0).toarray()).ravel().astype(np.float64)
        else:
            lo = np.min(X, axis=0).astype(np.float64)
            hi = np.max(X, axis=0).astype(np.float64)
        return lo, hi

    @classmethod
    def from_range(cls, lo: np.ndarray, hi: np.ndarray) -> MinMaxScaler:
        """The map onto [0, 1] of features whose minima are ``lo`` and maxima ``hi``."""
        lo = np.asarray(lo, dtype=np.float64)
        rng = np.asarray(hi, dtype=np.float64) - lo
        with np.errstate(divide="ignore", over="ignore"):
            scale = np.where(rng > 0, 1.0 / np.where(rng > 0, rng, 1.0), 1.0)
        if not np.all(np.isfinite(scale)):
            raise ValueError("feature ranges are too small to scale (1/range overflows)")
        return cls(min_=lo, scale_=scale)

    @property
    def n_features(self) -> int:
        return int(self.min_.shape[0])

    def transform(self, X: np.ndarray | sp.csr_matrix) -> np.ndarray | sp.csr_matrix:
        """Apply the map; float64 result (CSR stays CSR; shifted columns gain entries)."""
        if X.shape[1] != self.n_features:
            raise ValueError(
                f"X has {X.shape[1]} features, the scaler was fitted with {self.n_features}"
            )
        if not sp.issparse(X):
            return (np.asarray(X, dtype=np.float64) - self.min_) * self.scale_
        X = sp.csr_matrix(X, dtype=np.float64, copy=True)
        X.data *= self.scale_[X.indices]
        shift = -self.min_ * self.scale_
        shifted = np.flatnonzero(shift != 0.0)
        if shifted.size:
            # Columns whose minimum is not zero: every row gets the constant shift there
            # (implicit zeros included), so those columns become dense.
            n = X.shape[0]
            rows = np.repeat(np.arange(n), shifted.size)
            cols = np.tile(shifted, n)
            vals = np.tile(shift[shifted], n)
            X = (X + sp.csr_matrix((vals, (rows, cols)), shape=X.shape)).tocsr()
        X.sort_indices()
        return X


def encode_binary(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Map labels to -1/+1: ``classes[0]`` (the smaller label) -> -1, ``classes[1]`` -> +1."""
    if len(classes) != 2:
        raise ValueError(f"binary encoding needs exactly 2 classes, got {len(classes)}")
    return np.where(y == classes[1], 1.0, -1.0)


def append_constant(X: np.ndarray | sp.csr_matrix, value: float = 1.0):
    """Append a constant feature (the paper's bias-free model gains an intercept this way)."""
    n = X.shape[0]
    if sp.issparse(X):
        col = sp.csr_matrix(np.full((n, 1), value, dtype=np.float64))
        return sp.hstack([X, col], format="csr")
    return np.hstack([np.asarray(X, dtype=np.float64), np.full((n, 1), value)])
