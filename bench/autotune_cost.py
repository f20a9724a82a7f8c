"""Calibrate the cost model of the automatic-hyperparameter search (``solver.autotune``).

The search decides which rungs and refinement steps fit its budget from *predicted* costs,
not from the clock, so the same data and request give the same choice on any machine and
under any load. A fit of the exact solver on ``m`` rows with ``d`` features (mean nonzeros
per row) and ``q`` binary problems is predicted to cost::

    seconds(m) = q * (FIT_OVERHEAD + UNIT_SECONDS * m**a * (d + FEATURE_OFFSET))

with ``a = 2`` for the kernels and ``a = 1`` for the linear kernel. This command fits the
constants: it times single fits (what one CV fold costs; one BLAS thread, process CPU
seconds) of ``ODMClassifier`` at several row counts and points of the grid on the shared
datasets, and prints ``FIT_OVERHEAD`` and ``UNIT_SECONDS`` per kernel family (the pair with
the smallest mean log error, ``fit_constants``) for a given ``FEATURE_OFFSET``, with each
measurement's ratio of predicted to measured seconds::

    PYTHONPATH=. .venv/bin/python -m bench.autotune_cost [--out docs/bench-runs/autotune-cost.json]

``docs/auto-params.md`` records the run the constants in ``solver/autotune.py`` came from.

Each kernel fit also records its epochs and the size of every face the active-set Newton
step factored (``faces``), and the command fits a second model that adds those
factorizations' work, ``FACE_SECONDS * sum(s**3) / 3``, to the first: what a cost model of
rows alone leaves out (docs/auto-params.md, "The budget, measured").
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
from solver import newton_kernel as nwt

DATASETS = ("svmguide1", "phishing", "a9a", "ijcnn1", "cod-rna")
ROWS = (333, 1000, 3000, 6000)
# (log10 lam, log10 gamma multiple): corners and middle of the coarse grid
POINTS = ((0.0, 0.0), (3.0, 0.0), (6.0, 0.0), (3.0, 2.0), (6.0, 3.0))


def _mean_nnz(X: np.ndarray) -> float:
    return float(np.count_nonzero(X) / max(1, X.shape[0]))


class _CountingFaces(nwt.FaceSystems):
    """The solver's face systems, adding the size of every factored face to ``sizes``."""

    sizes: list[int] = []

    def _refactor(self, S, D, K_SS):
        _CountingFaces.sizes.append(int(S.size))
        return super()._refactor(S, D, K_SS)


def measure(kernel: str, seed: int = 0) -> list[dict[str, Any]]:
    """CPU seconds of single fits of the exact solver (what one CV fold costs)."""
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
            points = POINTS if kernel != "linear" else ((0.0, 0.0), (3.0, 0.0), (6.0, 0.0))
            for log_lam, log_gm in points:
                est = ODMClassifier(kernel=kernel, lam=10.0 ** log_lam,
                                    gamma=scale * 10.0 ** log_gm, theta=0.5, scale=False,
                                    random_state=0)
                _CountingFaces.sizes = []
                real, nwt.FaceSystems = nwt.FaceSystems, _CountingFaces
                try:
                    t = time.process_time()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", ConvergenceWarning)
                        est.fit(X[idx], y[idx])
                    cpu = time.process_time() - t
                finally:
                    nwt.FaceSystems = real
                rows.append({"dataset": name, "kernel": kernel, "rows": m, "d": d,
                             "log_lam": log_lam, "log_gamma_mult": log_gm, "cpu_s": cpu,
                             "epochs": int(est.n_iter_.sum()),
                             "faces": list(_CountingFaces.sizes)})
    return rows


def face_seconds(rows: list[dict[str, Any]]) -> float:
    """``FACE_SECONDS``: the median, over the fits that factored a face, of the seconds the
    rows-only prediction leaves unexplained per unit ``sum(s**3) / 3`` of their faces."""
    per = [max(r["cpu_s"] - r["predicted_s"], 0.0) / (sum(s ** 3 for s in r["faces"]) / 3)
           for r in rows if r["faces"]]
    return float(np.median(per)) if per else 0.0


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
                family["face_model"] = _face_model(rows)
            result["families"][kernel] = family
    if a.out is not None:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


def _face_model(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows-only prediction plus ``FACE_SECONDS * sum(s**3) / 3``: its constant and its
    predicted / measured ratios, beside the rows-only ones, by lam."""
    c3 = face_seconds(rows)
    out: dict[str, Any] = {"face_seconds": c3, "by_log_lam": {}}
    for r in rows:
        r["face_gflop"] = sum(s ** 3 for s in r["faces"]) / 3e9
        r["ratio_faces"] = (r["predicted_s"] + c3 * r["face_gflop"] * 1e9) / r["cpu_s"]
    print(f"rbf + faces: FACE_SECONDS {c3:.4g} s per s^3/3 of the factored faces", flush=True)
    for lam in sorted({r["log_lam"] for r in rows}):
        sel = [r for r in rows if r["log_lam"] == lam]
        a = np.array([r["ratio"] for r in sel])
        b = np.array([r["ratio_faces"] for r in sel])
        fac = sum(len(r["faces"]) for r in sel)
        out["by_log_lam"][f"{lam:g}"] = {
            "fits": len(sel), "factorizations": fac,
            "rows_only": [float(a.min()), float(np.median(a)), float(a.max())],
            "with_faces": [float(b.min()), float(np.median(b)), float(b.max())]}
        print(f"  lam 1e{lam:g}: {len(sel)} fits, {fac} factorizations; predicted/measured "
              f"rows only {a.min():.2f}/{np.median(a):.2f}/{a.max():.2f}, with faces "
              f"{b.min():.2f}/{np.median(b):.2f}/{b.max():.2f} (min/median/max)", flush=True)
    return out


if __name__ == "__main__":
    main()
