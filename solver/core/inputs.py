"""Input checks shared by the solver functions (the estimators validate more, earlier).

The solvers take dense float64 arrays or CSR matrices with sorted indices, labels in
{-1, +1} and optional warm-start duals ``(M, 2)``; these helpers convert and check once,
with messages that name what is wrong.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from solver.core.formulation import check_weights, default_scale


def check_X(X, *, contiguous: bool = False):
    """Float64 CSR (sorted indices) or a 2-D float64 array (C-contiguous if asked)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        X.sort_indices()
        return X
    X = np.ascontiguousarray(X, dtype=np.float64) if contiguous else np.asarray(X, np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional, got shape {X.shape}")
    return X


def check_y(y, m: int) -> np.ndarray:
    """Labels as a float64 vector of length ``m`` with values in {-1, +1}."""
    y = np.asarray(y, dtype=np.float64).ravel()
    if y.shape[0] != m:
        raise ValueError(f"X has {m} rows but y has {y.shape[0]} entries")
    if not np.all((y == 1.0) | (y == -1.0)):
        raise ValueError("y must contain only -1 and +1")
    return y


def check_Xy(X, y):
    """``check_X`` (C-contiguous) and ``check_y`` together."""
    X = check_X(X, contiguous=True)
    return X, check_y(y, X.shape[0])


def check_alpha0(alpha0, m: int) -> np.ndarray:
    """A private, finite, nonnegative ``(m, 2)`` copy of a warm start (zeros when None)."""
    if alpha0 is None:
        return np.zeros((m, 2))
    a = np.array(alpha0, dtype=np.float64, copy=True, order="C")
    if a.shape != (m, 2):
        raise ValueError(f"alpha0 must have shape ({m}, 2), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("alpha0 must be finite")
    return np.maximum(a, 0.0)


def check_dual_problem(X, y, alpha0, m_scale: float | None, tol: float, max_iter: int,
                       sample_weight=None):
    """A dual solver's inputs: ``X``, ``y``, the warm start ``alpha``, ``m_scale`` (the
    rows the loss is averaged over; ``m``, or the sum of ``sample_weight``, by default) and the
    checked positive weights (None without), with ``tol`` and ``max_iter`` checked."""

    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter!r}")
    X = check_X(X)
    m = X.shape[0]
    y = check_y(y, m)
    alpha = check_alpha0(alpha0, m)
    sw = check_weights(sample_weight, m)
    m_scale = float(default_scale(m, sw) if m_scale is None else m_scale)
    if not m_scale > 0:
        raise ValueError(f"m_scale must be > 0, got {m_scale!r}")
    return X, y, alpha, m_scale, sw


def as_generator(random_state) -> np.random.Generator:
    """A numpy ``Generator`` from None, an int, a ``SeedSequence``, a ``Generator`` or a
    legacy ``RandomState`` (which seeds a new generator with one draw)."""
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    return np.random.default_rng(random_state)
