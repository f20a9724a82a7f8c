"""Train an ``SODMClassifier`` on Spark from a stored dataset (the Spark backend's entry point).

Reproduces ``SODMClassifier.fit``: the same min-max scaler (per-feature min / max aggregated
over the cluster), the same ``gamma='scale'``, the same constant column, the same seeds
(``solver.core.training.problem_seed``) handed to Algorithm 1 (``kernel_sodm``) or Algorithm 2
(``linear_sodm``) for the binary problem or each one-vs-rest problem in turn, the same
size-weighted averaging of the last level's local duals, and then
``solver.estimators.build_fitted`` with the support vectors (kernel; their union over the
problems) or ``w`` (linear).
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
import pandas as pd
import scipy.sparse as sp

from solver.core.training import (
    fit_info,
    iterations,
    jsonable,
    plain,
    problem_progress,
    problem_seed,
    resolve_gamma,
    seed_for,
)
from solver.exceptions import FitCancelled
from solver.sodm.hierarchy import DEFAULT_LANDMARK_CANDIDATES
from solver.spark.data import (
    RowSubset,
    batch_X,
    ddl_fields,
    load_frame,
    model_space,
    select_rows,
    sql,
    summarize,
)

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


def fit_spark(spark: Any, dataset_dir: str | Path, params: dict[str, Any], *,
              seed: int | None,
              rows: RowSubset | None = None,
              progress: Callable[[float, str, dict], None] | None = None,
              should_stop: Callable[[], bool] | None = None,
              weight_feature: int | None = None) -> Any:
    """Fit ``SODMClassifier(**params, random_state=seed)`` on ``dataset_dir`` (a local
    directory or a store URI: ``solver.spark.data.load_frame``) with Spark:
    on every row, or on ``rows`` only, as the local backend fits ``X[ids]``. More than two
    classes: one-vs-rest, one binary problem (its own Spark jobs) per class in turn.
    ``weight_feature``: the stored feature that holds the rows' weights (a request's
    ``weight_column``), taken out of the features as the local backend takes it; rows of
    weight 0 are left out (give ``rows`` without them to number the rest as the local fit
    does)."""
    from solver.core.preprocessing import MinMaxScaler
    from solver.estimators import SODMClassifier, build_fitted

    t0 = time.perf_counter()
    params = {k: v for k, v in dict(params).items() if k != "random_state"}
    est = SODMClassifier(**params, random_state=seed)
    est.validate_params()
    seed_int = seed_for(seed)
    _set_runtime_confs(spark)
    df, info = _load_rows(spark, dataset_dir, rows)
    if weight_feature is not None:
        df = _with_weight_feature(df, info, int(weight_feature))
    if est.class_weight is not None:
        df = _with_class_weights(df, info, est.class_weight)
    n_cand = DEFAULT_LANDMARK_CANDIDATES if est.landmark_candidates is None \
        else int(est.landmark_candidates)
    # one pass: labels, rows, min / max, moments and the landmark candidates' raw rows
    summary = summarize(df, info, sample=(seed_int, n_cand))
    classes = _checked_classes(summary.classes)
    n = summary.n
    if info.weight_col:
        info.weight_total = float(summary.wsum)
    scaler = MinMaxScaler.from_range(summary.lo, summary.hi) if est.scale else None
    if scaler is not None:
        info.scaler_min, info.scaler_scale = scaler.min_, scaler.scale_
    info.fit_intercept = bool(est.fit_intercept)
    gamma = resolve_gamma(est.kernel, est.gamma, info.n_features,
                          lambda: summary.scaled_variance(info.scaler_min, info.scaler_scale))
    problem = _Problem(est, info, est._make_kernel(gamma), est._params(), n, n_cand)
    # hash-partitioned by row id so the data passes (strata, the levels) use every core even
    # when the file is a single split; results do not depend on the partitioning.  Not
    # materialised: the strata pass caches it with its own columns, one job instead of two
    base = df.select("row_id", "label", *info.input_cols) \
        .repartition(_base_partitions(spark, n), "row_id")
    history, n_iter, solutions = _solve_problems(problem, base, classes, seed_int,
                                                 summary.candidates, progress, should_stop)
    if est._uses_dsvrg():
        state = _linear_state(base, info, np.vstack(solutions), float(est.theta), classes)
    else:
        state = _kernel_state(solutions, info)
    info_ = fit_info(algorithm=est._algorithm_for_kernel(), n_train=n,
                     n_features=info.n_features, sparse_input=info.layout == "sparse",
                     n_problems=len(solutions), seed=seed_int, n_iter=n_iter,
                     seconds=time.perf_counter() - t0, backend="spark")
    if info.weight_col:
        info_["weights"] = _weights_record(df, info, est.class_weight)
    return build_fitted(est, classes=classes, n_features_in=info.n_features,
                        scaler_min=None if scaler is None else scaler.min_,
                        scaler_scale=None if scaler is None else scaler.scale_,
                        gamma=gamma, history=history, fit_info=info_, **state)


WEIGHT_COL = "_weight"
WEIGHT_FEATURE_COL = "_weight_feature"


def _with_weight_feature(df: Any, info: Any, j: int) -> Any:
    """``df`` with stored feature ``j`` as the rows' weight column (recorded in ``info``)
    instead of a feature, and without the rows of weight 0. Dense: the column ``f<j>``;
    sparse: the entries of index ``j`` moved to a column ``WEIGHT_FEATURE_COL`` and the
    higher indices shifted down by one."""
    F, _ = sql(df)
    if info.layout == "dense":
        name = info.feature_cols.pop(j)
    else:
        name = WEIGHT_FEATURE_COL

        def split_out(batches):
            for pdf in batches:
                idx, val, w = [], [], np.zeros(len(pdf))
                for r, (ii, vv) in enumerate(zip(pdf["indices"], pdf["values"],
                                                 strict=True)):
                    ii, vv = np.asarray(ii, dtype=np.int64), np.asarray(vv, np.float64)
                    hit = ii == j
                    w[r] = float(vv[hit].sum())
                    idx.append(np.where(ii[~hit] > j, ii[~hit] - 1, ii[~hit]))
                    val.append(vv[~hit])
                pdf = pdf.copy()
                pdf["indices"], pdf["values"], pdf[name] = idx, val, w
                yield pdf

        schema = ", ".join(ddl_fields(df) + [f"`{name}` double"])
        df = df.mapInPandas(split_out, schema)
    info.n_features -= 1
    info.weight_col = name
    return df.filter(F.col(name) > F.lit(0.0))


def _weights_record(df: Any, info: Any, class_weight: Any) -> dict[str, Any]:
    """``fit_info["weights"]`` as the local fit writes it (one job: sum, min, max)."""
    F, _ = sql(df)
    r = df.agg(F.sum(info.weight_col).alias("s"), F.min(info.weight_col).alias("lo"),
               F.max(info.weight_col).alias("hi")).collect()[0]
    return {"class_weight": jsonable(class_weight), "sum": float(r["s"]),
            "min": float(r["lo"]), "max": float(r["hi"])}


def _with_class_weights(df: Any, info: Any, class_weight: Any) -> Any:
    """``df`` with each row's class weight (times its weight column, if it has one) in
    column ``WEIGHT_COL`` (the classes' counts: one job), recorded in ``info``."""
    from solver.estimators import class_weight_table

    F, _ = sql(df)
    counted = sorted((r["label"], int(r["count"]))
                     for r in df.groupBy("label").count().collect() if r["label"] is not None)
    classes = np.asarray([c for c, _ in counted])
    counts = np.asarray([k for _, k in counted], dtype=np.float64)
    table = class_weight_table(class_weight, classes, counts)
    expr = None
    for c, w in zip(classes, table, strict=True):
        cond = F.col("label") == F.lit(plain(c))
        expr = F.when(cond, F.lit(float(w))) if expr is None \
            else expr.when(cond, F.lit(float(w)))
    expr = expr.otherwise(F.lit(1.0))
    if info.weight_col:
        expr = expr * F.col(info.weight_col)
    df = df.withColumn(WEIGHT_COL, expr)
    info.weight_col = WEIGHT_COL
    return df


def _load_rows(spark: Any, dataset_dir: str | Path, rows: RowSubset | None
               ) -> tuple[Any, Any]:
    """The stored dataset as a DataFrame and its description, restricted to ``rows``."""
    df, info = load_frame(spark, dataset_dir)
    if rows is not None:
        if info.n_rows is not None and info.n_rows != rows.n_rows:
            raise ValueError(f"the row subset is for {rows.n_rows} rows, the dataset has "
                             f"{info.n_rows}")
        df, info.n_rows = select_rows(df, rows), rows.size
    return df, info


def _checked_classes(classes: np.ndarray) -> np.ndarray:
    """``classes`` when they make a classification problem (as ``SODMClassifier.fit``
    checks them), else the same ``ValueError``."""
    if len(classes) != 2:
        from sklearn.utils.multiclass import check_classification_targets

        check_classification_targets(classes)  # more non-integer floats: a regression target
    if len(classes) < 2:
        raise ValueError(f"SODMClassifier needs at least two classes in y; only one class "
                         f"({classes[0]!r}) is present")
    return classes


def _solve_problems(problem: _Problem, base: Any, classes: np.ndarray, seed_int: int,
                    candidates: Any, progress: Callable[[float, str, dict], None] | None,
                    should_stop: Callable[[], bool] | None
                    ) -> tuple[list[dict], list[int], list[Any]]:
    """The binary problem, or one one-vs-rest problem per class in turn, with the local
    backend's seeds: the history (records tagged with the problem when several),
    iterations and solutions; a stop raises ``FitCancelled`` with the history so far."""
    n_problems = 1 if len(classes) == 2 else len(classes)
    history: list[dict] = []
    n_iter: list[int] = []
    solutions: list[Any] = []
    for k in range(n_problems):
        if should_stop is not None and should_stop():
            raise FitCancelled(history=history)
        label = None if n_problems == 1 else classes[k]
        seed_k = problem_seed(seed_int, k, n_problems)
        # the statistics pass sampled the candidates of seed_int (a binary problem's seed)
        hist, stopped, sol = problem.solve(
            _binary(base, classes[1] if n_problems == 1 else classes[k], problem.info), seed_k,
            candidates if seed_k == seed_int else None,
            problem_progress(progress, k, n_problems, label), should_stop)
        for rec in hist:
            rec = jsonable(rec)
            history.append(rec if n_problems == 1
                           else {"problem": k, "class": plain(label), **rec})
        if stopped:
            raise FitCancelled(history=history)
        solutions.append(sol)
        n_iter.append(iterations(hist))
    return history, n_iter, solutions


def _binary(base: Any, positive: Any, info: Any) -> Any:
    """``row_id``, ``y`` (+1 for ``positive``, else -1) and the input columns."""
    F, _ = sql(base)
    pos = positive.item() if isinstance(positive, np.generic) else positive
    return base.select("row_id", F.when(F.col("label") == F.lit(pos), F.lit(1.0))
                       .otherwise(F.lit(-1.0)).alias("y"), *info.input_cols)


class _Problem:
    """One binary problem of the fit on Spark: Algorithm 2 (DSVRG) or Algorithm 1."""

    def __init__(self, est: Any, info: Any, kernel: Any, odm: Any, n: int,
                 n_cand: int) -> None:
        self.est, self.info, self.kernel, self.odm = est, info, kernel, odm
        self.n, self.n_cand = n, n_cand

    def solve(self, data: Any, seed: int, candidates: Any,
              progress: Callable[[float, str, dict], None] | None,
              should_stop: Callable[[], bool] | None) -> tuple[list[dict], bool, Any]:
        """``(history, stopped, solution)``: ``w`` (DSVRG) or the support-vector rows."""
        est = self.est
        if est._uses_dsvrg():
            from solver.spark.linear_sodm import sodm_linear_spark

            lres = sodm_linear_spark(data, self.info, self.odm, n_rows=self.n,
                                     n_partitions=est.n_partitions, n_strata=est.n_strata,
                                     epochs=est.epochs, step_size=est.step_size, seed=seed,
                                     tol=float(est.tol), landmark_candidates=self.n_cand,
                                     candidates=candidates, progress=progress,
                                     should_stop=should_stop)
            return lres.history, lres.stopped, np.asarray(lres.w, dtype=np.float64).ravel()
        from solver.spark.kernel_sodm import sodm_kernel_spark

        run = sodm_kernel_spark(data, self.info, self.kernel, self.odm, n_rows=self.n,
                                p=None if est.p is None else int(est.p), levels=est.levels,
                                n_strata=est.n_strata, landmark_candidates=self.n_cand,
                                candidates=candidates, warm_start=est.warm_start_scaling,
                                final_global_solve=est.final_global_solve,
                                tol=float(est.tol), max_iter=int(est.max_iter),
                                cache_size=float(est.cache_size), seed=seed,
                                progress=progress, should_stop=should_stop)
        try:
            svs = None if run.stopped else _support_rows(run, self.info, self.n)
        finally:
            run.release()
        return run.history, run.stopped, svs


def _support_rows(run: Any, info: Any, n: int) -> pd.DataFrame:
    """The final state's support vectors (``row_id``, ``y``, ``zeta``, ``beta``, input
    columns) by row id: only those rows are collected."""
    state = run.state
    F, _ = sql(state)
    if run.last_level > 0:
        # solver.estimators.average_local_duals: alpha_i * m_k / M (weight sums if weighted)
        factor = F.col("msize") / F.lit(float(info.weight_total or n))
        state = state.withColumn("zeta", F.col("zeta") * factor) \
            .withColumn("beta", F.col("beta") * factor)
    svs = (state.filter(F.col("zeta") + F.col("beta") > F.lit(0.0))
           .select("row_id", "y", "zeta", "beta", *info.input_cols).toPandas())
    return svs.sort_values("row_id", kind="stable").reset_index(drop=True)


def _kernel_state(problems: list[pd.DataFrame], info: Any) -> dict[str, Any]:
    """Support vectors (the union over the problems, by row id) and one row of dual
    coefficients per problem (0 where a row is no support vector of that problem)."""
    support = np.unique(np.concatenate([p["row_id"].to_numpy(dtype=np.int64)
                                        for p in problems]))
    svs = pd.concat(problems, ignore_index=True).drop_duplicates("row_id") \
        .sort_values("row_id", kind="stable").reset_index(drop=True)
    Xs = model_space(batch_X(svs, info), info, constant=False)
    if sp.issparse(Xs):
        Xs = sp.csr_matrix(Xs)
    coef = np.zeros((len(problems), support.size))
    for k, p in enumerate(problems):
        pos = np.searchsorted(support, p["row_id"].to_numpy(dtype=np.int64))
        coef[k, pos] = p["y"].to_numpy(dtype=np.float64) * (
            p["zeta"].to_numpy(dtype=np.float64) - p["beta"].to_numpy(dtype=np.float64))
    return dict(support_vectors=Xs, dual_coef=coef, support=support,
                n_support=np.asarray([len(p) for p in problems], dtype=np.int64))


def _linear_state(base: Any, info: Any, W: np.ndarray, theta: float,
                  classes: np.ndarray) -> dict[str, Any]:
    """``W`` (one row per problem) plus the rows outside some problem's band
    ``[1-theta, 1+theta]`` (their ids) and the count per problem."""
    W = np.atleast_2d(np.asarray(W, dtype=np.float64))
    positives = [classes[1]] if W.shape[0] == 1 else list(classes)

    def outside(batches):
        for pdf in batches:
            Z = model_space(batch_X(pdf, info), info)
            labels = pdf["label"].to_numpy()
            y = np.column_stack([np.where(labels == c, 1.0, -1.0) for c in positives])
            ym = y * np.asarray(Z @ W.T)
            mask = (ym < 1 - theta) | (ym > 1 + theta)
            hit = mask.any(axis=1)
            yield pd.DataFrame({"row_id": pdf["row_id"].to_numpy(dtype=np.int64)[hit],
                                "mask": list(mask[hit])})

    out = base.mapInPandas(outside, "row_id long, mask array<boolean>").toPandas()
    out = out.sort_values("row_id", kind="stable")
    masks = np.asarray(out["mask"].tolist(), dtype=bool).reshape(len(out), W.shape[0])
    return dict(w=W, support=out["row_id"].to_numpy(dtype=np.int64),
                n_support=masks.sum(axis=0).astype(np.int64))
