"""CPU nanoseconds per RBF kernel value, by number of features: from the points against
inner products.

    PYTHONPATH=. .venv/bin/python -m bench.kernel_values

For each feature count ``d`` (uniform random rows, ``gamma = 1/d``, one BLAS thread), the
``m x m`` float32 matrix a partition's solve stores, made by ``kernel_matrix`` two ways: from
the points (``rbf_direct``, what ``d <= DIRECT_RBF_MAX_FEATURES`` uses) and from inner
products plus ``rbf_finish`` (every wider input); then decision values ``K @ coef`` (float64)
the same two ways (``kernel_combination``). The crossover is where ``DIRECT_RBF_MAX_FEATURES``
should sit on the machine measured (``docs/design-notes.md``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _timed(kernels, direct: bool, fn, kernel, X, *args, repeats: int = 2, **kw) -> float:
    """Best CPU ns per value of ``fn(kernel, X, *args)`` over ``repeats``, from the points
    (``direct``) or through inner products; compiled first on 64 rows, not timed."""
    kernels.DIRECT_RBF_MAX_FEATURES = 10 ** 9 if direct else 0
    warm = {k: v[:64] for k, v in kw.items()}
    fn(kernel, X[:64], *args, **warm)
    best = np.inf
    for _ in range(repeats):
        t = time.process_time()
        fn(kernel, X, *args, **kw)
        best = min(best, time.process_time() - t)
    return best / (X.shape[0] ** 2) * 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8000, help="m: the matrix is m x m")
    ap.add_argument("--features", type=int, nargs="+", default=[3, 8, 12, 16, 22, 40])
    a = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    import solver.core.kernels as kernels
    from solver.core.kernels import Kernel, kernel_combination, kernel_matrix

    rng = np.random.default_rng(0)
    m = a.rows
    out = np.ones((m, m), dtype=np.float32)  # pages mapped once, outside the timings
    print(f"rows {m}, DIRECT_RBF_MAX_FEATURES = {kernels.DIRECT_RBF_MAX_FEATURES}; "
          "ns per kernel value (CPU), best of 2")
    print("| features | matrix, from points | matrix, inner products | "
          "decision values, from points | decision values, inner products |")
    print("|---|---|---|---|---|")
    limit = kernels.DIRECT_RBF_MAX_FEATURES
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            for d in a.features:
                X = rng.random((m, d))
                coef = rng.normal(size=m)
                kernel = Kernel("rbf", gamma=1.0 / d)
                cells = [_timed(kernels, True, kernel_matrix, kernel, X, X, out=out),
                         _timed(kernels, False, kernel_matrix, kernel, X, X, out=out),
                         _timed(kernels, True, kernel_combination, kernel, X, X, coef),
                         _timed(kernels, False, kernel_combination, kernel, X, X, coef)]
                print(f"| {d} | " + " | ".join(f"{c:.2f}" for c in cells) + " |", flush=True)
    finally:
        kernels.DIRECT_RBF_MAX_FEATURES = limit
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
