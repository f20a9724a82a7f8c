"""SODM Algorithm 1 (hierarchical stratified partitions, kernel ODM) on Spark DataFrames.

Mirrors ``solver.sodm.hierarchy.sodm_kernel`` step for step so the same seed gives the same
partitions and the same duals:

* partition ids are a column; level ``l`` groups rows by ``part // p**(L-l)``;
* every group is solved by ``groupBy("gid").applyInPandas`` running the local unit of work
  ``solver.sodm.hierarchy.solve_partition`` on the group's rows in row-id order, with
  ``m_scale`` = the group size, seed ``solver.sodm.partition.local_seed(seed, l, k)`` and the
  warm start carried as the columns ``zeta``, ``beta`` (rescaled by ``m_old / m_new`` under
  ``warm_start="rescale"``, the previous size travels as column ``msize``);
* the warm-start KKT check (``check_warm_start``) runs from the second solved level on, and a
  level where every group was already converged ends the run, as locally;
* each level's output is cached (memory, spilling to disk) by the same Spark job that
  aggregates the per-group summaries, which alone reach the driver; a level's cache is
  dropped once the next level has filled its own, the last one after the support vectors
  are collected (:meth:`KernelRun.release`), and nothing stays cached when a level fails
  or is interrupted; ``should_stop`` is polled between levels.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from solver.sodm.levels import LevelOutcome, LevelStep, PartitionSummary, run_levels
from solver.spark.data import DataInfo, batch_X, ddl_fields, model_space, sql

__all__ = ["KernelRun", "SparkLevels", "sodm_kernel_spark"]

_STATS = ("objective", "kkt_violation", "warm_kkt", "n_iter", "converged", "stopped",
          "skipped", "seconds", "factorizations", "factor_work")


@dataclass
class KernelRun:
    """Outcome: the final state DataFrame (data + ``zeta``, ``beta``, ``msize``, ``gid``),
    cached until :meth:`release`."""

    state: Any
    history: list[dict] = field(default_factory=list)
    stopped: bool = False
    last_level: int = 0
    n_rows: int = 0
    cached: Any = None  # the persisted level output behind ``state``

    def release(self) -> None:
        """Drop the cached level output (call once ``state`` has been read)."""
        if self.cached is not None:
            self.cached.unpersist()
            self.cached = None


def sodm_kernel_spark(base: Any, info: DataInfo, kernel: Any, params: Any, *, n_rows: int,
                      p: int | None, levels: int | None, n_strata: int | None, warm_start: str,
                      final_global_solve: bool | None, tol: float, max_iter: int,
                      cache_size: float, seed: int, shrinking: bool = True,
                      convergence_test: bool = True, landmark_candidates: int | None = None,
                      candidates: pd.DataFrame | None = None,
                      progress: Callable[[float, str, dict], None] | None = None,
                      should_stop: Callable[[], bool] | None = None) -> KernelRun:
    """Run Algorithm 1 over ``base`` (``row_id``, ``y`` in {-1,+1}, feature columns);
    ``candidates``: the landmark candidate sample's raw rows when already collected."""
    from solver.sodm.hierarchy import resolve_structure
    from solver.spark.strata import assign_partitions_spark, select_landmarks_spark

    F, _ = sql(base)
    M = int(n_rows)
    shape = resolve_structure(M, cache_size, p=p, levels=levels, n_strata=n_strata,
                              landmark_candidates=landmark_candidates,
                              final_global_solve=final_global_solve)
    p, L, S = shape.p, shape.levels, shape.n_strata
    t_start = time.perf_counter()
    if L > 0:
        _, Zl = select_landmarks_spark(base, info, kernel, min(S, M), M, seed=seed,
                                       max_candidates=shape.landmark_candidates,
                                       candidates=candidates)
        data, strata = assign_partitions_spark(base, info, kernel, Zl, p ** L, seed)
        data = data.drop("stratum")
    else:
        data, strata = base.withColumn("part", F.lit(0).cast("long")), None
    backend = SparkLevels(data, strata, info, kernel, params, p=p, levels=L, seed=seed,
                          tol=tol, max_iter=max_iter, cache_size=cache_size,
                          shrinking=shrinking)
    try:
        levels_run = run_levels(backend, L, final_global_solve=shape.final_global_solve,
                                warm_start=warm_start, convergence_test=convergence_test,
                                progress=progress, should_stop=should_stop, started=t_start)
    except BaseException:  # an interrupted or failed level: nothing stays cached
        backend.release()
        raise
    finally:
        backend.release_strata()  # stopped or failed before the first level finished
    return KernelRun(state=backend.state, history=levels_run.history,
                     stopped=levels_run.stopped, last_level=levels_run.last_level, n_rows=M,
                     cached=backend.cached)


class SparkLevels:
    """The Spark :class:`solver.sodm.levels.LevelBackend`: the duals are the columns ``zeta``,
    ``beta`` (and the previous partition size ``msize``) of a state DataFrame; a level is one
    ``groupBy("gid").applyInPandas`` running the local ``solve_partition`` per group, whose
    output is cached by the job that aggregates the per-group summaries."""

    def __init__(self, data: Any, strata: Any, info: DataInfo, kernel: Any, params: Any, *,
                 p: int, levels: int, seed: int, tol: float, max_iter: int,
                 cache_size: float, shrinking: bool) -> None:
        F, _ = sql(data)
        # the first level reads this lazily (the strata are cached; no pass of its own)
        self.state = data.withColumn("zeta", F.lit(0.0)).withColumn("beta", F.lit(0.0)) \
            .withColumn("msize", F.lit(0.0))
        self.data_cols = [c for c in self.state.columns if c not in ("zeta", "beta", "msize")]
        self.strata = strata
        self.info, self.kernel, self.params = info, kernel, params
        self.p, self.levels = p, levels
        self.solve_options = {"seed": seed, "tol": tol, "max_iter": max_iter,
                              "cache_size": cache_size, "shrinking": shrinking}
        self.cached: Any = None  # the persisted level output behind ``state``

    def solve_level(self, step: LevelStep) -> LevelOutcome:
        F, _ = sql(self.state)
        lvl = step.level
        solve = _make_solver(self.info, self.kernel, self.params, level=lvl,
                             check=step.check_warm_start, rescale=step.rescale,
                             data_cols=self.data_cols, **self.solve_options)
        div = self.p ** (self.levels - lvl)
        grouped = self.state.withColumn(
            "gid", F.floor(F.col("part") / F.lit(div)).cast("long") if lvl > 0
            else F.lit(0).cast("long"))
        # cached (memory, spilling to disk): the summary aggregate below is the job that
        # solves the level and fills the cache
        new_state = (grouped.repartition(max(1, self.p ** lvl), "gid")
                     .groupBy("gid").applyInPandas(solve, _out_schema(self.state)).persist())
        try:
            stats = new_state.groupBy("gid").agg(
                *[F.first(c).alias(c) for c in _STATS], F.count("*").alias("size"),
                F.sum(F.when(F.col("zeta") + F.col("beta") > 0, 1).otherwise(0))
                .alias("nsv")).collect()
        except BaseException:
            new_state.unpersist()
            raise
        self.release()  # the level before (read by this one)
        self.cached = new_state
        self.release_strata()  # the first level has read it
        self.state = new_state.select(*self.data_cols, "zeta", "beta", "msize")
        parts = [PartitionSummary(
            size=int(r["size"]), n_sv=int(r["nsv"]), objective=float(r["objective"]),
            kkt_violation=float(r["kkt_violation"]), warm_kkt=float(r["warm_kkt"]),
            n_iter=int(r["n_iter"]), converged=bool(r["converged"]),
            stopped=bool(r["stopped"]), skipped=bool(r["skipped"]),
            factorizations=int(r["factorizations"]), factor_work=float(r["factor_work"]))
            for r in sorted(stats, key=lambda r: int(r["gid"]))]
        return LevelOutcome(parts, stopped=any(q.stopped for q in parts))

    def record_extras(self, level: int) -> dict[str, Any]:
        return {"backend": "spark"}

    def release(self) -> None:
        """Drop the cached output of the last solved level."""
        if self.cached is not None:
            self.cached.unpersist()
            self.cached = None

    def release_strata(self) -> None:
        if self.strata is not None:
            self.strata.unpersist()
            self.strata = None


def _out_schema(state: Any) -> str:
    fields = ddl_fields(state, exclude=("zeta", "beta", "msize"))
    fields += ["zeta double", "beta double", "msize double", "gid long",
               "objective double", "kkt_violation double", "warm_kkt double", "n_iter long",
               "converged boolean", "stopped boolean", "skipped boolean", "seconds double",
               "factorizations long", "factor_work double"]
    return ", ".join(fields)


def _make_solver(info: DataInfo, kernel: Any, params: Any, *, seed: int, level: int,
                 tol: float, max_iter: int, cache_size: float, shrinking: bool, check: bool,
                 rescale: bool, data_cols: list[str]) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The per-group function: the local ``solve_partition`` on the group's rows."""

    def solve(pdf: pd.DataFrame) -> pd.DataFrame:
        from solver.sodm.hierarchy import rescale_factors, solve_partition
        from solver.sodm.partition import local_seed

        pdf = pdf.sort_values("row_id", kind="stable").reset_index(drop=True)
        k = int(pdf["gid"].iloc[0])
        m = len(pdf)
        Z = model_space(batch_X(pdf, info), info)
        y = pdf["y"].to_numpy(dtype=np.float64)
        w = info.weights(pdf)
        alpha0 = np.column_stack([pdf["zeta"].to_numpy(dtype=np.float64),
                                  pdf["beta"].to_numpy(dtype=np.float64)])
        sizes = np.full(m, float(m) if w is None else float(w.sum()))
        if rescale:
            alpha0 = alpha0 * rescale_factors(pdf["msize"].to_numpy(dtype=np.float64),
                                              sizes)[:, None]
        out = solve_partition(Z, y, kernel, params, alpha0, m_scale=float(sizes[0]), tol=tol,
                              max_iter=max_iter, cache_size=cache_size,
                              seed=local_seed(seed, level, k), shrinking=shrinking,
                              check_warm_start=check, sample_weight=w)
        res = pdf[data_cols].copy()
        res["zeta"] = out.alpha[:, 0]
        res["beta"] = out.alpha[:, 1]
        res["msize"] = sizes
        res["gid"] = k
        res["objective"] = float(out.objective)
        res["kkt_violation"] = float(out.kkt_violation)
        res["warm_kkt"] = float(out.warm_kkt)
        res["n_iter"] = int(out.n_iter)
        res["converged"] = bool(out.converged)
        res["stopped"] = bool(out.stopped)
        res["skipped"] = bool(out.skipped)
        res["seconds"] = float(out.seconds)
        res["factorizations"] = len(out.newton.factored)
        res["factor_work"] = float(out.newton.factor_work)
        return res

    return solve
