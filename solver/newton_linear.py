"""Exact linear ODM in the primal: a finite Newton method (Keerthi & DeCoste's L2-SVM-MFN).

With the dual's diagonal terms ``(dz, db) = params.diag_terms(M)`` the primal is

    P(w) = 1/2 ||w||^2 + sum_i [ xi_i^2 / (2 dz) + eps_i^2 / (2 db) ],
    xi_i = max(0, 1 - theta - u_i),  eps_i = max(0, u_i - 1 - theta),  u_i = y_i w.x_i,

a strongly convex, piecewise-quadratic function (the ODM loss is a squared hinge on each side
of the band).  Each step solves the Newton system of the quadratic piece at ``w`` (identity
plus ``X_S' diag(1/dz or 1/db) X_S`` over the instances outside the band, a dense ``d x d``
Cholesky) and moves to the exact minimizer of ``P`` along the direction (a safeguarded 1-D
Newton on the piecewise-linear derivative).  When the sets below and above the band stop
changing the step lands on the optimum, so a few steps finish the problem whatever its
conditioning; dual coordinate descent instead needs more epochs the larger ``lam`` is.

The dual solution follows from the KKT closed forms ``zeta_i = xi_i / dz``,
``beta_i = eps_i / db`` (so ``zeta_i * beta_i = 0``), which is how :mod:`solver.dcd_linear`
uses this module: for data with few features it tries the Newton solve first and checks the
recovered dual against the same KKT tolerance, falling back to coordinate descent.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.linalg import cho_factor, cho_solve

__all__ = ["primal_newton", "alpha_from_margins"]

_GTOL = 1e-12  # relative gradient or Newton step size treated as zero


def alpha_from_margins(u: np.ndarray, dz: float, db: float, theta: float) -> np.ndarray:
    """The dual pairs of the KKT closed forms, ``(m, 2)`` = [xi / dz, eps / db]."""
    return np.column_stack((np.maximum(0.0, 1.0 - theta - u) / dz,
                            np.maximum(0.0, u - 1.0 - theta) / db))


def _line_search(wd: float, dd: float, u: np.ndarray, v: np.ndarray, a_lo: float,
                 a_hi: float, theta: float) -> float:
    """argmin_t P(w + t d): root of the increasing piecewise-linear derivative
    ``phi'(t) = w.d + t d.d + sum_lo a_lo (z - 1 + theta) v + sum_hi a_hi (z - 1 - theta) v``
    with ``z = u + t v``; Newton steps kept inside the bracket, bisection otherwise."""
    lo_t, hi_t, t = 0.0, np.inf, 1.0
    for _ in range(100):
        z = u + t * v
        low = z < 1.0 - theta
        high = z > 1.0 + theta
        vl, vh = v[low], v[high]
        dphi = wd + t * dd + a_lo * float((z[low] - 1.0 + theta) @ vl) \
            + a_hi * float((z[high] - 1.0 - theta) @ vh)
        ddphi = dd + a_lo * float(vl @ vl) + a_hi * float(vh @ vh)
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


def primal_newton(X, y: np.ndarray, dz: float, db: float, theta: float, w0: np.ndarray, *,
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
    while steps < int(max_iter):
        u = y * np.asarray(X @ w).ravel()
        low = u < 1.0 - theta
        high = u > 1.0 + theta
        state = (low.tobytes(), high.tobytes())
        if state == full_step_from:
            break  # w minimizes the quadratic piece it lies on: the optimum
        steps += 1
        r = np.zeros_like(u)
        r[low] = a_lo * (u[low] - 1.0 + theta)
        r[high] = a_hi * (u[high] - 1.0 - theta)
        g = w + np.asarray(X.T @ (y * r)).ravel()
        if np.abs(g).max() <= _GTOL * max(1.0, np.abs(w).max()):
            break  # stationary to rounding (instances exactly on a band edge can flip sets)
        S = np.flatnonzero(low | high)
        s = np.where(low[S], a_lo, a_hi)
        XS = X[S]
        if sp.issparse(XS):
            H = np.asarray((XS.T @ sp.diags(s) @ XS).todense())
        else:
            H = XS.T @ (XS * s[:, None])
        H[np.diag_indices(n)] += 1.0
        d = -cho_solve(cho_factor(H, lower=True, overwrite_a=True, check_finite=False), g,
                       check_finite=False)
        if np.abs(d).max() <= _GTOL * max(1.0, np.abs(w).max()):
            break  # the step is rounding noise: w is the optimum to machine precision
        v = y * np.asarray(X @ d).ravel()
        t = _line_search(float(w @ d), float(d @ d), u, v, a_lo, a_hi, theta)
        w += t * d
        full_step_from = state if abs(t - 1.0) <= 1e-9 else None
    return w, steps
