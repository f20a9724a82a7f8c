"""Scaling study on a generated SUSY-shaped set (18 features, 2 classes, Bayes accuracy ~0.8).

* Fit seconds against training size (10^3 .. ``max_rows``, half-decade steps) for SODM-linear,
  SODM-RBF and SVC with fixed hyperparameters (ODM: lam=1000, theta=0.2, upsilon=0.5; SVC:
  C=1; RBF gamma = 1/18), each fit in a child process with a per-fit cap; a method stops
  growing after its first capped fit.  The log-log slope is fitted by least squares.
* Speedup against processes: SODM-RBF with ``n_jobs`` 1 and 2 on the same data.
* Against partitions: SODM-RBF with ``levels`` 0..4 (1..16 partitions, p=2), ``n_jobs=2``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.child import run_task

N_FEATURES = 18
N_TEST = 20000
FIXED = {"sodm-linear": {"lam": 1e3, "theta": 0.2, "upsilon": 0.5},
         "sodm-rbf": {"lam": 1e3, "theta": 0.2, "upsilon": 0.5, "gamma_mult": 1.0},
         "svc": {"C": 1.0, "gamma_mult": 1.0}}


def _generate(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    z = rng.standard_normal((n, 8))
    score = z[:, :4].sum(axis=1) / 2 + 0.6 * (z[:, 4] ** 2 - z[:, 5] ** 2) \
        + 0.5 * z[:, 6] * z[:, 7] + 0.9 * rng.standard_normal(n)
    y = np.where(score > 0.1, 1.0, -1.0)
    high = np.column_stack([
        np.abs(z[:, 0] + z[:, 1]), np.abs(z[:, 2] - z[:, 3]), z[:, 4] ** 2, z[:, 5] ** 2,
        z[:, 6] * z[:, 7], np.sqrt((z[:, :4] ** 2).sum(axis=1)), np.exp(0.3 * z[:, 0]),
        np.tanh(z[:, 1] * z[:, 2]), z[:, 3] + 0.5 * z[:, 6], np.abs(z[:, 7]) ** 1.5])
    return np.hstack([z, high]), y


def susy_like(n: int, seed: int = 0) -> dict:
    """n training rows and a fixed 20,000-row test set, min-max scaled on the training rows."""
    X, y = _generate(n, np.random.default_rng([seed, n]))
    X_te, y_te = _generate(N_TEST, np.random.default_rng([seed, 10**9]))
    lo, span = X.min(axis=0), X.max(axis=0) - X.min(axis=0)
    span[span == 0] = 1.0
    return {"X_train": (X - lo) / span, "y_train": y,
            "X_test": np.clip((X_te - lo) / span, -1.0, 2.0), "y_test": y_te}


def _fit(method: str, n: int, timeout: float, n_jobs: int = 2, **extra) -> dict:
    spec = {"task": "fit", "method": method, "params": {**FIXED[method], **extra}, "seed": 0,
            "n_jobs": n_jobs, "data": {"n": n, "seed": 0}}
    res = run_task(spec, timeout)
    res["n"] = n
    print(f"  scaling {method:12s} n={n:8d} {extra or ''} n_jobs={n_jobs}: {res.get('status')}"
          f" fit {res.get('fit_s', float('nan')):.2f}s acc {res.get('accuracy', float('nan')):.4f}",
          flush=True)
    return res


def slope(points: list[dict]) -> float | None:
    """Least-squares slope of log10(fit_s) against log10(n) (None with < 2 points)."""
    ok = [(p["n"], p["fit_s"]) for p in points if p.get("status") == "ok" and p["fit_s"] > 0]
    if len(ok) < 2:
        return None
    n, t = np.log10(np.array(ok, dtype=float)).T
    return float(np.polyfit(n, t, 1)[0])


def run_scaling(work: Path, *, quick: bool = False, max_rows: int | None = None,
                timeout: float | None = None, save: Callable[[], None] | None = None,
                results: dict | None = None) -> dict:
    """Run the three studies; returns the JSON-ready record (also stored progressively)."""
    del work
    cap = timeout or (60.0 if quick else 300.0)
    top = max_rows or (3000 if quick else 10**6)
    sizes = [n for n in (1000, 3000, 10**4, 30000, 10**5, 300000, 10**6) if n <= top]
    out: dict = {"timeout_s": cap, "sizes": sizes, "params": FIXED, "size": {},
                 "n_jobs": [], "partitions": []}
    if results is not None:
        results["scaling"] = out

    def keep() -> None:
        if save is not None:
            save()

    print("scaling: fit time vs n", flush=True)
    for method in ("sodm-linear", "sodm-rbf", "svc"):
        pts = out["size"].setdefault(method, {"points": []})
        for n in sizes:
            res = _fit(method, n, cap)
            pts["points"].append(res)
            pts["slope"] = slope(pts["points"])
            keep()
            if res.get("status") != "ok":
                break
    n_mid = 2000 if quick else 30000
    print(f"scaling: n_jobs and partitions at n={n_mid}", flush=True)
    for jobs in (1, 2):
        out["n_jobs"].append({**_fit("sodm-rbf", n_mid, cap, n_jobs=jobs), "jobs": jobs})
        keep()
    for levels in ((0, 1) if quick else (0, 1, 2, 3, 4)):
        out["partitions"].append({**_fit("sodm-rbf", n_mid, cap, levels=levels),
                                  "levels": levels, "partitions": 2 ** levels})
        keep()
    return out
