"""Pick SODM Algorithm 1 defaults: time, test accuracy and dual gap of the returned solution
(on the global problem, after putting it on the global scale) against the exact solver, varying
one setting at a time around the base (levels auto = finest partitions >= 500 rows, 50 strata,
warm_start="rescale", no final global solve).
Run: ``PYTHONPATH=. python bench/sodm_defaults.py [dataset ...]``."""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np

from bench.data import load_split
from solver.dcd_kernel import kernel_decision, solve_kernel_dual
from solver.formulation import ODMParams, dual_objective
from solver.kernels import Kernel
from solver.sodm import sodm_kernel


def main(names: list[str]) -> None:
    warnings.simplefilter("ignore")
    params = ODMParams(lam=1000.0, upsilon=0.5, theta=0.2)
    for name in names:
        s = load_split(name, max_train=8000)
        X, y = s.X_train, s.y_train
        M = len(y)
        kernel = Kernel("rbf", gamma=1.0 / (X.shape[1] * X.var()))

        def acc(alpha: np.ndarray, X=X, y=y, kernel=kernel, s=s) -> float:
            f = kernel_decision(X, kernel, y * (alpha[:, 0] - alpha[:, 1]), Z=s.X_test)
            return float(np.mean(np.where(f > 0, 1.0, -1.0) == s.y_test))

        t = time.perf_counter()
        ex = solve_kernel_dual(X, y, kernel, params, tol=1e-3, cache_size=1024, random_state=0)
        t_ex = time.perf_counter() - t
        print(f"{name}: M={M} gamma={kernel.gamma:.3g} exact {t_ex:.2f}s acc {acc(ex.alpha):.4f}"
              f" objective {ex.objective:.6g}", flush=True)
        base = dict(levels=None, n_strata=50, warm_start="rescale", final_global_solve=False)
        variants = [("base", {})] + [(f"levels={v}", {"levels": v}) for v in (1, 2, 4, 6)] \
            + [(f"n_strata={v}", {"n_strata": v}) for v in (1, 10, 200)] \
            + [("literal", {"warm_start": "literal"}), ("final", {"final_global_solve": True}),
               ("literal+final", {"warm_start": "literal", "final_global_solve": True})]
        for label, change in variants:
            kw = {**base, **change}
            t = time.perf_counter()
            r = sodm_kernel(X, y, kernel, params, tol=1e-3, random_state=0, **kw)
            dt = time.perf_counter() - t
            last = r.history[-1]
            m_last = last["partition_size"] if last["level"] > 0 else M
            a = r.alpha * (m_last / M)  # the last level's local optima, on the global scale
            gap = (dual_objective(kernel_decision(X, kernel, y * (a[:, 0] - a[:, 1])) * y, a,
                                  params, M) - ex.objective) / abs(ex.objective)
            epochs = "/".join(str(h["n_iter"]) for h in r.history)
            print(f"  {label:14s} {dt:6.2f}s acc {acc(r.alpha):.4f} rel.gap {gap:9.2e} "
                  f"levels {[h['level'] for h in r.history]} epochs {epochs}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["svmguide1", "phishing", "a9a"])
