"""Scaling study on a generated SUSY-shaped set (18 features, 2 classes, Bayes accuracy ~0.8).

* Fit seconds (wall and CPU of the process tree) against training size (10^4 .. ``max_rows``
  = 10^6, half-decade steps) on one core for SODM-linear, SODM-RBF, SVC and
  Nystroem(1,000) + LinearSVC with fixed hyperparameters (ODM: lam=1000, theta=0.2,
  upsilon=0.5; SVC and LinearSVC: C=1; RBF gamma = 1/18), each fit in a child process with a
  per-fit cap; a method stops growing after its first capped fit.  The log-log slope is
  fitted by least squares.
* SODM-RBF on two cores (``n_jobs=2``) at the same sizes: the check of the cost model's
  executor term (``bench.cost_model``), which uses the per-level records of both.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from bench.child import run_task
from bench.lanes import in_lanes

N_FEATURES = 18
FIXED = {"sodm-linear": {"lam": 1e3, "theta": 0.2, "upsilon": 0.5},
         "sodm-rbf": {"lam": 1e3, "theta": 0.2, "upsilon": 0.5, "gamma_mult": 1.0},
         "svc": {"C": 1.0, "gamma_mult": 1.0},
         "nystroem-1000": {"C": 1.0, "gamma_mult": 1.0}}
SIZES = (10**4, 30000, 10**5, 300000, 10**6)
QUICK_SIZES = (1000, 3000)


def _fit(method: str, n: int, cpu_cap: float, wall_factor: float, cores: int,
         mem_gib: float | None, cpu: int | None = None) -> dict:
    spec = {"task": "fit", "method": method, "params": FIXED[method], "seed": 0,
            "n_jobs": cores, "cores": cores, "cpus": None if cpu is None else [cpu],
            "cpu_cap_s": cpu_cap, "mem_gib": mem_gib, "data": {"n": n, "seed": 0}}
    res = run_task(spec, cpu_cap * wall_factor)
    res["n"] = n
    nan = float("nan")
    print(f"  scaling {method:14s} n={n:8d} cores={cores}: {res.get('status')}"
          f" fit {res.get('fit_s', nan):.2f}s cpu {res.get('fit_cpu_s', nan):.2f}s"
          f" acc {res.get('accuracy', nan):.4f}", flush=True)
    return res


def slope(points: list[dict]) -> float | None:
    """Least-squares slope of log10(fit_s) against log10(n) (None with < 2 points)."""
    ok = [(p["n"], p["fit_s"]) for p in points if p.get("status") == "ok" and p["fit_s"] > 0]
    if len(ok) < 2:
        return None
    n, t = np.log10(np.array(ok, dtype=float)).T
    return float(np.polyfit(n, t, 1)[0])


def run_scaling(*, quick: bool = False, max_rows: int | None = None, cpu_cap: float = 300.0,
                wall_factor: float = 4.0, mem_gib: float | None = None,
                lanes: list[int] | None = None, save: Callable[[], None] | None = None,
                results: dict | None = None) -> dict:
    """Run the study (one-core sweeps in ``lanes``, one method per lane at a time, then the
    two-core sweep); returns the JSON-ready record (also stored progressively)."""
    top = max_rows or (3000 if quick else 10**6)
    sizes = [n for n in (QUICK_SIZES if quick else SIZES) if n <= top]
    out: dict = {"timeout_s": cpu_cap, "cpu_cap_s": cpu_cap, "sizes": sizes, "params": FIXED,
                 "size": {}, "two_cores": {"sodm-rbf": {"points": []}}, "mem_gib": mem_gib}
    if results is not None:
        results["scaling"] = out

    def keep() -> None:
        if save is not None:
            save()

    def sweep(method: str, cpu: int | None, cores: int, rec: dict) -> None:
        for n in sizes:
            res = _fit(method, n, cpu_cap, wall_factor, cores, mem_gib, cpu)
            rec["points"].append(res)
            rec["slope"] = slope(rec["points"])
            keep()
            if res.get("status") != "ok":
                break

    print("scaling: fit time vs n", flush=True)
    methods = ("sodm-rbf", "svc", "nystroem-1000", "sodm-linear")
    for m in methods:
        out["size"][m] = {"points": []}
    in_lanes(list(methods), lanes or [sorted(os.sched_getaffinity(0))[0]],
             lambda m, cpu: sweep(m, cpu, 1, out["size"][m]))
    sweep("sodm-rbf", None, 2, out["two_cores"]["sodm-rbf"])
    return out
