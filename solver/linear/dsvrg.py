"""SODM Algorithm 2 (Wang et al., IJCAI-23): distributed SVRG on the linear ODM primal.

Primal ``p(w) = (1/M) sum_i p_i(w)``, ``p_i(w) = 1/2 ||w||^2 + lam/(2(1-theta)^2) (xi_i^2 +
upsilon eps_i^2)``, per-instance gradient in DiODM's form (with the ``1/(1-theta)^2``
factor, the exact gradient of this primal; the SODM paper prints it without):
``grad p_i(w) = w + c_i(w) x_i`` with
``c_i = lam/(1-theta)^2 y_i [(g_i + theta - 1) 1(g_i < 1-theta) + upsilon (g_i - theta - 1)
1(g_i > 1+theta)]`` and ``g_i = y_i w.x_i``.

* Partitions: strata around landmarks chosen with the *linear* kernel among the same seeded
  candidate sample as Algorithm 1 (``landmark_candidates``, default 20,000 rows), dealt into
  ``n_partitions`` balanced stratified partitions (:mod:`solver.sodm.partition`, same reproducible
  rules as Algorithm 1).  Default ``n_partitions``: 8, but no partition under
  ``MIN_PARTITION_ROWS`` (2,000) rows; below 4,000 rows that is one partition, plain SVRG
  over the data without strata (:func:`default_partitions`).
* Epoch ``e = 1..epochs``: snapshot ``w~ = w``; full gradient ``h = (1/M) sum_j h_j`` with
  ``h_j = sum_{i in D_j} grad p_i(w~)`` (the sum over partitions is computed as one product
  with X; the Spark backend sums per partition); then the serial round-robin
  inner phase: partition ``j = 0..K-1`` in turn makes one pass over its own rows in the order
  ``default_rng(SeedSequence([seed, e, j])).permutation(|D_j|)`` (sampling without
  replacement, the refilled ``R_j`` of every epoch) with
  ``w <- w - eta (grad p_i(w) - grad p_i(w~) + h)`` and hands ``w`` to the next partition.
  The new snapshot is the last iterate (the paper's rule).  An epoch costs the inner pass
  plus three products with X (``X h``, ``X w``, ``X' c``): the margins ``X w`` of the new
  snapshot serve its gradient, the objective in the history and the next inner phase.
* The inner loop is numba-compiled and O(nnz(x_i)) per step for dense and CSR input: the
  update is affine, ``w_{t+1} - u = (1-eta)(w_t - u) - eta dc x_i`` with ``u = w~ - h``, so
  ``w`` is kept as ``u + s v`` (scalar ``s``) and ``x_i.u`` is precomputed once per epoch.
* Step size: ``step_size`` or ``_STEP_FACTOR / L_max`` with the largest per-instance
  smoothness constant ``L_max = 1 + lam max(1, upsilon) max_i ||x_i||^2 / (1-theta)^2``
  (each ``p_i`` is 1-strongly convex).  ``_STEP_FACTOR`` = 0.5 and 20 default ``epochs``:
  the smallest objective gap after 10 and 20 epochs of the factors tried; 1/L oscillates
  early (``bench/dsvrg_step.py``, ``docs/design-notes.md``).
* Stops after ``epochs`` epochs, or earlier when ``||grad p(w)|| <= tol * ||grad p(0)||``
  (the relative criterion of LIBLINEAR's primal solvers, whose default is 1e-2).  Default
  ``tol = 1e-3`` (the estimators' ``tol``): a small relative primal gap in a few epochs
  (``bench/dsvrg_tol.py``, ``docs/design-notes.md``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from numba import njit

from solver.core.formulation import (
    ODMParams,
    check_weights,
    lipschitz_constant,
    primal_objective_from_margins,
)
from solver.core.inputs import check_Xy
from solver.core.kernels import Kernel
from solver.sodm.hierarchy import DEFAULT_LANDMARK_CANDIDATES, DEFAULT_N_STRATA, stratify
from solver.sodm.partition import partition_members, stratified_partitions

__all__ = ["LinearResult", "sodm_linear", "full_gradient", "instance_coefficients",
           "default_partitions", "default_step_size", "svrg_inner", "inner_csr",
           "inner_dense", "linear_partitions", "validation_accuracy", "warmup"]

ProgressFn = Callable[[float, str, dict], None]
StopFn = Callable[[], bool]

_STEP_FACTOR = 0.5
DEFAULT_EPOCHS = 20
DEFAULT_PARTITIONS = 8
MIN_PARTITION_ROWS = 2000  # no default partition smaller than this
_TINY = 1e-100


@dataclass
class LinearResult:
    """Primal solution ``w`` of the linear ODM plus per-epoch history."""

    w: np.ndarray
    history: list[dict] = field(default_factory=list)
    stopped: bool = False
    converged: bool = False
    step_size: float = 0.0
    partitions: np.ndarray | None = None


def normalized_weights(sample_weight, m: int) -> np.ndarray:
    """Positive ``sample_weight`` scaled to mean 1 (ones without weights).

    With weights ``s_i`` (mean 1) the objective is ``(1/M) sum_i s_i-weighted p_i``: the same
    problem as ``lam/(2W) sum_i c_i loss_i`` for any positive multiple ``c = k s``
    (:mod:`solver.core.formulation`), and an instance's stochastic gradient is ``w + s_i c_i x_i``.
    """
    w = check_weights(sample_weight, m)
    if w is None:
        return np.ones(m)
    return w * (m / w.sum()) if m else w


def instance_coefficients(margins: np.ndarray, y: np.ndarray, params: ODMParams,
                          sw: np.ndarray | None = None) -> np.ndarray:
    """``c_i`` with ``grad p_i(w) = w + c_i x_i`` from the margins ``g_i = y_i w.x_i``
    (times the normalized weight ``sw_i`` when given)."""
    th = params.theta
    lo = np.where(margins < 1.0 - th, margins + th - 1.0, 0.0)
    hi = np.where(margins > 1.0 + th, params.upsilon * (margins - th - 1.0), 0.0)
    c = params.lam / (1.0 - th) ** 2 * (lo + hi) * y
    return c if sw is None else c * sw


def full_gradient(X, y, w, params: ODMParams, xw: np.ndarray | None = None,
                  sw: np.ndarray | None = None) -> np.ndarray:
    """``(1/M) sum_j h_j``, ``h_j = sum_{i in D_j} grad p_i(w)``: the partition sums add up to
    ``w + X' c / M`` over all rows, computed with one product each way (``xw = X w`` may be
    passed when it is already known)."""
    w = np.asarray(w, dtype=np.float64).ravel()
    xw = np.asarray(X @ w).ravel() if xw is None else xw
    c = instance_coefficients(y * xw, y, params, sw)
    return w + np.asarray(X.T @ c).ravel() / X.shape[0]


def default_partitions(n_rows: int) -> int:
    """``DEFAULT_PARTITIONS``, fewer when partitions would have under ``MIN_PARTITION_ROWS``
    rows; one partition, i.e. SVRG over the whole data without strata, below twice that."""
    return int(max(1, min(DEFAULT_PARTITIONS, int(n_rows) // MIN_PARTITION_ROWS)))


def default_step_size(X, params: ODMParams, sw: np.ndarray | None = None) -> float:
    """``_STEP_FACTOR / L_max`` (see the module docstring; with normalized weights ``sw``
    instance i's smoothness is ``1 + sw_i (L_i - 1)``)."""
    return _STEP_FACTOR / lipschitz_constant(X, params, sw)


@njit(cache=True, inline="always")
def _coef(g, yi, slam, theta, ups):
    """``slam`` is the instance's ``lam / (1-theta)^2`` times its normalized weight."""
    if g < 1.0 - theta:
        return slam * (g + theta - 1.0) * yi
    if g > 1.0 + theta:
        return slam * ups * (g - theta - 1.0) * yi
    return 0.0


@njit(cache=True, fastmath=True)
def inner_csr(order, indptr, indices, data, y, sw, xu, cw, v, s, eta, slam, theta, ups):
    """One inner pass over the CSR rows ``order`` with ``w = u + s v`` (``v`` updated in
    place); returns the new ``s``."""
    decay = 1.0 - eta
    for p in range(order.shape[0]):
        i = order[p]
        dot = 0.0
        for q in range(indptr[i], indptr[i + 1]):
            dot += data[q] * v[indices[q]]
        yi = y[i]
        dc = _coef(yi * (xu[i] + s * dot), yi, slam * sw[i], theta, ups) - cw[i]
        s *= decay
        if dc != 0.0:
            f = eta * dc / s
            for q in range(indptr[i], indptr[i + 1]):
                v[indices[q]] -= f * data[q]
        if s < _TINY:
            for k in range(v.shape[0]):
                v[k] *= s
            s = 1.0
    return s


@njit(cache=True, fastmath=True)
def inner_dense(order, X, y, sw, xu, cw, v, s, eta, slam, theta, ups):
    """:func:`inner_csr` for dense rows."""
    decay = 1.0 - eta
    n = X.shape[1]
    for p in range(order.shape[0]):
        i = order[p]
        xi = X[i]
        dot = 0.0
        for k in range(n):
            dot += xi[k] * v[k]
        yi = y[i]
        dc = _coef(yi * (xu[i] + s * dot), yi, slam * sw[i], theta, ups) - cw[i]
        s *= decay
        if dc != 0.0:
            f = eta * dc / s
            for k in range(n):
                v[k] -= f * xi[k]
        if s < _TINY:
            for k in range(n):
                v[k] *= s
            s = 1.0
    return s


def warmup() -> None:
    """Compile (or load from numba's cache) the inner passes for the types the solver passes
    (CSR indices as scipy stores them, int32)."""
    order = np.arange(2, dtype=np.int64)
    v = np.zeros(2)
    inner_csr(order, np.arange(3, dtype=np.int32), np.arange(2, dtype=np.int32), np.ones(2),
              np.ones(2), np.ones(2), v, v, v.copy(), 1.0, 0.1, 1.0, 0.1, 1.0)
    inner_dense(order, np.eye(2), np.ones(2), np.ones(2), v, v, v.copy(), 1.0, 0.1, 1.0, 0.1,
                1.0)


def svrg_inner(X, y, w_tilde: np.ndarray, h: np.ndarray, orders: list[np.ndarray],
               eta: float, params: ODMParams, should_stop: StopFn | None = None, *,
               xw: np.ndarray | None = None,
               sw: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """Run the SVRG inner steps over each index array of ``orders`` in turn (one array per
    node, serial round robin) from ``w~`` with full gradient ``h``; returns (w, stopped).
    ``xw = X w~`` may be passed when it is already known (saves a product with X);
    ``sw``: normalized weights (:func:`normalized_weights`)."""
    if not 0 < eta < 1:
        raise ValueError(f"step_size must be in (0, 1), got {eta!r}")
    u = w_tilde - h
    xw = np.asarray(X @ w_tilde, dtype=np.float64).ravel() if xw is None else xw
    xu = xw - np.asarray(X @ h, dtype=np.float64).ravel()
    sw = np.ones(X.shape[0]) if sw is None else sw
    cw = instance_coefficients(y * xw, y, params, sw)
    v = h.astype(np.float64, copy=True)
    s = 1.0
    slam = params.lam / (1.0 - params.theta) ** 2
    th, ups = float(params.theta), float(params.upsilon)
    stopped = False
    for order in orders:
        o = np.ascontiguousarray(order, dtype=np.int64)
        if sp.issparse(X):
            s = inner_csr(o, X.indptr, X.indices, X.data, y, sw, xu, cw, v, s, eta, slam, th,
                          ups)
        else:
            s = inner_dense(o, X, y, sw, xu, cw, v, s, eta, slam, th, ups)
        if should_stop is not None and should_stop():
            stopped = True
            break
    return u + s * v, stopped


def linear_partitions(X, n_partitions: int, n_strata: int, seed: int, *,
                      max_candidates: int | None = None) -> np.ndarray:
    """Stratified partition id per row, with landmarks/strata under the linear kernel."""
    _, strata = stratify(X, Kernel("linear"), min(int(n_strata), X.shape[0]), seed,
                         max_candidates=max_candidates)
    return stratified_partitions(strata, n_partitions, seed)


def validation_accuracy(w, X_val, y_val) -> float:
    """Accuracy of the linear model ``w`` on ``(X_val, y_val)`` (labels in {-1, +1})."""
    f = np.asarray(X_val @ w).ravel()
    return float(np.mean(np.where(f > 0, 1.0, -1.0) == y_val))


def sodm_linear(X, y, params: ODMParams, *, n_partitions: int | None = None,
                n_strata: int | None = None, epochs: int | None = None,
                step_size: float | None = None, tol: float = 1e-3, random_state=None,
                w0=None, X_val=None, y_val=None, progress: ProgressFn | None = None,
                should_stop: StopFn | None = None,
                landmark_candidates: int | None = None,
                sample_weight: np.ndarray | None = None) -> LinearResult:
    """SODM Algorithm 2 (see the module docstring); ``y`` in {-1, +1}; returns ``w``.
    ``sample_weight`` (positive) weights each row's loss (:func:`normalized_weights`)."""
    params.validate()
    X, y = check_Xy(X, y)
    M, d = X.shape
    sw = normalized_weights(sample_weight, M)
    K = default_partitions(M) if n_partitions is None else int(n_partitions)
    S = DEFAULT_N_STRATA if n_strata is None else int(n_strata)
    E = DEFAULT_EPOCHS if epochs is None else int(epochs)
    if K < 1 or S < 1 or E < 1:
        raise ValueError("n_partitions, n_strata and epochs must be >= 1")
    seed = 0 if random_state is None else int(random_state)
    eta = default_step_size(X, params, sw) if step_size is None else float(step_size)
    if not 0 < eta < 1:
        raise ValueError(f"step_size must be in (0, 1), got {step_size!r}")
    w = np.zeros(d) if w0 is None else np.asarray(w0, dtype=np.float64).ravel().copy()
    result = LinearResult(w=w, step_size=eta)
    if M == 0:
        return result
    K = min(K, M)
    cand = DEFAULT_LANDMARK_CANDIDATES if landmark_candidates is None \
        else int(landmark_candidates)
    part = linear_partitions(X, K, S, seed, max_candidates=cand) \
        if K > 1 else np.zeros(M, dtype=np.int64)
    result.partitions = part
    val = None
    if X_val is not None and y_val is not None:
        val = (X_val, np.asarray(y_val, dtype=np.float64).ravel())
    result.w = _epochs(result, X, y, w, partition_members(part, K), params, seed=seed,
                       epochs=E, tol=tol, from_zero=w0 is None, val=val, progress=progress,
                       should_stop=should_stop, sw=sw)
    return result


def _epochs(result: LinearResult, X, y, w: np.ndarray, groups: list[np.ndarray],
            params: ODMParams, *, seed: int, epochs: int, tol: float, from_zero: bool,
            val: tuple[Any, np.ndarray] | None, progress: ProgressFn | None,
            should_stop: StopFn | None, sw: np.ndarray | None = None) -> np.ndarray:
    """The outer loop from ``w``: per epoch an inner pass over the partitions in their
    seeded orders and a full gradient, a history record and a progress call; fills
    ``result`` (``stopped``, ``converged``, ``history``) and returns the last ``w``."""
    M, d = X.shape
    E, eta = epochs, result.step_size
    t_start = time.perf_counter()
    xw = np.asarray(X @ w, dtype=np.float64).ravel()
    h = full_gradient(X, y, w, params, xw, sw)
    g0 = max(float(np.linalg.norm(h if from_zero else full_gradient(X, y, np.zeros(d), params,
                                                                    np.zeros(M), sw))),
             1e-300)
    for e in range(1, E + 1):
        if should_stop is not None and should_stop():
            result.stopped = True
            break
        t0 = time.perf_counter()
        orders = [g[np.random.default_rng(np.random.SeedSequence([seed, e, j]))
                    .permutation(g.size)] for j, g in enumerate(groups)]
        w, stopped = svrg_inner(X, y, w, h, orders, eta, params, should_stop, xw=xw, sw=sw)
        xw = np.asarray(X @ w, dtype=np.float64).ravel()
        h = full_gradient(X, y, w, params, xw, sw)
        gn = float(np.linalg.norm(h))
        rec = {"epoch": e, "objective": primal_objective_from_margins(w, y * xw, params,
                                                                      sample_weight=sw),
               "grad_norm": gn, "seconds": time.perf_counter() - t0,
               "elapsed": time.perf_counter() - t_start}
        if val is not None:
            rec["val_accuracy"] = validation_accuracy(w, *val)
        result.history.append(rec)
        result.w = w
        if progress is not None:
            progress(e / E, f"epoch {e}/{E}: objective {rec['objective']:.6g}, "
                            f"|grad| {gn:.3g}", rec)
        if stopped:
            result.stopped = True
            break
        if not np.isfinite(gn):
            raise FloatingPointError(f"DSVRG diverged at epoch {e} (step size {eta:g})")
        if gn <= tol * g0:
            result.converged = True
            break
    return w
