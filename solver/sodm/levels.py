"""SODM's level loop (Algorithm 1, steps 3-5), one driver for every backend.

:func:`run_levels` owns what does not depend on where the partitions are solved: the
schedule (levels ``L .. 1``, then level 0 for the final global solve or when ``L = 0``), the
warm-start flags (rescaled by ``m_old / m_new`` and checked against ``tol`` from the second
solved level on), the between-level convergence test (a level whose partitions all had a
converged warm start ends the run, or jumps to the global solve), stop polling between
levels, the history records and the progress messages.

A :class:`LevelBackend` solves one level: every partition of it as its own local ODM from
the warm start the backend holds, which it then replaces by the solution.  The local process
pool (``solver.sodm.hierarchy.PoolLevels``) and Spark (``solver.spark.kernel_sodm.SparkLevels``)
implement it, so both backends run the same loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

__all__ = ["LevelStep", "PartitionSummary", "LevelOutcome", "LevelBackend", "LevelRun",
           "level_schedule", "level_record", "level_message", "run_levels"]

ProgressFn = Callable[[float, str, dict], None]
StopFn = Callable[[], bool]


@dataclass(frozen=True)
class LevelStep:
    """What the driver asks of a backend for one level."""

    level: int
    check_warm_start: bool  # skip a partition whose warm start already meets tol
    rescale: bool  # multiply the warm start by m_old / m_new first


@dataclass(frozen=True)
class PartitionSummary:
    """One partition's local solve, as the history needs it (no duals)."""

    size: int
    n_sv: int  # rows with zeta + beta > 0
    objective: float
    kkt_violation: float
    warm_kkt: float  # inf when the warm start was not checked
    n_iter: int
    converged: bool
    stopped: bool
    skipped: bool
    factorizations: int = 0  # faces its Newton steps factored (NewtonWork)
    factor_work: float = 0.0  # their sum(s^3) / 3


@dataclass
class LevelOutcome:
    """A solved level: its non-empty partitions in partition order."""

    partitions: list[PartitionSummary]
    stopped: bool = False  # a stop request reached the local solves


class LevelBackend(Protocol):
    """Where the partitions of a level are solved and the duals live between levels."""

    def solve_level(self, step: LevelStep) -> LevelOutcome:
        """Solve every partition of ``step.level`` from the held warm start."""
        ...

    def record_extras(self, level: int) -> dict[str, Any]:
        """Backend-specific fields appended to the level's history record."""
        ...


@dataclass
class LevelRun:
    history: list[dict] = field(default_factory=list)
    stopped: bool = False
    converged_early: bool = False
    last_level: int = 0


def level_schedule(levels: int, final_global_solve: bool) -> list[int]:
    """Levels in solve order: ``L .. 1``, then 0 for the global solve (always when L = 0)."""
    return list(range(levels, 0, -1)) + ([0] if final_global_solve or levels == 0 else [])


def level_record(level: int, parts: Sequence[PartitionSummary], seconds: float,
                 elapsed: float) -> dict[str, Any]:
    """The history record of one level."""
    warm = [p.warm_kkt for p in parts if np.isfinite(p.warm_kkt)]
    return {
        "level": int(level),
        "partitions": len(parts),
        "partition_size": int(max((p.size for p in parts), default=0)),
        "objective": float(sum(p.objective for p in parts)),
        "kkt_violation": float(max((p.kkt_violation for p in parts), default=0.0)),
        "warm_start_kkt": float(max(warm)) if warm else None,
        "n_sv": int(sum(p.n_sv for p in parts)),
        "n_iter": int(max((p.n_iter for p in parts), default=0)),
        "converged": bool(all(p.converged for p in parts)),
        "skipped_partitions": int(sum(p.skipped for p in parts)),
        "factorizations": int(sum(p.factorizations for p in parts)),
        "factor_work": float(sum(p.factor_work for p in parts)),
        "seconds": float(seconds),
        "elapsed": float(elapsed),
    }


def level_message(record: dict[str, Any]) -> str:
    return (f"level {record['level']}: {record['partitions']} partitions of <= "
            f"{record['partition_size']} rows, KKT {record['kkt_violation']:.3g}")


def run_levels(backend: LevelBackend, levels: int, *, final_global_solve: bool,
               warm_start: str, convergence_test: bool, progress: ProgressFn | None,
               should_stop: StopFn | None, started: float | None = None) -> LevelRun:
    """Run the level schedule on ``backend`` (see the module docstring); ``started`` is the
    ``perf_counter`` time the records' ``elapsed`` counts from (default: now)."""
    schedule = level_schedule(levels, final_global_solve)
    t_start = time.perf_counter() if started is None else started
    run = LevelRun()
    first = True
    jump_to_global = False
    for step, lvl in enumerate(schedule):
        if jump_to_global and lvl != 0:
            continue
        if should_stop is not None and should_stop():
            run.stopped = True
            break
        t0 = time.perf_counter()
        check = convergence_test and not first
        out = backend.solve_level(LevelStep(level=lvl, check_warm_start=check,
                                            rescale=warm_start == "rescale" and not first))
        first = False
        rec = level_record(lvl, out.partitions, time.perf_counter() - t0,
                           time.perf_counter() - t_start)
        rec.update(backend.record_extras(lvl))
        all_skipped = check and all(p.skipped for p in out.partitions)
        rec["converged_early"] = bool(all_skipped)
        run.history.append(rec)
        run.last_level = lvl
        if progress is not None:
            progress((step + 1) / len(schedule), level_message(rec), rec)
        if out.stopped:
            run.stopped = True
            break
        if all_skipped and lvl > 0:
            run.converged_early = True
            if not final_global_solve:
                break
            jump_to_global = True
    return run
