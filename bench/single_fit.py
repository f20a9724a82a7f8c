"""One exact-solver fit on a random subset of a shared dataset: CPU seconds and epochs.

    PYTHONPATH=. .venv/bin/python -m bench.single_fit --dataset ijcnn1.t --rows 11000 \\
        --lam 1e6 --gamma-mult 3.16 --theta 0.2

What one partition of an SODM fit costs (``ODMClassifier``, RBF, one BLAS thread, features
min-max scaled on the training split by ``bench.data``, ``gamma = gamma_mult / (d Var X)``
(``bench.run`` counts ``gamma_mult`` in units of ``1 / d`` instead), rows drawn with
``numpy.random.default_rng(seed)``, ``cache_size`` 512 MB unless ``--cache-size``); for
comparing solver changes on the same fit.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from bench.data import load_split


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--lam", type=float, required=True)
    ap.add_argument("--gamma-mult", type=float, default=1.0)
    ap.add_argument("--theta", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-size", type=float, default=512.0,
                    help="the fit's cache_size in MB (default 512, the estimator's)")
    ap.add_argument("--max-iter", type=int, default=None,
                    help="stop after this many epochs (default: the estimator's)")
    ap.add_argument("--direct-worth", type=float, default=None,
                    help="the Newton schedule's DIRECT_WORTH for this process (0: every "
                         "direct attempt the face allows; inf: none; default: the solver's)")
    ap.add_argument("--direct-fixed", type=float, default=None,
                    help="the Newton schedule's DIRECT_FIXED for this process (0: no fixed "
                         "cost per attempt; default: the solver's)")
    a = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    from solver import ODMClassifier
    from solver.auto.search import factored_faces
    from solver.exact import newton_kernel

    if a.direct_worth is not None:
        newton_kernel.DIRECT_WORTH = a.direct_worth
    if a.direct_fixed is not None:
        newton_kernel.DIRECT_FIXED = a.direct_fixed

    s = load_split(a.dataset)
    X, y = np.asarray(s.X_train, dtype=float), s.y_train  # min-max scaled by load_split
    gamma = a.gamma_mult / (X.shape[1] * float(np.var(X)))
    idx = np.random.default_rng(a.seed).choice(len(y), min(a.rows, len(y)), replace=False)
    extra = {} if a.max_iter is None else {"max_iter": a.max_iter}
    est = ODMClassifier(kernel="rbf", lam=a.lam, gamma=gamma, theta=a.theta, scale=False,
                        random_state=0, cache_size=a.cache_size, **extra)
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ODMClassifier(kernel="rbf", lam=1.0, gamma=gamma, scale=False).fit(
            X[idx[:200]], y[idx[:200]])  # the compiled loops loaded, not timed
        t = time.process_time()
        est.fit(X[idx], y[idx])
        cpu = time.process_time() - t
    distinct = len(np.unique(np.column_stack([X[idx], y[idx]]), axis=0))
    print(f"{a.dataset} rows={len(idx)} distinct={distinct} lam={a.lam:g} gamma={a.gamma_mult:g}x "
          f"theta={a.theta:g} cache={a.cache_size:g}: {cpu:.2f} CPU s, epochs {est.n_iter_}, "
          f"faces factored {factored_faces(est)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
