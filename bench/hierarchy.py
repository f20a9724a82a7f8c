"""SODM's hierarchy on the larger tasks: accuracy and CPU seconds per level, and the paper's
two theorems measured (issue 19, part 4).

Tasks (:func:`load_task`, splits of :func:`bench.data.load_split`): the official splits
reversed, ``cod-rna.t`` (train 271,617 rows, test ``cod-rna``) and ``ijcnn1.t`` (train
91,701, test ``ijcnn1``), and ``skin_nonskin`` (stratified 80/20, 196,045 training rows).
Every task holds out a stratified validation set from its *training* split (10%, at most 20,000
rows): structure defaults are chosen on validation accuracy, the test accuracy is
reported beside it and chooses nothing.  Features min-max scaled on the training split.
One untuned setting shared by all (issue 19's): RBF gamma = 10 / (d Var X), lam = 1e4,
theta = 0.5, upsilon = 0.5, tol = 1e-3.

* :func:`level_curve`: one SODM fit of a structure (``CONFIGS``), with the model of every
  level kept: cumulative CPU seconds of the fit at the end of each level (``n_jobs=1``
  runs in this process, so process CPU time is the whole tree's, BLAS threads included),
  validation and test accuracy, support vectors and prediction seconds per 1,000 rows of
  the level's model (the size-weighted average of its local models, as the estimator
  stores it).
* :func:`theorem1`: on a training subsample small enough for the exact solver, the global
  dual objective of every level's model against the exact optimum ``d*`` (relative gap),
  level by level (the paper's Theorem 1 says the gap shrinks as partitions merge).
* :func:`theorem2`: stratified partitions against random balanced ones at the same ``p``:
  each partition's local optimum ``d_k`` against ``d*`` (Theorem 2 bounds
  ``d_k - d*``), their spread, and the merged model's accuracy.

    PYTHONPATH=. .venv/bin/python -m bench.hierarchy --tasks cod-rna.t \\
        [--configs default ...] [--theorem-rows 16000] [--out docs/hierarchy.json]

``--from-json docs/hierarchy.json --doc docs/hierarchy.md`` re-renders the document from a
results file, measuring nothing.

:func:`level_curves` is what ``bench.run`` calls per larger task (the ``PUBLISHED``
structures with the benchmark's tuned setting); :func:`run` (this module's command) returns
the whole study as one JSON-able dict and :func:`report_lines` renders it as markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.model_selection import train_test_split

from bench.data import load_split
from solver.core.formulation import ODMParams, dual_objective
from solver.core.kernels import Kernel, kernel_decision
from solver.estimators import average_local_duals
from solver.exact.dcd_kernel import kernel_kkt_violation
from solver.exact.reduction import project_support
from solver.sodm.hierarchy import sodm_kernel, solve_partition, stratify
from solver.sodm.partition import (
    deal_partitions,
    level_ids,
    local_seed,
    partition_members,
    row_keys,
    stratified_partitions,
)

__all__ = ["TASKS", "CONFIGS", "PUBLISHED", "Task", "load_task", "split_task", "level_curve",
           "level_curves", "theorem1", "theorem2", "run", "report_lines"]

TASKS = ("cod-rna.t", "ijcnn1.t", "skin_nonskin")  # bench.data names
VAL_FRACTION = 0.1
VAL_MAX_ROWS = 20_000
GAMMA_MULT = 10.0  # gamma = GAMMA_MULT / (d Var X)
PARAMS = ODMParams(lam=1e4, upsilon=0.5, theta=0.5)
TOL = 1e-3
# structures compared by level_curve: sodm_kernel keyword arguments (absent: its default);
# "stop_rows" ends the fit after the first level whose partitions have that many rows
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "levels2": {"levels": 2},
    "cache2048": {"cache_size": 2048.0},
    "p2": {"p": 2, "levels": 7, "cache_size": 2048.0, "stop_rows": 15_000},
}
# the structures bench.run publishes, in this order (see level_curves)
PUBLISHED = ["default", "cache2048", "p2"]
PREDICT_ROWS = 1000


@dataclass
class Task:
    """A training split cut into fit and validation rows, and the test split."""

    name: str
    X_fit: np.ndarray
    y_fit: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    gamma: float = 0.0  # RBF width; 0: GAMMA_MULT / (d Var X) of the fit rows
    params: ODMParams = PARAMS

    def __post_init__(self) -> None:
        if not self.gamma > 0:
            self.gamma = GAMMA_MULT / (self.X_fit.shape[1] * float(np.var(self.X_fit)))


def load_task(name: str, *, max_fit: int | None = None, seed: int = 0) -> Task:
    """The task's training split (validation rows held out, stratified) and its test split
    (:func:`bench.data.load_split`); ``max_fit`` keeps a stratified subsample of the fit
    rows."""
    s = load_split(name)
    return split_task(name, s.X_train, s.y_train, s.X_test, s.y_test, max_fit=max_fit,
                      seed=seed)


def split_task(name: str, X, y, X_te, y_te, *, max_fit: int | None = None,
               seed: int = 0) -> Task:
    """Hold out the validation rows of a training split (stratified)."""
    n_val = min(VAL_MAX_ROWS, int(round(VAL_FRACTION * len(y))))
    X_fit, X_val, y_fit, y_val = train_test_split(X, y, test_size=n_val, stratify=y,
                                                  random_state=seed)
    if max_fit is not None and len(y_fit) > max_fit:
        X_fit, _, y_fit, _ = train_test_split(X_fit, y_fit, train_size=max_fit,
                                              stratify=y_fit, random_state=seed)
    return Task(name, np.ascontiguousarray(X_fit), y_fit, X_val, y_val, X_te, y_te)


def _model_rows(task: Task, alpha: np.ndarray, ids: np.ndarray | None) -> tuple[np.ndarray,
                                                                                 np.ndarray]:
    """Support rows and their coefficients of the size-weighted average of the local models
    (``ids``: partition per row; None: one global model)."""
    a = alpha if ids is None else average_local_duals(alpha, ids)
    coef = task.y_fit * (a[:, 0] - a[:, 1])
    sv = np.flatnonzero(coef)
    return sv, coef[sv]


def _evaluate(task: Task, kernel: Kernel, alpha: np.ndarray, ids: np.ndarray | None
              ) -> dict[str, Any]:
    sv, coef = _model_rows(task, alpha, ids)
    return _evaluate_model(task, kernel, task.X_fit[sv], coef)


def _evaluate_model(task: Task, kernel: Kernel, Xs: np.ndarray, coef: np.ndarray
                    ) -> dict[str, Any]:
    """Support vectors, model MB, prediction CPU per 1,000 test rows, val/test accuracy."""
    sv = np.arange(Xs.shape[0])
    out: dict[str, Any] = {"n_sv": int(sv.size), "model_mb": round(Xs.nbytes / 2**20 + sv.size
                                                                   * 8 / 2**20, 2)}
    for split, X, y in (("val", task.X_val, task.y_val), ("test", task.X_test, task.y_test)):
        t = time.process_time()
        f = kernel_decision(Xs, kernel, coef, Z=X) if sv.size else np.zeros(len(y))
        if split == "test":
            out["predict_cpu_s_per_1000"] = round((time.process_time() - t)
                                                  * PREDICT_ROWS / len(y), 4)
        out[f"{split}_accuracy"] = round(float(np.mean(np.where(f > 0, 1.0, -1.0) == y)), 5)
    return out


def budget_rows(task: Task, kernel: Kernel, alpha: np.ndarray, ids: np.ndarray | None,
                budgets: list[int], *, seed: int = 0) -> list[dict[str, Any]]:
    """The model projected onto ``budget`` support vectors (the estimators'
    ``max_support_vectors``, :func:`solver.exact.reduction.project_support`), for every budget."""
    sv, coef = _model_rows(task, alpha, ids)
    Xs = task.X_fit[sv]
    rows = [{"task": task.name, "budget": None, "reduce_cpu_s": 0.0,
             **_evaluate_model(task, kernel, Xs, coef)}]
    for b in budgets:
        if b >= sv.size:
            continue
        t = time.process_time()
        keep, c = project_support(Xs, coef[None, :], kernel, b, seed)
        cpu = time.process_time() - t
        rows.append({"task": task.name, "budget": b, "reduce_cpu_s": round(cpu, 2),
                     **_evaluate_model(task, kernel, Xs[keep], c[0])})
    return rows


def level_curve(task: Task, config: str, *, seed: int = 0, deadline: float | None = None,
                budgets: list[int] | None = None, budget_out: list | None = None
                ) -> list[dict[str, Any]]:
    """Fit ``CONFIGS[config]`` once (``n_jobs=1``) and evaluate the model of every level;
    past ``deadline`` (``time.monotonic()``) the fit stops and its last row says so.  With
    ``budgets``, the last level's model under each support-vector budget goes to
    ``budget_out`` (:func:`budget_rows`)."""
    kw = dict(CONFIGS[config])
    stop_rows = kw.pop("stop_rows", None)
    kernel = Kernel("rbf", gamma=task.gamma)
    marks: list[float] = []
    big_enough: list[bool] = []

    def progress(_fraction: float, _message: str, rec: dict) -> None:
        marks.append(time.process_time() - t0)
        big_enough.append(stop_rows is not None and rec["partition_size"] >= stop_rows)

    t0 = time.process_time()
    w0 = time.perf_counter()
    res = sodm_kernel(task.X_fit, task.y_fit, kernel, task.params, n_jobs=1, tol=TOL,
                      random_state=seed, keep_levels=True, progress=progress,
                      should_stop=lambda: bool(big_enough and big_enough[-1])
                      or deadline is not None and time.monotonic() > deadline, **kw)
    wall = time.perf_counter() - w0
    top = int(res.history[0]["level"]) if res.history else 0
    rows = []
    for rec, cpu in zip(res.history, marks, strict=True):
        lvl = int(rec["level"])
        ids = level_ids(res.partitions, res.p, top, lvl) if lvl > 0 else None
        row = {"task": task.name, "config": config, "rows": int(len(task.y_fit)),
               "p": res.p, "level": lvl, "partitions": rec["partitions"],
               "partition_rows": rec["partition_size"], "epochs": rec["n_iter"],
               "level_wall_s": round(rec["seconds"], 2), "fit_cpu_s": round(cpu, 2),
               "kkt": rec["kkt_violation"], "converged_early": rec["converged_early"]}
        row.update(_evaluate(task, kernel, res.level_alpha[lvl], ids))
        rows.append(row)
    if rows:
        rows[-1]["fit_wall_s"] = round(wall, 2)
        if res.stopped and not (big_enough and big_enough[-1]):
            rows[-1]["status"] = "stopped at the time cap"
        if budgets and budget_out is not None:
            lvl = rows[-1]["level"]
            ids = level_ids(res.partitions, res.p, top, lvl) if lvl > 0 else None
            budget_out.extend(budget_rows(task, kernel, res.level_alpha[lvl], ids, budgets,
                                          seed=seed))
    return rows


def level_curves(name: str, data: Path, params: dict, *, quick: bool, timeout: float,
                 mem_gib: float) -> list[dict[str, Any]]:
    """The per-level rows ``bench.run`` publishes for one dataset: ``PUBLISHED`` structures
    fitted on the training split of ``data`` (an ``.npz`` with ``X_train, y_train, X_test,
    y_test``) less its validation rows, with the tuned ``odm-rbf`` setting ``params``
    (``lam, gamma_mult, theta, upsilon``; gamma = gamma_mult / d) or, when empty, this
    module's shared setting.  One BLAS thread (the one-core protocol); ``timeout`` wall
    seconds for all of them; a structure whose kernel budget exceeds ``mem_gib`` is listed
    as skipped.  ``quick`` fits the first structure only."""
    from threadpoolctl import threadpool_limits

    z = np.load(data)
    task = split_task(name, z["X_train"], z["y_train"], z["X_test"], z["y_test"])
    if params:
        task.params = ODMParams(lam=float(params["lam"]), theta=float(params["theta"]),
                                upsilon=float(params.get("upsilon", 0.5)))
        task.gamma = float(params["gamma_mult"]) / task.X_fit.shape[1]
    deadline = time.monotonic() + float(timeout)
    rows: list[dict[str, Any]] = []
    for config in PUBLISHED[:1] if quick else PUBLISHED:
        budget_gib = (1.25 * CONFIGS[config].get("cache_size", 512.0) / 1024
                      + 3 * task.X_fit.nbytes / 2**30 + 0.5)
        if budget_gib > mem_gib:
            rows.append({"task": name, "config": config,
                         "status": f"skipped: needs about {budget_gib:.1f} GiB"})
        elif time.monotonic() > deadline:
            rows.append({"task": name, "config": config, "status": "skipped: time cap"})
        else:
            with threadpool_limits(limits=1, user_api="blas"):
                rows.extend(level_curve(task, config, deadline=deadline))
    return rows


def _global_objective(task: Task, kernel: Kernel, alpha: np.ndarray) -> float:
    nu = task.y_fit * (alpha[:, 0] - alpha[:, 1])
    u = task.y_fit * kernel_decision(task.X_fit, kernel, nu)
    return dual_objective(u, alpha, task.params, float(len(task.y_fit)))


def _exact(task: Task, kernel: Kernel, seed: int) -> tuple[np.ndarray, float, float]:
    """The exact solution (solver tolerance 1e-6), its objective and CPU seconds."""
    t = time.process_time()
    res = sodm_kernel(task.X_fit, task.y_fit, kernel, task.params, levels=0, n_jobs=1, tol=1e-6,
                      random_state=seed, cache_size=_exact_cache_mb(len(task.y_fit)),
                      max_iter=5000)
    return res.alpha, _global_objective(task, kernel, res.alpha), time.process_time() - t


def _exact_cache_mb(m: int) -> float:
    return 4.0 * m * m / 2**20 + 64.0  # the whole float32 kernel


def theorem1(task: Task, *, p: int = 2, levels: int = 3, seed: int = 0
             ) -> list[dict[str, Any]]:
    """Gap of every level's model (rescaled to the global problem) to the exact optimum,
    and of a last level solved on level 1's support rows only (:func:`_support_level`)."""
    kernel = Kernel("rbf", gamma=task.gamma)
    alpha_star, d_star, exact_cpu = _exact(task, kernel, seed)
    rows = [{"task": task.name, "rows": int(len(task.y_fit)), "p": p, "level": 0,
             "partitions": 1, "objective": d_star, "rel_gap": 0.0, "cpu_s": round(exact_cpu, 2),
             **_evaluate(task, kernel, alpha_star, None)}]
    t0 = time.process_time()
    res = sodm_kernel(task.X_fit, task.y_fit, kernel, task.params, p=p, levels=levels, n_jobs=1,
                      tol=TOL, random_state=seed, keep_levels=True, convergence_test=False,
                      cache_size=_exact_cache_mb(len(task.y_fit)))
    cpu = time.process_time() - t0
    for rec in res.history:
        lvl = int(rec["level"])
        ids = level_ids(res.partitions, p, levels, lvl)
        a = average_local_duals(res.level_alpha[lvl], ids)
        d = _global_objective(task, kernel, a)
        rows.append({"task": task.name, "rows": int(len(task.y_fit)), "p": p, "level": lvl,
                     "partitions": rec["partitions"], "objective": d,
                     "rel_gap": (d - d_star) / abs(d_star), "cpu_s": round(cpu, 2),
                     **_evaluate(task, kernel, res.level_alpha[lvl], ids)})
    ids = level_ids(res.partitions, p, levels, 1)
    alpha, sv_rows, kkt, level_cpu = _support_level(task, kernel, res.level_alpha[1], ids,
                                                    seed)
    d = _global_objective(task, kernel, alpha)
    rows.append({"task": task.name, "rows": int(len(task.y_fit)), "p": p,
                 "level": "0 on support rows", "partitions": 1, "solved_rows": sv_rows,
                 "objective": d, "rel_gap": (d - d_star) / abs(d_star),
                 "kkt_all_rows": kkt, "cpu_s": round(cpu + level_cpu, 2),
                 **_evaluate(task, kernel, alpha, None)})
    return rows


def _support_level(task: Task, kernel: Kernel, alpha1: np.ndarray, ids: np.ndarray,
                   seed: int) -> tuple[np.ndarray, int, float, float]:
    """Merging beyond level 1 the cascade way: one global problem (``m_scale = M``) on the
    rows level 1 left with nonzero duals, warm-started from level 1 on the global scale; rows
    in the band keep zero duals.  Returns the duals, the rows solved, the KKT violation
    over *all* rows (what dropping the others cost) and the CPU seconds."""
    t = time.process_time()
    M = len(task.y_fit)
    a = average_local_duals(alpha1, ids)
    sv = np.flatnonzero(a.sum(axis=1) > 0)
    out = solve_partition(task.X_fit[sv], task.y_fit[sv], kernel, task.params, a[sv],
                          m_scale=float(M), tol=TOL, max_iter=1000,
                          cache_size=_exact_cache_mb(sv.size), seed=local_seed(seed, 0, 0),
                          check_warm_start=False)
    alpha = np.zeros((M, 2))
    alpha[sv] = out.alpha
    cpu = time.process_time() - t
    kkt = kernel_kkt_violation(task.X_fit, task.y_fit, kernel, task.params, alpha)
    return alpha, int(sv.size), float(kkt), cpu


def _local_solves(task: Task, kernel: Kernel, ids: np.ndarray, n_parts: int, seed: int
                  ) -> tuple[np.ndarray, list[float]]:
    alpha = np.zeros((len(task.y_fit), 2))
    objectives = []
    for k, g in enumerate(partition_members(ids, n_parts)):
        out = solve_partition(task.X_fit[g], task.y_fit[g], kernel, task.params,
                              np.zeros((g.size, 2)), m_scale=float(g.size), tol=TOL,
                              max_iter=1000, cache_size=_exact_cache_mb(g.size),
                              seed=local_seed(seed, 1, k), check_warm_start=False)
        alpha[g] = out.alpha
        objectives.append(out.objective)
    return alpha, objectives


def theorem2(task: Task, *, p: int = 8, seed: int = 0, d_star: float | None = None
             ) -> list[dict[str, Any]]:
    """Stratified against random balanced partitions at the same ``p`` (one level): local
    optima ``d_k`` (and ``d_k - d*`` when ``d_star`` is given), their spread, and the merged
    model's accuracy."""
    kernel = Kernel("rbf", gamma=task.gamma)
    M = len(task.y_fit)
    _, strata = stratify(task.X_fit, kernel, 50, seed, max_candidates=20_000)
    schemes = {"stratified": stratified_partitions(strata, p, seed),
               "random": deal_partitions(np.zeros(M, dtype=np.int64), row_keys(seed, M), p)}
    rows = []
    for name, ids in schemes.items():
        alpha, d = _local_solves(task, kernel, ids, p, seed)
        d_arr = np.asarray(d)
        row = {"task": task.name, "rows": M, "p": p, "partitions": name,
               "d_k_mean": float(d_arr.mean()), "d_k_min": float(d_arr.min()),
               "d_k_max": float(d_arr.max()),
               "d_k_spread": float((d_arr.max() - d_arr.min()) / abs(d_arr.mean())),
               "d_k_std_rel": float(d_arr.std() / abs(d_arr.mean()))}
        if d_star is not None:
            row["max_d_k_minus_d_star_rel"] = float((d_arr.max() - d_star) / abs(d_star))
        row.update(_evaluate(task, kernel, alpha, ids))
        rows.append(row)
    return rows


def run(tasks: list[str], configs: list[str], *, theorem_rows: int = 16_000,
        theorem_p: int = 8, seed: int = 0, budgets: list[int] | None = None,
        out: Path | None = None, command: str = "") -> dict[str, Any]:
    """Everything for ``tasks``: level curves of ``configs`` on the whole fit split (the
    first config's model also under the support-vector ``budgets``), and both theorems on a
    ``theorem_rows`` subsample (``theorem_rows=0`` skips them).  With ``out`` the JSON file
    is rewritten after every piece."""
    results: dict[str, Any] = {"settings": {
        "gamma": f"{GAMMA_MULT:g} / (d Var X)", "lam": PARAMS.lam, "theta": PARAMS.theta,
        "upsilon": PARAMS.upsilon, "tol": TOL, "val_fraction": VAL_FRACTION,
        "val_max_rows": VAL_MAX_ROWS, "seed": seed, "load_avg_start": list(os.getloadavg()),
        "command": command, "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())},
        "curves": [], "budget": [], "theorem1": [], "theorem2": []}

    def save() -> None:
        if out is not None:
            out.write_text(json.dumps(results, indent=1) + "\n")

    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):  # CPU seconds of one core
        for name in tasks:
            if theorem_rows:
                sub = load_task(name, max_fit=theorem_rows, seed=seed)
                t1 = theorem1(sub, seed=seed)
                results["theorem1"].extend(t1)
                save()
                results["theorem2"].extend(theorem2(sub, p=theorem_p, seed=seed,
                                                    d_star=t1[0]["objective"]))
                save()
            task = load_task(name, seed=seed)
            for i, config in enumerate(configs):
                results["curves"].extend(level_curve(
                    task, config, seed=seed, budgets=budgets if i == 0 else None,
                    budget_out=results["budget"]))
                save()
    results["settings"]["load_avg_end"] = list(os.getloadavg())
    results["settings"]["finished_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    save()
    return results


def _table(rows: list[dict], cols: list[tuple[str, str]]) -> list[str]:
    lines = ["| " + " | ".join(h for h, _ in cols) + " |",
             "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for _, key in cols:
            v = r.get(key, "")
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report_lines(results: dict[str, Any]) -> list[str]:
    """Markdown: per-level curves, then Theorem 1 and Theorem 2 tables."""
    lines = ["### SODM per level (accuracy and CPU seconds when stopping at each level)", ""]
    lines += _table(results.get("curves", []), [
        ("task", "task"), ("structure", "config"), ("p", "p"), ("level", "level"),
        ("partition rows", "partition_rows"), ("epochs", "epochs"),
        ("fit CPU s", "fit_cpu_s"), ("val acc", "val_accuracy"),
        ("test acc", "test_accuracy"), ("SVs", "n_sv"),
        ("predict CPU s / 1k", "predict_cpu_s_per_1000")])
    lines += ["", "### Support-vector budget (`max_support_vectors`) on the first structure's "
              "model", ""]
    lines += _table(results.get("budget", []), [
        ("task", "task"), ("budget", "budget"), ("SVs", "n_sv"), ("model MB", "model_mb"),
        ("projection CPU s", "reduce_cpu_s"), ("predict CPU s / 1k", "predict_cpu_s_per_1000"),
        ("val acc", "val_accuracy"), ("test acc", "test_accuracy")])
    lines += ["", "### Theorem 1: relative gap to the exact dual optimum, level by level", ""]
    lines += _table(results.get("theorem1", []), [
        ("task", "task"), ("rows", "rows"), ("p", "p"), ("level", "level"),
        ("partitions", "partitions"), ("rows solved", "solved_rows"),
        ("relative gap", "rel_gap"), ("KKT, all rows", "kkt_all_rows"),
        ("val acc", "val_accuracy"), ("test acc", "test_accuracy"), ("fit CPU s", "cpu_s")])
    lines += ["", "### Theorem 2: stratified against random partitions at the same p", ""]
    lines += _table(results.get("theorem2", []), [
        ("task", "task"), ("rows", "rows"), ("p", "p"), ("partitions", "partitions"),
        ("spread of d_k", "d_k_spread"), ("std of d_k (rel.)", "d_k_std_rel"),
        ("max (d_k - d*) / abs(d*)", "max_d_k_minus_d_star_rel"),
        ("val acc", "val_accuracy"), ("test acc", "test_accuracy")])
    return lines


def plot_curves(results: dict[str, Any], path: Path) -> None:
    """Validation accuracy against cumulative fit CPU seconds, one panel per task: the p2
    structure's levels as a line (finest level first), the one-level structures as points,
    as the paper's per-level figures show accuracy and time per level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - NullFormatter below

    curves = [r for r in results.get("curves", []) if "val_accuracy" in r]
    tasks = list(dict.fromkeys(r["task"] for r in curves))
    if not tasks:
        return
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        rows = [r for r in curves if r["task"] == task]
        for config in dict.fromkeys(r["config"] for r in rows):
            pts = sorted((r for r in rows if r["config"] == config),
                         key=lambda r: r["fit_cpu_s"])
            x = [r["fit_cpu_s"] for r in pts]
            y = [r["val_accuracy"] for r in pts]
            ax.plot(x, y, marker="o", linestyle="-" if len(pts) > 1 else "none", label=config)
            for r in pts:
                ax.annotate(f"{r['partition_rows']:,}", (r["fit_cpu_s"], r["val_accuracy"]),
                            fontsize=7, textcoords="offset points", xytext=(3, -9))
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(f"{task}: validation accuracy per level")
        ax.set_xlabel("fit CPU seconds at the end of the level (log)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation accuracy (labels: partition rows)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def headline_lines(results: dict[str, Any]) -> list[str]:
    """The result a reader needs first, per task, from the curves: the one-level default's
    validation accuracy and CPU, the first p2 level that reaches it, and twice the partition
    size (the numbers are the tables' own; the doc leads with them)."""
    curves = results.get("curves", [])
    lines = []
    for task in dict.fromkeys(r["task"] for r in curves):
        rows = [r for r in curves if r["task"] == task]
        default = next((r for r in rows if r["config"] == "default"), None)
        if default is None:
            continue
        parts = [f"the default (one level, {default['partitions']} partitions of "
                 f"{default['partition_rows']:,} rows) reaches validation "
                 f"{default['val_accuracy']:.4g} in {default['fit_cpu_s']:.4g} CPU s"]
        p2 = [r for r in rows if r["config"] == "p2"]
        shown = float(f"{default['val_accuracy']:.4g}")  # compared as the tables show them
        reach = next((r for r in p2 if float(f"{r['val_accuracy']:.4g}") >= shown), None)
        if reach is not None:
            parts.append(f"the p2 hierarchy first reaches it at level {reach['level']} "
                         f"({reach['partition_rows']:,}-row partitions) in "
                         f"{reach['fit_cpu_s']:.4g} CPU s")
        elif p2:
            parts.append("the p2 hierarchy does not reach it")
        double = next((r for r in rows if r["config"] == "cache2048"), None)
        if double is not None:
            parts.append(f"twice the partition size gives {double['val_accuracy']:.4g} in "
                         f"{double['fit_cpu_s']:.4g} CPU s")
        lines.append(f"- **{task}**: " + "; ".join(parts) + ".")
    return lines


def doc_text(results: dict[str, Any], plot_rel: str | None = None) -> str:
    """The whole markdown document: the result per task and the one command that measured
    it first, then the setting, the figure and the tables."""
    s = results["settings"]
    command = s["command"].removeprefix("python ")
    head = ["# SODM hierarchy: per-level curves and the paper's theorems", "",
            "Per task, with the untuned setting below (validation accuracy, fit CPU seconds "
            "cumulative over the levels):", ""]
    head += headline_lines(results)
    head += ["", "Measured by one command (see `bench/hierarchy.py` for the protocol, "
             "`docs/design-notes.md` for what it decided):", "",
             f"    PYTHONPATH=. .venv/bin/python {command}", "",
             f"Setting: RBF gamma = {s['gamma']}, lam = {s['lam']:g}, theta = "
             f"{s['theta']:g}, upsilon = {s['upsilon']:g}, tol = {s['tol']:g}; validation "
             f"rows: {s['val_fraction']:.0%} of each training split (at most "
             f"{s['val_max_rows']:,}); one BLAS thread, n_jobs=1. Load average at the start "
             f"{s['load_avg_start'][0]:.1f}, at the end {s['load_avg_end'][0]:.1f} (a 2-core "
             "machine: CPU seconds are steadier than wall seconds). Run "
             f"{s['started_utc']} to {s['finished_utc']} UTC.", ""]
    if plot_rel is not None:
        head += [f"![validation accuracy against CPU seconds, per level]({plot_rel})", ""]
    return "\n".join(head + report_lines(results)) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    ap.add_argument("--configs", nargs="*", default=["default"], choices=list(CONFIGS))
    ap.add_argument("--theorem-rows", type=int, default=16_000)
    ap.add_argument("--theorem-p", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budgets", type=int, nargs="*", default=[2000, 5000, 10000],
                    help="support-vector budgets applied to the first config's model")
    ap.add_argument("--out", type=Path, default=None, help="JSON results")
    ap.add_argument("--doc", type=Path, default=None, help="markdown report")
    ap.add_argument("--plot", type=Path, default=None, help="per-level figure (PNG)")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="render --doc (and --plot) from this results file, measuring nothing")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    if a.from_json is not None:
        res = json.loads(a.from_json.read_text())
    else:
        res = run(a.tasks, a.configs, theorem_rows=a.theorem_rows, theorem_p=a.theorem_p,
                  seed=a.seed, budgets=a.budgets, out=a.out,
                  command="python -m bench.hierarchy " + " ".join(sys.argv[1:]))
    if a.doc is not None:
        rel = None
        if a.plot is not None:
            plot_curves(res, a.plot)
            rel = os.path.relpath(a.plot, a.doc.parent)
        a.doc.write_text(doc_text(res, rel))
    print("\n".join(report_lines(res)))


if __name__ == "__main__":
    main()
