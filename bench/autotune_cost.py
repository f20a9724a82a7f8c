"""Calibrate the cost model of the automatic-hyperparameter search (``solver.autotune``).

The search decides which rungs and refinement steps fit its budget from *predicted* costs,
not from the clock, so the same data and request give the same choice on any machine and
under any load. A fit of the exact solver on ``m`` rows with ``d`` features (mean nonzeros
per row) and ``q`` binary problems is predicted to cost::

    seconds(m) = q * (FIT_OVERHEAD + UNIT_SECONDS * m**a * (d + FEATURE_OFFSET))

with ``a = 2`` for the kernels and ``a = 1`` for the linear kernel. This command fits the
constants: it times CV folds (a fit and the predictions for half as many other rows: what one
fold of the search costs; one BLAS thread, process CPU seconds) of ``ODMClassifier`` at
several row counts and points of the grid on the shared datasets, and prints
``FIT_OVERHEAD`` and ``UNIT_SECONDS`` per kernel family (the pair with the smallest mean log
error, ``fit_constants``) for a given ``FEATURE_OFFSET``, with each
measurement's ratio of predicted to measured seconds::

    PYTHONPATH=. .venv/bin/python -m bench.autotune_cost [--out docs/bench-runs/autotune-cost.json]

``docs/auto-params.md`` records the run the constants in ``solver/autotune.py`` came from.

Each kernel fit also records its epochs and the size of every face the active-set Newton
step factored (``faces``); the command then fits, the same way, the rows-only model, one that
adds those factorizations' work ``c3 * sum(s**3) / 3`` and one that also adds the sweeps'
``c4 * epochs * m**2``, and prints their errors by lam: what a cost model of rows alone
leaves out (docs/auto-params.md, "The budget, measured"). The kernel constants the search
uses (``KERNEL_COST``: overhead, unit, factor_unit) are the ``with_faces`` coefficients;
the linear kernel's are ``fit_constants``' pair.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from bench.data import load_split

DATASETS = ("svmguide1", "phishing", "a9a", "ijcnn1", "cod-rna")
ROWS = (333, 1000, 3000, 6000)
# (log10 lam, log10 gamma multiple): corners and middle of the coarse grid
POINTS = ((0.0, 0.0), (3.0, 0.0), (6.0, 0.0), (3.0, 2.0), (6.0, 3.0))


def _mean_nnz(X: np.ndarray) -> float:
    return float(np.count_nonzero(X) / max(1, X.shape[0]))


def faces_of(est) -> list[int]:
    """The size of every face the fit's Newton steps factored (none for the linear kernel)."""
    return [s for rec in est.history_ for s in rec.get("faces_factored", ())]


def measure(kernel: str, seed: int = 0) -> list[dict[str, Any]]:
    """CPU seconds of one CV fold of the search: a fit of the exact solver on ``m`` rows and
    its predictions for ``m / 2`` others (the validation third when the fit has two)."""
    from sklearn.exceptions import ConvergenceWarning

    from solver import ODMClassifier

    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(seed)
    for name in DATASETS:
        s = load_split(name)
        X, y = s.X_train, s.y_train
        d = _mean_nnz(X)
        scale = 1.0 / (X.shape[1] * float(np.var(X)))
        for m in ROWS:
            if m > len(y):
                continue
            idx = rng.choice(len(y), m, replace=False)
            val = rng.choice(len(y), m // 2, replace=False)
            points = POINTS if kernel != "linear" else ((0.0, 0.0), (3.0, 0.0), (6.0, 0.0))
            for log_lam, log_gm in points:
                est = ODMClassifier(kernel=kernel, lam=10.0 ** log_lam,
                                    gamma=scale * 10.0 ** log_gm, theta=0.5, scale=False,
                                    random_state=0)
                t = time.process_time()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    est.fit(X[idx], y[idx])
                fit = time.process_time() - t
                est.predict(X[val])
                cpu = time.process_time() - t
                rows.append({"dataset": name, "kernel": kernel, "rows": m, "d": d,
                             "log_lam": log_lam, "log_gamma_mult": log_gm, "cpu_s": cpu,
                             "fit_cpu_s": fit,
                             "epochs": int(est.n_iter_.sum()), "faces": faces_of(est)})
    return rows


def fit_constants(rows: list[dict[str, Any]], a: float, offset: float
                  ) -> tuple[float, float]:
    """``overhead`` on a log grid and ``unit`` the median of ``(t - overhead) / m^a (d +
    offset)`` over the fits of 3,000 rows or more (where the m^a term dominates), the pair
    with the smallest mean absolute log ratio of predicted to measured seconds."""
    t = np.array([r["cpu_s"] for r in rows])
    m = np.array([r["rows"] for r in rows])
    u = m ** a * (np.array([r["d"] for r in rows]) + offset)
    big = m >= 3000
    best = (np.inf, 0.0, 0.0)
    for c0 in np.geomspace(1e-4, 1e-2, 41):
        c1 = float(np.median(np.maximum(t[big] - c0, 1e-6) / u[big]))
        err = float(np.mean(np.abs(np.log((c0 + c1 * u) / t))))
        if err < best[0]:
            best = (err, float(c0), c1)
    return best[1], best[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offset", type=float, default=100.0,
                    help="FEATURE_OFFSET of the kernel family (the linear one uses 0)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    from threadpoolctl import threadpool_limits

    result: dict[str, Any] = {"command": "python -m bench.autotune_cost " + " ".join(
        sys.argv[1:]), "load_start": list(os.getloadavg()), "families": {}}
    with threadpool_limits(limits=1, user_api="blas"):
        for kernel, expo in (("rbf", 2.0), ("linear", 1.0)):
            rows = measure(kernel)
            offset = a.offset if kernel != "linear" else 0.0
            rows = rows[1:]  # the first fit of a family compiles the numba kernels
            overhead, unit = fit_constants(rows, expo, offset)
            for r in rows:
                r["width_offset"] = offset
                r["predicted_s"] = overhead + unit * r["rows"] ** expo * (r["d"] + offset)
                r["ratio"] = r["predicted_s"] / r["cpu_s"]
                print(f"{kernel:6} {r['dataset']:10} m={r['rows']:5d} lam=1e{r['log_lam']:g} "
                      f"gm=1e{r['log_gamma_mult']:g} cpu {r['cpu_s']:.3f} s "
                      f"predicted {r['predicted_s']:.3f} s ({r['ratio']:.2f}x), "
                      f"{r['epochs']} epochs, faces {r['faces']}", flush=True)
            ratios = np.array([r["ratio"] for r in rows])
            family = {
                "exponent": expo, "width_offset": offset, "fit_overhead_s": overhead,
                "unit_s": unit,
                "ratio_median": float(np.median(ratios)), "ratio_min": float(ratios.min()),
                "ratio_max": float(ratios.max()), "measurements": rows}
            print(f"{kernel}: FIT_OVERHEAD {overhead:.4g} s, UNIT_SECONDS {unit:.4g} s; "
                  f"predicted/measured median {np.median(ratios):.2f}, range "
                  f"{ratios.min():.2f}-{ratios.max():.2f}", flush=True)
            if kernel != "linear":
                family["face_model"] = face_models(rows)
            result["families"][kernel] = family
    if a.out is not None:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


def face_models(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Three models fitted the same way (non-negative least squares on relative error, all
    kernel fits): ``c0 + c1 m^2 (d + offset)`` (rows only), plus ``c3 * sum(s^3) / 3`` over
    the faces factored (the Cholesky work), plus ``c4 * epochs * m^2`` (the sweeps); their
    predicted / measured ratios on the fits of 3,000 rows or more, by lam."""
    from scipy.optimize import nnls

    t = np.array([r["cpu_s"] for r in rows])
    m = np.array([r["rows"] for r in rows], dtype=float)
    u = m ** 2 * (np.array([r["d"] for r in rows]) + rows[0]["width_offset"])
    faces = np.array([sum(s ** 3 for s in r["faces"]) / 3 for r in rows])
    epochs = np.array([r["epochs"] for r in rows]) * m ** 2
    lam = np.array([r["log_lam"] for r in rows])
    big = m >= 3000
    out: dict[str, Any] = {}
    for name, cols in (("rows_only", [np.ones_like(t), u]),
                       ("with_faces", [np.ones_like(t), u, faces]),
                       ("with_faces_and_epochs", [np.ones_like(t), u, faces, epochs])):
        A = np.stack(cols, axis=1)
        coef, _ = nnls(A / t[:, None], np.ones(len(t)))
        ratio = A @ coef / t
        by = {f"{lv:g}": [float(np.min(ratio[big & (lam == lv)])),
                          float(np.median(ratio[big & (lam == lv)])),
                          float(np.max(ratio[big & (lam == lv)]))]
              for lv in sorted(set(lam[big].tolist()))}
        err = float(np.mean(np.abs(np.log(ratio[big]))))
        out[name] = {"coefficients": coef.tolist(), "mean_abs_log_ratio_3000": err,
                     "ratio_3000_by_log_lam": by}
        print(f"rbf {name}: coefficients {', '.join(f'{c:.3g}' for c in coef)}; fits of "
              f">= 3,000 rows: mean |log(predicted/measured)| {err:.3f}; by lam (min/median/"
              "max) " + "; ".join(f"1e{k}: {v[0]:.2f}/{v[1]:.2f}/{v[2]:.2f}"
                                  for k, v in by.items()), flush=True)
    return out


if __name__ == "__main__":
    main()
