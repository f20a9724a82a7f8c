"""Exact linear ODM: LIBLINEAR-style dual coordinate descent (Hsieh et al. 2008 adapted to ODM).

Keeps ``w = sum_i y_i (zeta_i - beta_i) x_i`` so one pair update costs O(nnz(x_i)) and an
epoch O(nnz(X)); dense arrays and CSR matrices have their own compiled loops.  Same exact pair
update, random permutation per epoch and shrinking rule as :mod:`solver.exact.dcd_kernel`.  The
sweep's own violations decide when to stop (as in LIBLINEAR); the exact max projected-gradient
violation is then recomputed from ``w`` and the solve goes on if it still exceeds ``tol``.

With at most ``_NEWTON_MAX_FEATURES`` features (``newton=True``) a primal finite Newton solve
(:mod:`solver.linear.newton_linear`, d x d systems) runs first, from the warm start; its dual
from the KKT closed forms is returned when it meets ``tol`` (``n_iter = 0`` epochs), otherwise
coordinate descent continues from it.  Dual CD needs more epochs the larger ``lam`` is;
Newton takes a few steps of O(nnz * d) whatever ``lam`` (``docs/design-notes.md``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from solver.core import _numba_kernels as nk
from solver.core.formulation import (
    ODMParams,
    check_weights,
    default_scale,
    diag_vectors,
    dual_objective,
)
from solver.core.inputs import as_generator, check_alpha0, check_dual_problem, check_X, check_y
from solver.core.kernels import row_sq_norms
from solver.exceptions import convergence_warning
from solver.linear.newton_linear import alpha_from_margins, primal_newton

__all__ = ["LinearDualResult", "solve_linear_dual", "linear_kkt_violation"]

# the primal Newton solve forms and factors a dense d x d matrix per step
_NEWTON_MAX_FEATURES = 1000


@dataclass
class LinearDualResult:
    """Solution of the linear ODM dual: ``alpha`` ``(m, 2)`` and the primal ``w``."""

    alpha: np.ndarray
    w: np.ndarray
    n_iter: int
    kkt_violation: float
    objective: float
    converged: bool
    stopped: bool
    newton_steps: int = 0


def _margins(X, y, w) -> np.ndarray:
    return y * np.asarray(X @ w).ravel()


def linear_kkt_violation(X, y, params: ODMParams, alpha, m_scale: float | None = None,
                         sample_weight: np.ndarray | None = None) -> float:
    """Max projected-gradient violation of ``alpha`` for the linear ODM dual on ``(X, y)``."""
    params.validate()
    X = check_X(X)
    m = X.shape[0]
    y = check_y(y, m)
    a = check_alpha0(alpha, m)
    w = np.asarray(X.T @ (y * (a[:, 0] - a[:, 1]))).ravel()
    sw = check_weights(sample_weight, m)
    dz, db = diag_vectors(params, default_scale(m, sw) if m_scale is None else m_scale, m, sw)
    v = nk.violations_from_margins(_margins(X, y, w), a, dz, db, params.theta, np.empty(m))
    return float(v.max()) if m else 0.0


def _checked(X, y, params: ODMParams, alpha0, m_scale: float | None, tol: float,
             max_iter: int, sample_weight
             ) -> tuple[Any, np.ndarray, np.ndarray, float, np.ndarray | None]:
    """Validated ``X``, ``y``, starting ``alpha``, ``m_scale`` (``m`` or the weights' sum by
    default) and the weights."""
    params.validate()
    return check_dual_problem(X, y, alpha0, m_scale, tol, max_iter, sample_weight)


def _newton_start(X, y, params: ODMParams, w, dz: np.ndarray, db: np.ndarray, tol: float,
                  m_scale: float, sw: np.ndarray | None
                  ) -> tuple[LinearDualResult | None, np.ndarray, np.ndarray, int]:
    """The primal Newton solve's dual point: the result when it meets ``tol``, else
    ``(None, alpha, w, newton_steps)`` for coordinate descent to start from."""
    theta = float(params.theta)
    w_n, newton_steps = primal_newton(X, y, dz, db, theta, w)
    cand = alpha_from_margins(_margins(X, y, w_n), dz, db, theta)
    w_c = np.ascontiguousarray(np.asarray(X.T @ (y * (cand[:, 0] - cand[:, 1]))).ravel())
    u_c = _margins(X, y, w_c)
    kkt = float(nk.violations_from_margins(u_c, cand, dz, db, theta, np.empty(X.shape[0])).max())
    if kkt <= tol:
        return (LinearDualResult(cand, w_c, 0, kkt, dual_objective(u_c, cand, params, m_scale, sw),
                                 True, False, newton_steps), cand, w_c, newton_steps)
    return None, cand, w_c, newton_steps


def _epochs(X, y, sqn, alpha, w, dz: np.ndarray, db: np.ndarray, theta: float, tol: float,
            max_iter: int, rng: np.random.Generator, shrinking: bool,
            should_stop: Callable[[], bool] | None) -> tuple[int, float, bool, bool]:
    """Coordinate-descent epochs with shrinking (``sqn``: the rows' squared norms), updating
    ``alpha`` and ``w`` in place; ``(n_iter, kkt, converged, stopped)`` (``kkt`` is ``inf``
    unless measured)."""
    m = X.shape[0]
    sparse = sp.issparse(X)
    active = np.ones(m, dtype=np.bool_)
    viol = np.empty(m)
    shrink_thr = np.inf
    converged = stopped = False
    n_iter = 0
    kkt = np.inf
    for epoch in range(1, int(max_iter) + 1):
        n_iter = epoch
        order = rng.permutation(np.flatnonzero(active)).astype(np.int64)
        stats = np.zeros(3)
        if sparse:
            nk.linear_sweep_csr(order, X.indptr, X.indices, X.data, y, sqn, alpha, w, dz, db,
                                theta, active, shrink_thr, bool(shrinking), stats)
        else:
            nk.linear_sweep_dense(order, X, y, sqn, alpha, w, dz, db, theta, active,
                                  shrink_thr, bool(shrinking), stats)
        if stats[0] <= tol:
            if active.all():
                nk.violations_from_margins(_margins(X, y, w), alpha, dz, db, theta, viol)
                kkt = float(viol.max())
                if kkt <= tol:
                    converged = True
                    break
            active[:] = True
            shrink_thr = np.inf
        else:
            shrink_thr = stats[0] if shrinking else np.inf
        if should_stop is not None and should_stop():
            stopped = True
            break
    return n_iter, kkt, converged, stopped


def solve_linear_dual(X, y, params: ODMParams, *, alpha0=None, m_scale: float | None = None,
                      tol: float = 1e-3, max_iter: int = 1000, random_state=None,
                      shrinking: bool = True, should_stop: Callable[[], bool] | None = None,
                      newton: bool = True,
                      sample_weight: np.ndarray | None = None) -> LinearDualResult:
    """Solve the linear-kernel ODM dual exactly; ``max_iter`` counts epochs.

    ``newton`` tries the primal Newton solve first when ``X`` has at most
    ``_NEWTON_MAX_FEATURES`` columns (module docstring); the optimum is the same.

    ``should_stop()`` is polled after every epoch; a stop returns the current iterate with
    ``stopped=True``.  ``max_iter`` epochs without convergence warn with ``ConvergenceWarning``.
    ``sample_weight`` (positive, length m) multiplies each instance's loss
    (:mod:`solver.core.formulation`); ``m_scale`` then defaults to the weights' sum.
    """
    X, y, alpha, m_scale, sw = _checked(X, y, params, alpha0, m_scale, tol, max_iter,
                                        sample_weight)
    m, n = X.shape
    rng = as_generator(random_state)
    dz, db = diag_vectors(params, m_scale, m, sw)
    theta = float(params.theta)
    w = np.ascontiguousarray(np.asarray(X.T @ (y * (alpha[:, 0] - alpha[:, 1]))).ravel(),
                             dtype=np.float64)
    if m == 0:
        return LinearDualResult(alpha, w, 0, 0.0, 0.0, True, False)
    newton_steps = 0
    if newton and n <= _NEWTON_MAX_FEATURES:
        done, alpha, w, newton_steps = _newton_start(X, y, params, w, dz, db, tol, m_scale,
                                                      sw)
        if done is not None:
            return done
    sqn = row_sq_norms(X)
    if not sp.issparse(X):
        X = np.ascontiguousarray(X)
    n_iter, kkt, converged, stopped = _epochs(X, y, sqn, alpha, w, dz, db, theta, tol,
                                              max_iter, rng, shrinking, should_stop)
    if not converged:
        viol = np.empty(m)
        nk.violations_from_margins(_margins(X, y, w), alpha, dz, db, theta, viol)
        kkt = float(viol.max())
        converged = kkt <= tol
        if not converged and not stopped:
            warnings.warn(
                f"linear ODM dual coordinate descent did not converge in {max_iter} epochs "
                f"(KKT violation {kkt:.3g} > tol {tol:g})",
                convergence_warning(), stacklevel=2)
    obj = dual_objective(_margins(X, y, w), alpha, params, m_scale, sw)
    return LinearDualResult(alpha, w, n_iter, kkt, obj, converged, stopped, newton_steps)
