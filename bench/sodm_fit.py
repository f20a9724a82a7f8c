"""One SODM-RBF fit at a fixed setting: CPU, memory, accuracy.

    PYTHONPATH=. .venv/bin/python -m bench.sodm_fit --dataset ijcnn1 --lam 1e6 \\
        --gamma-mult 1 --gamma-units scale --theta 0.2 --cache-size 512

For comparing solver changes on the final fit of a training request: the training split of
``bench.data`` less a validation fifth (``numpy.random.default_rng(0)``), one BLAS thread
(``--blas-threads``), ``n_jobs=1``; ``gamma = gamma_mult / d`` (``--gamma-units d``,
``bench.run``'s convention) or ``gamma_mult / (d Var X)`` (``scale``, the "auto" search's);
the default structure, or ``--p`` partitions in one level. Prints CPU seconds of the fit,
partitions, validation and test accuracy, the process's peak RSS, epochs and
factorizations. To
compare two trees in one command, run the file of this tree with ``PYTHONPATH`` set to each
(``bench/records/`` has such runs).
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings

import numpy as np

from bench.data import load_split


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--lam", type=float, required=True)
    ap.add_argument("--gamma-mult", type=float, default=1.0)
    ap.add_argument("--gamma-units", choices=("d", "scale"), default="scale")
    ap.add_argument("--theta", type=float, default=0.2)
    ap.add_argument("--cache-size", type=float, default=512.0)
    ap.add_argument("--p", type=int, default=None,
                    help="level-1 partitions (default: those whose kernel fits the cache); "
                         "one level")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="OpenBLAS threads of the fit (default 1: one core's CPU seconds)")
    a = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    import solver
    from solver import ODMClassifier, SODMClassifier

    s = load_split(a.dataset)
    X, y = np.asarray(s.X_train, dtype=float), s.y_train
    perm = np.random.default_rng(0).permutation(len(y))
    nv = len(y) // 5
    Xv, yv, X, y = X[perm[:nv]], y[perm[:nv]], X[perm[nv:]], y[perm[nv:]]
    d = X.shape[1]
    gamma = a.gamma_mult / d if a.gamma_units == "d" else a.gamma_mult / (d * float(np.var(X)))
    import scipy.linalg  # noqa: F401  (load scipy's BLAS so the limit covers it)

    with threadpool_limits(limits=a.blas_threads, user_api="blas"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ODMClassifier(kernel="rbf", lam=1.0, gamma=gamma, scale=False).fit(
            X[:200], y[:200])  # the compiled loops loaded, not timed
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t = time.process_time()
        est = SODMClassifier(kernel="rbf", lam=a.lam, gamma=gamma, theta=a.theta,
                             scale=False, random_state=0, n_jobs=1,
                             cache_size=a.cache_size, p=a.p,
                             levels=None if a.p is None else 1).fit(X, y)
        cpu = time.process_time() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rec = est.history_[0]
    print(f"{solver.__file__.rsplit('/solver/', 1)[0]}: {a.dataset} rows={len(y)} "
          f"lam={a.lam:g} gamma={a.gamma_mult:g}/{a.gamma_units} theta={a.theta:g} "
          f"cache={a.cache_size:g}: {cpu:.2f} CPU s, partitions {rec.get('partitions')}, "
          f"val {est.score(Xv, yv):.4f} test {est.score(s.X_test, s.y_test):.4f}, "
          f"peak RSS {peak:.0f} MB ({before:.0f} before the fit), "
          f"epochs {rec.get('n_iter')}, factorizations {rec.get('factorizations')}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
