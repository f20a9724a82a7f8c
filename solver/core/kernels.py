"""Kernel functions and BLAS-blocked kernel matrices for dense arrays and CSR matrices.

``linear``: x.z;  ``rbf``: exp(-gamma ||x - z||^2);  ``poly``: (gamma x.z + coef0)^degree.
Every kernel is computed from the inner-product block ``A_blk @ B.T`` (BLAS for dense input,
scipy's sparse product for CSR) so a sparse matrix is never densified as a whole; only output
blocks of at most ``block_elems`` entries are materialised at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solver.core import buffers

__all__ = [
    "Kernel",
    "KERNEL_NAMES",
    "MAX_KERNEL_VALUE",
    "kernel_matrix",
    "kernel_combination",
    "kernel_decision",
    "kernel_diag",
    "row_sq_norms",
    "rkhs_sq_distance",
]

KERNEL_NAMES = ("linear", "rbf", "poly")
# The largest kernel value a fit accepts: kernel columns may be stored as float32 (at most
# 3.4e38), and decision values and Newton steps sum many of them.
MAX_KERNEL_VALUE = 1e30
_BLOCK_ELEMS = 1 << 22  # ~32 MB of float64 per output block: the most at a time
# dense inner-product blocks of few features: each value is written and read once for a few
# multiply-adds, so a block that stays in the cache (8 MB) is cheaper; with more features the
# GEMM itself dominates and runs better on larger blocks (docs/design-notes.md, "Inner-product
# blocks by feature count"): ``FEATURE_BLOCK_ELEMS`` entries per feature, within both bounds
_MIN_BLOCK_ELEMS = 1 << 20
FEATURE_BLOCK_ELEMS = 1 << 14
# dense RBF kernel values of rows with at most this many features are made from the points
# (no inner products): faster up to about 14 features where measured (docs/design-notes.md)
DIRECT_RBF_MAX_FEATURES = 12


@dataclass(frozen=True)
class Kernel:
    """A positive-definite kernel; ``gamma``/``degree``/``coef0`` as in scikit-learn."""

    name: str = "rbf"
    gamma: float = 1.0
    degree: int = 3
    coef0: float = 1.0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> Kernel:
        """Raise ``ValueError`` naming the bad field."""
        if self.name not in KERNEL_NAMES:
            raise ValueError(f"kernel name must be one of {KERNEL_NAMES}, got {self.name!r}")
        g = self.gamma
        if isinstance(g, bool) or not isinstance(g, int | float | np.integer | np.floating) \
                or not math.isfinite(float(g)) or g <= 0:
            raise ValueError(f"gamma must be a positive finite number, got {g!r}")
        d = self.degree
        if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 1:
            raise ValueError(f"degree must be an int >= 1, got {d!r}")
        c0 = self.coef0
        if isinstance(c0, bool) or not isinstance(c0, int | float | np.integer | np.floating) \
                or not math.isfinite(float(c0)):
            raise ValueError(f"coef0 must be a finite number, got {c0!r}")
        return self

    def value_bound(self, max_sq_norm: float) -> float:
        """An upper bound of ``|k(x, z)|`` over rows with ``||x||^2 <= max_sq_norm``
        (``|x.z| <= max_sq_norm`` by Cauchy-Schwarz); ``inf`` past float64."""
        if self.name == "rbf":
            return 1.0
        if self.name == "linear":
            return float(max_sq_norm)
        base = float(self.gamma) * float(max_sq_norm) + abs(float(self.coef0))
        if base > 1.0 and int(self.degree) * math.log10(base) > 300:
            return math.inf
        return base ** int(self.degree)


def _check(A):
    if sp.issparse(A):
        A = sp.csr_matrix(A)
        if A.dtype != np.float64:
            A = A.astype(np.float64)
        return A
    A = np.asarray(A, dtype=np.float64)
    if A.ndim == 1:
        A = A[None, :]
    return A


def row_sq_norms(A) -> np.ndarray:
    """Squared Euclidean norm of every row (dense or sparse)."""
    if sp.issparse(A):
        A = sp.csr_matrix(A)
        return np.asarray(np.bincount(
            np.repeat(np.arange(A.shape[0]), np.diff(A.indptr)),
            weights=A.data * A.data, minlength=A.shape[0]), dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    return np.einsum("ij,ij->i", A, A)


def _dot_block(A_blk, B) -> np.ndarray:
    """Dense ``A_blk @ B.T`` for any mix of dense / CSR operands."""
    if sp.issparse(A_blk):
        if sp.issparse(B):
            return np.asarray((A_blk @ B.T).toarray())
        return np.asarray(A_blk @ B.T)
    if sp.issparse(B):
        return np.asarray((B @ A_blk.T).T)
    return A_blk @ B.T


def block_elems_for(A, B) -> int:
    """Entries per inner-product block for ``A @ B.T``: ``FEATURE_BLOCK_ELEMS`` per feature
    between ``_MIN_BLOCK_ELEMS`` and ``_BLOCK_ELEMS`` for dense operands, ``_BLOCK_ELEMS``
    when either is sparse (its product makes a fresh block anyway)."""
    if sp.issparse(A) or sp.issparse(B):
        return _BLOCK_ELEMS
    return min(_BLOCK_ELEMS, max(_MIN_BLOCK_ELEMS, FEATURE_BLOCK_ELEMS * int(A.shape[1])))


def _inner_product_blocks(A, B, step: int, sym: bool = False):
    """``(s, e, c0, G)`` with ``G = A[s:e] @ B[c0:].T`` as C-contiguous float64, for row
    blocks of ``step`` rows (``c0 = s`` when ``sym``: the upper block triangle, else 0).
    Dense blocks go through one reused buffer: a fresh block per BLAS call would be fresh
    pages from the OS each time, and their first-touch faults cost more than the product
    here (see :mod:`solver.core.buffers`); each ``G`` is valid until the next one is made."""
    nA, nB = A.shape[0], B.shape[0]
    dense = not sp.issparse(A) and not sp.issparse(B)
    G_buf = buffers.empty(min(nA, step) * nB, np.float64) if dense and nA > 1 else None
    for s in range(0, nA, step):
        e = min(nA, s + step)
        c0 = s if sym else 0
        Bc = B[c0:] if sym else B
        if G_buf is not None:
            G = G_buf[: (e - s) * Bc.shape[0]].reshape(e - s, Bc.shape[0])
            np.dot(A[s:e], Bc.T, out=G)
        else:
            G = _dot_block(A[s:e], Bc)
            if G.dtype != np.float64 or not G.flags.c_contiguous or not G.flags.writeable:
                G = np.ascontiguousarray(G, dtype=np.float64)
        yield s, e, c0, G


def _direct_rbf(kernel: Kernel, A, B) -> bool:
    """Whether RBF values of these rows are made from the points (dense, few features)."""
    return kernel.name == "rbf" and 1 <= A.shape[1] <= DIRECT_RBF_MAX_FEATURES \
        and not sp.issparse(A) and not sp.issparse(B)


def _finish_into(kernel: Kernel, G: np.ndarray, sa: np.ndarray | None,
                 sb: np.ndarray | None, out: np.ndarray) -> None:
    """Turn the inner-product block ``G`` into kernel values written to ``out`` (one fused
    compiled pass for rbf/poly, whatever the dtype of ``out``)."""
    from solver.core import _numba_kernels as nk

    if kernel.name == "linear":
        out[...] = G
    elif kernel.name == "rbf":
        nk.rbf_finish(G, sa, sb, float(kernel.gamma), out)
    else:
        nk.poly_finish(G, float(kernel.gamma), float(kernel.coef0), int(kernel.degree), out)


def kernel_matrix(kernel: Kernel, A, B=None, *, out: np.ndarray | None = None,
                  dtype=np.float64, block_elems: int | None = None) -> np.ndarray:
    """Dense kernel matrix ``K[i, j] = k(A_i, B_j)`` (``B`` defaults to ``A``).

    Computed in row blocks of ``A`` so that temporaries stay under ``block_elems`` entries
    (default :func:`block_elems_for`);
    when ``B`` is omitted and ``A`` is sparse only the upper block triangle is computed and
    then mirrored.
    ``out`` (shape ``(len(A), len(B))``, C-contiguous rows) may be given to fill an existing
    buffer, e.g. a float32 cache.  For dense ``A`` and no ``B`` every block is computed
    (faster than mirroring): ``K[i, j]`` and ``K[j, i]`` may then differ in the last bit.
    Dense RBF rows of at most ``DIRECT_RBF_MAX_FEATURES`` features skip the inner products
    (:func:`solver.core._numba_kernels.rbf_direct`).
    """
    kernel.validate()
    A = _check(A)
    # only the upper block triangle, mirrored, for sparse input (its products are the cost);
    # dense blocks are cheaper to compute than to mirror (a transposed copy)
    sym = B is None and sp.issparse(A)
    B = A if B is None else _check(B)
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"A has {A.shape[1]} features but B has {B.shape[1]}")
    nA, nB = A.shape[0], B.shape[0]
    if out is None:
        out = buffers.empty((nA, nB), dtype=dtype)
    elif out.shape != (nA, nB):
        raise ValueError(f"out has shape {out.shape}, expected {(nA, nB)}")
    if nA == 0 or nB == 0:
        return out
    if _direct_rbf(kernel, A, B):
        from solver.core import _numba_kernels as nk

        nk.rbf_direct(np.ascontiguousarray(A), np.ascontiguousarray(B.T), float(kernel.gamma),
                      out)
        return out
    sa = row_sq_norms(A) if kernel.name == "rbf" else None
    sb = (sa if sym else row_sq_norms(B)) if kernel.name == "rbf" else None
    if block_elems is None:
        block_elems = block_elems_for(A, B)
    step = max(1, block_elems // max(nB, 1))
    if sym:
        step = max(step, 256)
    for s, e, c0, G in _inner_product_blocks(A, B, step, sym):
        _finish_into(kernel, G, None if sa is None else sa[s:e],
                     None if sb is None else sb[c0:], out[s:e, c0:])
    if sym:
        for s in range(0, nA, step):
            e = min(nA, s + step)
            out[e:, s:e] = out[s:e, e:].T
    return out


def kernel_combination(kernel: Kernel, A, B, coef, *,
                       block_elems: int | None = None) -> np.ndarray:
    """``K(A, B) @ coef`` for ``coef`` of shape ``(len(B),)`` or ``(len(B), k)``: decision
    values without storing the kernel.  Row blocks of ``A`` (``block_elems`` inner products
    at a time, default :func:`block_elems_for`, in one reused buffer for dense input) are
    turned into kernel values and summed against ``coef`` in one compiled pass; the linear
    kernel is ``A @ (B' coef)``; dense RBF rows of few features skip the inner products (as
    in :func:`kernel_matrix`)."""
    kernel.validate()
    A, B = _check(A), _check(B)
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"A has {A.shape[1]} features but B has {B.shape[1]}")
    coef = np.asarray(coef, dtype=np.float64)
    vector = coef.ndim == 1
    C = np.ascontiguousarray(coef.reshape(B.shape[0], -1))
    nA, nB = A.shape[0], B.shape[0]
    out = np.zeros((nA, C.shape[1]))
    if nA and nB:
        if kernel.name == "linear":
            out[...] = np.asarray(A @ np.asarray(B.T @ C)).reshape(nA, -1)
        elif _direct_rbf(kernel, A, B):
            from solver.core import _numba_kernels as nk

            nk.rbf_direct_combination(np.ascontiguousarray(A), np.ascontiguousarray(B.T),
                                      float(kernel.gamma), C, out)
        else:
            from solver.core import _numba_kernels as nk

            sa = row_sq_norms(A) if kernel.name == "rbf" else None
            sb = row_sq_norms(B) if kernel.name == "rbf" else None
            if block_elems is None:
                block_elems = block_elems_for(A, B)
            for s, e, _, G in _inner_product_blocks(A, B, max(1, block_elems // nB)):
                if kernel.name == "rbf":
                    nk.rbf_combination(G, sa[s:e], sb, float(kernel.gamma), C, out[s:e])
                else:
                    nk.poly_combination(G, float(kernel.gamma), float(kernel.coef0),
                                        int(kernel.degree), C, out[s:e])
    return out[:, 0] if vector else out



def kernel_decision(X, kernel: Kernel, nu: np.ndarray, Z=None, *,
                    block_elems: int | None = None) -> np.ndarray:
    """``f(z_j) = sum_i nu_i k(x_i, z_j)`` for every row of ``Z`` (default ``X``), over the
    nonzero coefficients only (:func:`kernel_combination`)."""
    Z = X if Z is None else Z
    nz = np.flatnonzero(nu)
    if nz.size == 0:
        return np.zeros(Z.shape[0])
    return kernel_combination(kernel, Z, X[nz], nu[nz], block_elems=block_elems)

def kernel_diag(kernel: Kernel, A) -> np.ndarray:
    """The diagonal ``k(a_i, a_i)`` without forming the matrix."""
    kernel.validate()
    A = _check(A)
    if kernel.name == "rbf":
        return np.ones(A.shape[0], dtype=np.float64)
    sq = row_sq_norms(A)
    if kernel.name == "linear":
        return sq
    return (kernel.gamma * sq + kernel.coef0) ** kernel.degree


def rkhs_sq_distance(kernel: Kernel, A, B) -> np.ndarray:
    """Squared RKHS distances ``||phi(a_i) - phi(b_j)||^2 = k(a,a) + k(b,b) - 2 k(a,b)``,
    clipped at 0 against rounding."""
    K = kernel_matrix(kernel, A, B)
    K *= -2.0
    K += kernel_diag(kernel, A)[:, None]
    K += kernel_diag(kernel, B)[None, :]
    np.maximum(K, 0.0, out=K)
    return K
