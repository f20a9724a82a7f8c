"""DiP-ODM: DiP-SVM (Singh, Roy, Mohan 2017) with the ODM dual.

Distribution-preserving partitions from k-means in the *input* space: each k-means cluster is
dealt evenly over the ``2**levels`` partitions (the same dealing rule as SODM's strata, keys
``splitmix64(seed, i)``); the local solutions are then combined Cascade-style (support vectors
move up a binary tree, warm-started, down to one problem), as the authors' ``DPPSolver`` does.
It is SODM's stratification with Euclidean clusters instead of RKHS landmarks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from sklearn.cluster import KMeans

from solver.baselines.cascade import cascade_solve
from solver.core.formulation import ODMParams, check_weights
from solver.core.inputs import check_Xy
from solver.core.kernels import Kernel
from solver.sodm.hierarchy import SODMResult
from solver.sodm.partition import deal_partitions, row_keys

__all__ = ["dip_odm"]


def dip_odm(X, y, kernel: Kernel, params: ODMParams, *, levels: int = 3,
            n_clusters: int = 20, warm_start: str = "rescale", n_jobs: int | None = 1,
            tol: float = 1e-3, max_iter: int = 1000, cache_size: float = 512.0,
            random_state=None, X_val=None, y_val=None, progress: Callable | None = None,
            should_stop: Callable[[], bool] | None = None,
            sample_weight: np.ndarray | None = None) -> SODMResult:
    """DiP-ODM over ``2**levels`` k-means-stratified partitions; ``y`` in {-1, +1}."""
    params.validate()
    X, y = check_Xy(X, y)
    sample_weight = check_weights(sample_weight, X.shape[0])
    seed = 0 if random_state is None else int(random_state)
    M = X.shape[0]
    k = max(1, min(int(n_clusters), M))
    clusters = KMeans(n_clusters=k, n_init=1, random_state=seed).fit_predict(X)
    finest = deal_partitions(clusters, row_keys(seed, M), 2 ** int(levels))
    res = cascade_solve(X, y, kernel, params, finest, int(levels), warm_start=warm_start,
                        n_jobs=n_jobs, tol=tol, max_iter=max_iter, cache_size=cache_size,
                        seed=seed, X_val=X_val, y_val=y_val, progress=progress,
                        should_stop=should_stop, sample_weight=sample_weight)
    res.strata = clusters
    return res
