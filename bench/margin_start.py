"""An exact fit started from another model's margins against the same fit from zero.

    PYTHONPATH=. .venv/bin/python -m bench.margin_start ijcnn1.t 1e6 10 0.2 11463 6793

Arguments: dataset, lam, gamma_mult (``gamma = gamma_mult / (d Var X)``, the "auto"
search's units), theta, the rows of the fit (a final-fit partition's size) and of the model
whose margins start it (a last-rung CV fold's size), disjoint random rows of the training
split (``numpy.random.default_rng(0)``). The start is the dual the KKT conditions give for
that model's decision values ``u = y f`` on the fit's rows: ``zeta = (1 - theta - u) / dz``
where positive, ``beta = (u - 1 - theta) / db`` where positive. Prints the CPU seconds,
epochs and factored faces of both fits and their test accuracy (one BLAS thread).
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np

from bench.data import load_split


def main(argv: list[str]) -> int:
    import scipy.linalg  # noqa: F401  (load scipy's BLAS so the limit covers it)
    from threadpoolctl import threadpool_limits

    from solver import ODMClassifier
    from solver.core.formulation import ODMParams

    ds, lam, gm, theta = argv[0], float(argv[1]), float(argv[2]), float(argv[3])
    m_fit, m_guide = int(argv[4]), int(argv[5])
    s = load_split(ds)
    X, y = np.asarray(s.X_train, dtype=float), s.y_train
    gamma = gm / (X.shape[1] * float(np.var(X)))
    perm = np.random.default_rng(0).permutation(len(y))
    fit_rows, guide_rows = perm[:m_fit], perm[m_fit:m_fit + m_guide]
    kw = dict(kernel="rbf", lam=lam, gamma=gamma, theta=theta, scale=False, random_state=0)

    def fit(rows, start=None):
        est = ODMClassifier(**kw)
        if start is not None:
            est._dual_start = start
        t = time.process_time()
        est.fit(X[rows], y[rows])
        return est, time.process_time() - t

    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit(perm[:300])  # the compiled loops loaded, not timed
        guide, cpu_guide = fit(guide_rows)
        u = np.where(y[fit_rows] == guide.classes_[1], 1.0, -1.0) * guide.decision_function(
            X[fit_rows])
        dz, db = ODMParams(lam=lam, upsilon=guide.upsilon, theta=theta).diag_terms(
            float(m_fit))
        start = np.column_stack([np.maximum(0.0, 1 - theta - u) / dz,
                                 np.maximum(0.0, u - 1 - theta) / db])
        cold, cpu_cold = fit(fit_rows)
        warm, cpu_warm = fit(fit_rows, start)
    print(f"{ds} lam={lam:g} gamma={gm:g}x theta={theta:g}: guide model on {m_guide} rows "
          f"{cpu_guide:.2f} CPU s; fit of {m_fit} rows:")
    for name, est, cpu in (("from zero", cold, cpu_cold), ("from margins", warm, cpu_warm)):
        h = est.history_[0]
        print(f"  {name}: {cpu:.2f} CPU s, epochs {h.get('n_iter')}, faces "
              f"{h.get('faces_factored')}, objective {h.get('objective'):.6g}, "
              f"test {est.score(s.X_test, s.y_test):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
