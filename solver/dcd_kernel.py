"""Exact kernel ODM: dual coordinate descent engineered like LIBSVM / LIBLINEAR.

* The solver keeps ``f = K nu`` with ``nu_i = y_i (zeta_i - beta_i)`` (so ``u = Q(zeta - beta)``
  is ``y * f``) and updates each instance's pair ``(zeta_i, beta_i)`` together and exactly
  (closed form in :mod:`solver._numba_kernels`); one kernel column per changed pair.
* Coordinates are visited in a fresh random permutation every epoch.
* Shrinking (LIBLINEAR rule): an instance at ``zeta = beta = 0`` whose two gradients both exceed
  the previous epoch's max violation is dropped from the sweep; when the remaining ones meet the
  tolerance but the full problem does not, every instance is brought back.
* Stop when the max projected-gradient violation over *all* instances is ``<= tol`` (checked
  exactly from ``f`` after every epoch, O(m)); after ``max_iter`` epochs warn with
  ``ConvergenceWarning``.
* Ill-conditioned problems (large ``lam``, wide kernels) make coordinate descent crawl (its
  epochs grow with the condition number).  An active-set Newton solve (primal-dual active
  set) jumps to the exact optimum once the states settle; it returns a point meeting the same
  tolerance, or its last iterate made feasible when that has a lower dual objective, or
  leaves the iterate alone.  When the predicted face (instances the step solves for) is small
  enough for a dense Cholesky of ``K_SS + D`` in a quarter of the budget, it is tried from
  epoch 5 with direct face solves, in both kernel modes (``K_SS`` taken from the matrix or
  computed from X), but only from ``_DIRECT_MAX_FACE`` rows down while coordinate descent is
  still shrinking the face: a float32 Cholesky refined in float64 to the accuracy of a
  float64 one, and the faces that follow, which differ by fewer and fewer rows, solved from
  that factor (:class:`_FaceSystems`).  ijcnn1, gamma = 10/22,
  lam = 1e5, upsilon = 0.5, one 12,500-row partition: theta = 0.8 (1,775 nonzero pairs)
  4.8 s instead of 3,500-odd epochs (float64 factor); full SODM-RBF fit (n_jobs=2) 46 s ->
  17 s, with the BLAS limit of ``solver.parallel``.  ``bench/face_solve.py`` measures the
  pieces on one core (Cholesky in float32 vs float64, kernel allocation, the face cap) and
  the partitions of ijcnn1 and cod-rna that SODM solves with the benchmark's settings.
  Larger faces: from epoch 50 on, when the observed linear rate
  extrapolates to more than ``max(2 * epochs spent, 500)`` epochs still to go, the same step
  with preconditioned CG on the face (full-matrix mode only) is tried under a mat-vec budget.
  Measured on ijcnn1 subsets (RBF gamma = 10/22, theta = 0.5, upsilon = 0.5, tol = 1e-3):
  12,500 rows at lam = 1e5 took 15.9 s with the earlier rule (epoch 20, 2x, failed attempts
  discarded), 7.0 s now and 6.3 s without Newton; 3,125 rows at lam = 1e5 3.3 s, 1.6 s and
  1.9 s; 5,000 rows at lam = 1e6 23.3 s, 14.3 s, and not converged in 3000 epochs (11.8 s)
  without Newton.
* Kernel values: if the whole m x m matrix fits in ``cache_size`` MB it is computed once with
  BLAS blocks (float64 if that fits, else float32 like LIBSVM's cache); otherwise a fixed number
  of column slots (float32) is filled on demand, in batches computed with BLAS, evicting the
  least recently used columns, so memory never exceeds the budget.  In that mode each epoch
  visits the instances whose columns are cached first, so a support set larger than the
  cache costs only the overflow in recomputed columns per epoch (not every column, which is
  what LRU under a random cyclic order would give).  The Newton step's face memory is on top:
  its float32 factor (``|S|^2 * 4`` bytes; plus a float64 ``K_SS`` in column-cache mode,
  ``|S|^2 * 12`` in all), at most a quarter of ``cache_size`` (or 12 MB), and while later
  faces reuse it, the factor's inverse columns of the rows they dropped (at most a quarter
  of the factor again).
* Kernel matrices and column slots are allocated with their pages mapped up front
  (:mod:`solver.buffers`): first-touch page faults cost more than computing the kernel here.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve

from solver import _numba_kernels as nk
from solver import buffers
from solver.exceptions import convergence_warning
from solver.formulation import ODMParams, dual_objective
from solver.inputs import as_generator, check_alpha0, check_X, check_y
from solver.kernels import Kernel, kernel_combination, kernel_diag, kernel_matrix

__all__ = ["DualResult", "solve_kernel_dual", "kernel_kkt_violation", "kernel_decision"]

_MB = 1 << 20
_POLL_SECONDS = 0.25  # poll should_stop inside an epoch at most this often
_FETCH_BATCH = 128  # max kernel columns computed per BLAS call in cache mode
# active-set Newton (see _active_set_newton): first tried at this epoch, and only when the
# extrapolated coordinate-descent epochs left exceed this (a mat-vec costs 1-2 epochs, and
# on the ijcnn1/svmguide1 partitions Newton needed 400-1600 of them)
_NEWTON_FIRST_EPOCH = 50
_NEWTON_MIN_REMAINING = 500
# ... unless the predicted face (nonzero pairs and margins outside the band) is small enough
# for a dense Cholesky of K_SS + D within _DIRECT_SHARE of the kernel budget (store.face_bytes
# per entry): then attempts (direct face solves, in either kernel mode) start at
# _DIRECT_FIRST_EPOCH and are retried at twice the epoch count; faces up to _DIRECT_MIN_FACE
# rows always qualify
_DIRECT_FIRST_EPOCH = 5
_DIRECT_SHARE = 0.25
_DIRECT_MIN_FACE = 1000
# ... and while coordinate descent is still shrinking the face, only from this many rows
# down: an attempt on a larger, less settled face costs more in Cholesky factorizations
# than the epochs it saves.  ``bench/face_solve.py`` (a 12,500-row ijcnn1 partition, lam =
# 1e5, gamma = 100/22, theta = 0.2, one core): cap 8,192 -> first attempt at epoch 6
# (face 8,145), two factorizations and four faces from them, 7.2 s; 6,000 -> 4.7 s;
# 5,792 -> epoch 24, one factorization and two faces from it, 4.1 s.  Once the face stops
# shrinking (the smallest of the last five epochs' faces within _FACE_SHRINK of the five
# before) faces up to the budget are attempted: on a 14,884-row cod-rna partition (lam =
# 1e5, gamma = 10/8, theta = 0.8) coordinate descent hovers at 6,000-7,000 rows, and the
# attempt at epoch 10 (face 6,759) finishes the solve in 9.5 s (it waited 80 epochs for
# 5,792 before, 11 s)
_DIRECT_MAX_FACE = 5792
_FACE_SHRINK = 0.97
# no CG attempt while the predicted face is within this factor of the direct limit: coordinate
# descent shrinks it there within a few epochs (a failed 14,884-row cod-rna CG attempt cost 13 s)
_CG_FACE_FACTOR = 2.0
# float64 iterative-refinement steps after a float32 Cholesky face solve (each costs two
# |S|^2 passes; the error shrinks by about cond * 6e-8 per step)
_REFINE_MAX = 8
# a face that differs from the last factored one by at most this share of its rows (removed,
# added or switched side) is solved from that factor (_FaceSystems); triangular solves
# with k right-hand sides cost about k / (3 n) of a factorization of n rows here
_UPDATE_SHARE = 0.25


@dataclass
class DualResult:
    """Solution of the kernel ODM dual; ``alpha`` is ``(m, 2)`` = [zeta, beta] per instance."""

    alpha: np.ndarray
    n_iter: int
    kkt_violation: float
    objective: float
    converged: bool
    stopped: bool


def kernel_decision(X, kernel: Kernel, nu: np.ndarray, Z=None, *,
                    block_elems: int = 1 << 22) -> np.ndarray:
    """``f(z_j) = sum_i nu_i k(x_i, z_j)`` for every row of ``Z`` (default ``X``), over the
    nonzero coefficients, ``O(block)`` inner products at a time
    (:func:`solver.kernels.kernel_combination`)."""
    Z = X if Z is None else Z
    nz = np.flatnonzero(nu)
    if nz.size == 0:
        return np.zeros(Z.shape[0])
    return kernel_combination(kernel, Z, X[nz], nu[nz], block_elems=block_elems)


def kernel_kkt_violation(X, y, kernel: Kernel, params: ODMParams, alpha,
                         m_scale: float | None = None) -> float:
    """Max projected-gradient violation of ``alpha`` for the kernel ODM dual on ``(X, y)``.

    The gradient is computed in kernel blocks (never the whole matrix); SODM uses this for its
    between-level convergence test.
    """
    params.validate()
    X = check_X(X)
    m = X.shape[0]
    y = check_y(y, m)
    a = check_alpha0(alpha, m)
    m_scale = m if m_scale is None else m_scale
    f = kernel_decision(X, kernel, y * (a[:, 0] - a[:, 1]))
    dz, db = params.diag_terms(m_scale)
    v = nk.pair_violations(f, y, a, dz, db, params.theta, np.empty(m))
    return float(v.max()) if m else 0.0


class _ColumnStore:
    """Kernel columns for the sweep: the full matrix, or a bounded LRU set of column slots."""

    def __init__(self, X, kernel: Kernel, budget_bytes: float, dtype=None) -> None:
        m = X.shape[0]
        self.X, self.kernel, self.m = X, kernel, m
        if dtype is None:
            dtype = np.float64 if 8.0 * m * m <= budget_bytes else np.float32
        dtype = np.dtype(dtype)
        self.full = m * m * dtype.itemsize <= budget_bytes or m <= 2
        if self.full:
            self.cache = kernel_matrix(kernel, X, dtype=dtype)  # symmetric: half the work
            self.slot = np.arange(m, dtype=np.int64)
            self.n_slots = m
        else:
            n_slots = int(budget_bytes // (dtype.itemsize * m))
            self.n_slots = int(min(m, max(4, n_slots)))
            self.cache = buffers.empty((self.n_slots, m), dtype=dtype)
            self.slot = np.full(m, -1, dtype=np.int64)
            self.owner = np.full(self.n_slots, -1, dtype=np.int64)
        # columns computed per BLAS call: the temporary block stays within ~1/8 of the budget
        self.batch_max = int(max(1, min(self.n_slots, budget_bytes / 8 // (8.0 * m))))
        self.last_used = np.zeros(self.n_slots, dtype=np.int64)
        self.tick = 1
        self.n_computed = m if self.full else 0

    @property
    def face_bytes(self) -> int:
        """Bytes per face entry of a direct Newton step (:class:`_FaceSystems`): the float32
        factor, plus a float64 ``K_SS`` in column-cache mode."""
        return 4 if self.full else 12

    def block(self, S: np.ndarray, dtype=np.float64) -> np.ndarray:
        """``K[S][:, S]`` as a new array of ``dtype``: copied from the matrix or computed
        from X."""
        if self.full:
            rows = self.slot[S]
            out = buffers.empty((S.size, S.size), dtype=dtype)
            step = max(1, (1 << 22) // max(self.m, 1))  # row temporaries of <= 16-32 MB
            for i in range(0, S.size, step):
                out[i:i + step] = self.cache[rows[i:i + step]][:, S]
            return out
        return kernel_matrix(self.kernel, self.X[S], dtype=dtype)

    def combine(self, S: np.ndarray, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out = K[:, S] @ x`` (float64)."""
        if self.full:
            return nk.rows_combination(self.cache, self.slot[S], x, out)
        out[:] = kernel_decision(self.X[S], self.kernel, x, self.X)
        return out

    def fetch(self, idx: np.ndarray) -> None:
        """Compute the columns of ``idx`` (not cached) with one BLAS call, evicting LRU slots."""
        idx = idx[self.slot[idx] < 0][: self.batch_max]
        if idx.size == 0:
            return
        self.tick += 1
        free = np.argpartition(self.last_used, idx.size - 1)[: idx.size] \
            if idx.size < self.n_slots else np.arange(self.n_slots)
        old = self.owner[free]
        self.slot[old[old >= 0]] = -1
        self.owner[free] = idx
        self.slot[idx] = free
        self.last_used[free] = self.tick
        self.cache[free] = kernel_matrix(self.kernel, self.X[idx], self.X,
                                         dtype=self.cache.dtype)
        self.n_computed += idx.size


def solve_kernel_dual(X, y, kernel: Kernel, params: ODMParams, *, alpha0=None,
                      m_scale: float | None = None, tol: float = 1e-3, max_iter: int = 1000,
                      cache_size: float = 512, shrinking: bool = True, random_state=None,
                      should_stop: Callable[[], bool] | None = None,
                      kernel_dtype=None, newton: bool = True) -> DualResult:
    """Solve the kernel ODM dual exactly by dual coordinate descent (see module docstring).

    ``m_scale`` is the M of the ``(M c / 2)`` term (default ``len(y)``); ``cache_size`` is the
    kernel memory budget in MB; ``max_iter`` counts epochs; ``should_stop()`` is polled after
    every epoch and every ~0.25 s inside long epochs, and a stop returns the current iterate
    with ``stopped=True``.  ``kernel_dtype`` forces the kernel storage type (default: float64
    when the full matrix fits the budget in float64, float32 otherwise).  ``newton`` enables
    the active-set Newton-CG attempts of the module docstring (full-matrix mode); they only
    accelerate, the optimum is the same.
    """
    params.validate()
    kernel.validate()
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter!r}")
    if not cache_size > 0:
        raise ValueError(f"cache_size must be > 0 (MB), got {cache_size!r}")
    X = check_X(X)
    m = X.shape[0]
    y = check_y(y, m)
    alpha = check_alpha0(alpha0, m)
    m_scale = float(m if m_scale is None else m_scale)
    if not m_scale > 0:
        raise ValueError(f"m_scale must be > 0, got {m_scale!r}")
    rng = as_generator(random_state)
    dz, db = params.diag_terms(m_scale)
    theta = float(params.theta)
    if m == 0:
        return DualResult(alpha, 0, 0.0, 0.0, True, False)

    store = _ColumnStore(X, kernel, float(cache_size) * _MB, kernel_dtype)
    kdiag = kernel_diag(kernel, X)
    nu = y * (alpha[:, 0] - alpha[:, 1])
    if not np.any(nu):
        f = np.zeros(m)
    elif store.full and store.cache.dtype == np.float64:
        f = store.cache @ nu
    elif store.full:
        # float32 cache: ``cache @ nu`` would upcast the whole matrix to a float64 temporary
        # (twice the budget); accumulate the nonzero rows in float64 instead
        nz = np.flatnonzero(nu)
        f = nk.rows_combination(store.cache, nz, nu[nz], np.empty(m))
    else:
        f = kernel_decision(X, kernel, nu)

    active = np.ones(m, dtype=np.bool_)
    viol = np.empty(m)
    shrink_thr = np.inf
    use_newton = bool(newton)
    n_newton = 0
    next_newton = _NEWTON_FIRST_EPOCH
    next_direct = _DIRECT_FIRST_EPOCH
    direct_max = max(_DIRECT_MIN_FACE, int(np.sqrt(
        _DIRECT_SHARE * float(cache_size) * _MB / store.face_bytes)))
    direct_settled = min(direct_max, _DIRECT_MAX_FACE)
    face_hist: list[int] = []
    faces = _FaceSystems(store)
    poll_state = {"t": time.monotonic(), "stop": False}

    def poll() -> bool:
        """should_stop(), asked at most every _POLL_SECONDS (sticky once True)."""
        if should_stop is None or poll_state["stop"]:
            return poll_state["stop"]
        if time.monotonic() - poll_state["t"] > _POLL_SECONDS:
            poll_state["t"] = time.monotonic()
            poll_state["stop"] = bool(should_stop())
        return poll_state["stop"]
    kkts: list[float] = []
    chunk = int(max(64, min(m, 20_000_000 // max(m, 1))))
    converged = stopped = False
    n_iter = 0
    kkt = np.inf
    for epoch in range(1, int(max_iter) + 1):
        n_iter = epoch
        order = rng.permutation(np.flatnonzero(active)).astype(np.int64)
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
                                shrink_thr, bool(shrinking), stats, nk.SKIP)
            if p < stop_at:
                _fetch_ahead(store, order, p, f, y, alpha, dz, db, theta)
                continue
            if poll():
                stopped = True
                break
        if stopped:
            break
        nk.pair_violations(f, y, alpha, dz, db, theta, viol)
        kkt = float(viol.max())
        if kkt <= tol:
            converged = True
            break
        kkts.append(kkt)
        face = _predicted_face(f, y, alpha, theta) if use_newton else m
        face_hist.append(face)
        if use_newton and epoch >= next_direct and (
                face <= direct_settled or face <= direct_max and _face_stalled(face_hist)):
            _, moved = _active_set_newton(store, kdiag, y, alpha, f, dz, db, theta, tol,
                                           budget=40 * (2 + face * face // (3 * m)),
                                           abort=poll, direct_max=direct_max, faces=faces)
            n_newton += 1
            next_direct = 2 * epoch
        elif use_newton and store.full and epoch >= next_newton \
                and face > _CG_FACE_FACTOR * direct_settled:
            remaining = _epochs_left(kkts, tol)
            if remaining > max(2 * epoch, _NEWTON_MIN_REMAINING):
                _, moved = _active_set_newton(store, kdiag, y, alpha, f, dz, db, theta, tol,
                                               budget=int(min(remaining, 10 * epoch)),
                                               abort=poll)
                n_newton += 1
                next_newton = 2 * epoch
            else:
                moved = False
                next_newton = epoch + max(5, epoch // 4)
        else:
            moved = False
        if moved:
            active[:] = True
            shrink_thr = np.inf
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
        if should_stop is not None:
            poll_state["t"] = time.monotonic()
            if poll_state["stop"] or should_stop():
                stopped = True
                break
    if stopped or not np.isfinite(kkt):
        nk.pair_violations(f, y, alpha, dz, db, theta, viol)
        kkt = float(viol.max())
        converged = kkt <= tol
    if not converged and not stopped:
        warnings.warn(
            f"kernel ODM dual coordinate descent did not converge in {max_iter} epochs "
            f"(KKT violation {kkt:.3g} > tol {tol:g})",
            convergence_warning(), stacklevel=2)
    obj = dual_objective(y * f, alpha, params, m_scale)
    return DualResult(alpha, n_iter, kkt, obj, converged, stopped)


class _FaceSystems:
    """Solves ``(K_SS + diag(D)) x = t`` for the successive faces of the direct Newton steps
    of one solve.

    A face is factored once (Cholesky in float32, about 2.8x faster than float64: 0.42 s vs
    1.19 s for 5,000 rows on one core, ``bench/face_solve.py``) and becomes the *base*.  The
    faces that follow differ from their predecessor by fewer and fewer rows (a 12,500-row
    ijcnn1 partition: 5,769, then 5,144 with 636 rows out and 11 in, then 5,121 with 51 out
    and 28 in); a face within ``_UPDATE_SHARE`` of the base's size in rows removed, added or
    moved between the zeta and beta sides reuses the base factor instead of a new one:

    * removed rows ``R`` (base positions): ``A_TT^-1 v`` on the kept rows ``T`` is
      ``z_T - Y_T C^-1 z_R`` with ``z = A_B^-1 [v; 0]``, ``Y = A_B^-1 E_R`` and
      ``C = Y_R`` (the Schur complement of the inverse, ``|R| x |R|``);
    * added rows ``N``: bordering, ``Sc = A_NN - A_NT A_TT^-1 A_TN`` (``|N| x |N|``).

    Both cost ``|R| + |N|`` right-hand sides of the triangular solves (about half as
    expensive per flop as a factorization here; 800 of them on 5,000 rows took 0.35 s
    against 0.72 s for the factorization) and small dense factors.  Either way the solve is
    float32-accurate and float64 iterative refinement against the exact matrix (the full
    matrix's rows, ``K[:, S] x``, or in column-cache mode a float64 ``K_SS`` computed from
    X, ``|S|^2 * 12`` bytes with the factor, which always refactors) finishes it until the
    max residual is ``<= target`` or stops halving; the best iterate is returned.  The
    residual on the face is the KKT violation there, so an unrefined solve only costs the
    active-set loop another step; the caller accepts no point without checking it.
    """

    def __init__(self, store: _ColumnStore) -> None:
        self.store = store
        self.base: np.ndarray | None = None  # the factored face (row indices)
        self.base_D = np.zeros(0)
        self.fac = None
        self.pos = np.full(store.m, -1, dtype=np.int64)  # row -> position in the base
        # columns of the base's inverse computed so far (base position -> index in ycols)
        self.ycol = np.full(store.m, -1, dtype=np.int64)
        self.ycols: list[np.ndarray] = []
        self.n_factored = 0  # factorizations (tests and benchmarks read it)
        self.n_updated = 0  # faces solved from the base factor

    def solve(self, S: np.ndarray, D: np.ndarray, t: np.ndarray,
              target: float) -> np.ndarray | None:
        """``x`` refined to a max residual ``<= target`` (or the best refinement reached);
        ``None`` when the float32 matrix is not numerically positive definite (the Newton
        attempt then ends; coordinate descent goes on)."""
        store = self.store
        buf = np.empty(store.m if store.full else S.size)
        approx = self._from_base(S, D) if store.full and self.base is not None else None
        K_SS = None
        if approx is None:
            if not store.full:
                K_SS = store.block(S)
            approx = self._refactor(S, D, K_SS)
            if approx is None:
                return None
        if store.full:
            rows = store.slot[S]

            def matvec(v: np.ndarray) -> np.ndarray:
                return nk.rows_combination(store.cache, rows, v, buf)[S]
        else:
            ar = np.arange(S.size, dtype=np.int64)

            def matvec(v: np.ndarray) -> np.ndarray:
                return nk.rows_combination(K_SS, ar, v, buf)
        r = t.copy()
        x = np.zeros(t.size)
        prev = best = np.inf
        x_best = x
        for _ in range(_REFINE_MAX):
            x = x + approx(r)
            r = t - (matvec(x) + D * x)
            res = float(np.abs(r).max())
            if res < best:
                best, x_best = res, x
            if res <= target or not res < 0.5 * prev:
                break
            prev = res
        return x_best

    def _refactor(self, S: np.ndarray, D: np.ndarray, K_SS: np.ndarray | None):
        """Factor this face (it becomes the base); returns its float32 solve."""
        self.base, self.fac = None, None  # the old factor goes before the new one is made
        self.pos[:] = -1
        self.ycol[:] = -1
        self.ycols = []
        if K_SS is None:
            A = self.store.block(S, np.float32)
        else:
            A = buffers.empty(K_SS.shape, np.float32)
            A[...] = K_SS
        A[np.diag_indices_from(A)] += D.astype(np.float32)
        try:
            fac = cho_factor(A, lower=True, overwrite_a=True, check_finite=False)
        except LinAlgError:
            return None
        self.n_factored += 1
        if self.store.full:  # only the full-matrix mode updates (it has K's rows at hand)
            self.base, self.base_D, self.fac = S.copy(), D.copy(), fac
            self.pos[S] = np.arange(S.size)

        def solve(v: np.ndarray) -> np.ndarray:
            return cho_solve(fac, v.astype(np.float32), check_finite=False)

        return solve

    def _inverse_columns(self, R: np.ndarray) -> np.ndarray:
        """``A_B^-1 E_R`` (float32), from the columns kept since the base was factored plus
        the missing ones (successive faces mostly remove more of the same rows)."""
        have = self.ycol[R] >= 0
        miss = R[~have]
        if miss.size:
            n = self.base.size
            E = np.zeros((n, miss.size), dtype=np.float32)
            E[miss, np.arange(miss.size)] = 1.0
            cols = cho_solve(self.fac, E, check_finite=False)
            self.ycol[miss] = np.arange(len(self.ycols), len(self.ycols) + miss.size)
            self.ycols.extend(cols.T)
        return np.stack([self.ycols[c] for c in self.ycol[R]], axis=1)

    def _from_base(self, S: np.ndarray, D: np.ndarray):
        """The float32 solve of this face from the base factor, or ``None`` when the face
        differs from the base by more than ``_UPDATE_SHARE`` of its rows (or the bordered
        systems are not numerically positive definite)."""
        base, fac, store = self.base, self.fac, self.store
        n = base.size
        p = self.pos[S]
        same = p >= 0
        same[same] = self.base_D[p[same]] == D[same]
        tp = p[same]
        kept = np.zeros(n, dtype=bool)
        kept[tp] = True
        R = np.flatnonzero(~kept)
        new = np.flatnonzero(~same)
        if R.size + new.size > _UPDATE_SHARE * n:
            return None
        try:
            if R.size:
                Y = self._inverse_columns(R)
                C = cho_factor(Y[R].astype(np.float64), lower=True, check_finite=False)

            def solve_kept(V: np.ndarray) -> np.ndarray:
                Z = np.zeros((n, V.shape[1]), dtype=np.float32)
                Z[tp] = V
                Z = cho_solve(fac, Z, check_finite=False)
                if R.size:
                    Z -= Y @ cho_solve(C, Z[R].astype(np.float64),
                                       check_finite=False).astype(np.float32)
                return Z[tp]

            if new.size:
                T = S[same]
                K_NS = store.cache[store.slot[S[new]]]  # the new rows of K (all columns)
                B = np.ascontiguousarray(K_NS[:, T].T, dtype=np.float32)  # A_TN
                W = solve_kept(B).astype(np.float64)
                Bt = B.T.astype(np.float64)  # A_NT
                Sc = K_NS[:, S[new]].astype(np.float64)
                Sc[np.diag_indices_from(Sc)] += D[new]
                # fails when new rows are nearly in the span of the kept ones at this float32
                # accuracy of W: the face is then factored anew
                Sc_f = cho_factor(Sc - Bt @ W, lower=True, check_finite=False)
        except LinAlgError:
            return None
        self.n_updated += 1

        def solve(v: np.ndarray) -> np.ndarray:
            x = np.empty(v.size)
            y_t = solve_kept(v[same].astype(np.float32)[:, None])[:, 0].astype(np.float64)
            if new.size:
                x_n = cho_solve(Sc_f, v[new] - Bt @ y_t, check_finite=False)
                x[new] = x_n
                y_t = y_t - W @ x_n
            x[same] = y_t
            return x

        return solve


def _pcg(matvec, D, pinv, t, x, target: float, max_iter: int,
         abort: Callable[[], bool] | None = None) -> tuple[np.ndarray, int]:
    """Jacobi-preconditioned CG for ``(K_SS + diag(D)) x = t`` from ``x``; stops when the
    max residual is ``<= target`` (or ``abort()`` says so). Returns ``(x, matvecs used)``."""
    r = t - (matvec(x) + D * x)
    used = 1
    z = pinv * r
    p = z.copy()
    rz = float(r @ z)
    while used < max_iter and np.abs(r).max() > target:
        if abort is not None and abort():
            return x, max_iter
        Ap = matvec(p) + D * p
        used += 1
        pAp = float(p @ Ap)
        if not pAp > 0:
            break
        step = rz / pAp
        x = x + step * p
        r -= step * Ap
        z = pinv * r
        rz_new = float(r @ z)
        p = z + (rz_new / rz) * p
        rz = rz_new
    return x, used


def _face_stalled(hist: list[int], window: int = 5) -> bool:
    """Whether coordinate descent has stopped shrinking the predicted face: the smallest of
    the last ``window`` epochs' faces is not ``_FACE_SHRINK`` below the smallest of the
    ``window`` before."""
    return len(hist) >= 2 * window and \
        min(hist[-window:]) > _FACE_SHRINK * min(hist[-2 * window:-window])


def _epochs_left(kkts: list[float], tol: float) -> float:
    """Epochs coordinate descent still needs, extrapolating its linear rate between the
    middle and the end of the history (minima over 5 epochs damp the oscillation)."""
    e = len(kkts)
    h = e // 2
    a = min(kkts[max(0, h - 3): h + 2])
    b = min(kkts[-5:])
    if not b < a:
        return float("inf")
    rate = (b / a) ** (1.0 / max(1, e - 1 - h))
    return float(np.log(tol / b) / np.log(rate)) if b > tol else 0.0


def _active_set_newton(store: _ColumnStore, kdiag, y, alpha, f, dz, db, theta, tol,
                       budget: int, abort: Callable[[], bool] | None = None,
                       direct_max: int = 0, faces: _FaceSystems | None = None
                       ) -> tuple[bool, bool]:
    """Primal-dual active-set (semismooth Newton) solve of the dual.

    ``direct_max > 0``: each face system is solved exactly by ``faces``
    (:class:`_FaceSystems`, Cholesky in either kernel mode, reusing the last factor for
    nearby faces) and the attempt ends when a face exceeds ``direct_max`` rows;
    ``direct_max == 0``: preconditioned CG (full-matrix mode only).

    Each instance is in one of three states: Z (zeta > 0), B (beta > 0) or O (both 0).  For a
    fixed state the KKT conditions are the SPD system ``(K_SS + D) nu_S = t_S`` on
    S = Z u B with ``D_i = M c upsilon, t_i = y_i (1-theta)`` on Z and ``D_i = M c,
    t_i = y_i (1+theta)`` on B (its residual is exactly the KKT violation on S).  The states
    are then re-predicted from the solution (Z keeps members
    with zeta > 0 and gains non-members with margin < 1-theta; B likewise above 1+theta) until
    they stop changing, at which point the iterate satisfies every KKT condition.  Coordinate
    descent needs O(condition number) epochs on ill-conditioned problems (large ``lam``, wide
    kernels), CG about its square root, the direct solve a few state updates.  ``budget`` caps
    the work in kernel mat-vecs (each costs about one epoch; a Cholesky of ``|S|`` rows counts
    ``|S|^2 / 3m``).  Returns ``(converged, moved)``: on success ``alpha``/``f`` are
    overwritten with a point meeting ``tol``.  When the budget runs out first, the last
    iterate, projected onto the feasible set, replaces ``alpha``/``f`` if its dual objective is
    lower (``moved``), so the mat-vecs spent still shorten the coordinate descent that follows
    (otherwise a failed attempt would cost up to ``budget`` epochs for nothing).
    """
    m = store.m
    zs = alpha[:, 0] > 0
    bs = alpha[:, 1] > 0
    nu = y * (alpha[:, 0] - alpha[:, 1])
    fcur = f.copy()
    used = 0
    buf = np.empty(m)
    tight = False
    loose = 10.0 * tol  # state prediction needs only rough solves
    viol = np.empty(m)
    cand = np.empty_like(alpha)
    for _ in range(40):
        u = y * fcur
        ysn = y * nu  # = zeta on Z, -beta on B
        if used > 0 and not np.any(zs & (ysn < 0)) and not np.any(bs & (ysn > 0)):
            # feasible iterate with exact f: accept it once it meets the tolerance
            cand[:, 0] = np.where(zs, ysn, 0.0)
            cand[:, 1] = np.where(bs, -ysn, 0.0)
            if nk.pair_violations(fcur, y, cand, dz, db, theta, viol).max() <= tol:
                alpha[:] = cand
                f[:] = fcur
                return True, True
        new_z = np.where(zs, ysn > 0, (~bs | (ysn >= 0)) & (u < 1.0 - theta))
        new_b = np.where(bs, ysn < 0, (~zs | (ysn <= 0)) & (u > 1.0 + theta))
        new_z &= ~new_b
        n_changed = int(np.count_nonzero(new_z != zs) + np.count_nonzero(new_b != bs))
        if used > 0 and n_changed <= max(2, (zs | bs).sum() // 100):
            tight = True  # few states left to settle: solve accurately from now on
        zs, bs = new_z, new_b
        S = np.flatnonzero(zs | bs)
        if S.size == 0:
            nu[:] = 0.0
            fcur[:] = 0.0
            used += 1
            continue
        zside = zs[S]
        D = np.where(zside, dz, db)
        t = y[S] * np.where(zside, 1.0 - theta, 1.0 + theta)

        left = budget - used
        if left <= 1:
            break
        if S.size <= direct_max and faces is not None:
            x = faces.solve(S, D, t, 1e-3 * tol if tight else loose)
            if x is None:
                break
            used += 1 + int(S.size * S.size // (6 * m))
        elif store.full and direct_max == 0:
            rows = store.slot[S]

            def matvec(v, rows=rows, S=S):
                return nk.rows_combination(store.cache, rows, v, buf)[S]

            target = 1e-3 * tol if tight else loose
            x, k = _pcg(matvec, D, 1.0 / (kdiag[S] + D), t, nu[S].copy(), target, left - 1,
                        abort)
            used += k + 1
        else:
            break  # face too large for a direct solve (CG attempts are the caller's other rule)
        nu[:] = 0.0
        nu[S] = x
        store.combine(S, x, fcur)
        if abort is not None and abort():
            break
    if used == 0:
        return False, False
    ysn = y * nu
    cand[:, 0] = np.where(zs, np.maximum(ysn, 0.0), 0.0)
    cand[:, 1] = np.where(bs, np.maximum(-ysn, 0.0), 0.0)
    nu_c = y * (cand[:, 0] - cand[:, 1])
    nz = np.flatnonzero(nu_c)
    f_c = store.combine(nz, nu_c[nz], np.empty(m))
    if _pair_objective(f_c, y, cand, dz, db, theta) < _pair_objective(f, y, alpha, dz, db, theta):
        alpha[:] = cand
        f[:] = f_c
        return False, True
    return False, False


def _predicted_face(f, y, alpha, theta) -> int:
    """Instances the next active-set step would solve for: nonzero pairs and margins outside
    the band."""
    u = y * f
    return int(np.count_nonzero(alpha.any(axis=1) | (u < 1.0 - theta) | (u > 1.0 + theta)))


def _pair_objective(f, y, alpha, dz, db, theta) -> float:
    """Dual objective ``1/2 a'Ha + b'a`` from ``f = K nu`` (``nu = y (zeta - beta)``)."""
    z, b = alpha[:, 0], alpha[:, 1]
    quad = float((y * (z - b)) @ f) + dz * float(z @ z) + db * float(b @ b)
    return 0.5 * quad + (theta - 1.0) * float(z.sum()) + (theta + 1.0) * float(b.sum())


def _fetch_ahead(store: _ColumnStore, order: np.ndarray, p: int, f, y, alpha, dz, db,
                 theta) -> None:
    """Fetch the missing column at ``order[p]`` plus those of the next instances in the sweep
    that currently violate the KKT conditions (one BLAS call for the batch)."""
    want = min(_FETCH_BATCH, max(1, store.n_slots // 4), store.batch_max)
    ahead = order[p + 1: p + 1 + 8 * want]
    ahead = ahead[store.slot[ahead] < 0]
    if ahead.size:
        v = nk.pair_violations(f[ahead], y[ahead], alpha[ahead], dz, db, theta,
                               np.empty(ahead.size))
        ahead = ahead[v > 1e-12][: want - 1]
    store.fetch(np.concatenate(([order[p]], ahead)).astype(np.int64))
