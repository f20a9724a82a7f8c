"""How accurate SODM's level-1 model is when it keeps only its first k partitions.

    PYTHONPATH=. .venv/bin/python -m bench.ensemble_curve --dataset ijcnn1.t --lam 1e6 \\
        --gamma-mult 10 --theta 0.2

Without a final global solve SODM's model is the concatenation of its level-1 partitions'
local ODMs: its decision is the (size-weighted) sum of ``p`` local decisions
(``solver.estimators.average_local_duals``). This fits that model once, as
``SODMClassifier`` does with ``scale=False`` (``solver.sodm.hierarchy.sodm_kernel``), on the
training split less a validation fifth (``bench.sodm_fit``'s split: one BLAS thread, one
process, the default structure or ``--p``), and then scores the sum of the first ``k`` local
decisions, ``k = 1 .. p`` in partition order, on:

* the validation fifth (never trained on), and its agreement with the whole model there;
* for ``k < p``, the rows of the last partition, which the first ``p - 1`` local models
  never saw (what a rule inside the fit could read with no rows set aside): accuracy, the
  gain over ``k - 1`` models on the same rows, and the share of them the ``k``-th flipped.

A final fit that stopped adding partitions where this curve flattens would cost about
``k / p`` of the fit's CPU seconds (printed beside it; each local solve costs about the
same) and keep about ``k / p`` of its support vectors; ``solver.sodm.partition_stop`` is
that rule (the search's ``partition_gain``, off by default), with the gain's threshold.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np

from bench.data import load_split


def level_one_fit(X: np.ndarray, y: np.ndarray, gamma: float, lam: float, theta: float, *,
                  cache_size: float = 512.0, p: int | None = None) -> tuple[Any, Any]:
    """SODM's fit of ``SODMClassifier`` (RBF, a constant feature appended as
    ``fit_intercept`` does, its default ``upsilon``, ``tol`` and seed 0, one process) made
    with ``solver.sodm.hierarchy.sodm_kernel``: its result and the kernel."""
    from solver.core.formulation import ODMParams
    from solver.core.kernels import Kernel
    from solver.core.preprocessing import append_constant
    from solver.sodm.hierarchy import sodm_kernel

    kernel = Kernel("rbf", gamma=gamma)
    params = ODMParams(lam=lam, upsilon=0.5, theta=theta)
    res = sodm_kernel(append_constant(X), y, kernel, params, p=p,
                      levels=None if p is None else 1, cache_size=cache_size, random_state=0,
                      n_jobs=1)
    return res, kernel


def level_one_ids(res: Any) -> np.ndarray | None:
    """Every row's level-1 partition (None when the fit solved all rows at once)."""
    from solver.sodm.partition import level_ids

    if res.partitions is None or not res.history or int(res.history[0]["level"]) < 1:
        return None
    return level_ids(res.partitions, res.p, int(res.history[0]["level"]), 1)


def local_decisions(res: Any, kernel: Any, ids: np.ndarray, X: np.ndarray, y: np.ndarray,
                    rows: np.ndarray) -> np.ndarray:
    """``(p, len(rows))``: each level-1 partition's local decision on ``rows`` (raw
    features; their sum has the sign of the fitted model's decision)."""
    from solver.core.kernels import kernel_decision
    from solver.core.preprocessing import append_constant

    Z, Zr = append_constant(X), append_constant(rows)
    nu = y * (res.alpha[:, 0] - res.alpha[:, 1])
    return np.stack([kernel_decision(Z[ids == k], kernel, nu[ids == k], Z=Zr)
                     for k in range(int(ids.max()) + 1)])


def curve(res: Any, kernel: Any, ids: np.ndarray, X: np.ndarray, y: np.ndarray,
          Xv: np.ndarray, yv: np.ndarray) -> list[dict[str, Any]]:
    """One row per ``k``: validation accuracy of the sum of the first ``k`` local models,
    agreement with the whole model on the validation rows, the support vectors it keeps,
    and, for ``k < p``, on the last partition's training rows (which the first ``p - 1``
    local models never saw: what a rule inside the fit could read without setting rows
    aside) its accuracy, its gain over the first ``k - 1`` models' sum on the same rows
    (paired) and the share of those rows whose label the ``k``-th model flipped. Labels in
    {-1, +1}."""
    p = int(ids.max()) + 1
    val = np.cumsum(local_decisions(res, kernel, ids, X, y, Xv), axis=0) > 0
    last = np.flatnonzero(ids == p - 1)
    held = np.cumsum(local_decisions(res, kernel, ids, X, y, X[last])[: p - 1], axis=0) > 0
    right_v = np.where(val, 1.0, -1.0) == yv
    right_h = np.where(held, 1.0, -1.0) == y[last]
    sv = res.alpha.sum(axis=1) > 0
    rows: list[dict[str, Any]] = []
    for k in range(1, p + 1):
        r: dict[str, Any] = {"k": k, "validation": float(np.mean(right_v[k - 1])),
                             "agrees_with_whole": float(np.mean(val[k - 1] == val[-1])),
                             "support_vectors": int(np.count_nonzero(sv & (ids < k))),
                             "held_out": None, "held_out_gain": None, "held_out_flips": None}
        if k < p:
            r["held_out"] = float(np.mean(right_h[k - 1]))
            if k > 1:
                r["held_out_gain"] = r["held_out"] - float(np.mean(right_h[k - 2]))
                r["held_out_flips"] = float(np.mean(held[k - 1] != held[k - 2]))
        rows.append(r)
    return rows


# the stop rules the curve is read against: the first k >= 2 (and < p) whose k-th model
# gains less than GAIN_POINTS on the held-out rows (the auto search's plateau_points), or
# flips fewer than FLIP_SHARE of their labels
GAIN_POINTS = 0.1
FLIP_SHARE = 0.003


def stop_at(rows: list[dict[str, Any]], key: str, below: float) -> int:
    """The ``k`` a rule stops at: the first ``k`` whose ``key`` (a held-out gain or flip
    share) is under ``below``, else ``p`` (all partitions)."""
    for r in rows:
        if r[key] is not None and r[key] < below:
            return int(r["k"])
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--lam", type=float, required=True)
    ap.add_argument("--gamma-mult", type=float, default=1.0,
                    help="gamma = gamma_mult / (d Var X), the 'auto' search's units")
    ap.add_argument("--theta", type=float, default=0.2)
    ap.add_argument("--cache-size", type=float, default=512.0)
    ap.add_argument("--p", type=int, default=None, help="level-1 partitions (one level)")
    a = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    s = load_split(a.dataset)
    X, y = np.asarray(s.X_train, dtype=float), np.asarray(s.y_train, dtype=np.float64)
    perm = np.random.default_rng(0).permutation(len(y))
    nv = len(y) // 5
    Xv, yv, X, y = X[perm[:nv]], y[perm[:nv]], X[perm[nv:]], y[perm[nv:]]
    gamma = a.gamma_mult / (X.shape[1] * float(np.var(X)))
    import scipy.linalg  # noqa: F401  (load scipy's BLAS so the limit covers it)

    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        level_one_fit(X[:200], y[:200], gamma, 1.0, a.theta)  # compiled loops loaded
        t = time.process_time()
        res, kernel = level_one_fit(X, y, gamma, a.lam, a.theta, cache_size=a.cache_size,
                                    p=a.p)
        cpu = time.process_time() - t
        ids = level_one_ids(res)
        if ids is None:
            print(f"{a.dataset}: {len(y)} rows were solved whole (no partitions)")
            return 0
        rows = curve(res, kernel, ids, X, y, Xv, yv)
    p = len(rows)
    print(f"{a.dataset} rows={len(y)} lam={a.lam:g} gamma={a.gamma_mult:g}/scale "
          f"theta={a.theta:g}: {p} partitions, fit {cpu:.2f} CPU s, "
          f"{rows[-1]['support_vectors']} support vectors")
    print(f"(held out: the last partition's {int(np.count_nonzero(ids == p - 1)):,} "
          f"training rows, which the first {p - 1} local models never saw)")
    print("| k | validation | agrees with all p | held out | gain on them (points) | "
          "flipped on them | support vectors | ~ CPU s (k / p of the fit) |")
    print("|---|---|---|---|---|---|---|---|")

    def fmt(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    for r in rows:
        gain = None if r["held_out_gain"] is None else 100.0 * r["held_out_gain"]
        flips = "-" if r["held_out_flips"] is None else f"{100.0 * r['held_out_flips']:.2f} %"
        print(f"| {r['k']} | {r['validation']:.4f} | {r['agrees_with_whole']:.4f} | "
              f"{fmt(r['held_out'], '.4f')} | {fmt(gain, '+.2f')} | "
              f"{flips} | {r['support_vectors']:,} | {cpu * r['k'] / p:.1f} |")
    for label, key, below in ((f"gain under {GAIN_POINTS:g} points", "held_out_gain",
                               GAIN_POINTS / 100.0),
                              (f"flips under {100 * FLIP_SHARE:g} %", "held_out_flips",
                               FLIP_SHARE)):
        k = stop_at(rows, key, below)
        r = rows[k - 1]
        print(f"stop at the first held-out {label}: k = {k} of {p}, validation "
              f"{r['validation']:.4f} ({100 * (r['validation'] - rows[-1]['validation']):+.2f}"
              f" points against all {p}), {k / p:.2f} of the fit's CPU seconds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
