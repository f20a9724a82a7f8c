"""Pick DSVRG's default stopping tolerance: epochs, seconds, relative primal gap to the exact
linear ODM optimum and test accuracy for ``||grad p(w)|| <= tol ||grad p(0)||`` at several
``tol``, on the paper's datasets with the workstation benchmark's CV-chosen linear ODM
parameters (``bench/records/benchmarks-workstation-2026-11-25.md``).
Run: ``PYTHONPATH=. python bench/dsvrg_tol.py``.
"""

from __future__ import annotations

import time

import numpy as np

from bench.data import load_split
from solver.core.formulation import ODMParams, primal_objective_linear
from solver.linear.dcd_linear import solve_linear_dual
from solver.linear.dsvrg import sodm_linear

# (lam, theta) chosen by the benchmark's 3-fold CV for the odm-linear family; upsilon = 0.5
SETTINGS = {"svmguide1": (1e3, 0.8), "phishing": (10.0, 0.8), "a9a": (100.0, 0.5),
            "ijcnn1": (1e4, 0.8), "cod-rna": (1e3, 0.8)}
TOLS = (1e-2, 3e-3, 1e-3, 1e-4, 1e-6)


def _with_bias(X: np.ndarray) -> np.ndarray:
    return np.hstack([X, np.ones((X.shape[0], 1))])


def main() -> None:
    for name, (lam, theta) in SETTINGS.items():
        s = load_split(name)
        X, Xt = _with_bias(s.X_train), _with_bias(s.X_test)
        pr = ODMParams(lam=lam, upsilon=0.5, theta=theta)
        exact = solve_linear_dual(X, s.y_train, pr, tol=1e-8, max_iter=5000)
        p_star = primal_objective_linear(exact.w, X, s.y_train, pr)
        acc = float(np.mean(np.sign(Xt @ exact.w) == s.y_test))
        print(f"{name} M={len(s.y_train)} lam={lam:g} theta={theta}: exact accuracy {acc:.4f}")
        sodm_linear(X, s.y_train, pr, epochs=1, random_state=0)  # compile / load the loops
        for tol in TOLS:
            t0 = time.perf_counter()
            r = sodm_linear(X, s.y_train, pr, tol=tol, random_state=0)
            sec = time.perf_counter() - t0
            gap = (primal_objective_linear(r.w, X, s.y_train, pr) - p_star) / abs(p_star)
            acc = float(np.mean(np.sign(Xt @ r.w) == s.y_test))
            print(f"  tol {tol:g}: {len(r.history)} epochs, {sec:.3f} s, relative gap "
                  f"{gap:.1e}, accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
