"""How many SODM levels to use on full datasets: time, test accuracy and per-level epochs of
``sodm_kernel`` for each ``levels`` value, next to the value ``default_levels`` picks, and
scikit-learn's SVC (LIBSVM) fitted in the same process as the peer (ratio ours / SVC).

The benchmark protocol's RBF settings (``bench.run``'s grid winners for SODM-RBF and SVC) on
the whole training set.  Run:
``PYTHONPATH=. python bench/sodm_levels.py a9a --levels 1 2 4 --n-jobs 2 --cache-size 1024``
(``--p 2 4`` also varies the merge fan-in: level 1 has ``p`` partitions of ``M / p`` rows).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.svm import SVC

from bench.data import load_split
from bench.proc_meter import TreeMeter
from solver.core.formulation import ODMParams
from solver.core.kernels import Kernel
from solver.exact.dcd_kernel import kernel_decision
from solver.sodm.hierarchy import default_levels, sodm_kernel

# dataset -> (lam, gamma * d, theta, upsilon): grid-search winners of the workstation run
# (bench/records/benchmarks-workstation-2026-11-25.md, CV on 10,000 rows)
SETTINGS: dict[str, tuple[float, float, float, float]] = {
    "a9a": (1e3, 1.0, 0.8, 0.5),
    "cod-rna": (1e5, 10.0, 0.8, 0.5),
    "ijcnn1": (1e5, 100.0, 0.2, 0.5),
    "phishing": (1e3, 10.0, 0.8, 0.5),
}
# dataset -> (C, gamma * d) of SVC, same source
SVC_SETTINGS: dict[str, tuple[float, float]] = {
    "a9a": (1.0, 10.0),
    "cod-rna": (10.0, 10.0),
    "ijcnn1": (100.0, 100.0),
    "phishing": (100.0, 10.0),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", choices=sorted(SETTINGS))
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--p", type=int, nargs="+", default=[2],
                    help="merge fan-in values to try (level 1 has p partitions)")
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--cache-size", type=float, default=1024.0)
    ap.add_argument("--no-svc", action="store_true", help="skip the SVC peer")
    ap.add_argument("--lam", type=float, default=None, help="override the SODM lam")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    s = load_split(a.dataset)
    lam, gd, theta, ups = SETTINGS[a.dataset]
    lam = lam if a.lam is None else a.lam
    kernel = Kernel("rbf", gamma=gd / s.X_train.shape[1])
    params = ODMParams(lam=lam, upsilon=ups, theta=theta)
    M = len(s.y_train)
    print(f"{a.dataset}: M={M} d={s.X_train.shape[1]} n_jobs={a.n_jobs} lam={lam:g}"
          f" cache_size={a.cache_size:g} -> default_levels={default_levels(M, 2, a.cache_size)}",
          flush=True)
    svc_seconds = None
    if not a.no_svc:
        C, svc_gd = SVC_SETTINGS[a.dataset]
        t = time.perf_counter()
        svc = SVC(C=C, gamma=svc_gd / s.X_train.shape[1], cache_size=a.cache_size)
        svc.fit(s.X_train, s.y_train)
        svc_seconds = time.perf_counter() - t
        print(f"  SVC C={C:g}: {svc_seconds:7.1f}s acc {svc.score(s.X_test, s.y_test):.4f}",
              flush=True)
    for p, L in [(p, L) for p in a.p for L in a.levels]:
        with TreeMeter() as meter:
            t = time.perf_counter()
            r = sodm_kernel(s.X_train, s.y_train, kernel, params, p=p, levels=L,
                            n_jobs=a.n_jobs, cache_size=a.cache_size, tol=1e-3,
                            random_state=0)
            dt = time.perf_counter() - t
        coef = s.y_train * (r.alpha[:, 0] - r.alpha[:, 1])
        sv = coef != 0
        f = kernel_decision(s.X_train[sv], kernel, coef[sv], Z=s.X_test)
        acc = float(np.mean(np.where(f > 0, 1.0, -1.0) == s.y_test))
        per = ", ".join(f"L{h['level']}: {h['n_iter']} ep {h['seconds']:.1f}s" for h in r.history)
        rss = meter.peak_rss / 2**20
        ratio = f" ({dt / svc_seconds:.2f}x SVC)" if svc_seconds else ""
        print(f"  p={p} levels={L}: {dt:7.1f}s{ratio} acc {acc:.4f}  [{per}]"
              f"  peak RSS of the process tree {rss:.0f} MB", flush=True)


if __name__ == "__main__":
    main()
