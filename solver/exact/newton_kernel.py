"""Active-set Newton steps for the kernel ODM dual, and when coordinate descent tries them.

Coordinate descent needs O(condition number) epochs on ill-conditioned problems (large
``lam``, wide kernels).  Each instance is in one of three states: Z (``zeta > 0``),
B (``beta > 0``) or O (both 0).  For fixed states the KKT conditions are the SPD system
``(K_SS + D) nu_S = t_S`` on the face ``S = Z u B`` (``D_i = M c upsilon``,
``t_i = y_i (1 - theta)`` on Z; ``D_i = M c``, ``t_i = y_i (1 + theta)`` on B), whose
residual is exactly the KKT violation on S.  The primal-dual active-set (semismooth Newton)
method solves it, re-predicts the states from the solution and repeats until they stop
changing: a few face solves instead of thousands of epochs. The first states come from
coordinate descent's iterate, not a face solution: a member stays only where a few projected
coordinate steps would keep its dual positive, so the first (largest) face is nearer the
optimum's.

* Direct face solves (:class:`FaceSystems`): a float32 Cholesky refined in float64, and
  later faces, which differ by fewer and fewer rows, solved from that factor.
* Block steps (full-matrix mode) for a face that stays well above what may be factored:
  the same active-set solve on the rows deepest in the face (:func:`block_rows`) with the
  other rows' duals held fixed, an exact minimisation over the block that leaves coordinate
  descent a face it can shrink into the direct range.
* Preconditioned CG on the face (:func:`pcg`) for faces too large to factor (full-matrix
  mode only), tried only when the observed linear rate of coordinate descent extrapolates
  to many more epochs.
* :class:`NewtonSchedule` decides after each epoch whether to attempt one; an attempt
  returns a point meeting the tolerance, or its last iterate made feasible when that lowers
  the dual objective, or leaves the iterate alone, so it only ever accelerates.

The measurements behind the constants are in ``docs/design-notes.md`` (``bench/face_solve.py``
reproduces them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.linalg import LinAlgError, blas, cho_factor, cho_solve

from solver.core import _numba_kernels as nk
from solver.core import buffers
from solver.exact.kernel_columns import ColumnStore

__all__ = [
    "NewtonWork",
    "NewtonSchedule",
    "FaceSystems",
    "factor_solve",
    "active_set_newton",
    "block_rows",
    "pcg",
    "face_stalled",
    "epochs_left",
    "predicted_face",
    "first_face",
    "next_states",
    "pair_objective",
]

# --- when to attempt (NewtonSchedule) ------------------------------------------------------
# direct attempts start at this epoch: the first epochs settle most states cheaply
DIRECT_FIRST_EPOCH = 5
# a failed attempt is retried at this multiple of its epoch (attempts cost at most a share
# of the epochs spent)
RETRY_FACTOR = 2
# faces up to this many rows always qualify for a direct step, whatever the budget
DIRECT_MIN_FACE = 1000
# while coordinate descent still shrinks the face, factor only faces up to this many rows:
# a larger, less settled face costs more in factorizations than the epochs it saves
DIRECT_MAX_FACE = 5792
# the face has stopped shrinking when the smallest of the last FACE_WINDOW epochs' faces is
# within this factor of the smallest of the FACE_WINDOW before
FACE_SHRINK = 0.97
FACE_WINDOW = 5
# CG attempts start at this epoch (a mat-vec costs one or two epochs, and CG needs hundreds)
CG_FIRST_EPOCH = 50
# ... and only when the extrapolated epochs left exceed this (and twice the epochs spent)
CG_MIN_REMAINING = 500
# no CG while the face is within this factor of the direct limit: coordinate descent
# shrinks it into direct range within a few epochs ...
CG_FACE_FACTOR = 2.0
# ... unless nearly every row is on the face and it has stopped shrinking: then shrinking
# saves coordinate descent nothing, and a CG mat-vec costs about what an epoch does
CG_WHOLE_FACE = 0.95
# a CG attempt may spend up to this many epochs' worth of mat-vecs per epoch spent so far
CG_BUDGET_PER_EPOCH = 10
# when CG is not worth it yet, look again after max(CG_RECHECK_MIN, epoch / CG_RECHECK_DIV)
CG_RECHECK_MIN = 5
CG_RECHECK_DIV = 4
# the linear rate is read from minima over windows of this many epochs (damps oscillation)
RATE_WINDOW = 5
# a direct attempt may use this many state updates' worth of mat-vecs (each update: two
# mat-vecs and a factorization counted at |S|^2 / 3m)
DIRECT_BUDGET_UPDATES = 40
# an attempt whose first face has |S| rows out of m (first_face) costs about 0.03 |S|^2 / m
# epochs of coordinate descent; it is made only when coordinate descent's extrapolated epochs
# left exceed twice that (else coordinate descent finishes first, and the question is asked
# again next epoch)
DIRECT_WORTH = 0.06
# ... plus twice what an attempt costs beyond its factorization on a small fit (mat-vecs with
# the face's columns, small solves, bookkeeping: ~1.5e8 multiply-adds of coordinate
# descent, whose epochs make about m |face| of them, |face| the sign rule's): it decides fits
# of a few thousand rows, where an epoch takes well under a millisecond
DIRECT_FIXED = 3e8

# a face still above BLOCK_FACE times the direct limit over the last FACE_WINDOW epochs once
# it has stopped shrinking (under 3 % per window: 15 epochs or more from the limit) gets a
# block step, from BLOCK_FIRST_EPOCH on and when it pays as a direct step of the limit's size
# would: the active-set solve on the rows deepest in the face, the others held fixed ...
BLOCK_FACE = 1.1
BLOCK_FIRST_EPOCH = 10
# ... on BLOCK_SHARE of the direct limit's rows: the deepest rows are the ones coordinate
# descent moves slowest, and a block of half the limit costs an eighth of its factor
BLOCK_SHARE = 0.5

# --- one attempt (active_set_newton) --------------------------------------------------------
# at most this many state updates per attempt
MAX_STATE_UPDATES = 40
# the first face keeps a nonzero dual only where START_STEPS projected coordinate steps from
# the iterate would keep it (coordinate descent leaves many small duals that the optimum
# sets to zero, and the first face is the attempt's largest factorization)
START_STEPS = 10.0
# ... but only when the sign rule's first face holds more than START_SHARE of the rows:
# coordinate descent's small duals inflate large faces (up to 90 % of the rows where the
# optimum's face holds half), while on a small face the trimmed rows come back and cost a
# second factorization (skin_nonskin, about a tenth of the rows; docs/design-notes.md)
START_SHARE = 0.2
# state prediction needs only rough solves: residual target LOOSE_TOL * tol ...
LOOSE_TOL = 10.0
# ... until at most 1/SETTLED_DIV of the face (and at least SETTLED_MIN rows) changes state;
# then solve to TIGHT_TOL * tol so the accepted point meets tol
SETTLED_DIV = 100
SETTLED_MIN = 2
TIGHT_TOL = 1e-3

# --- face systems (FaceSystems) -------------------------------------------------------------
# float64 refinement steps after a float32 solve (each costs two |S|^2 passes; the error
# shrinks by about cond * 6e-8 per step) ...
REFINE_MAX = 8
# ... stopped when a step does not cut the residual below this fraction of the last one
REFINE_MIN_GAIN = 0.5
# a face that differs from the factored one by at most this share of its rows (removed,
# added or switched side) is solved from that factor ...
UPDATE_SHARE = 0.25
# ... when that costs less than factoring the new face: k right-hand sides (the removed
# and added rows whose columns are not kept yet) on a base of n rows cost two triangular
# solves, k n^2 multiply-adds or UPDATE_RHS_COST * k n^2 flops, against s^3 / 3 flops for
# the factor of a face of s rows (a base of 6,010 rows less 1,177: 8.5e10 against 3.8e10)
UPDATE_RHS_COST = 2.0
# right-hand sides up to this many are solved by two BLAS-2 triangular solves each: LAPACK's
# potrs first packs the whole factor for its BLAS-3 solve, a fixed cost of about five
# vector solves (docs/design-notes.md, "A vector solve without potrs")
FEW_RHS = 4


@dataclass(frozen=True)
class NewtonWork:
    """What the Newton steps of one kernel solve did, counted (the same on any machine):
    attempts, the size of every face factored (one that fails as not positive definite
    included) and the faces solved from an earlier factor. Its cost grows with lam, which a
    cost model of rows alone misses (docs/auto-params.md, "The budget, measured")."""

    attempts: int = 0
    factored: tuple[int, ...] = ()
    updated: int = 0

    @property
    def factor_work(self) -> float:
        """``sum(s**3) / 3`` over the faces factored: the Cholesky work, in flops (half
        as many multiply-adds)."""
        return float(sum(float(s) ** 3 for s in self.factored) / 3.0)

    def record(self) -> dict[str, Any]:
        """The fields a fit's history record keeps."""
        return {"newton_attempts": self.attempts, "faces_factored": list(self.factored),
                "faces_updated": self.updated, "factor_work": self.factor_work}


@dataclass
class NewtonSchedule:
    """When one kernel solve attempts an active-set Newton step, and the attempt itself.

    Built once per solve (:meth:`for_store`); :meth:`after_epoch` is called after every epoch
    that did not converge and returns whether the iterate moved.
    """

    store: ColumnStore
    kdiag: np.ndarray
    y: np.ndarray
    dz: np.ndarray
    db: np.ndarray
    theta: float
    direct_max: int  # largest face a direct step factors (the kernel budget's share)
    direct_settled: int  # ... while coordinate descent still shrinks the face
    next_direct: int = DIRECT_FIRST_EPOCH
    next_cg: int = CG_FIRST_EPOCH
    next_block: int = BLOCK_FIRST_EPOCH
    face_history: list[int] = field(default_factory=list)
    n_attempts: int = 0
    faces: FaceSystems | None = None
    max_iter: float = float("inf")  # the solve's epochs: coordinate descent stops there

    @classmethod
    def for_store(cls, store: ColumnStore, kdiag, y, dz: np.ndarray,
                  db: np.ndarray, theta: float, max_iter: float = float("inf")
                  ) -> NewtonSchedule:
        """The schedule of a solve on ``store`` of at most ``max_iter`` epochs: its direct
        steps factor faces within ``store.factor_bytes``."""
        direct_max = max(DIRECT_MIN_FACE, int(np.sqrt(store.factor_bytes / store.face_bytes)))
        return cls(store, kdiag, y, dz, db, float(theta), direct_max,
                   min(direct_max, DIRECT_MAX_FACE), faces=FaceSystems(store),
                   max_iter=float(max_iter))

    def work(self) -> NewtonWork:
        """What this solve's Newton steps did so far."""
        faces = self.faces
        return NewtonWork(self.n_attempts, tuple(faces.factored) if faces else (),
                          faces.n_updated if faces else 0)

    def after_epoch(self, epoch: int, kkts: list[float], alpha: np.ndarray, f: np.ndarray,
                    tol: float, abort: Callable[[], bool] | None = None) -> bool:
        """Attempt a Newton step if the schedule says so; ``alpha``/``f`` are updated in
        place when it moves the iterate (returns whether it did)."""
        m = self.store.m
        face = predicted_face(f, self.y, alpha, self.theta)
        self.face_history.append(face)
        if epoch >= self.next_direct and (
                face <= self.direct_settled
                or face <= self.direct_max and face_stalled(self.face_history)):
            first = first_face(f, self.y, alpha, self.kdiag, self.dz, self.db, self.theta)
            # (an attempt is made anyway where coordinate descent would run out of epochs)
            worth = min(attempt_epochs(first, face, m), self.max_iter - epoch)
            if epochs_left(kkts, tol) < worth:
                return False
            self.next_direct = RETRY_FACTOR * epoch
            return self._attempt(alpha, f, tol, abort, direct_budget(face, m), direct=True)
        if self.store.full and epoch >= self.next_block and face_stalled(self.face_history) \
                and min(self.face_history[-FACE_WINDOW:]) > BLOCK_FACE * self.direct_max \
                and epochs_left(kkts, tol) >= DIRECT_WORTH * self.direct_max ** 2 / m:
            self.next_block = RETRY_FACTOR * epoch
            free = block_rows(f, self.y, alpha, self.kdiag, self.theta,
                              int(BLOCK_SHARE * self.direct_max))
            return self._attempt(alpha, f, tol, abort, direct_budget(self.direct_max, m),
                                 direct=True, free=free)
        if self.store.full and epoch >= self.next_cg and (
                face > CG_FACE_FACTOR * self.direct_settled
                or face > self.direct_max and face >= CG_WHOLE_FACE * m
                and face_stalled(self.face_history)):
            remaining = epochs_left(kkts, tol)
            if remaining > max(RETRY_FACTOR * epoch, CG_MIN_REMAINING):
                self.next_cg = RETRY_FACTOR * epoch
                budget = int(min(remaining, CG_BUDGET_PER_EPOCH * epoch))
                return self._attempt(alpha, f, tol, abort, budget, direct=False)
            self.next_cg = epoch + max(CG_RECHECK_MIN, epoch // CG_RECHECK_DIV)
        return False

    def _attempt(self, alpha, f, tol, abort, budget: int, *, direct: bool,
                 free: np.ndarray | None = None) -> bool:
        self.n_attempts += 1
        _, moved = active_set_newton(
            self.store, self.kdiag, self.y, alpha, f, self.dz, self.db, self.theta, tol,
            budget=budget, abort=abort, direct_max=self.direct_max if direct else 0,
            faces=self.faces if direct else None, free=free)
        return moved


def direct_budget(face: int, m: int) -> int:
    """Mat-vec budget of a direct attempt on a face of ``face`` rows out of ``m``."""
    return DIRECT_BUDGET_UPDATES * (2 + face * face // (3 * m))


class FaceSystems:
    """Solves ``(K_SS + diag(D)) x = t`` for the successive faces of the direct Newton steps
    of one solve.

    A face is factored once (Cholesky in float32, docs/design-notes.md has its cost) and becomes
    the *base*; a face within ``UPDATE_SHARE`` of the base in rows removed, added or moved
    between the zeta and beta sides reuses the base factor where its new triangular solves
    cost less than a factorization of the face:

    * removed rows ``R`` (base positions): ``A_TT^-1 v`` on the kept rows ``T`` is
      ``z_T - Y_T C^-1 z_R`` with ``z = A_B^-1 [v; 0]``, ``Y = A_B^-1 E_R`` and
      ``C = Y_R`` (the Schur complement of the inverse, ``|R| x |R|``);
    * added rows ``N``: bordering, ``Sc = A_NN - A_NT A_TT^-1 A_TN`` (``|N| x |N|``), with
      ``A_TT^-1 A_TN`` from ``A_B^-1 K_BN`` less ``Y K_RN``.

    The columns ``Y`` and ``A_B^-1 K_BN`` are kept per row until the next factorization
    (successive faces remove and add mostly the same rows), so only rows new to the base's
    updates cost triangular solves.

    Either way the solve is float32-accurate, and float64 iterative refinement against the
    exact matrix (the full matrix's rows, ``K[:, S] x``, or in column-cache mode a float64
    ``K_SS`` computed from X, ``|S|^2 * 12`` bytes with the factor, which always refactors)
    finishes it until the max residual is ``<= target`` or stops halving; the best iterate is
    returned.  On ill-conditioned faces the bordered pieces can lose too much accuracy for
    the refinement to converge; a face solved from the base that stops above the target is
    then factored anew and refined from there (inaccurate solves make the predicted states
    flip on rounding noise, and the active-set loop cycles).  The caller accepts no point
    without checking it.
    """

    def __init__(self, store: ColumnStore) -> None:
        self.store = store
        self.base: np.ndarray | None = None  # the factored face (row indices)
        self.base_D = np.zeros(0)
        self.fac = None
        self.root = 1.0  # the base factor is that of root**2 * A (see _refactor)
        self.pos = np.full(store.m, -1, dtype=np.int64)  # row -> position in the base
        # columns of the base's inverse computed so far (base position -> index in ycols)
        self.ycol = np.full(store.m, -1, dtype=np.int64)
        self.ycols: list[np.ndarray] = []
        # ... and of the base's inverse times the K columns of rows added since (row -> index
        # in gcols)
        self.gcol = np.full(store.m, -1, dtype=np.int64)
        self.gcols: list[np.ndarray] = []
        self.n_factored = 0  # factorizations that succeeded (tests read it)
        self.factored: list[int] = []  # the size of every face factored, failed ones too
        self.n_updated = 0  # faces solved from the base factor

    def solve(self, S: np.ndarray, D: np.ndarray, t: np.ndarray,
              target: float) -> np.ndarray | None:
        """``x`` refined to a max residual ``<= target`` (or the best refinement reached);
        ``None`` when the float32 matrix is not numerically positive definite (the Newton
        attempt then ends; coordinate descent goes on)."""
        store = self.store
        buf = np.empty(store.m if store.full else S.size)
        approx = self._from_base(S, D) if store.full and self.base is not None else None
        updated = approx is not None
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
        x, res = _refine(approx, matvec, D, t, None, target)
        if res > target and updated:
            # the bordered solve from the base lost the accuracy the refinement needs (on
            # ill-conditioned faces its float32 pieces amplify rounding): factor this face
            approx = self._refactor(S, D, None)
            if approx is not None:
                x, res = _refine(approx, matvec, D, t, x, target)
        return x

    def _refactor(self, S: np.ndarray, D: np.ndarray, K_SS: np.ndarray | None):
        """Factor this face (it becomes the base); returns its float32 solve."""
        self.factored.append(int(S.size))
        self.base, self.fac = None, None  # the old factor goes before the new one is made
        self.pos[:] = -1
        self.ycol[:] = -1
        self.ycols = []
        self.gcol[:] = -1
        self.gcols = []
        if K_SS is None:
            A = self.store.block(S, np.float32)
        else:
            A = buffers.empty(K_SS.shape, np.float32)
            A[...] = K_SS
        A[np.diag_indices_from(A)] += D.astype(np.float32)
        # Subnormals: the fill-in of small entries underflows below float32's normal range,
        # and on CPUs without fast subnormals (Intel's) the factorization then runs up to
        # 10x slower (docs/design-notes.md). Entries below float32's resolution of the smallest
        # diagonal are dropped (the factor only preconditions the refined solve), and the
        # matrix is scaled by root**2 (a power of two, exact) so its largest entry is near
        # 2**98 at most: what would underflow now lies ~29 decades further down.
        diag = A.diagonal()
        root = 2.0 ** max(0, min(48, int(50 - math.log2(max(float(diag.max()), 1e-30)))))
        nk.drop_and_scale(A, np.float32(np.finfo(np.float32).eps * float(diag.min())),
                          np.float32(root * root))
        try:
            # A is symmetric and C-ordered: its transpose is the same matrix in the Fortran
            # order LAPACK works in, factored in place (the upper triangle of A.T is the
            # lower one filled above). Given A itself, scipy makes a transposed copy first:
            # twice the factor's memory and a third more time (docs/design-notes.md).
            fac = cho_factor(A.T, lower=False, overwrite_a=True, check_finite=False)
        except LinAlgError:
            return None
        self.n_factored += 1
        if self.store.full:  # only the full-matrix mode updates (it has K's rows at hand)
            self.base, self.base_D, self.fac, self.root = S.copy(), D.copy(), fac, root
            self.pos[S] = np.arange(S.size)

        def solve(v: np.ndarray) -> np.ndarray:
            # (root^2 A)^-1 (root v) = A^-1 v / root: right-hand side and solution stay in
            # float32's normal range
            return factor_solve(fac, (v * root).astype(np.float32)) * root

        return solve

    def _inverse_columns(self, R: np.ndarray) -> np.ndarray:
        """``A_B^-1 E_R`` (float32), from the columns kept since the base was factored plus
        the missing ones (successive faces mostly remove more of the same rows)."""
        have = self.ycol[R] >= 0
        miss = R[~have]
        if miss.size:
            n = self.base.size
            E = np.zeros((n, miss.size), dtype=np.float32, order="F")  # LAPACK's order
            E[miss, np.arange(miss.size)] = self.root
            cols = cho_solve(self.fac, E, check_finite=False)
            cols *= np.float32(self.root)
            self.ycol[miss] = np.arange(len(self.ycols), len(self.ycols) + miss.size)
            self.ycols.extend(cols.T)
        return np.stack([self.ycols[c] for c in self.ycol[R]], axis=1)

    def _border_columns(self, N: np.ndarray, K_NB: np.ndarray) -> np.ndarray:
        """``A_B^-1 K_BN`` (float32) for the added rows ``N`` (row indices; ``K_NB`` their
        kernel rows on the base), from the columns kept since the base was factored plus the
        missing ones: successive faces add mostly the same rows, and each face's bordered
        solve needs them whatever it removes (:meth:`_from_base`)."""
        have = self.gcol[N] >= 0
        miss = np.flatnonzero(~have)
        if miss.size:
            E = np.asfortranarray(K_NB[miss].T, dtype=np.float32)  # LAPACK's order
            E *= np.float32(self.root)
            cols = cho_solve(self.fac, E, check_finite=False)
            cols *= np.float32(self.root)
            self.gcol[N[miss]] = np.arange(len(self.gcols), len(self.gcols) + miss.size)
            self.gcols.extend(cols.T)
        return np.stack([self.gcols[c] for c in self.gcol[N]], axis=1)

    def _from_base(self, S: np.ndarray, D: np.ndarray):
        """The float32 solve of this face from the base factor, or ``None`` when the face
        differs from the base by more than ``UPDATE_SHARE`` of its rows, when its new
        triangular solves would cost more than factoring the face (``UPDATE_RHS_COST``), or
        when the bordered systems are not numerically positive definite."""
        base, fac, root, store = self.base, self.fac, self.root, self.store
        n = base.size
        p = self.pos[S]
        same = p >= 0
        same[same] = self.base_D[p[same]] == D[same]
        tp = p[same]
        kept = np.zeros(n, dtype=bool)
        kept[tp] = True
        R = np.flatnonzero(~kept)
        new = np.flatnonzero(~same)
        if R.size + new.size > UPDATE_SHARE * n:
            return None
        g_miss = int(np.count_nonzero(self.gcol[S[new]] < 0))
        if len(self.gcols) + g_miss > UPDATE_SHARE * n:
            # the kept bordering columns stay within a quarter of the factor's memory
            self.gcol[:] = -1
            self.gcols = []
            g_miss = new.size
        rhs = int(np.count_nonzero(self.ycol[R] < 0)) + g_miss  # columns not kept yet
        if UPDATE_RHS_COST * rhs * n * n > S.size ** 3 / 3.0:
            return None
        try:
            if R.size:
                Y = self._inverse_columns(R)
                C = cho_factor(Y[R].astype(np.float64), lower=True, check_finite=False)

            def solve_kept(V: np.ndarray) -> np.ndarray:
                Z = np.zeros((n, V.shape[1]), dtype=np.float32, order="F")
                Z[tp] = V * np.float32(root)
                Z = factor_solve(fac, Z)
                Z *= np.float32(root)
                return finish_kept(Z)

            def finish_kept(Z: np.ndarray) -> np.ndarray:
                # A_TT^-1 V from Z = A_B^-1 [V; 0]
                if R.size:
                    # on a nearly singular Y[R] this overflows float32 to inf / NaN: the
                    # NaN residual is never a best iterate of _refine, and solve() then
                    # factors the face anew, so the warning would only be noise
                    with np.errstate(over="ignore", invalid="ignore"):
                        Z -= Y @ factor_solve(C, Z[R].astype(np.float64)).astype(np.float32)
                return Z[tp]

            if new.size:
                T = S[same]
                K_NS = store.cache[store.slot[S[new]]]  # the new rows of K (all columns)
                B = np.ascontiguousarray(K_NS[:, T].T, dtype=np.float32)  # A_TN
                # A_TT^-1 A_TN is solve_kept(B); its first step, A_B^-1 [A_TN; 0], is
                # A_B^-1 K_BN (kept per row) less Y K_RN, which zeroes the removed rows
                Z = self._border_columns(S[new], K_NS[:, base])
                if R.size:
                    Z = Z - Y @ np.ascontiguousarray(K_NS[:, base[R]].T, dtype=np.float32)
                W = finish_kept(Z).astype(np.float64)
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
                x_n = factor_solve(Sc_f, v[new] - Bt @ y_t)
                x[new] = x_n
                y_t = y_t - W @ x_n
            x[same] = y_t
            return x

        return solve


def factor_solve(fac: tuple[np.ndarray, bool], B: np.ndarray) -> np.ndarray:
    """``A^-1 B`` from ``cho_factor``'s ``fac = (c, lower)`` of ``A`` (``B`` a vector or
    columns); a new array, of ``c``'s dtype. Few columns go through ``trsv`` directly."""
    c, lower = fac
    if B.ndim == 2 and B.shape[1] > FEW_RHS:
        return cho_solve(fac, B, check_finite=False)
    trsv = blas.get_blas_funcs("trsv", (c,))
    # A = L L^T: L y = b, then L^T x = y; A = U^T U: U^T y = b, then U x = y
    first, second = (0, 1) if lower else (1, 0)

    def one(b: np.ndarray) -> np.ndarray:
        y = trsv(c, b, trans=first, lower=lower)
        return trsv(c, y, trans=second, lower=lower, overwrite_x=True)

    if B.ndim == 1:
        return one(B)
    out = np.empty(B.shape, dtype=c.dtype, order="F")
    for j in range(B.shape[1]):
        out[:, j] = one(B[:, j])
    return out


def _refine(approx, matvec, D, t, x: np.ndarray | None, target: float
            ) -> tuple[np.ndarray, float]:
    """Iterative refinement of ``(K_SS + diag(D)) x = t`` from ``x`` (``None``: zero) with
    the float32 solve ``approx``: the best iterate and its max residual, stopped at
    ``target`` or when a step does not cut the residual below ``REFINE_MIN_GAIN`` of the
    last."""
    if x is None:
        x, r, prev = np.zeros(t.size), t.copy(), np.inf
    else:
        r = t - (matvec(x) + D * x)
        prev = float(np.abs(r).max())
    best, x_best = prev, x
    for _ in range(REFINE_MAX):
        x = x + approx(r)
        r = t - (matvec(x) + D * x)
        res = float(np.abs(r).max())
        if res < best:
            best, x_best = res, x
        if res <= target or not res < REFINE_MIN_GAIN * prev:
            break
        prev = res
    return x_best, best


def pcg(matvec, D, pinv, t, x, target: float, max_iter: int,
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


def face_stalled(hist: list[int], window: int = FACE_WINDOW) -> bool:
    """Whether coordinate descent has stopped shrinking the predicted face: the smallest of
    the last ``window`` epochs' faces is not ``FACE_SHRINK`` below the smallest of the
    ``window`` before."""
    return len(hist) >= 2 * window and \
        min(hist[-window:]) > FACE_SHRINK * min(hist[-2 * window:-window])


def attempt_epochs(first: int, face: int, m: int) -> float:
    """Twice what a direct attempt costs in epochs of coordinate descent on ``m`` rows whose
    face has ``face`` rows, the attempt's first face ``first`` (``DIRECT_WORTH``,
    ``DIRECT_FIXED``)."""
    return DIRECT_WORTH * first * first / m + DIRECT_FIXED / (m * max(face, 1))


def epochs_left(kkts: list[float], tol: float) -> float:
    """Epochs coordinate descent still needs, extrapolating its linear rate between the
    middle and the end of the history (minima over ``RATE_WINDOW`` epochs)."""
    e = len(kkts)
    h = e // 2
    half = RATE_WINDOW // 2
    a = min(kkts[max(0, h - half - 1): h + half])
    b = min(kkts[-RATE_WINDOW:])
    if not b < a:
        return float("inf")
    rate = (b / a) ** (1.0 / max(1, e - 1 - h))
    return float(np.log(tol / b) / np.log(rate)) if b > tol else 0.0


@dataclass
class _Dual:
    """The fixed data of one active-set attempt: the kernel columns, the labels, the pair
    constants and a mat-vec buffer."""

    store: ColumnStore
    kdiag: np.ndarray
    y: np.ndarray
    dz: np.ndarray  # per-instance diagonal terms (solver.core.formulation.diag_vectors)
    db: np.ndarray
    theta: float
    buf: np.ndarray

    def feasible_point(self, fcur, ysn, zs, bs, cand, tol, viol) -> bool:
        """Whether the iterate (``ysn = y nu``, exact ``fcur``) is feasible for its states
        and meets ``tol``; ``cand`` then holds it as ``(zeta, beta)`` pairs."""
        if np.any(zs & (ysn < 0)) or np.any(bs & (ysn > 0)):
            return False
        cand[:, 0] = np.where(zs, ysn, 0.0)
        cand[:, 1] = np.where(bs, -ysn, 0.0)
        return nk.pair_violations(fcur, self.y, cand, self.dz, self.db, self.theta,
                                  viol).max() <= tol

    def next_states(self, zs, bs, ysn, u, start: bool = False
                    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`next_states` of this problem (``start``: from coordinate descent's
        iterate)."""
        return next_states(zs, bs, ysn, u, self.theta,
                           (self.kdiag, self.dz, self.db) if start else None)

    def solve_face(self, S, zside, nu, target, left, abort, direct_max, faces,
                   f_fixed: np.ndarray | None = None) -> tuple[np.ndarray | None, int]:
        """``nu_S`` on the face ``S`` and its cost in mat-vecs, or ``(None, 0)`` when the
        attempt must end (budget spent, factor failed, face too large); ``f_fixed`` is
        ``K nu`` of the rows a block step holds fixed."""
        store = self.store
        D = np.where(zside, self.dz[S], self.db[S])
        t = self.y[S] * np.where(zside, 1.0 - self.theta, 1.0 + self.theta)
        if f_fixed is not None:
            t = t - f_fixed[S]
        if left <= 1:
            return None, 0
        if S.size <= direct_max and faces is not None:
            x = faces.solve(S, D, t, target)
            if x is None:
                return None, 0
            return x, 1 + int(S.size * S.size // (6 * store.m))
        if store.full and direct_max == 0:
            rows = store.slot[S]
            buf = self.buf

            def matvec(v, rows=rows, S=S):
                return nk.rows_combination(store.cache, rows, v, buf)[S]

            x, k = pcg(matvec, D, 1.0 / (self.kdiag[S] + D), t, nu[S].copy(), target,
                       left - 1, abort)
            return x, k + 1
        # face too large for a direct solve (CG attempts are the caller's other rule)
        return None, 0

    def project_if_lower(self, nu, zs, bs, alpha, f, cand) -> bool:
        """Replace ``alpha``/``f`` by the iterate projected onto the feasible set when its
        dual objective is lower; whether it did."""
        y, dz, db, theta = self.y, self.dz, self.db, self.theta
        ysn = y * nu
        cand[:, 0] = np.where(zs, np.maximum(ysn, 0.0), 0.0)
        cand[:, 1] = np.where(bs, np.maximum(-ysn, 0.0), 0.0)
        nu_c = y * (cand[:, 0] - cand[:, 1])
        nz = np.flatnonzero(nu_c)
        f_c = self.store.combine(nz, nu_c[nz], np.empty(self.store.m))
        if pair_objective(f_c, y, cand, dz, db, theta) < pair_objective(f, y, alpha, dz, db,
                                                                         theta):
            alpha[:] = cand
            f[:] = f_c
            return True
        return False


def active_set_newton(store: ColumnStore, kdiag, y, alpha, f, dz, db, theta, tol,
                      budget: int, abort: Callable[[], bool] | None = None,
                      direct_max: int = 0, faces: FaceSystems | None = None,
                      free: np.ndarray | None = None) -> tuple[bool, bool]:
    """Primal-dual active-set (semismooth Newton) solve of the dual (module docstring).

    ``direct_max > 0``: each face system is solved exactly by ``faces`` (Cholesky in either
    kernel mode, reusing the last factor for nearby faces) and the attempt ends when a face
    exceeds ``direct_max`` rows; ``direct_max == 0``: preconditioned CG (full-matrix mode
    only).  The states are re-predicted from each solution (Z keeps members with
    ``zeta > 0`` and gains non-members with margin ``< 1 - theta``; B likewise above
    ``1 + theta``) until the iterate satisfies every KKT condition.  ``budget`` caps the work
    in kernel mat-vecs (a Cholesky of ``|S|`` rows counts ``|S|^2 / 6m``).  ``free`` (a
    mask) makes it a block step: only those rows change, the others keep their duals (their
    ``K nu`` moves into the right-hand side), and the attempt ends once the block's states
    settle, keeping the point only if it lowers the objective.  Returns
    ``(converged, moved)``: on success ``alpha``/``f`` hold a point meeting ``tol``; when the
    budget runs out first, the last iterate projected onto the feasible set replaces them if
    its dual objective is lower (``moved``), so the mat-vecs spent still shorten the
    coordinate descent that follows.
    """
    dual = _Dual(store, kdiag, y, dz, db, theta, np.empty(store.m))
    zs = alpha[:, 0] > 0
    bs = alpha[:, 1] > 0
    nu = y * (alpha[:, 0] - alpha[:, 1])
    fcur = f.copy()
    used = 0
    tight = False
    viol = np.empty(store.m)
    cand = np.empty_like(alpha)
    block = free is not None
    f_fixed = None  # K nu of the rows a block step holds fixed
    if block:
        hold = np.flatnonzero(~free & (nu != 0))
        f_fixed = store.combine(hold, nu[hold], np.empty(store.m))
        zs_held, bs_held = zs.copy(), bs.copy()
    for _ in range(MAX_STATE_UPDATES):
        ysn = y * nu  # = zeta on Z, -beta on B
        if used > 0 and not block and dual.feasible_point(fcur, ysn, zs, bs, cand, tol,
                                                          viol):
            alpha[:] = cand  # feasible iterate with exact f meeting the tolerance
            f[:] = fcur
            return True, True
        new_z, new_b = dual.next_states(zs, bs, ysn, y * fcur, start=used == 0)
        if block:
            new_z = np.where(free, new_z, zs_held)
            new_b = np.where(free, new_b, bs_held)
            if tight and np.array_equal(new_z, zs) and np.array_equal(new_b, bs):
                break  # the block's states settled and were solved accurately
        n_changed = int(np.count_nonzero(new_z != zs) + np.count_nonzero(new_b != bs))
        if used > 0 and n_changed <= max(SETTLED_MIN, (zs | bs).sum() // SETTLED_DIV):
            tight = True  # few states left to settle: solve accurately from now on
        zs, bs = new_z, new_b
        S = np.flatnonzero((zs | bs) & free if block else zs | bs)
        if S.size == 0:
            if block:
                break
            nu[:] = 0.0
            fcur[:] = 0.0
            used += 1
            continue
        target = TIGHT_TOL * tol if tight else LOOSE_TOL * tol
        x, cost = dual.solve_face(S, zs[S], nu, target, budget - used, abort, direct_max,
                                  faces, f_fixed)
        if x is None:
            break
        used += cost
        nu[free if block else slice(None)] = 0.0
        nu[S] = x
        store.combine(S, x, fcur)
        if block:
            fcur += f_fixed
        if abort is not None and abort():
            break
    if used == 0:
        return False, False
    return False, dual.project_if_lower(nu, zs, bs, alpha, f, cand)


def block_rows(f, y, alpha, kdiag, theta, size: int) -> np.ndarray:
    """Mask of the ``size`` rows deepest in the face: the largest distances outside the
    band ``[1 - theta, 1 + theta]`` of each row's margin without its own term (the ``r`` of
    :mod:`solver.core._numba_kernels`), the rows most likely to stay on it."""
    r = y * f - kdiag * (alpha[:, 0] - alpha[:, 1])
    depth = np.maximum(1.0 - theta - r, r - 1.0 - theta)
    free = np.zeros(f.size, dtype=bool)
    free[np.argpartition(-depth, size)[:size]] = True
    return free


def next_states(zs, bs, ysn, u, theta: float,
                start: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """States predicted from a solution (``ysn = y nu``, ``u = y f``): members keep their
    sign, non-members join Z below the band (``u < 1 - theta``) and B above it. ``start`` =
    ``(kdiag, dz, db)`` when the iterate is coordinate descent's, not a face solution (so
    members' gradients are not zero): where that face holds more than ``START_SHARE`` of
    the rows, members keep their state only where ``START_STEPS`` projected coordinate
    steps along their gradient would leave the dual positive."""
    keep_z, keep_b = ysn > 0, ysn < 0
    new_z, new_b = _states(zs, bs, keep_z, keep_b, ysn, u, theta)
    if start is None or np.count_nonzero(new_z | new_b) <= START_SHARE * ysn.size:
        return new_z, new_b
    kdiag, dz, db = start
    grad_z = u - (1.0 - theta) + dz * ysn  # d objective / d zeta on Z
    grad_b = (1.0 + theta) - u - db * ysn  # d objective / d beta on B
    keep_z &= ysn > START_STEPS * grad_z / (kdiag + dz)
    keep_b &= -ysn > START_STEPS * grad_b / (kdiag + db)
    return _states(zs, bs, keep_z, keep_b, ysn, u, theta)


def _states(zs, bs, keep_z, keep_b, ysn, u, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """Members (``zs``/``bs``) stay where ``keep_z``/``keep_b``; the others join Z below the
    band and B above it."""
    new_z = np.where(zs, keep_z, (~bs | (ysn >= 0)) & (u < 1.0 - theta))
    new_b = np.where(bs, keep_b, (~zs | (ysn <= 0)) & (u > 1.0 + theta))
    new_z &= ~new_b
    return new_z, new_b


def predicted_face(f, y, alpha, theta) -> int:
    """Instances the next active-set step would solve for: nonzero pairs and margins outside
    the band."""
    u = y * f
    return int(np.count_nonzero(alpha.any(axis=1) | (u < 1.0 - theta) | (u > 1.0 + theta)))


def first_face(f, y, alpha, kdiag, dz, db, theta) -> int:
    """Rows of the first face an attempt from this iterate factors (:func:`next_states` with
    ``start``): the predicted face less the members projected steps would drop."""
    new_z, new_b = next_states(alpha[:, 0] > 0, alpha[:, 1] > 0, alpha[:, 0] - alpha[:, 1],
                               y * f, theta, (kdiag, dz, db))
    return int(np.count_nonzero(new_z | new_b))


def pair_objective(f, y, alpha, dz, db, theta) -> float:
    """Dual objective ``1/2 a'Ha + b'a`` from ``f = K nu`` (``nu = y (zeta - beta)``)."""
    z, b = alpha[:, 0], alpha[:, 1]
    quad = float((y * (z - b)) @ f) + float((dz * z) @ z) + float((db * b) @ b)
    return 0.5 * quad + (theta - 1.0) * float(z.sum()) + (theta + 1.0) * float(b.sum())
