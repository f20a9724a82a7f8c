"""Landmarks and strata in the kernel's feature space (SODM Algorithm 1 step 1, eqs. 5/7-8).

Landmarks: greedy maximisation of the determinant of the landmarks' Gram matrix (DiODM's
general rule ``z_s = argmax_z k(z,z) - K_zs' K_s^-1 K_zs``), implemented as pivoted incomplete
Cholesky with the largest-residual pivot: keep the residual ``r(z) = k(z,z) - ||l(z)||^2``
of every candidate, take ``z* = argmax r`` (ties: lowest row index), append
``l_new(z) = (k(z, z*) - l(z).l(z*)) / sqrt(r(z*))`` and subtract ``l_new^2`` from ``r``.
O(M S^2) time, O(M S) memory, one kernel column per step.  The first landmark is
``argmax k(z,z)`` (the first row for RBF, as in SODM's ``z_1 = x_1``).  Selection stops early
when the largest residual falls below ``tol`` times the largest diagonal (the remaining points
are, numerically, in the span of the chosen ones), so fewer than S landmarks may be returned.

Candidates: all rows, or, when ``max_candidates`` is given and smaller than M, the rows whose
``splitmix64(seed, i)`` key is below ``key_threshold(max_candidates / M)`` (a Bernoulli
sample that a distributed engine reproduces row by row).

Strata: every row goes to its nearest landmark in RKHS distance
``k(x,x) + k(z,z) - 2 k(x,z)`` (ties: lowest landmark number), computed in row blocks.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from solver.core.kernels import Kernel, kernel_diag, kernel_matrix
from solver.sodm.partition import key_threshold, splitmix64

__all__ = ["select_landmarks", "assign_strata", "landmark_candidates", "is_candidate"]

_BLOCK_ELEMS = 1 << 22


def _rows(X, idx):
    return X[idx] if sp.issparse(X) else np.asarray(X)[idx]


def is_candidate(row_ids, n_rows: int, seed: int, max_candidates: int | None) -> np.ndarray:
    """Whether each row index is a landmark candidate: every row, or those whose
    ``splitmix64(seed, i)`` key is below ``key_threshold(max_candidates / n_rows)`` (the rule
    a distributed engine applies to its row ids)."""
    row_ids = np.asarray(row_ids)
    if max_candidates is None or max_candidates >= n_rows:
        return np.ones(row_ids.shape, dtype=bool)
    return splitmix64(seed, row_ids) < key_threshold(max_candidates / n_rows)


def landmark_candidates(n_rows: int, seed: int, max_candidates: int | None) -> np.ndarray:
    """Candidate row indices (sorted): all rows, or the key-threshold sample (row 0 when the
    sample is empty)."""
    cand = np.flatnonzero(is_candidate(np.arange(n_rows, dtype=np.uint64), n_rows, seed,
                                       max_candidates)).astype(np.int64)
    return cand if cand.size else np.arange(min(n_rows, 1), dtype=np.int64)


def select_landmarks(X, kernel: Kernel, n_landmarks: int, random_state=0, *,
                     max_candidates: int | None = None, tol: float = 1e-10) -> np.ndarray:
    """Row indices (into ``X``, in selection order) of up to ``n_landmarks`` landmarks.

    ``random_state`` (an int seed) only matters when ``max_candidates`` subsamples the
    candidates; the greedy selection itself is deterministic.
    """
    S = int(n_landmarks)
    if S < 1:
        raise ValueError(f"n_landmarks must be >= 1, got {n_landmarks!r}")
    M = X.shape[0]
    if M == 0:
        return np.zeros(0, dtype=np.int64)
    seed = 0 if random_state is None else int(random_state)
    cand = landmark_candidates(M, seed, max_candidates)
    Xc = _rows(X, cand)
    n = cand.shape[0]
    S = min(S, n)
    r = kernel_diag(kernel, Xc).astype(np.float64, copy=True)
    scale = float(r.max()) if n else 0.0
    Lt = np.zeros((S, n), dtype=np.float64)  # factor columns as rows: contiguous updates
    chosen: list[int] = []
    taken = np.zeros(n, dtype=bool)
    for s in range(S):
        rr = np.where(taken, -np.inf, r)
        j = int(np.argmax(rr))  # first maximum = lowest row index
        if not rr[j] > tol * max(scale, 1e-300):
            break
        lnew = kernel_matrix(kernel, Xc, _rows(Xc, [j])).ravel()
        if s:
            lnew -= Lt[:s].T @ Lt[:s, j]
        lnew /= np.sqrt(rr[j])
        Lt[s] = lnew
        r -= lnew * lnew
        taken[j] = True
        chosen.append(j)
    return cand[np.asarray(chosen, dtype=np.int64)]


def assign_strata(X, Z, kernel: Kernel, *, block_elems: int = _BLOCK_ELEMS) -> np.ndarray:
    """Stratum (index of the nearest landmark row of ``Z``) for every row of ``X``.

    ``k(x,x)`` is the same for every landmark, so the nearest landmark minimises
    ``k(z,z) - 2 k(x,z)``; rows are processed in blocks of ``block_elems / len(Z)`` rows.
    """
    M, S = X.shape[0], Z.shape[0]
    if S == 0:
        raise ValueError("at least one landmark is needed")
    zdiag = kernel_diag(kernel, Z)
    out = np.empty(M, dtype=np.int64)
    step = max(1, block_elems // max(S, 1))
    for s in range(0, M, step):
        e = min(M, s + step)
        D = kernel_matrix(kernel, X[s:e], Z)
        D *= -2.0
        D += zdiag[None, :]
        out[s:e] = np.argmin(D, axis=1)
    return out
