"""Kernel columns for the exact kernel solver, within a memory budget.

If the whole ``m x m`` matrix fits the budget it is computed once (float64 if that fits,
else float32 like LIBSVM's cache); otherwise a fixed number of float32 column slots is filled
on demand, a batch of columns per BLAS call, evicting the least recently used, so memory
never exceeds the budget.  Large buffers come from :mod:`solver.core.buffers` (pages mapped up
front: first-touch page faults cost more than the kernel values, ``docs/design-notes.md``).
"""

from __future__ import annotations

import numpy as np

from solver.core import _numba_kernels as nk
from solver.core import buffers
from solver.core.kernels import Kernel, kernel_decision, kernel_matrix
from solver.exact.kernel_memo import MemoSlot

__all__ = ["ColumnStore"]

# a kernel solve's memory ceiling is (1 + FACTOR_SHARE) x its kernel budget: the kernel
# values, and in what they leave (at least this share of the budget) the float32 factor of
# a direct Newton face (solver.exact.newton_kernel)
FACTOR_SHARE = 0.25
# fewest column slots in column-cache mode, so a sweep always has room for a fetched batch
MIN_SLOTS = 4
# most kernel columns one BLAS call computes in column-cache mode (bounds the temporary)
FETCH_BATCH = 128
# the temporary block of a fetch stays within this share of the budget
FETCH_BUDGET_SHARE = 1 / 8
# one fetch takes at most this fraction of the slots (the rest keep the recently used ones)
FETCH_SLOT_SHARE = 1 / 4
# a fetch also brings the columns of the violators among this many times the batch of
# instances next in the sweep (those are the columns the sweep will ask for next)
FETCH_LOOKAHEAD = 8


class ColumnStore:
    """Kernel columns for the sweep: the full matrix, or a bounded LRU set of column slots.

    ``slot[i]`` is the row of ``cache`` holding column ``i`` (``-1`` when not cached);
    ``last_used``/``tick`` drive the LRU eviction (the compiled sweep stamps the slots it
    reads). ``memo``: where a search keeps whole matrices across solves of the same rows and
    kernel (:mod:`solver.exact.kernel_memo`); only the full matrix is kept.
    """

    def __init__(self, X, kernel: Kernel, budget_bytes: float, dtype=None,
                 memo: MemoSlot | None = None) -> None:
        m = X.shape[0]
        self.X, self.kernel, self.m = X, kernel, m
        if dtype is None:
            dtype = np.float64 if 8.0 * m * m <= budget_bytes else np.float32
        dtype = np.dtype(dtype)
        self.full = m * m * dtype.itemsize <= budget_bytes or m <= 2
        if self.full:
            def compute() -> np.ndarray:
                return kernel_matrix(kernel, X, dtype=dtype)

            self.cache = compute() if memo is None else memo.matrix((m, m), dtype, compute)
            self.slot = np.arange(m, dtype=np.int64)
            self.n_slots = m
        else:
            n_slots = int(budget_bytes // (dtype.itemsize * m))
            self.n_slots = int(min(m, max(MIN_SLOTS, n_slots)))
            self.cache = buffers.empty((self.n_slots, m), dtype=dtype)
            self.slot = np.full(m, -1, dtype=np.int64)
            self.owner = np.full(self.n_slots, -1, dtype=np.int64)
        # bytes a direct Newton step's factor (and its K_SS in column-cache mode) may use
        self.factor_bytes = max(FACTOR_SHARE * budget_bytes,
                                (1.0 + FACTOR_SHARE) * budget_bytes - self.cache.nbytes)
        self.batch_max = int(max(1, min(self.n_slots,
                                        budget_bytes * FETCH_BUDGET_SHARE // (8.0 * m))))
        self.last_used = np.zeros(self.n_slots, dtype=np.int64)
        self.tick = 1
        self.n_computed = m if self.full else 0

    @property
    def face_bytes(self) -> int:
        """Bytes per face entry of a direct Newton step (:class:`solver.exact.newton_kernel.
        FaceSystems`): the float32 factor, plus a float64 ``K_SS`` in column-cache mode."""
        return 4 if self.full else 12

    def block(self, S: np.ndarray, dtype=np.float64) -> np.ndarray:
        """``K[S][:, S]`` as a new array of ``dtype``: copied from the matrix or computed
        from X."""
        if self.full:
            out = buffers.empty((S.size, S.size), dtype=dtype)
            return nk.gather_block(self.cache, self.slot[S], np.asarray(S, dtype=np.int64),
                                   out)
        return kernel_matrix(self.kernel, self.X[S], dtype=dtype)

    def combine(self, S: np.ndarray, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out = K[:, S] @ x`` (float64)."""
        if self.full:
            return nk.rows_combination(self.cache, self.slot[S], x, out)
        out[:] = kernel_decision(self.X[S], self.kernel, x, self.X)
        return out

    def margins(self, nu: np.ndarray) -> np.ndarray:
        """``f = K nu`` over all rows (float64) without a float64 copy of a float32 matrix."""
        m = self.m
        if not np.any(nu):
            return np.zeros(m)
        if self.full and self.cache.dtype == np.float64:
            return self.cache @ nu
        if self.full:
            # ``cache @ nu`` would upcast the whole float32 matrix to a float64 temporary
            # (twice the budget); accumulate the nonzero rows in float64 instead
            nz = np.flatnonzero(nu)
            return nk.rows_combination(self.cache, nz, nu[nz], np.empty(m))
        return kernel_decision(self.X, self.kernel, nu)

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

    def fetch_ahead(self, order: np.ndarray, p: int, f, y, alpha, dz, db, theta,
                    skip_face: float) -> None:
        """Fetch the missing column at ``order[p]`` plus those of the next instances in the
        sweep that the sweep would update now (violation above ``nk.SKIP``, and above
        ``skip_face`` where a dual is nonzero; one BLAS call for the batch)."""
        want = min(FETCH_BATCH, max(1, int(self.n_slots * FETCH_SLOT_SHARE)), self.batch_max)
        ahead = order[p + 1: p + 1 + FETCH_LOOKAHEAD * want]
        ahead = ahead[self.slot[ahead] < 0]
        if ahead.size:
            v = nk.pair_violations(f[ahead], y[ahead], alpha[ahead], dz[ahead], db[ahead], theta,
                                   np.empty(ahead.size))
            face = (alpha[ahead, 0] > 0.0) | (alpha[ahead, 1] > 0.0)
            ahead = ahead[(v > nk.SKIP) & ~(face & (v <= skip_face))][: want - 1]
        self.fetch(np.concatenate(([order[p]], ahead)).astype(np.int64))
