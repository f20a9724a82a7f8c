"""CPU nanoseconds per RBF kernel value, by number of features: from the points against
inner products, and the inner products' block size.

    PYTHONPATH=. .venv/bin/python -m bench.kernel_values

For each feature count ``d`` (uniform random rows, ``gamma = 1/d``, one BLAS thread), the
``m x m`` float32 matrix a partition's solve stores, made by ``kernel_matrix`` three ways:
from the points (``rbf_direct``, what ``d <= DIRECT_RBF_MAX_FEATURES`` uses), from inner
products plus ``rbf_finish`` in blocks of ``block_elems_for`` entries (every wider input),
and the same in blocks of the fixed ``_BLOCK_ELEMS`` (4M) entries, with the ratio of the
two; then decision values ``K @ coef`` (float64) the same three ways
(``kernel_combination``). The crossover of the first two is where
``DIRECT_RBF_MAX_FEATURES`` should sit on the machine measured; the ratio is what the
block rule saves there (``docs/design-notes.md``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _timed(kernels, direct: bool, fn, kernel, X, *args, repeats: int = 2,
           block_elems: int | None = None, **kw) -> float:
    """Best CPU ns per value of ``fn(kernel, X, *args)`` over ``repeats``, from the points
    (``direct``) or through inner products in blocks of ``block_elems`` entries (None: the
    default rule); compiled first on 64 rows, not timed."""
    kernels.DIRECT_RBF_MAX_FEATURES = 10 ** 9 if direct else 0
    warm = {k: v[:64] for k, v in kw.items()}
    fn(kernel, X[:64], *args, **warm)
    best = np.inf
    for _ in range(repeats):
        t = time.process_time()
        fn(kernel, X, *args, block_elems=block_elems, **kw)
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
    fixed = kernels._BLOCK_ELEMS
    print(f"| features | block entries | matrix, from points | matrix, inner products | "
          f"... in {fixed:,}-entry blocks | ratio | decision values, from points | "
          f"decision values, inner products | ... in {fixed:,}-entry blocks | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    limit = kernels.DIRECT_RBF_MAX_FEATURES
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            for d in a.features:
                X = rng.random((m, d))
                coef = rng.normal(size=m)
                kernel = Kernel("rbf", gamma=1.0 / d)
                cells = []
                for fn, args in ((kernel_matrix, {"out": out}), (kernel_combination, {})):
                    extra = (X, coef) if fn is kernel_combination else (X,)
                    by_rule = _timed(kernels, False, fn, kernel, X, *extra, **args)
                    by_fixed = _timed(kernels, False, fn, kernel, X, *extra,
                                      block_elems=fixed, **args)
                    cells += [f"{_timed(kernels, True, fn, kernel, X, *extra, **args):.2f}",
                              f"{by_rule:.2f}", f"{by_fixed:.2f}", f"{by_rule / by_fixed:.2f}x"]
                print(f"| {d} | {kernels.block_elems_for(X, X):,} | " + " | ".join(cells)
                      + " |", flush=True)
    finally:
        kernels.DIRECT_RBF_MAX_FEATURES = limit
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
