"""Train an ``SODMClassifier`` on Spark from a stored dataset (the Spark backend's entry point).

Reproduces ``SODMClassifier.fit`` for two classes: the same min-max scaler (per-feature
min / max aggregated over the cluster), the same ``gamma='scale'``, the same constant column,
the same seed handed to Algorithm 1 (``kernel_sodm``) or Algorithm 2 (``linear_sodm``), the
same size-weighted averaging of the last level's local duals, and then
``solver.estimators.build_fitted`` with the support vectors (kernel) or ``w`` (linear).
Only small results reach the driver: per-feature statistics, per-group summaries, landmark
rows, gradients of size d and the final support vectors.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from solver.exceptions import FitCancelled
from solver.sodm import DEFAULT_LANDMARK_CANDIDATES
from solver.spark.data import (
    RowSubset,
    batch_X,
    load_frame,
    model_space,
    select_rows,
    sql,
    summarize,
)
from solver.training import fit_info, iterations, jsonable, resolve_gamma, seed_for

__all__ = ["fit_spark"]


def _set_runtime_confs(spark: Any) -> None:
    """Session confs the algorithms rely on (runtime confs: allowed under Connect)."""
    for key, value in (("spark.sql.adaptive.coalescePartitions.enabled", "false"),
                       ("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")):
        # a locked-down server may refuse; the results do not depend on these
        with contextlib.suppress(Exception):
            spark.conf.set(key, value)


ROWS_PER_PARTITION = 16_384


def _base_partitions(spark: Any, n_rows: int) -> int:
    """Partitions of the working copy: one per ``ROWS_PER_PARTITION`` rows, at most the
    session's ``spark.sql.shuffle.partitions``."""
    try:
        cap = int(spark.conf.get("spark.sql.shuffle.partitions"))
    except Exception:  # noqa: BLE001 - a locked-down server may refuse to answer
        cap = 8
    return max(1, min(cap, -(-int(n_rows) // ROWS_PER_PARTITION)))


def fit_spark(spark: Any, dataset_dir: Path, params: dict[str, Any], *, seed: int | None,
              rows: RowSubset | None = None,
              progress: Callable[[float, str, dict], None] | None = None,
              should_stop: Callable[[], bool] | None = None) -> Any:
    """Fit ``SODMClassifier(**params, random_state=seed)`` on ``dataset_dir`` with Spark:
    on every row, or on ``rows`` only, as the local backend fits ``X[ids]``."""
    from solver.estimators import SODMClassifier, build_fitted
    from solver.preprocessing import MinMaxScaler

    t0 = time.perf_counter()
    params = {k: v for k, v in dict(params).items() if k != "random_state"}
    est = SODMClassifier(**params, random_state=seed)
    est.validate_params()
    seed_int = seed_for(seed)
    _set_runtime_confs(spark)
    df, info = load_frame(spark, Path(dataset_dir))
    if rows is not None:
        if info.n_rows is not None and info.n_rows != rows.n_rows:
            raise ValueError(f"the row subset is for {rows.n_rows} rows, the dataset has "
                             f"{info.n_rows}")
        df, info.n_rows = select_rows(df, rows), rows.size
    n_cand = DEFAULT_LANDMARK_CANDIDATES if est.landmark_candidates is None \
        else int(est.landmark_candidates)
    # one pass: labels, rows, min / max, moments and the landmark candidates' raw rows
    summary = summarize(df, info, sample=(seed_int, n_cand))
    classes = summary.classes
    if len(classes) != 2:
        raise ValueError(f"the Spark backend trains two-class problems; the dataset has "
                         f"{len(classes)} classes (use the local backend for one-vs-rest)")
    n = summary.n
    scaler = MinMaxScaler.fit(np.vstack([summary.lo, summary.hi])) if est.scale else None
    if scaler is not None:
        info.scaler_min, info.scaler_scale = scaler.min_, scaler.scale_
    info.fit_intercept = bool(est.fit_intercept)
    gamma = resolve_gamma(est.kernel, est.gamma, info.n_features,
                          lambda: summary.scaled_variance(info.scaler_min, info.scaler_scale))
    kernel = est._make_kernel(gamma)
    odm = est._params()
    F, _ = sql(df)
    pos = classes[1].item() if isinstance(classes[1], np.generic) else classes[1]
    # hash-partitioned by row id so the data passes (strata, the levels) use every core even
    # when the file is a single split; results do not depend on the partitioning.  Not
    # materialised: the strata pass caches it with its own columns, one job instead of two
    base = (df.select("row_id",
                      F.when(F.col("label") == F.lit(pos), F.lit(1.0)).otherwise(F.lit(-1.0))
                      .alias("y"), *info.input_cols)
            .repartition(_base_partitions(spark, n), "row_id"))
    history: list[dict] = []
    try:
        if est._uses_dsvrg():
            from solver.spark.linear_sodm import sodm_linear_spark

            lres = sodm_linear_spark(base, info, odm, n_rows=n, n_partitions=est.n_partitions,
                                     n_strata=est.n_strata, epochs=est.epochs,
                                     step_size=est.step_size, seed=seed_int,
                                     tol=float(est.tol), landmark_candidates=n_cand,
                                     candidates=summary.candidates,
                                     progress=progress, should_stop=should_stop)
            history = [jsonable(r) for r in lres.history]
            if lres.stopped:
                raise FitCancelled(history=history)
            state = _linear_state(base, info, lres.w, float(est.theta))
        else:
            from solver.spark.kernel_sodm import sodm_kernel_spark

            run = sodm_kernel_spark(base, info, kernel, odm, n_rows=n,
                                    p=None if est.p is None else int(est.p),
                                    levels=est.levels, n_strata=est.n_strata,
                                    landmark_candidates=n_cand,
                                    candidates=summary.candidates,
                                    warm_start=est.warm_start_scaling,
                                    final_global_solve=est.final_global_solve,
                                    tol=float(est.tol), max_iter=int(est.max_iter),
                                    cache_size=float(est.cache_size), seed=seed_int,
                                    progress=progress, should_stop=should_stop)
            try:
                history = [jsonable(r) for r in run.history]
                if run.stopped:
                    raise FitCancelled(history=history)
                state = _kernel_state(run, info, n)
            finally:
                run.release()
    finally:
        base.unpersist()
    info_ = fit_info(algorithm=est._algorithm_for_kernel(), n_train=n,
                     n_features=info.n_features, sparse_input=info.layout == "sparse",
                     n_problems=1, seed=seed_int, n_iter=[iterations(history)],
                     seconds=time.perf_counter() - t0, backend="spark")
    return build_fitted(est, classes=classes, n_features_in=info.n_features,
                        scaler_min=None if scaler is None else scaler.min_,
                        scaler_scale=None if scaler is None else scaler.scale_,
                        gamma=gamma, history=history, fit_info=info_, **state)


def _kernel_state(run: Any, info: Any, n: int) -> dict[str, Any]:
    """Support vectors and dual coefficients from the final state (only SV rows collected)."""
    state = run.state
    F, _ = sql(state)
    if run.last_level > 0:
        # solver.estimators.average_local_duals: alpha_i * m_k / M
        factor = F.col("msize") / F.lit(float(n))
        state = state.withColumn("zeta", F.col("zeta") * factor) \
            .withColumn("beta", F.col("beta") * factor)
    svs = (state.filter(F.col("zeta") + F.col("beta") > F.lit(0.0))
           .select("row_id", "y", "zeta", "beta", *info.input_cols).toPandas())
    svs = svs.sort_values("row_id", kind="stable").reset_index(drop=True)
    X = batch_X(svs, info)
    Xs = model_space(X, info, constant=False)
    if sp.issparse(Xs):
        Xs = sp.csr_matrix(Xs)
    y = svs["y"].to_numpy(dtype=np.float64)
    coef = y * (svs["zeta"].to_numpy(dtype=np.float64) - svs["beta"].to_numpy(dtype=np.float64))
    return dict(support_vectors=Xs, dual_coef=coef[None, :],
                support=svs["row_id"].to_numpy(dtype=np.int64),
                n_support=np.asarray([len(svs)], dtype=np.int64))


def _linear_state(base: Any, info: Any, w: np.ndarray, theta: float) -> dict[str, Any]:
    """``w`` plus the rows outside the band ``[1-theta, 1+theta]`` (their ids only)."""
    import pandas as pd

    w = np.asarray(w, dtype=np.float64).ravel()

    def outside(batches):
        for pdf in batches:
            Z = model_space(batch_X(pdf, info), info)
            ym = pdf["y"].to_numpy(dtype=np.float64) * np.asarray(Z @ w).ravel()
            mask = (ym < 1 - theta) | (ym > 1 + theta)
            yield pd.DataFrame({"row_id": pdf["row_id"].to_numpy(dtype=np.int64)[mask]})

    ids = base.mapInPandas(outside, "row_id long").toPandas()["row_id"].to_numpy(np.int64)
    ids.sort()
    return dict(w=w[None, :], support=ids, n_support=np.asarray([ids.size], dtype=np.int64))
