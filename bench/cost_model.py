"""A cost model of SODM-RBF's fit, fitted to the scaling study and used beyond this machine.

With ``n`` rows of ``d`` features, fan-in ``p`` and ``L`` levels, level ``l`` solves
``P_l = p**l`` partitions of ``m_l = n / P_l`` rows; ``E`` executors (cores) solve them in
``ceil(P_l / E)`` rounds.  A partition's solve computes its kernel once (``m**2 d``) and runs
dual coordinate descent and Newton face solves over it, so its time is modelled as
``t(m) = a m**b`` (``b`` near 2 while the kernel fits ``cache_size``); what is not a level
(landmark selection among 20,000 candidates, strata, dealing, the process pool) as
``s0 + s1 n`` on one core and ``s0 + s1 n / E`` on ``E``.  So

    T(n, E) = s0 + s1 n / E + sum_l ceil(P_l / E) * a * m_l**b

Memory per executor: its partition's float32 kernel (``4 m**2`` bytes, at most ``cache_size``)
plus up to a quarter of that for the Newton face factor, the partition's rows (``8 m d``) and
an interpreter (``r0``); the driver holds the ``(n, 2)`` duals and the data it deals.

The constants come from one-core fits (CPU seconds of each level, i.e. the level's wall
seconds scaled by the fit's CPU / wall ratio, which removes the time other processes held the
core on a shared machine); the two-core fits of the same study check the ``E`` term.
"""

from __future__ import annotations

import math

import numpy as np

from solver.sodm.hierarchy import resolve_structure

__all__ = ["fit_cost_model", "predict", "check_rows", "PREDICTIONS"]

# (label, rows, features, executors): the paper's SUSY and a 10M-row set of the same shape
PREDICTIONS = [("SUSY (the paper's, 5M rows)", 5_000_000, 18, 32),
               ("10M rows, SUSY-shaped", 10_000_000, 18, 32)]
_CACHE_MB = 1024.0


def _cpu_scale(p: dict) -> float:
    wall, cpu = p.get("fit_s") or 0.0, p.get("fit_cpu_s") or 0.0
    return min(1.0, cpu / wall) if wall > 0 and cpu > 0 else 1.0


def fit_cost_model(points: list[dict]) -> dict | None:
    """Constants ``a, b, s0, s1, r0`` from the one-core SODM-RBF points of the scaling study
    (each with its per-level ``history``); None with fewer than two usable points."""
    parts, setup = [], []
    mem = []
    for p in points:
        if p.get("status") != "ok" or not p.get("history"):
            continue
        scale = _cpu_scale(p)
        level_s = 0.0
        for h in p["history"]:
            if h.get("level", 0) <= 0 or not h.get("partitions"):
                continue
            parts.append((h["partition_size"], h["seconds"] * scale / h["partitions"]))
            level_s += h["seconds"] * scale
        setup.append((p["n"], max(p["fit_cpu_s"] - level_s, 0.0)))
        m = max(h["partition_size"] for h in p["history"])
        mem.append((p["n"], m, p.get("fit_peak_rss_mb") or p.get("peak_rss_mb")))
    if len(parts) < 2 or len(setup) < 2:
        return None
    m_arr, t_arr = np.log(np.array(parts, dtype=float)).T
    b, log_a = np.polyfit(m_arr, t_arr, 1)
    n_arr, s_arr = np.array(setup, dtype=float).T
    s1, s0 = np.polyfit(n_arr, s_arr, 1)
    kernel_mb = [min(4.0 * m * m / 2**20, _CACHE_MB) * 1.25 for _, m, _ in mem]
    r0 = float(np.median([rss - k - 8.0 * n * 18 / 2**20 * 3
                          for (n, _, rss), k in zip(mem, kernel_mb, strict=True)]))
    return {"a": float(math.exp(log_a)), "b": float(b), "s0": float(max(s0, 0.0)),
            "s1": float(max(s1, 0.0)), "r0_mb": max(r0, 0.0), "n_partition_points": len(parts),
            "n_fits": len(setup)}


def predict(model: dict, n: int, d: int, executors: int, *, levels: int | None = None,
            p: int | None = None, cache_size: float = _CACHE_MB) -> dict:
    """Predicted fit seconds and memory for ``n`` rows on ``executors`` cores with SODM's
    default structure (or the given ``p`` / ``levels``)."""
    shape = resolve_structure(n, cache_size, p=p, levels=levels, n_strata=None,
                              landmark_candidates=None, final_global_solve=None)
    seconds = model["s0"] + model["s1"] * n / executors
    cpu = model["s0"] + model["s1"] * n
    rounds = []
    for lvl in range(shape.levels, 0, -1):
        P = shape.p ** lvl
        m = math.ceil(n / P)
        t = model["a"] * m ** model["b"]
        seconds += math.ceil(P / executors) * t
        cpu += P * t
        rounds.append({"level": lvl, "partitions": P, "partition_rows": m,
                       "rounds": math.ceil(P / executors), "partition_s": t})
    m1 = math.ceil(n / shape.p ** max(shape.levels, 1)) if shape.levels else n
    kernel_mb = min(4.0 * m1 * m1 / 2**20, cache_size) * 1.25
    return {"n": n, "d": d, "executors": executors, "p": shape.p, "levels": shape.levels,
            "levels_detail": rounds, "seconds": seconds, "cpu_seconds": cpu,
            "executor_mb": model["r0_mb"] + kernel_mb + 8.0 * m1 * d / 2**20,
            "driver_mb": model["r0_mb"] + (8.0 * n * d + 16.0 * n) / 2**20}


def check_rows(model: dict, one_core: list[dict], two_cores: list[dict], d: int) -> list[dict]:
    """Measured against predicted fit seconds: one core (wall scaled to CPU, the points the
    model was fitted on) and two cores (``n_jobs=2``: wall and CPU as measured)."""
    rows = []
    for cores, pts in ((1, one_core), (2, two_cores)):
        for p in pts:
            if p.get("status") != "ok":
                continue
            pred = predict(model, p["n"], d, cores)
            rows.append({"n": p["n"], "cores": cores, "wall_s": p["fit_s"],
                         "cpu_s": p["fit_cpu_s"], "predicted_s": pred["seconds"],
                         "predicted_cpu_s": pred["cpu_seconds"],
                         "peak_rss_mb": p.get("fit_peak_rss_mb") or p.get("peak_rss_mb"),
                         "predicted_mb": pred["executor_mb"] * cores
                         + (pred["driver_mb"] - model["r0_mb"])})
    return rows
