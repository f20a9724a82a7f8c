"""The kernel solver's direct Newton step and kernel allocation, measured on one core.

Reproduces the numbers behind the constants of ``solver/exact/newton_kernel.py`` and
``solver/core/buffers.py`` (``docs/design-notes.md``):

1. Cholesky of a 5,000-row RBF face system in float64 vs float32 (``FaceSystems`` factors
   in float32 and refines in float64), and in float32 given the C-ordered matrix against its
   transpose (``FaceSystems`` factors the transpose in place);
2. the float32 RBF kernel of 12,500 ijcnn1 rows computed into a fresh ``np.empty`` array,
   into ``solver.core.buffers.empty`` (pages mapped up front) and into an already-touched array;
3. one 12,500-row ijcnn1 partition (lam = 1e5, gamma = 100/22, theta = 0.2, upsilon = 0.5,
   cache_size = 1024, tol = 1e-3) solved with several ``DIRECT_MAX_FACE`` caps, and one
   14,884-row cod-rna partition (the benchmark's settings): epochs, the face size of every
   factorization, the faces solved from an earlier factor, and seconds.

    PYTHONPATH=. .venv/bin/python bench/face_solve.py [--caps 5792 6000 8192]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.linalg import cho_factor
from threadpoolctl import threadpool_limits

from bench.data import load_split
from solver.core import buffers
from solver.core.formulation import ODMParams
from solver.core.kernels import Kernel, kernel_matrix
from solver.exact import dcd_kernel as dk
from solver.exact import newton_kernel as nwt


def _seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caps", type=int, nargs="+", default=[5792, 6000, 8192])
    ap.add_argument("--rows", type=int, default=12_500)
    a = ap.parse_args()
    s = load_split("ijcnn1")
    idx = np.random.default_rng(0).permutation(len(s.y_train))[: a.rows]
    X, y = np.ascontiguousarray(s.X_train[idx]), s.y_train[idx]
    kernel = Kernel("rbf", gamma=100.0 / X.shape[1])
    with threadpool_limits(1):
        kernel_matrix(kernel, X[:100], dtype=np.float32)  # load the compiled finish
        K = kernel_matrix(kernel, X[:5000])
        for dtype in (np.float64, np.float32):
            A = K.astype(dtype)
            A[np.diag_indices_from(A)] += 0.1
            t = _seconds(lambda A=A: cho_factor(A, lower=True, overwrite_a=True,
                                                check_finite=False))
            print(f"Cholesky 5000 rows {np.dtype(dtype).name}: {t:.2f} s", flush=True)
        # FaceSystems factors its C-ordered face matrix through the transpose (the same
        # symmetric matrix in LAPACK's Fortran order), in place; given the matrix itself
        # scipy first makes a transposed copy
        for label, lower, view in (("the C-ordered matrix (a copy first)", True, False),
                                   ("its transpose, in place", False, True)):
            A = K.astype(np.float32)
            A[np.diag_indices_from(A)] += 0.1
            t = _seconds(lambda A=A, lower=lower, view=view: cho_factor(
                A.T if view else A, lower=lower, overwrite_a=True, check_finite=False))
            print(f"Cholesky 5000 rows float32 of {label}: {t:.2f} s", flush=True)
        n = X.shape[0]
        shape = (n, n)
        outs = {"np.empty": lambda: np.empty(shape, dtype=np.float32),
                "buffers.empty": lambda: buffers.empty(shape, np.float32),
                "an already touched array": lambda: out}
        out = np.ones(shape, dtype=np.float32)
        for label, make in outs.items():
            t = _seconds(lambda make=make: kernel_matrix(kernel, X, out=make()))
            print(f"float32 kernel of {n} rows into {label}: {t:.2f} s", flush=True)
        out = None
        params = ODMParams(lam=1e5, upsilon=0.5, theta=0.2)
        default_cap = nwt.DIRECT_MAX_FACE
        try:
            for cap in a.caps:
                nwt.DIRECT_MAX_FACE = cap
                _partition(f"ijcnn1 partition, face cap {cap}", X, y, kernel, params)
        finally:
            nwt.DIRECT_MAX_FACE = default_cap
        # the first level-1 partition of cod-rna's SODM fit has 14,884 rows
        c = load_split("cod-rna")
        idx = np.random.default_rng(0).permutation(len(c.y_train))[:14_884]
        _partition("cod-rna partition (14,884 rows, lam 1e5, gamma 10/8, theta 0.8)",
                   np.ascontiguousarray(c.X_train[idx]), c.y_train[idx],
                   Kernel("rbf", gamma=10.0 / 8), ODMParams(lam=1e5, upsilon=0.5, theta=0.8))


def _partition(label: str, X, y, kernel: Kernel, params: ODMParams) -> None:
    """Solve one partition (cache_size 1024, tol 1e-3) and print seconds, epochs, the faces
    factored and how many faces were solved from an earlier factor (the solve's
    ``NewtonWork``)."""
    t = time.perf_counter()
    r = dk.solve_kernel_dual(X, y, kernel, params, tol=1e-3, cache_size=1024, random_state=0)
    sec = time.perf_counter() - t
    print(f"{label}: {sec:.2f} s, {r.n_iter} epochs, factorizations of "
          f"{list(r.newton.factored)}, {r.newton.updated} faces solved from an earlier factor",
          flush=True)


if __name__ == "__main__":
    main()
