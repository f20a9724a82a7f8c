"""Calibrate the cost model of the automatic-hyperparameter search (``solver.auto.search``).

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

    PYTHONPATH=. .venv/bin/python -m bench.autotune_cost [--out bench/records/autotune-cost.json]

``docs/auto-params.md`` records the run the constants in ``solver/auto/search.py`` came from.

Each kernel fit also records its epochs and the size of every face the active-set Newton
step factored (``faces``); the command then fits, the same way, the rows-only model, one that
adds those factorizations' work ``c3 * sum(s**3) / 3`` and one that also adds the sweeps'
``c4 * epochs * m**2``, and prints their errors by lam: what a cost model of rows alone
leaves out (docs/auto-params.md, "The budget, measured").

Last, it runs the kernel search itself (``solver.auto.search.search``, lam, gamma and theta
"auto", a fixed budget of ``--search-budget`` seconds) on each dataset's training split and
fits the same three-term model to what every scored candidate cost (``search_constants``:
its k folds, fits, predictions and the search's own overhead, against its rows and the faces
it factored): a budget on counted work, tried and not adopted (docs/auto-params.md). The
search still decides on the rows-only pairs (``KERNEL_COST``, ``LINEAR_COST``) of this
command's earlier run, which timed single fits (bench/records/autotune-cost.json).
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
from solver.auto.search import factored_faces
from solver.exact.newton_kernel import NewtonWork

DATASETS = ("svmguide1", "phishing", "a9a", "ijcnn1", "cod-rna")
ROWS = (333, 1000, 3000, 6000)
# (log10 lam, log10 gamma multiple): corners and middle of the coarse grid
POINTS = ((0.0, 0.0), (3.0, 0.0), (6.0, 0.0), (3.0, 2.0), (6.0, 3.0))


def _mean_nnz(X: np.ndarray) -> float:
    return float(np.count_nonzero(X) / max(1, X.shape[0]))


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
                             "epochs": int(est.n_iter_.sum()), "faces": factored_faces(est)})
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
    ap.add_argument("--search-budget", type=float, default=20.0,
                    help="predicted CPU seconds of each calibration search")
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
    result["search"] = search_constants(a.search_budget, a.offset)
    if a.out is not None:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


def search_entries(budget: float, seed: int = 0) -> list[dict[str, Any]]:
    """Every candidate the kernel search scored on each dataset's training split (lam,
    gamma, theta "auto", the default settings but a fixed budget of ``budget`` predicted
    seconds and no races, so each candidate ran every fold): its rows, the faces of each
    fold, and its measured CPU seconds."""
    from solver import ODMClassifier
    from solver.auto.search import AUTO_PARAMS, SearchSettings, search

    out: list[dict[str, Any]] = []
    for name in DATASETS:
        s = load_split(name)
        X, y = s.X_train, s.y_train
        res = search(lambda v: ODMClassifier(scale=False, random_state=seed, **v), X, y,
                     linear=False, gamma_scale=1.0 / (X.shape[1] * float(np.var(X))),
                     fixed={}, auto=AUTO_PARAMS, seed=seed,
                     settings=SearchSettings(budget_floor_seconds=budget, budget_factor=0.0,
                                             race_se=None))
        out += [{"dataset": name, "d": _mean_nnz(X), "folds": res.folds, "rows": r["rows"],
                 "lam": r["lam"], "stage": r["stage"], "faces": r["faces"],
                 "cpu_s": r["cpu_seconds"]} for r in res.table]
        print(f"search {name}: {len(res.table)} candidates, rungs "
              f"{[(r['rows'], r['candidates']) for r in res.rungs]}, "
              f"{res.cpu_seconds:.1f} CPU s", flush=True)
    return out


def search_constants(budget: float, offset: float) -> dict[str, Any]:
    """:func:`search_model` of the calibration searches' candidates (the first left out: it
    compiles the numba kernels)."""
    return {"budget": budget, **search_model(search_entries(budget)[1:], offset)}


def search_model(entries: list[dict[str, Any]], offset: float) -> dict[str, Any]:
    """The three-term model fitted to what each candidate of the search cost (non-negative
    least squares on relative error): ``folds * c0 + c1 * sum m_f^2 (d + offset) + c3 *
    sum W_f`` over its folds (``m_f`` the fold's training rows, ``W_f`` its faces'
    ``sum(s^3) / 3``)."""
    t = np.array([e["cpu_s"] for e in entries])
    k = np.array([e["folds"] for e in entries], dtype=float)
    m = np.array([e["rows"] for e in entries], dtype=float) * (k - 1) / k
    u = k * m ** 2 * (np.array([e["d"] for e in entries]) + offset)
    w = np.array([sum(_work(f) for f in e["faces"]) for e in entries])
    A = np.stack([k, u, w], axis=1)
    coef, ratio = _fit_relative(A, t)
    for e, r in zip(entries, ratio, strict=True):
        e["ratio"] = float(r)
    rows = np.array([e["rows"] for e in entries])
    by_rows = {}
    for lo, hi in ((0, 1000), (1000, 3000), (3000, 10 ** 9)):
        sel = (rows >= lo) & (rows < hi)
        if sel.any():
            by_rows[f"{lo}-{hi}"] = [int(sel.sum()), float(np.median(ratio[sel])),
                                     float(t[sel].sum()), float((A[sel] @ coef).sum())]
    total = float((A @ coef).sum() / t.sum())
    print(f"rbf search: coefficients {', '.join(f'{c:.3g}' for c in coef)} (overhead per "
          f"fold, unit, factor_unit); {len(entries)} candidates, predicted / measured "
          f"in all {total:.2f}, median {np.median(ratio):.2f}, range {ratio.min():.2f}-"
          f"{ratio.max():.2f}; by rung rows (count, median ratio, measured s, predicted s): "
          + "; ".join(f"{k_}: {v[0]}, {v[1]:.2f}, {v[2]:.1f}, {v[3]:.1f}"
                      for k_, v in by_rows.items()), flush=True)
    return {"coefficients": coef.tolist(), "ratio_total": total,
            "ratio_median": float(np.median(ratio)), "by_rows": by_rows,
            "entries": entries}


def _work(faces) -> float:
    """``sum(s^3) / 3`` of the faces (``NewtonWork.factor_work``)."""
    return NewtonWork(factored=tuple(faces)).factor_work


def _fit_relative(A: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative least squares of ``A @ coef`` on ``t`` in relative error: the
    coefficients and each row's predicted / measured ratio."""
    from scipy.optimize import nnls

    coef, _ = nnls(A / t[:, None], np.ones(len(t)))
    return coef, A @ coef / t


def face_models(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Three models fitted the same way (non-negative least squares on relative error, all
    kernel fits): ``c0 + c1 m^2 (d + offset)`` (rows only), plus ``c3 * sum(s^3) / 3`` over
    the faces factored (the Cholesky work), plus ``c4 * epochs * m^2`` (the sweeps); their
    predicted / measured ratios on the fits of 3,000 rows or more, by lam."""
    t = np.array([r["cpu_s"] for r in rows])
    m = np.array([r["rows"] for r in rows], dtype=float)
    u = m ** 2 * (np.array([r["d"] for r in rows]) + rows[0]["width_offset"])
    faces = np.array([_work(r["faces"]) for r in rows])
    epochs = np.array([r["epochs"] for r in rows]) * m ** 2
    lam = np.array([r["log_lam"] for r in rows])
    big = m >= 3000
    out: dict[str, Any] = {}
    for name, cols in (("rows_only", [np.ones_like(t), u]),
                       ("with_faces", [np.ones_like(t), u, faces]),
                       ("with_faces_and_epochs", [np.ones_like(t), u, faces, epochs])):
        A = np.stack(cols, axis=1)
        coef, ratio = _fit_relative(A, t)
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
