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
import contextlib
import time
import warnings
from typing import Any

import numpy as np

from bench.data import load_split


def subset(dataset: str, rows: int, seed: int, gamma_mult: float
           ) -> tuple[np.ndarray, np.ndarray, float]:
    """``rows`` training rows of ``dataset`` drawn with ``seed`` (features min-max scaled by
    ``load_split``), their labels and ``gamma = gamma_mult / (d Var X)`` of the whole split."""
    s = load_split(dataset)
    X, y = np.asarray(s.X_train, dtype=float), s.y_train
    gamma = gamma_mult / (X.shape[1] * float(np.var(X)))
    idx = np.random.default_rng(seed).choice(len(y), min(rows, len(y)), replace=False)
    return X[idx], y[idx], gamma


def fit_subset(X: np.ndarray, y: np.ndarray, gamma: float, lam: float, theta: float, *,
               around: contextlib.AbstractContextManager | None = None, **params: Any
               ) -> tuple[Any, float]:
    """The fitted RBF ``ODMClassifier`` (one BLAS thread) and its fit's CPU seconds, the
    compiled loops loaded beforehand by an untimed, seeded fit of 200 rows; ``around`` is
    entered for the timed fit alone (a recorder of its solves sees none of the warm-up's)."""
    from threadpoolctl import threadpool_limits

    from solver import ODMClassifier

    est = ODMClassifier(kernel="rbf", lam=lam, gamma=gamma, theta=theta, scale=False,
                        random_state=0, **params)
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ODMClassifier(kernel="rbf", lam=1.0, gamma=gamma, scale=False,
                      random_state=0).fit(X[:200], y[:200])
        with around or contextlib.nullcontext():
            t = time.process_time()
            est.fit(X, y)
            return est, time.process_time() - t


def fit_arguments(description: str) -> argparse.ArgumentParser:
    """The options that name one fit of :func:`subset`'s rows (dataset, rows, lam, gamma
    multiple, theta, seed)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--lam", type=float, required=True)
    ap.add_argument("--gamma-mult", type=float, default=1.0)
    ap.add_argument("--theta", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = fit_arguments(__doc__.splitlines()[0])
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
    from solver.auto.search import factored_faces
    from solver.exact import newton_kernel

    if a.direct_worth is not None:
        newton_kernel.DIRECT_WORTH = a.direct_worth
    if a.direct_fixed is not None:
        newton_kernel.DIRECT_FIXED = a.direct_fixed

    X, y, gamma = subset(a.dataset, a.rows, a.seed, a.gamma_mult)
    extra = {} if a.max_iter is None else {"max_iter": a.max_iter}
    est, cpu = fit_subset(X, y, gamma, a.lam, a.theta, cache_size=a.cache_size, **extra)
    distinct = len(np.unique(np.column_stack([X, y]), axis=0))
    print(f"{a.dataset} rows={len(y)} distinct={distinct} lam={a.lam:g} gamma={a.gamma_mult:g}x "
          f"theta={a.theta:g} cache={a.cache_size:g}: {cpu:.2f} CPU s, epochs {est.n_iter_}, "
          f"faces factored {factored_faces(est)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
