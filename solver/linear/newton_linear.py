"""Exact linear ODM in the primal: a finite Newton method (Keerthi & DeCoste's L2-SVM-MFN).

With the dual's per-instance diagonal terms ``(dz_i, db_i)`` (``params.diag_terms(M)`` divided
by the instance's weight, ``solver.core.formulation.diag_vectors``) the primal is

    P(w) = 1/2 ||w||^2 + sum_i [ xi_i^2 / (2 dz_i) + eps_i^2 / (2 db_i) ],
    xi_i = max(0, 1 - theta - u_i),  eps_i = max(0, u_i - 1 - theta),  u_i = y_i w.x_i,

a strongly convex, piecewise-quadratic function (the ODM loss is a squared hinge on each side
of the band).  Each step solves the Newton system of the quadratic piece at ``w`` (identity
plus ``X_S' diag(1/dz or 1/db) X_S`` over the instances outside the band, a dense ``d x d``
Cholesky) and moves to the exact minimizer of ``P`` along the direction (a safeguarded 1-D
Newton on the piecewise-linear derivative).  When the sets below and above the band stop
changing the step lands on the optimum, so a few steps finish the problem whatever its
conditioning; dual coordinate descent instead needs more epochs the larger ``lam`` is.
The Hessian is updated by the rows whose weight changed (``+-x_i x_i'``) when they are fewer
than half the rows outside the band, which after the first step they usually are (few rows
change side near the optimum; ``tests/solver/test_dcd_linear.py`` checks it on svmguide1),
and the line search is compiled; the first step, from ``w = 0`` where every row has the
same weight, is one ``X' X``.

The dual solution follows from the KKT closed forms ``zeta_i = xi_i / dz``,
``beta_i = eps_i / db`` (so ``zeta_i * beta_i = 0``), which is how :mod:`solver.linear.dcd_linear`
uses this module: for data with few features it tries the Newton solve first and checks the
recovered dual against the same KKT tolerance, falling back to coordinate descent.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.linalg import cho_factor, cho_solve

__all__ = ["primal_newton", "alpha_from_margins", "warmup"]

_GTOL = 1e-12  # relative gradient or Newton step size treated as zero


def alpha_from_margins(u: np.ndarray, dz: np.ndarray, db: np.ndarray,
                       theta: float) -> np.ndarray:
    """The dual pairs of the KKT closed forms, ``(m, 2)`` = [xi / dz, eps / db]."""
    return np.column_stack((np.maximum(0.0, 1.0 - theta - u) / dz,
                            np.maximum(0.0, u - 1.0 - theta) / db))


def warmup() -> None:
    """Compile (or load from numba's cache) :func:`_line_search` for the types the solver
    passes."""
    v = np.zeros(2)
    _line_search(0.0, 1.0, v, v, v, v, 0.1)


@njit(cache=True)
def _line_search(wd: float, dd: float, u: np.ndarray, v: np.ndarray, a_lo: np.ndarray,
                 a_hi: np.ndarray, theta: float) -> float:
    """argmin_t P(w + t d): root of the increasing piecewise-linear derivative
    ``phi'(t) = w.d + t d.d + sum_lo a_lo_i (z - 1 + theta) v + sum_hi a_hi_i (z-1-theta) v``
    with ``z = u + t v``; Newton steps kept inside the bracket, bisection otherwise
    (compiled: one pass over the instances per trial step)."""
    lo_t, hi_t, t = 0.0, np.inf, 1.0
    for _ in range(100):
        dphi = wd + t * dd
        ddphi = dd
        for i in range(u.shape[0]):
            z = u[i] + t * v[i]
            if z < 1.0 - theta:
                dphi += a_lo[i] * (z - 1.0 + theta) * v[i]
                ddphi += a_lo[i] * v[i] * v[i]
            elif z > 1.0 + theta:
                dphi += a_hi[i] * (z - 1.0 - theta) * v[i]
                ddphi += a_hi[i] * v[i] * v[i]
        if dphi > 0:
            hi_t = t
        elif dphi < 0:
            lo_t = t
        else:
            return t
        t_new = t - dphi / ddphi
        if not lo_t < t_new < hi_t:
            t_new = 0.5 * (lo_t + hi_t) if np.isfinite(hi_t) else 2.0 * t
        if abs(t_new - t) <= 1e-15 * max(1.0, abs(t)):
            return t_new
        t = t_new
    return t


def _weighted_gram(X, idx: np.ndarray, wts: np.ndarray) -> np.ndarray:
    """``X_idx' diag(wts) X_idx`` as a dense ``d x d`` array (weights of any sign)."""
    if idx.size == X.shape[0] and wts.size and np.all(wts == wts[0]):
        G = X.T @ X  # every row, one weight (the first step from w = 0): no row copies
        G = np.asarray(G.todense()) if sp.issparse(G) else G
        return wts[0] * G
    Xi = X[idx]
    if sp.issparse(Xi):
        return np.asarray((Xi.T @ sp.diags(wts) @ Xi).todense())
    return (Xi * wts[:, None]).T @ Xi


def primal_newton(X, y: np.ndarray, dz: np.ndarray, db: np.ndarray, theta: float,
                  w0: np.ndarray, *,
                  max_iter: int = 50) -> tuple[np.ndarray, int]:
    """Minimize the linear ODM primal from ``w0``; returns ``(w, Newton steps)``.

    Stops when a full step lands on a point whose sets of instances below and above the band
    are those the step was computed from (it minimizes that quadratic piece, so it is the
    optimum), when the gradient or the Newton step vanishes to rounding, or after
    ``max_iter`` steps.
    """
    a_lo, a_hi = 1.0 / dz, 1.0 / db
    n = X.shape[1]
    w = np.array(w0, dtype=np.float64)
    full_step_from = None  # the sets a full step was taken from
    steps = 0
    H: np.ndarray | None = None
    s_prev = np.zeros(0)
    while steps < int(max_iter):
        u = y * np.asarray(X @ w).ravel()
        low = u < 1.0 - theta
        high = u > 1.0 + theta
        state = (low.tobytes(), high.tobytes())
        if state == full_step_from:
            break  # w minimizes the quadratic piece it lies on: the optimum
        steps += 1
        r = np.zeros_like(u)
        r[low] = a_lo[low] * (u[low] - 1.0 + theta)
        r[high] = a_hi[high] * (u[high] - 1.0 - theta)
        g = w + np.asarray(X.T @ (y * r)).ravel()
        if np.abs(g).max() <= _GTOL * max(1.0, np.abs(w).max()):
            break  # stationary to rounding (instances exactly on a band edge can flip sets)
        # Hessian I + X' diag(s) X of this piece; from the previous one by the rows whose
        # weight changed when they are fewer than the rows outside the band
        s = np.where(low, a_lo, np.where(high, a_hi, 0.0))
        changed = np.flatnonzero(s != s_prev) if H is not None else None
        if changed is None or 2 * changed.size > np.count_nonzero(s):
            S = np.flatnonzero(s)
            H = _weighted_gram(X, S, s[S])
            H[np.diag_indices(n)] += 1.0
        elif changed.size:
            H = H + _weighted_gram(X, changed, s[changed] - s_prev[changed])
        s_prev = s
        d = -cho_solve(cho_factor(H, lower=True, check_finite=False), g, check_finite=False)
        if np.abs(d).max() <= _GTOL * max(1.0, np.abs(w).max()):
            break  # the step is rounding noise: w is the optimum to machine precision
        v = y * np.asarray(X @ d).ravel()
        t = _line_search(float(w @ d), float(d @ d), u, v, a_lo, a_hi, theta)
        w += t * d
        full_step_from = state if abs(t - 1.0) <= 1e-9 else None
    return w, steps
