"""SODM Algorithm 1 defaults on small and mid-size data, chosen on validation accuracy.

Every dataset's training split (``bench.data.load_split``) loses a stratified 20% as
validation rows (the test split is not read); at most ``--max-fit`` of the rest are fitted.
RBF with gamma = 1 / (d Var X), lam = 1000, theta = 0.2, upsilon = 0.5 (the estimator's
defaults), tol = 1e-3, one process.  Printed per fit: CPU seconds, validation accuracy and
the relative dual gap of the returned solution on the global problem (local duals put on
the global scale) against the exact solver.

1. ``--part partitions``: the exact solver against one level of ``p`` partitions, for the
   smallest partition worth making (``solver.sodm.hierarchy.MIN_LEVEL_PARTITION_ROWS``);
2. ``--part variants``: one setting at a time around the defaults (levels, n_strata,
   warm start, final global solve);
3. ``--part lam``: the exact solver for lam in 1 .. 1e5 (the estimators' default ``lam``).

    PYTHONPATH=. .venv/bin/python bench/sodm_defaults.py --part partitions \\
        --datasets phishing a9a ijcnn1 cod-rna --max-fit 16000
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.model_selection import train_test_split

from bench.data import load_split
from solver.core.formulation import ODMParams, dual_objective
from solver.core.kernels import Kernel, kernel_decision
from solver.sodm.hierarchy import sodm_kernel

PARAMS = ODMParams(lam=1000.0, upsilon=0.5, theta=0.2)
VAL_FRACTION = 0.2


def _data(name: str, max_fit: int, seed: int = 0):
    s = load_split(name)
    X, X_val, y, y_val = train_test_split(s.X_train, s.y_train, test_size=VAL_FRACTION,
                                          stratify=s.y_train, random_state=seed)
    if len(y) > max_fit:
        X, _, y, _ = train_test_split(X, y, train_size=max_fit, stratify=y,
                                      random_state=seed)
    return np.ascontiguousarray(X), y, X_val, y_val


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["svmguide1", "phishing", "a9a"])
    ap.add_argument("--part", choices=["partitions", "variants", "lam"], default="variants")
    ap.add_argument("--max-fit", type=int, default=8000)
    ap.add_argument("--p", type=int, nargs="+", default=[2, 4, 8])
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    for name in a.datasets:
        study(name, a.part, a.max_fit, a.p)


def study(name: str, part: str, max_fit: int, ps: list[int]) -> None:
    """Print the fits of one dataset (see the module docstring)."""
    if part == "lam":
        lam_sweep(name, max_fit)
        return
    X, y, X_val, y_val = _data(name, max_fit)
    M = len(y)
    kernel = Kernel("rbf", gamma=1.0 / (X.shape[1] * X.var()))
    cache = 4.0 * M * M / 2**20 + 64  # every solve keeps its whole kernel

    def fit(**kw):
        t = time.process_time()
        r = sodm_kernel(X, y, kernel, PARAMS, tol=1e-3, random_state=0,
                        cache_size=cache, **kw)
        return r, time.process_time() - t

    def report(label: str, r, cpu: float, d_star: float | None) -> float:
        last = r.history[-1]
        m_last = last["partition_size"] if last["level"] > 0 else M
        a_glob = r.alpha * (m_last / M)  # the last level's local optima, global scale
        nu = y * (a_glob[:, 0] - a_glob[:, 1])
        d = dual_objective(y * kernel_decision(X, kernel, nu), a_glob, PARAMS, M)
        f = kernel_decision(X, kernel, nu, Z=X_val)
        acc = float(np.mean(np.where(f > 0, 1.0, -1.0) == y_val))
        gap = "" if d_star is None else f" rel.gap {(d - d_star) / abs(d_star):9.2e}"
        epochs = "/".join(str(h["n_iter"]) for h in r.history)
        print(f"  {label:18s} {cpu:7.2f} CPU s  val acc {acc:.4f}{gap}  "
              f"levels {[h['level'] for h in r.history]} epochs {epochs}", flush=True)
        return d

    print(f"{name}: fit rows {M}, validation rows {len(y_val)}, gamma {kernel.gamma:.3g}",
          flush=True)
    r, cpu = fit(levels=0)
    d_star = report("exact", r, cpu, None)
    if part == "partitions":
        for p in ps:
            r, cpu = fit(p=p, levels=1)
            report(f"1 level, p={p} ({M // p} rows)", r, cpu, d_star)
        return
    variants = [("defaults", {})] + [(f"levels={v}", {"p": 2, "levels": v})
                                     for v in (1, 2, 4)] \
        + [(f"n_strata={v}", {"p": 2, "levels": 1, "n_strata": v}) for v in (1, 10, 200)] \
        + [("literal", {"p": 2, "levels": 2, "warm_start": "literal"}),
           ("rescale", {"p": 2, "levels": 2}),
           ("final", {"p": 2, "levels": 2, "final_global_solve": True})]
    for label, kw in variants:
        r, cpu = fit(**kw)
        report(label, r, cpu, d_star)


def lam_sweep(name: str, max_fit: int) -> None:
    """Validation accuracy and CPU seconds of the exact solver for every lam."""
    X, y, X_val, y_val = _data(name, max_fit)
    kernel = Kernel("rbf", gamma=1.0 / (X.shape[1] * X.var()))
    print(f"{name}: fit rows {len(y)}, validation rows {len(y_val)}", flush=True)
    for lam in (1.0, 10.0, 1e2, 1e3, 1e4, 1e5):
        params = ODMParams(lam=lam, upsilon=PARAMS.upsilon, theta=PARAMS.theta)
        t = time.process_time()
        r = sodm_kernel(X, y, kernel, params, levels=0, tol=1e-3, random_state=0,
                        cache_size=4.0 * len(y) ** 2 / 2**20 + 64)
        cpu = time.process_time() - t
        f = kernel_decision(X, kernel, y * (r.alpha[:, 0] - r.alpha[:, 1]), Z=X_val)
        acc = float(np.mean(np.where(f > 0, 1.0, -1.0) == y_val))
        print(f"  lam {lam:8g} {cpu:7.2f} CPU s  val acc {acc:.4f}  epochs "
              f"{r.history[-1]['n_iter']}", flush=True)


if __name__ == "__main__":
    main()
