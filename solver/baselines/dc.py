"""DC-ODM: DC-SVM (Hsieh, Si, Dhillon, ICML 2014) with the ODM dual.

Level ``l = levels .. 1``: ``fanout**l`` clusters by two-step kernel k-means (kernel k-means on
a sample of at most ``sample_size`` rows, keys ``splitmix64(seed, i)`` below a threshold, then
every row goes to the nearest cluster mean in the RKHS); each cluster is solved as its own ODM
(``m_scale`` = cluster size) warm-started from the previous level's per-instance ``alpha``
(rescaled by old/new problem size with ``warm_start="rescale"``).  Clusters are *not*
distribution-preserving (unlike SODM's strata), and they are computed anew at every level, so
``fanout`` (DC-SVM's name) is not a merge factor like SODM's ``p``.  Finally one global
solve warm-started from level 1 returns the exact ODM optimum, as DC-SVM does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from solver.core.formulation import ODMParams, check_weights
from solver.core.inputs import check_Xy
from solver.core.kernels import Kernel, kernel_matrix
from solver.sodm.hierarchy import SODMResult, solve_groups, validation_accuracy
from solver.sodm.landmarks import assign_strata, landmark_candidates, select_landmarks
from solver.sodm.levels import level_record
from solver.sodm.parallel import TaskPool
from solver.sodm.partition import partition_members

__all__ = ["dc_odm", "kernel_kmeans"]

_BLOCK_ELEMS = 1 << 22


def _rows(X, idx):
    return X[idx] if sp.issparse(X) else np.asarray(X)[idx]


def kernel_kmeans(X, kernel: Kernel, n_clusters: int, seed: int, *, sample_size: int = 2000,
                  n_iter: int = 20) -> np.ndarray:
    """Cluster id per row: kernel k-means on a key sample (initialised at greedy landmarks),
    then nearest cluster mean in the RKHS for every row."""
    M = X.shape[0]
    cand = landmark_candidates(M, seed, sample_size)
    Xs = _rows(X, cand)
    k = max(1, min(int(n_clusters), cand.size))
    lm = select_landmarks(Xs, kernel, k, seed)
    lab = assign_strata(Xs, _rows(Xs, lm), kernel)
    Ks = kernel_matrix(kernel, Xs)
    for _ in range(int(n_iter)):
        new = _nearest_mean(Ks, Ks, lab, k)
        if np.array_equal(new, lab):
            break
        lab = new
    out = np.empty(M, dtype=np.int64)
    step = max(1, _BLOCK_ELEMS // max(cand.size, 1))
    for s in range(0, M, step):
        e = min(M, s + step)
        out[s:e] = _nearest_mean(kernel_matrix(kernel, X[s:e], Xs), Ks, lab, k)
    return out


def _nearest_mean(Kxs: np.ndarray, Ks: np.ndarray, lab: np.ndarray, k: int) -> np.ndarray:
    """argmin_c ||phi(x) - mean_c||^2 = argmin_c -2/|c| sum_j K(x,s_j) + 1/|c|^2 sum K_c."""
    n = np.bincount(lab, minlength=k).astype(np.float64)
    ind = np.zeros((lab.size, k))
    ind[np.arange(lab.size), lab] = 1.0
    safe = np.where(n > 0, n, 1.0)
    within = np.einsum("ic,ic->c", ind, Ks @ ind) / safe ** 2
    D = -2.0 * (Kxs @ ind) / safe + within
    D[:, n == 0] = np.inf
    return np.argmin(D, axis=1)


def dc_odm(X, y, kernel: Kernel, params: ODMParams, *, levels: int = 2, fanout: int = 4,
           sample_size: int = 2000, warm_start: str = "rescale", n_jobs: int | None = 1,
           tol: float = 1e-3, max_iter: int = 1000, cache_size: float = 512.0,
           random_state=None, X_val=None, y_val=None, progress: Callable | None = None,
           should_stop: Callable[[], bool] | None = None,
           sample_weight: np.ndarray | None = None) -> SODMResult:
    """DC-ODM (see the module docstring); ``y`` in {-1, +1}; with ``sample_weight`` a
    cluster's size is its rows' weight sum."""
    params.validate()
    X, y = check_Xy(X, y)
    sample_weight = check_weights(sample_weight, X.shape[0])
    seed = 0 if random_state is None else int(random_state)
    M = X.shape[0]
    alpha = np.zeros((M, 2))
    res = SODMResult(alpha=alpha)
    prev: np.ndarray | None = None
    schedule = list(range(int(levels), -1, -1))
    t_start = time.perf_counter()
    with TaskPool(n_jobs, should_stop) as pool:
        for step, lvl in enumerate(schedule):
            if should_stop is not None and should_stop():
                res.stopped = True
                break
            t0 = time.perf_counter()
            if lvl > 0:
                ids = kernel_kmeans(X, kernel, int(fanout) ** lvl, seed + lvl,
                                    sample_size=sample_size)
            else:
                ids = np.zeros(M, dtype=np.int64)
            n_groups = int(ids.max()) + 1
            groups = partition_members(ids, n_groups)
            sizes = np.bincount(ids, weights=sample_weight,
                                minlength=n_groups)[ids].astype(np.float64)
            if prev is not None and warm_start == "rescale":
                alpha *= (prev / sizes)[:, None]
            outs = solve_groups(pool, X, y, kernel, params, alpha, groups, level=lvl,
                                  seed=seed, tol=tol, max_iter=max_iter,
                                  cache_size=cache_size, shrinking=True,
                                  check_warm_start=False, sample_weight=sample_weight)
            prev = sizes
            rec = level_record(lvl, [o.summary() for o in outs], time.perf_counter() - t0,
                          time.perf_counter() - t_start)
            if X_val is not None and y_val is not None:
                rec["val_accuracy"] = validation_accuracy(X, y, kernel, alpha, X_val,
                                                    np.asarray(y_val, dtype=np.float64))
            res.history.append(rec)
            res.last_level = lvl
            if lvl == int(levels):
                res.partitions = ids
            if progress is not None:
                progress((step + 1) / len(schedule), f"DC level {lvl}", rec)
            if any(o.stopped for o in outs) or pool.stop_requested:
                res.stopped = True
                break
    return res
