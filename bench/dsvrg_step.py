"""Pick the DSVRG step-size factor: relative primal gap to the exact linear ODM optimum after
5/10/20/40 epochs for step = factor / L_max.  Run: ``PYTHONPATH=. python bench/dsvrg_step.py``."""

from __future__ import annotations

import warnings

import numpy as np

from bench.data import load_split
from solver.core.formulation import ODMParams, lipschitz_constant, primal_objective_linear
from solver.linear.dcd_linear import solve_linear_dual
from solver.linear.dsvrg import sodm_linear


def main() -> None:
    warnings.simplefilter("ignore")
    for name, max_train in [("svmguide1", None), ("phishing", None), ("a9a", 10000)]:
        s = load_split(name, max_train=max_train)
        X = np.hstack([s.X_train, np.ones((len(s.y_train), 1))])
        y = s.y_train
        for lam in (10.0, 1000.0):
            pr = ODMParams(lam=lam, upsilon=0.5, theta=0.2)
            ex = solve_linear_dual(X, y, pr, tol=1e-6, max_iter=5000)
            pstar = primal_objective_linear(ex.w, X, y, pr)
            print(f"{name} M={len(y)} lam={lam} p*={pstar:.6f}")
            for fac in (0.1, 0.25, 0.5, 1.0):
                eta = fac / lipschitz_constant(X, pr)
                r = sodm_linear(X, y, pr, epochs=40, step_size=eta, tol=1e-14, random_state=0)
                gaps = [(h["objective"] - pstar) / abs(pstar) for h in r.history]
                shown = " ".join(f"{gaps[i]:.1e}" for i in (4, 9, 19, 39) if i < len(gaps))
                print(f"  factor {fac}: relative gap at epochs 5/10/20/40: {shown}")


if __name__ == "__main__":
    main()
