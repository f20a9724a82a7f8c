"""Exact kernel ODM: dual coordinate descent engineered like LIBSVM / LIBLINEAR.

* The solver keeps ``f = K nu`` with ``nu_i = y_i (zeta_i - beta_i)`` (so ``u = Q(zeta - beta)``
  is ``y * f``) and updates each instance's pair ``(zeta_i, beta_i)`` together and exactly
  (closed form in :mod:`solver.core._numba_kernels`); one kernel column per changed pair.
* Coordinates are visited in a fresh random permutation every epoch.
* An instance on the face (a nonzero dual) is left alone in an epoch where its violation is
  at most ``FACE_SKIP_SHARE`` of the previous epoch's largest and ``FACE_SKIP_TOL`` times
  the tolerance: every update reads a whole kernel column, and those that move the iterate
  least are most of a long tail's updates (docs/design-notes.md, "Small face updates
  skipped").
* Shrinking (LIBLINEAR rule): an instance at ``zeta = beta = 0`` whose two gradients both exceed
  the previous epoch's max violation is dropped from the sweep; when the remaining ones meet the
  tolerance but the full problem does not, every instance is brought back.
* Stop when the max projected-gradient violation over *all* instances is ``<= tol`` (checked
  exactly from ``f`` after every epoch, O(m)); after ``max_iter`` epochs warn with
  ``ConvergenceWarning``.
* Ill-conditioned problems (large ``lam``, wide kernels) make coordinate descent crawl; the
  active-set Newton steps of :mod:`solver.exact.newton_kernel` jump to the optimum once the states
  settle (:class:`~solver.exact.newton_kernel.NewtonSchedule` decides when to try them).
* Kernel values come from :class:`solver.exact.kernel_columns.ColumnStore`: the whole matrix when
  it fits ``cache_size``, else an LRU set of columns.  In that mode each epoch visits the
  instances whose columns are cached first, so a support set larger than the cache costs
  only the overflow in recomputed columns per epoch (not every column, which is what LRU
  under a random cyclic order would give).  The Newton step's face factor comes on top:
  kernel values and factor together stay within ``1.25 * cache_size`` (at least a quarter
  of ``cache_size`` for the factor).
* Rows identical in features and label are solved as one weighted row
  (:mod:`solver.exact.duplicates`): the same optimum from fewer kernel values.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solver.core import _numba_kernels as nk
from solver.core.formulation import (
    ODMParams,
    check_weights,
    default_scale,
    diag_vectors,
    dual_objective,
)
from solver.core.inputs import as_generator, check_alpha0, check_dual_problem, check_X, check_y
from solver.core.kernels import Kernel, kernel_decision, kernel_diag
from solver.exact import newton_kernel
from solver.exact.duplicates import row_groups
from solver.exact.kernel_columns import ColumnStore
from solver.exact.kernel_memo import MemoSlot
from solver.exceptions import convergence_warning

__all__ = ["DualResult", "solve_kernel_dual", "kernel_kkt_violation", "kernel_decision"]

_MB = 1 << 20
# poll should_stop inside an epoch at most this often (seconds)
POLL_SECONDS = 0.25
# a sweep is cut into chunks of about this many kernel entries between polls ...
POLL_CHUNK_ENTRIES = 20_000_000
# ... and at least this many instances
POLL_CHUNK_MIN = 64
# an epoch skips the update of a face instance whose violation is at most this share of the
# previous epoch's largest (the first epoch, and the one after a Newton step, skip none) ...
FACE_SKIP_SHARE = 0.3
# ... and at most this multiple of the tolerance: the early epochs, whose iterate the first
# Newton faces are read from, update nearly every face instance
FACE_SKIP_TOL = 3.0


@dataclass
class DualResult:
    """Solution of the kernel ODM dual; ``alpha`` is ``(m, 2)`` = [zeta, beta] per instance."""

    alpha: np.ndarray
    n_iter: int
    kkt_violation: float
    objective: float
    converged: bool
    stopped: bool
    newton: newton_kernel.NewtonWork = field(default_factory=newton_kernel.NewtonWork)
    # the rows the solve ran on: fewer than m when identical rows were merged
    rows_solved: int = 0


def kernel_kkt_violation(X, y, kernel: Kernel, params: ODMParams, alpha,
                         m_scale: float | None = None,
                         sample_weight: np.ndarray | None = None) -> float:
    """Max projected-gradient violation of ``alpha`` for the kernel ODM dual on ``(X, y)``.

    The gradient is computed in kernel blocks (never the whole matrix); SODM uses this for its
    between-level convergence test.
    """
    params.validate()
    X = check_X(X)
    m = X.shape[0]
    y = check_y(y, m)
    a = check_alpha0(alpha, m)
    sw = check_weights(sample_weight, m)
    m_scale = default_scale(m, sw) if m_scale is None else m_scale
    f = kernel_decision(X, kernel, y * (a[:, 0] - a[:, 1]))
    dz, db = diag_vectors(params, m_scale, m, sw)
    v = nk.pair_violations(f, y, a, dz, db, params.theta, np.empty(m))
    return float(v.max()) if m else 0.0


class _StopPoll:
    """``should_stop()``, asked at most every ``POLL_SECONDS`` (sticky once True)."""

    def __init__(self, should_stop: Callable[[], bool] | None) -> None:
        self.should_stop = should_stop
        self.t = time.monotonic()
        self.stop = False

    def __call__(self) -> bool:
        if self.should_stop is None or self.stop:
            return self.stop
        if time.monotonic() - self.t > POLL_SECONDS:
            self.t = time.monotonic()
            self.stop = bool(self.should_stop())
        return self.stop

    def now(self) -> bool:
        """Ask ``should_stop()`` now (end of an epoch)."""
        if self.should_stop is None:
            return False
        self.t = time.monotonic()
        return self.stop or bool(self.should_stop())


def _checked(X, y, kernel: Kernel, params: ODMParams, alpha0, m_scale: float | None,
             tol: float, max_iter: int, cache_size: float, sample_weight
             ) -> tuple[Any, np.ndarray, np.ndarray, float, np.ndarray | None]:
    """Validated ``X``, ``y``, starting ``alpha``, ``m_scale`` (``m`` or the weights' sum by
    default) and the weights."""
    params.validate()
    kernel.validate()
    if not cache_size > 0:
        raise ValueError(f"cache_size must be > 0 (MB), got {cache_size!r}")
    return check_dual_problem(X, y, alpha0, m_scale, tol, max_iter, sample_weight)


def _epochs(store: ColumnStore, kdiag, y, alpha, f, dz, db, theta, *, rng, poll: _StopPoll,
            schedule: newton_kernel.NewtonSchedule | None, tol: float, max_iter: int,
            shrinking: bool, visits: np.ndarray | None = None) -> tuple[int, float, bool, bool]:
    """Coordinate-descent epochs with shrinking and the scheduled Newton attempts, updating
    ``alpha`` and ``f`` in place; ``(n_iter, kkt, converged, stopped)``."""
    m = store.m
    active = np.ones(m, dtype=np.bool_)
    viol = np.empty(m)
    shrink_thr = np.inf
    kkts: list[float] = []
    chunk = int(max(POLL_CHUNK_MIN, min(m, POLL_CHUNK_ENTRIES // max(m, 1))))
    converged = stopped = False
    n_iter = 0
    kkt = np.inf
    skip_face = nk.SKIP
    for epoch in range(1, int(max_iter) + 1):
        n_iter = epoch
        stats, stopped = _sweep(store, rng, active, chunk, poll, kdiag, y, alpha, f, dz, db,
                                theta, shrink_thr, shrinking, visits, skip_face)
        if stopped:
            break
        skip_face = max(nk.SKIP, min(FACE_SKIP_SHARE * stats[0], FACE_SKIP_TOL * tol))
        nk.pair_violations(f, y, alpha, dz, db, theta, viol)
        kkt = float(viol.max())
        if kkt <= tol:
            converged = True
            break
        kkts.append(kkt)
        if schedule is not None and schedule.after_epoch(epoch, kkts, alpha, f, tol, poll):
            active[:] = True
            shrink_thr = np.inf
            skip_face = nk.SKIP
            nk.pair_violations(f, y, alpha, dz, db, theta, viol)
            kkt = float(viol.max())
            if kkt <= tol:
                converged = True
                break
        if shrinking:
            if not active.all() and float(viol[active].max(initial=0.0)) <= tol:
                active[:] = True
                shrink_thr = np.inf
            else:
                shrink_thr = stats[0] if stats[0] > 0 else np.inf
        if poll.now():
            stopped = True
            break
    return n_iter, kkt, converged, stopped


def solve_kernel_dual(X, y, kernel: Kernel, params: ODMParams, *, alpha0=None,
                      m_scale: float | None = None, tol: float = 1e-3, max_iter: int = 1000,
                      cache_size: float = 512, shrinking: bool = True, random_state=None,
                      should_stop: Callable[[], bool] | None = None,
                      kernel_dtype=None, newton: bool = True,
                      sample_weight: np.ndarray | None = None,
                      kernel_memo: MemoSlot | None = None,
                      merge_duplicates: bool = True) -> DualResult:
    """Solve the kernel ODM dual exactly by dual coordinate descent (see module docstring).

    ``m_scale`` is the M of the ``(M c / 2)`` term (default ``len(y)``); ``cache_size`` is the
    kernel memory budget in MB; ``max_iter`` counts epochs; ``should_stop()`` is polled after
    every epoch and every ~0.25 s inside long epochs, and a stop returns the current iterate
    with ``stopped=True``.  ``kernel_dtype`` forces the kernel storage type (default: float64
    when the full matrix fits the budget in float64, float32 otherwise).  ``newton`` enables
    the active-set Newton attempts (:mod:`solver.exact.newton_kernel`); they only accelerate, the
    optimum is the same.  ``sample_weight`` (positive, length m) multiplies each instance's
    loss (:mod:`solver.core.formulation`); ``m_scale`` then defaults to the weights' sum.
    ``kernel_memo``: a search's kept kernel matrices (:mod:`solver.exact.kernel_memo`): the
    same values, computed once for all solves of the same rows and kernel.
    ``merge_duplicates``: rows identical in features and label are solved as one weighted
    row and their duals shared out by weight (:mod:`solver.exact.duplicates`): the same
    optimum, from fewer kernel values; ``rows_solved`` says how many rows the solve had.
    """
    X, y, alpha, m_scale, sw = _checked(X, y, kernel, params, alpha0, m_scale, tol,
                                        max_iter, cache_size, sample_weight)
    groups = row_groups(X, y, sw) if merge_duplicates else None
    if groups is None:
        return _solve(X, y, kernel, params, alpha, m_scale, sw, tol=tol, max_iter=max_iter,
                      cache_size=cache_size, shrinking=shrinking, random_state=random_state,
                      should_stop=should_stop, kernel_dtype=kernel_dtype, newton=newton,
                      kernel_memo=kernel_memo)
    if kernel_memo is not None:
        kernel_memo = MemoSlot(kernel_memo.memo, (kernel_memo.key, groups.digest()))
    res = _solve(X[groups.first], y[groups.first], kernel, params, groups.merge(alpha),
                 m_scale, groups.weight, tol=tol, max_iter=max_iter, cache_size=cache_size,
                 shrinking=shrinking, random_state=random_state, should_stop=should_stop,
                 kernel_dtype=kernel_dtype, newton=newton, kernel_memo=kernel_memo,
                 visits=groups.count)
    res.alpha = groups.expand(res.alpha)
    return res


def _solve(X, y, kernel: Kernel, params: ODMParams, alpha: np.ndarray, m_scale: float,
           sw: np.ndarray | None, *, tol: float, max_iter: int, cache_size: float,
           shrinking: bool, random_state, should_stop: Callable[[], bool] | None,
           kernel_dtype, newton: bool, kernel_memo: MemoSlot | None,
           visits: np.ndarray | None = None) -> DualResult:
    """:func:`solve_kernel_dual` on checked rows, updating ``alpha`` in place; ``visits``:
    each row's updates per epoch (a merged row's copies, below), else one."""
    m = X.shape[0]
    rng = as_generator(random_state)
    dz, db = diag_vectors(params, m_scale, m, sw)
    theta = float(params.theta)
    if m == 0:
        return DualResult(alpha, 0, 0.0, 0.0, True, False, rows_solved=0)

    store = ColumnStore(X, kernel, float(cache_size) * _MB, kernel_dtype, memo=kernel_memo)
    kdiag = kernel_diag(kernel, X)
    f = store.margins(y * (alpha[:, 0] - alpha[:, 1]))
    schedule = newton_kernel.NewtonSchedule.for_store(
        store, kdiag, y, dz, db, theta, max_iter) if newton else None
    n_iter, kkt, converged, stopped = _epochs(
        store, kdiag, y, alpha, f, dz, db, theta, rng=rng, poll=_StopPoll(should_stop),
        schedule=schedule, tol=tol, max_iter=max_iter, shrinking=shrinking, visits=visits)
    if stopped or not np.isfinite(kkt):
        kkt = float(nk.pair_violations(f, y, alpha, dz, db, theta, np.empty(m)).max())
        converged = kkt <= tol
    if not converged and not stopped:
        warnings.warn(
            f"kernel ODM dual coordinate descent did not converge in {max_iter} epochs "
            f"(KKT violation {kkt:.3g} > tol {tol:g})",
            convergence_warning(), stacklevel=3)
    obj = dual_objective(y * f, alpha, params, m_scale, sw)
    return DualResult(alpha, n_iter, kkt, obj, converged, stopped,
                      schedule.work() if schedule is not None else newton_kernel.NewtonWork(),
                      rows_solved=m)


def _sweep(store: ColumnStore, rng, active, chunk: int, poll: _StopPoll, kdiag, y, alpha, f,
           dz, db, theta, shrink_thr: float, shrinking: bool,
           visits: np.ndarray | None, skip_face: float) -> tuple[np.ndarray, bool]:
    """One epoch of coordinate descent over the active instances, in chunks between stop
    polls, fetching missing columns as the compiled sweep asks for them.  Returns the
    sweep's ``[max violation, shrunk, updates]`` and whether a stop was requested.
    ``visits``: instance i comes ``visits[i]`` times in the epoch's random order;
    ``skip_face``: face instances whose violation is at most this are not updated."""
    idx = np.flatnonzero(active)
    if visits is not None:
        idx = np.repeat(idx, visits[idx])
    order = rng.permutation(idx).astype(np.int64)
    if not store.full:
        # cached columns first: a random cyclic order over more columns than the cache
        # holds would miss on every column under LRU; this way only the overflow is
        # recomputed each epoch
        order = np.concatenate((order[store.slot[order] >= 0], order[store.slot[order] < 0]))
    stats = np.zeros(3)
    p, n = 0, order.shape[0]
    while p < n:
        stop_at = min(n, p + chunk)
        store.tick += 1
        p = nk.kernel_sweep(order, p, stop_at, store.slot, store.cache, store.last_used,
                            store.tick, kdiag, y, alpha, f, dz, db, theta, active,
                            shrink_thr, bool(shrinking), stats, nk.SKIP, skip_face)
        if p < stop_at:
            store.fetch_ahead(order, p, f, y, alpha, dz, db, theta, skip_face)
            continue
        if poll():
            return stats, True
    return stats, False
