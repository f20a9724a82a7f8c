"""Ca-ODM: Cascade SVM (Graf et al., NeurIPS 2004) with the ODM dual, as in the SODM paper.

``2**levels`` random balanced partitions (keys ``splitmix64(seed, i)``, no strata) are solved;
only their support vectors (``zeta_i + beta_i > 0``, the instances whose margin leaves
``[1-theta, 1+theta]``) move up a binary tree; siblings are merged, warm-started from the
children's ``alpha`` and re-solved, down to one problem (no feedback pass).  A problem on the
support vectors of a set of ``n`` rows keeps ``m_scale = n`` (the dropped instances have zero
loss, so with every true support vector kept the root solves the exact ODM of all the data).
:func:`cascade_solve` is shared with DiP-ODM, which only changes the first partitions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from solver.core.formulation import ODMParams, check_weights, default_scale
from solver.core.inputs import check_Xy
from solver.core.kernels import Kernel
from solver.sodm.hierarchy import SODMResult, solve_groups, validation_accuracy
from solver.sodm.levels import level_record
from solver.sodm.parallel import TaskPool
from solver.sodm.partition import deal_partitions, level_ids, partition_members, row_keys

__all__ = ["ca_odm", "cascade_solve"]


def cascade_solve(X, y, kernel: Kernel, params: ODMParams, finest, levels: int, *,
                  warm_start: str = "rescale", n_jobs: int | None = 1, tol: float = 1e-3,
                  max_iter: int = 1000, cache_size: float = 512.0, seed: int = 0,
                  sv_tol: float = 0.0, X_val=None, y_val=None,
                  progress: Callable | None = None,
                  should_stop: Callable[[], bool] | None = None,
                  sample_weight: np.ndarray | None = None) -> SODMResult:
    """Binary-tree cascade from the finest partition ids (``0..2**levels-1``); with
    ``sample_weight`` a problem's ``m_scale`` is its rows' weight sum."""
    M = X.shape[0]
    alpha = np.zeros((M, 2))
    res = SODMResult(alpha=alpha, partitions=np.asarray(finest))
    alive = np.ones(M, dtype=bool)
    prev_scale: np.ndarray | None = None
    t_start = time.perf_counter()
    with TaskPool(n_jobs, should_stop) as pool:
        for step, lvl in enumerate(range(levels, -1, -1)):
            if should_stop is not None and should_stop():
                res.stopped = True
                break
            t0 = time.perf_counter()
            ids = level_ids(finest, 2, levels, lvl)
            full_groups = partition_members(ids, 2 ** lvl)
            scales = [float(default_scale(g.size, None if sample_weight is None
                                          else sample_weight[g])) for g in full_groups]
            groups = [g[alive[g]] for g in full_groups]
            row_scale = np.asarray(scales)[ids]
            if prev_scale is not None and warm_start == "rescale":
                alpha *= (prev_scale / row_scale)[:, None]
            outs = solve_groups(pool, X, y, kernel, params, alpha, groups, level=lvl,
                                  seed=seed, tol=tol, max_iter=max_iter,
                                  cache_size=cache_size, shrinking=True,
                                  check_warm_start=False, m_scales=scales,
                                  sample_weight=sample_weight)
            prev_scale = row_scale
            rec = level_record(lvl, [o.summary() for o in outs], time.perf_counter() - t0,
                          time.perf_counter() - t_start)
            rec["n_rows_solved"] = int(sum(g.size for g in groups))
            if X_val is not None and y_val is not None:
                rec["val_accuracy"] = validation_accuracy(X, y, kernel, alpha, X_val,
                                                    np.asarray(y_val, dtype=np.float64))
            res.history.append(rec)
            res.last_level = lvl
            if progress is not None:
                progress((step + 1) / (levels + 1), f"cascade level {lvl}", rec)
            if any(o.stopped for o in outs) or pool.stop_requested:
                res.stopped = True
                break
            sv = alpha.sum(axis=1) > sv_tol
            alpha[~sv] = 0.0
            alive &= sv
    return res


def ca_odm(X, y, kernel: Kernel, params: ODMParams, *, levels: int = 3,
           warm_start: str = "rescale", n_jobs: int | None = 1, tol: float = 1e-3,
           max_iter: int = 1000, cache_size: float = 512.0, random_state=None,
           X_val=None, y_val=None, progress: Callable | None = None,
           should_stop: Callable[[], bool] | None = None,
           sample_weight: np.ndarray | None = None) -> SODMResult:
    """Cascade ODM over ``2**levels`` random balanced partitions; ``y`` in {-1, +1}."""
    params.validate()
    X, y = check_Xy(X, y)
    sample_weight = check_weights(sample_weight, X.shape[0])
    seed = 0 if random_state is None else int(random_state)
    M = X.shape[0]
    finest = deal_partitions(np.zeros(M, dtype=np.int64), row_keys(seed, M), 2 ** int(levels))
    return cascade_solve(X, y, kernel, params, finest, int(levels), warm_start=warm_start,
                         n_jobs=n_jobs, tol=tol, max_iter=max_iter, cache_size=cache_size,
                         seed=seed, X_val=X_val, y_val=y_val, progress=progress,
                         should_stop=should_stop, sample_weight=sample_weight)
