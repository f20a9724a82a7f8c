"""How many rows repeat, and what merging them does to one kernel solve.

    PYTHONPATH=. .venv/bin/python -m bench.duplicates

Per dataset of ``bench.data`` (training split, seed 0): the share of distinct ``(x, y)`` rows
over all rows and over a random 11,000-row sample (about one partition). Then one solve of
an 8,683-row sample of a9a's training split (lam 5,623, gamma 0.1 / (d Var X), theta 0.2,
the auto search's choice; one of its final fit's partitions is that size) with identical rows
merged and not (``solve_kernel_dual(merge_duplicates=...)``): rows solved, epochs, CPU
seconds and the dual objective.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from bench.data import DATASETS, load_split


def distinct_shares() -> None:
    from solver.core.inputs import check_X
    from solver.exact.duplicates import row_groups

    print("| dataset | rows | distinct share | distinct share, 11,000-row sample |")
    print("|---|---|---|---|")
    for name in DATASETS:
        s = load_split(name, seed=0)
        X, y = check_X(s.X_train), np.asarray(s.y_train, np.float64)
        idx = np.sort(np.random.default_rng(0).choice(len(y), min(len(y), 11000),
                                                      replace=False))
        shares = []
        for rows in (np.arange(len(y)), idx):
            g = row_groups(X[rows], y[rows], None)
            shares.append(1.0 if g is None else g.size / len(rows))
        print(f"| {name} | {len(y):,} | {shares[0]:.3f} | {shares[1]:.3f} |", flush=True)


def a9a_solve() -> None:
    from solver.core.cputime import CpuClock
    from solver.core.formulation import ODMParams
    from solver.core.kernels import Kernel
    from solver.exact.dcd_kernel import solve_kernel_dual

    s = load_split("a9a", seed=0)
    X = sp.csr_matrix(s.X_train, dtype=np.float64)
    idx = np.sort(np.random.default_rng(0).choice(X.shape[0], 8683, replace=False))
    X, y = X[idx], np.asarray(s.y_train, np.float64)[idx]
    kernel = Kernel("rbf", gamma=0.1 / (X.shape[1] * X.toarray().var()))
    params = ODMParams(lam=5623.41, theta=0.2)
    print("\n| a9a sample, merged | rows solved | epochs | CPU s | dual objective |")
    print("|---|---|---|---|---|")
    for merge in (False, True):
        with CpuClock() as clock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = solve_kernel_dual(X, y, kernel, params, random_state=0,
                                  merge_duplicates=merge)
        print(f"| {merge} | {r.rows_solved:,} | {r.n_iter} | {clock.seconds:.2f} | "
              f"{r.objective:.6f} |", flush=True)


def main() -> int:
    distinct_shares()
    a9a_solve()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
