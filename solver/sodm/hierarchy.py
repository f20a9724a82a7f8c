"""SODM Algorithm 1 (Wang et al., IJCAI-23): hierarchical stratified partitions for kernel ODM.

1. Landmarks: ``n_strata`` points chosen greedily in the RKHS of the training kernel
   (:mod:`solver.sodm.landmarks`), strata = nearest landmark.
2. ``K = p**levels`` stratified partitions of balanced size (:mod:`solver.sodm.partition`; every
   random choice is a function of ``(seed, row index)``, see that module for the exact rules
   the Spark backend reproduces).
3. For ``l = levels .. 1``: solve the ``p**l`` local ODMs (each the exact ODM of its own data,
   ``m_scale`` = partition size) with :func:`solver.exact.dcd_kernel.solve_kernel_dual`, in parallel
   over ``n_jobs`` processes; the local solver of partition ``k`` at level ``l`` is seeded by
   ``SeedSequence([seed, l, k])``.  Then merge every ``p`` consecutive partitions; the new
   warm start is the per-instance concatenation of the children's ``alpha`` (``alpha`` lives
   in one ``(M, 2)`` array in input row order, so concatenation is implicit), either
   paper-literal (``warm_start="literal"``) or multiplied by ``m_old / m_new``
   (``"rescale"``: a partition of ``m`` rows stands for its data repeated ``m_new / m``
   times, as in the proof of the paper's Theorem 2, so its local optimum is about
   ``m_new / m`` times the merged problem's).
4. Between-level convergence test (the paper's "if all alpha converge"): before solving a
   level, the max projected-gradient (KKT) violation of the merged warm start is computed on
   every merged problem; a partition whose warm start is already ``<= tol`` is not re-solved,
   and when that holds for every partition the algorithm returns (or jumps to the final global
   solve).
5. ``final_global_solve=True`` adds level 0: one solve of the whole problem warm-started from
   level 1, so the result is the true ODM optimum.  Without it the result is the paper's output,
   the level-1 concatenation ``[alpha_1; ..; alpha_p]`` (a block-diagonal approximation).
6. ``partition_gain`` (None unless given; one level, no final solve): level 1 stops adding
   partitions once one raises the accuracy on the last partition's rows by less
   (:mod:`solver.sodm.partition_stop`); the others stay out of the concatenation.

Steps 3-5 are the level driver :func:`solver.sodm.levels.run_levels`, shared with the Spark
backend; here :class:`PoolLevels` solves each level's partitions in a process pool.

Defaults (the measurements behind them, with their commands, are in ``docs/design-notes.md``):

* ``p`` (the merge factor): the smallest ``p >= 2`` whose level-1 partitions (``M / p`` rows)
  have a float32 kernel within ``cache_size`` (:func:`default_p`; the paper leaves ``p`` to
  the user).  Level 1 is always solved and its partition size sets the accuracy: larger
  partitions are more accurate at about the same CPU (fewer, larger kernel blocks), so
  ``cache_size`` trades memory for accuracy; a partition larger than the cache would run
  from the column cache, with faces too large for the direct Newton step.
  After an "auto" search whose learning curve was flat, the estimators pass
  :func:`plateau_p` instead: partitions of about the rows from which CV accuracy stopped
  rising, at least ``MIN_LEVEL_PARTITION_ROWS``.
* ``levels``: the fewest ``L >= 1`` whose partitions fit ``cache_size`` the same way, with
  no partition under ``MIN_LEVEL_PARTITION_ROWS`` rows and at most ``MAX_LEVELS`` levels
  (0 levels, the exact solver, below ``2 p * MIN_LEVEL_PARTITION_ROWS`` rows); see
  :func:`default_levels`.  With the default ``p`` that is one level: reaching the same
  partitions through finer levels costs about twice the CPU for no more accuracy (a finer
  level only buys a warm start, and local solves from zero converge fast).
* ``landmark_candidates``: landmarks are chosen among a seeded sample of about
  ``DEFAULT_LANDMARK_CANDIDATES`` rows (all rows below it), which the Spark backend collects
  and selects from in the driver, one job instead of one per landmark.
* ``n_strata = 50`` (the authors' setting).
* ``warm_start = "rescale"``: the local optimum of a representative partition is about ``p``
  times the merged problem's, so the rescaled warm start starts closer (fewer epochs).
* ``final_global_solve = False`` (the paper's output): the level-1 concatenation, not the
  exact optimum.
* The warm-start KKT check (``convergence_test``) goes through the merged partition in row
  blocks and stops at the first block that violates ``tol``, so a failing check (the usual
  case) costs about ``1024 / m`` of a kernel-vector product; the history's
  ``warm_start_kkt`` is then the max over the rows examined (a lower bound).

Memory: ``cache_size`` (MB) is the kernel budget of *each* local solve, i.e. per worker process
as in LIBSVM/scikit-learn (total about ``n_jobs * cache_size``); the local solver stores the
block in float64, float32 or an LRU column cache to stay within it.  Keeping the budget per
solve (not divided by ``n_jobs``) makes the result independent of ``n_jobs``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from solver.core import buffers
from solver.core.formulation import (
    ODMParams,
    check_weights,
    default_scale,
    dual_gradient,
    dual_objective,
    kkt_violation_from_grad,
)
from solver.core.inputs import check_Xy
from solver.core.kernels import Kernel, kernel_matrix
from solver.exact.dcd_kernel import kernel_decision, solve_kernel_dual
from solver.exact.newton_kernel import NewtonWork
from solver.sodm.landmarks import assign_strata, select_landmarks
from solver.sodm.levels import LevelOutcome, LevelStep, PartitionSummary, run_levels
from solver.sodm.parallel import TaskPool, resolve_n_jobs
from solver.sodm.partition import (
    level_ids,
    local_seed,
    partition_members,
    stratified_partitions,
)
from solver.sodm.partition_stop import HeldOutCurve

__all__ = [
    "SODMResult",
    "PartitionOutcome",
    "PoolLevels",
    "sodm_kernel",
    "solve_partition",
    "solve_groups",
    "validation_accuracy",
    "default_p",
    "plateau_p",
    "default_levels",
    "resolve_structure",
    "stratify",
    "rescale_factors",
    "warm_start_violation",
]

ProgressFn = Callable[[float, str, dict], None]
StopFn = Callable[[], bool]

MIN_LEVEL_PARTITION_ROWS = 5000  # no default level with partitions smaller than this
MAX_LEVELS = 10  # deeper hierarchies only add merges of tiny partitions
_MB = 1 << 20
DEFAULT_N_STRATA = 50
# landmarks are chosen among a seeded key-threshold sample of about this many rows
# (solver.sodm.landmarks.landmark_candidates); the Spark backend collects exactly that sample
DEFAULT_LANDMARK_CANDIDATES = 20_000


@dataclass
class SODMResult:
    """Output of a hierarchical solver: ``alpha`` ``(M, 2)`` in the input row order."""

    alpha: np.ndarray
    history: list[dict] = field(default_factory=list)
    p: int = 2  # the merge fan-in used (``default_p`` when not given)
    stopped: bool = False
    converged_early: bool = False
    last_level: int = 0
    landmarks: np.ndarray | None = None
    strata: np.ndarray | None = None
    partitions: np.ndarray | None = None
    level_alpha: dict[int, np.ndarray] = field(default_factory=dict)
    # level 1's partitions that the held-out gain rule kept (``partition_gain``); None when
    # the rule did not run (every partition is in the model)
    kept_partitions: np.ndarray | None = None


@dataclass
class PartitionOutcome:
    """What one local solve returns (picklable, so it can come back from a worker)."""

    alpha: np.ndarray
    objective: float
    kkt_violation: float
    warm_kkt: float
    n_iter: int
    converged: bool
    stopped: bool
    skipped: bool
    seconds: float
    newton: NewtonWork = field(default_factory=NewtonWork)

    def summary(self) -> PartitionSummary:
        """The history's view of this solve."""
        return PartitionSummary(
            size=int(self.alpha.shape[0]),
            n_sv=int(np.count_nonzero(self.alpha.sum(axis=1) > 0)),
            objective=float(self.objective), kkt_violation=float(self.kkt_violation),
            warm_kkt=float(self.warm_kkt), n_iter=int(self.n_iter),
            converged=bool(self.converged), stopped=bool(self.stopped),
            skipped=bool(self.skipped), factorizations=len(self.newton.factored),
            factor_work=self.newton.factor_work)


def default_p(n_rows: int, cache_size: float = 512.0) -> int:
    """The smallest merge factor ``p >= 2`` whose level-1 partitions (``ceil(M / p)`` rows)
    have a float32 kernel within ``cache_size`` MB (module docstring)."""
    fit_rows = max(1, int(math.sqrt(float(cache_size) * _MB / 4.0)))
    return max(2, math.ceil(int(n_rows) / fit_rows))


def plateau_p(n_rows: int, rows: int, cache_size: float = 512.0) -> int:
    """The merge factor for level-1 partitions of about ``rows`` rows (the auto search's
    learning-curve plateau, ``solver.auto.search.plateau_rows``): ``n_rows // rows`` with
    ``rows`` at least ``MIN_LEVEL_PARTITION_ROWS``, so every partition holds at least that
    many, and never fewer partitions than :func:`default_p`."""
    target = max(int(rows), MIN_LEVEL_PARTITION_ROWS)
    return max(default_p(n_rows, cache_size), int(n_rows) // target)


@dataclass(frozen=True)
class Structure:
    """SODM's shape with the documented defaults filled in (the Spark backend resolves the
    same values, so both backends build the same partitions)."""

    p: int
    levels: int
    n_strata: int
    landmark_candidates: int
    final_global_solve: bool


def resolve_structure(n_rows: int, cache_size: float, *, p: int | None,
                      levels: int | None, n_strata: int | None,
                      landmark_candidates: int | None,
                      final_global_solve: bool | None) -> Structure:
    """``None`` -> :func:`default_p`, :func:`default_levels`, ``DEFAULT_N_STRATA``,
    ``DEFAULT_LANDMARK_CANDIDATES`` and no final global solve."""
    p_value = default_p(n_rows, cache_size) if p is None else int(p)
    return Structure(
        p=p_value,
        levels=default_levels(n_rows, p_value, cache_size) if levels is None else int(levels),
        n_strata=DEFAULT_N_STRATA if n_strata is None else int(n_strata),
        landmark_candidates=(DEFAULT_LANDMARK_CANDIDATES if landmark_candidates is None
                             else int(landmark_candidates)),
        final_global_solve=bool(final_global_solve) if final_global_solve is not None
        else False)


def default_levels(n_rows: int, p: int, cache_size: float = 512.0) -> int:
    """The fewest levels ``L >= 1`` whose partitions' float32 kernel fits ``cache_size`` MB,
    but no partitions under ``MIN_LEVEL_PARTITION_ROWS`` (0 levels, the exact solver, below
    ``2 p * 5000`` rows) and at most 10 levels.

    Level 1 (``p`` partitions of ``M / p`` rows) is always solved, so every finer level only
    buys a warm start; it pays off only when level 1's kernel does not fit the cache (column
    cache mode recomputes kernel columns every epoch).
    """
    L_max = 0
    while L_max < MAX_LEVELS and n_rows / float(p) ** (L_max + 1) >= MIN_LEVEL_PARTITION_ROWS:
        L_max += 1
    fit_rows = math.sqrt(float(cache_size) * _MB / 4.0)
    for L in range(1, L_max + 1):
        if math.ceil(n_rows / float(p) ** L) <= fit_rows:
            return L
    return L_max


def stratify(X, kernel: Kernel, n_strata: int, seed: int, *,
             max_candidates: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Landmark rows and stratum id per row (steps 1a/1b)."""
    lm = select_landmarks(X, kernel, n_strata, seed, max_candidates=max_candidates)
    Z = X[lm] if sp.issparse(X) else np.asarray(X)[lm]
    return lm, assign_strata(X, Z, kernel)


def rescale_factors(old_sizes: np.ndarray, new_sizes: np.ndarray) -> np.ndarray:
    """Per-instance warm-start factor ``m_old / m_new``."""
    return np.asarray(old_sizes, dtype=np.float64) / np.asarray(new_sizes, dtype=np.float64)


def warm_start_violation(X, y, kernel: Kernel, params: ODMParams, alpha0, m_scale: float,
                         tol: float, *, block_rows: int = 1024,
                         sample_weight: np.ndarray | None = None
                         ) -> tuple[float, np.ndarray | None]:
    """KKT violation of ``alpha0`` on the problem ``(X, y, m_scale)``, computed in row blocks
    that stop at the first block violating ``tol``.

    Returns ``(violation, u)``: when the warm start passes, ``violation`` is the exact max
    violation and ``u = Q (zeta - beta)``; otherwise ``violation`` is the max over the rows
    examined so far (a lower bound, already ``> tol``) and ``u`` is None.  A failing check
    therefore costs about ``block_rows / m`` of a full kernel-vector product.
    """
    a0 = np.asarray(alpha0, dtype=np.float64)
    yv = np.asarray(y, dtype=np.float64)
    nu = yv * (a0[:, 0] - a0[:, 1])
    nz = np.flatnonzero(nu)
    m = a0.shape[0]
    u = np.zeros(m)
    Xs, nus = _rows(X, nz), nu[nz]
    step = max(int(block_rows), (1 << 22) // max(nz.size, 1))
    viol = 0.0
    for s in range(0, m, step):
        e = min(m, s + step)
        if nz.size:
            u[s:e] = yv[s:e] * (kernel_matrix(kernel, X[s:e], Xs) @ nus)
        g = dual_gradient(u[s:e], a0[s:e], params, m_scale,
                          None if sample_weight is None else sample_weight[s:e])
        viol = max(viol, kkt_violation_from_grad(g, a0[s:e]))
        if viol > tol:
            return viol, None
    return viol, u


def solve_partition(X, y, kernel: Kernel, params: ODMParams, alpha0, *, m_scale: float,
                    tol: float, max_iter: int, cache_size: float, seed: int,
                    shrinking: bool = True, check_warm_start: bool = True,
                    should_stop: StopFn | None = None,
                    sample_weight: np.ndarray | None = None) -> PartitionOutcome:
    """Solve one local ODM (one partition at one level) from ``alpha0``.

    With ``check_warm_start`` the KKT violation of ``alpha0`` is measured first
    (:func:`warm_start_violation`); if it is already ``<= tol`` the partition is not re-solved
    (``skipped=True``).  This is the unit of work a distributed engine runs per partition.
    ``sample_weight``: the partition's rows' weights (``m_scale`` is then their sum).
    """
    t0 = time.perf_counter()
    a0 = np.asarray(alpha0, dtype=np.float64)
    warm_kkt = np.inf
    if check_warm_start and np.any(a0):
        warm_kkt, u = warm_start_violation(X, y, kernel, params, a0, m_scale, tol,
                                           sample_weight=sample_weight)
        if u is not None:
            return PartitionOutcome(a0.copy(),
                                    dual_objective(u, a0, params, m_scale, sample_weight),
                                    warm_kkt, warm_kkt, 0, True, False, True,
                                    time.perf_counter() - t0)
    res = solve_kernel_dual(X, y, kernel, params, alpha0=a0, m_scale=m_scale, tol=tol,
                            max_iter=max_iter, cache_size=cache_size, shrinking=shrinking,
                            random_state=seed, should_stop=should_stop,
                            sample_weight=sample_weight)
    return PartitionOutcome(res.alpha, float(res.objective), float(res.kkt_violation),
                            float(warm_kkt), int(res.n_iter), bool(res.converged),
                            bool(res.stopped), False, time.perf_counter() - t0, res.newton)


def _rows(X, idx):
    return X[idx] if sp.issparse(X) else X[idx]


def validation_accuracy(X, y, kernel: Kernel, alpha: np.ndarray, X_val, y_val) -> float:
    """Accuracy on ``(X_val, y_val)`` of the kernel model with duals ``alpha`` on ``(X, y)``."""
    nu = y * (alpha[:, 0] - alpha[:, 1])
    f = kernel_decision(X, kernel, nu, Z=X_val)
    return float(np.mean(np.where(f > 0, 1.0, -1.0) == y_val))


def solve_groups(pool: TaskPool, X, y, kernel: Kernel, params: ODMParams, alpha: np.ndarray,
                 groups: list[np.ndarray], *, level: int, seed: int, tol: float,
                 max_iter: int, cache_size: float, shrinking: bool, check_warm_start: bool,
                 m_scales: list[float] | None = None,
                 sample_weight: np.ndarray | None = None) -> list[PartitionOutcome]:
    """Solve every non-empty group of rows as one local problem (seeded by its group number)
    and write the solutions back into ``alpha`` (in place); outcomes in group order.
    A group's ``m_scale`` defaults to its rows (the sum of their ``sample_weight``)."""
    ks = [k for k, g in enumerate(groups) if g.size]
    tasks = []
    for k in ks:
        g = groups[k]
        sw = None if sample_weight is None else sample_weight[g]
        ms = float(default_scale(g.size, sw) if m_scales is None else m_scales[k])
        tasks.append(((_rows(X, g), y[g], kernel, params, alpha[g]),
                      {"m_scale": ms, "sample_weight": sw, "tol": tol, "max_iter": max_iter,
                       "cache_size": cache_size, "seed": local_seed(seed, level, k),
                       "shrinking": shrinking, "check_warm_start": check_warm_start}))
    outs = pool.map(solve_partition, tasks)
    for k, o in zip(ks, outs, strict=True):
        alpha[groups[k]] = o.alpha
    return outs


class PoolLevels:
    """The local :class:`solver.sodm.levels.LevelBackend`: a level's partitions solved in a
    :class:`TaskPool`; the duals live in one ``(M, 2)`` array in input row order, so merging
    partitions is implicit."""

    def __init__(self, pool: TaskPool, X, y, kernel: Kernel, params: ODMParams,
                 finest: np.ndarray, p: int, levels: int, *, seed: int, tol: float,
                 max_iter: int, cache_size: float, shrinking: bool, X_val=None, y_val=None,
                 keep_levels: bool = False, sample_weight: np.ndarray | None = None,
                 partition_gain: float | None = None) -> None:
        self.pool, self.X, self.y, self.kernel, self.params = pool, X, y, kernel, params
        self.finest, self.p, self.levels = finest, p, levels
        self.solve_options = {"seed": seed, "tol": tol, "max_iter": max_iter,
                              "cache_size": cache_size, "shrinking": shrinking,
                              "sample_weight": sample_weight}
        self.sample_weight = sample_weight
        self.X_val, self.y_val = X_val, y_val
        self.keep_levels = keep_levels
        self.alpha = np.zeros((X.shape[0], 2))
        self.level_alpha: dict[int, np.ndarray] = {}
        self._sizes: np.ndarray | None = None  # partition size of every row, last level
        # level 1 (the only level) adds partitions while each gains this much held-out
        # accuracy (solver.sodm.partition_stop); what it kept goes into the level's record
        self.partition_gain = partition_gain
        self.kept: dict[str, Any] = {}
        self.kept_ids: np.ndarray | None = None

    def solve_level(self, step: LevelStep) -> LevelOutcome:
        lvl, M = step.level, self.X.shape[0]
        ids = level_ids(self.finest, self.p, self.levels, lvl) if lvl > 0 \
            else np.zeros(M, dtype=np.int64)
        groups = partition_members(ids, self.p ** lvl)
        sizes = np.bincount(ids, weights=self.sample_weight,
                            minlength=self.p ** lvl)[ids].astype(np.float64)
        if step.rescale and self._sizes is not None:
            self.alpha *= rescale_factors(self._sizes, sizes)[:, None]
        if self.partition_gain is not None and lvl == 1 and len(groups) > 2 \
                and groups[-1].size:
            outs = self._solve_while_gaining(groups, step)
        else:
            outs = solve_groups(self.pool, self.X, self.y, self.kernel, self.params,
                                self.alpha, groups, level=lvl,
                                check_warm_start=step.check_warm_start, **self.solve_options)
        self._sizes = sizes
        if self.keep_levels:
            self.level_alpha[lvl] = self.alpha.copy()
        return LevelOutcome([o.summary() for o in outs],
                            stopped=any(o.stopped for o in outs) or self.pool.stop_requested)

    def _solve_while_gaining(self, groups: list[np.ndarray], step: LevelStep
                             ) -> list[PartitionOutcome]:
        """Level 1's partitions in order, a batch of the pool's size at a time, until one
        gains less than ``partition_gain`` on the last partition's rows (which are solved
        only if none does; :mod:`solver.sodm.partition_stop`). The partitions after the one
        that stopped the fit (solved in its batch) are dropped, so the kept ones do not
        depend on the pool's size."""
        held = groups[-1]
        sw = self.sample_weight
        curve = HeldOutCurve(self.y[held], self.partition_gain,
                             None if sw is None else sw[held])
        X_held = _rows(self.X, held)
        order = [k for k in range(len(groups) - 1) if groups[k].size]
        outs: list[PartitionOutcome] = []
        kept: list[int] = []
        stopped_at = None
        for start in range(0, len(order), self.pool.n_jobs):
            batch = order[start:start + self.pool.n_jobs]
            part = [g if k in batch else g[:0] for k, g in enumerate(groups)]
            got = solve_groups(self.pool, self.X, self.y, self.kernel, self.params,
                               self.alpha, part, level=1,
                               check_warm_start=step.check_warm_start, **self.solve_options)
            for k, o in zip(batch, got, strict=True):
                if stopped_at is not None:  # solved beside the one that stopped the fit
                    self.alpha[groups[k]] = 0.0
                    continue
                outs.append(o)
                kept.append(k)
                nu = self.y[groups[k]] * (o.alpha[:, 0] - o.alpha[:, 1])
                if o.stopped or curve.add(kernel_decision(_rows(self.X, groups[k]),
                                                          self.kernel, nu, Z=X_held)):
                    stopped_at = k
            if stopped_at is not None:
                break
        if stopped_at is None:
            outs += solve_groups(self.pool, self.X, self.y, self.kernel, self.params,
                                 self.alpha, [g[:0] for g in groups[:-1]] + [held], level=1,
                                 check_warm_start=step.check_warm_start, **self.solve_options)
            kept.append(len(groups) - 1)
        self.kept_ids = np.array(kept, dtype=np.int64)
        self.kept = {"partitions_kept": len(outs), "partitions_planned": len(groups),
                     "held_out_rows": int(held.size),
                     "held_out_accuracy": [float(a) for a in curve.accuracies]}
        return outs

    def record_extras(self, level: int) -> dict[str, Any]:
        extras = dict(self.kept) if level == 1 else {}
        if self.X_val is None or self.y_val is None:
            return extras
        extras["val_accuracy"] = validation_accuracy(self.X, self.y, self.kernel, self.alpha,
                                                     self.X_val, self.y_val)
        return extras


def sodm_kernel(X, y, kernel: Kernel, params: ODMParams, *, p: int | None = None,
                levels: int | None = None, n_strata: int | None = None,
                warm_start: str = "rescale", final_global_solve: bool | None = None,
                n_jobs: int | None = 1, tol: float = 1e-3, max_iter: int = 1000,
                cache_size: float = 512.0, random_state=None, X_val=None, y_val=None,
                progress: ProgressFn | None = None, should_stop: StopFn | None = None,
                convergence_test: bool = True, shrinking: bool = True,
                landmark_candidates: int | None = None, keep_levels: bool = False,
                sample_weight: np.ndarray | None = None,
                partition_gain: float | None = None) -> SODMResult:
    """SODM Algorithm 1 (see the module docstring); ``y`` in {-1, +1}.

    ``levels=0`` (one partition) is the exact solver.  ``random_state`` is an int seed (None
    means 0).  ``progress(fraction, message, record)`` is called after every level with that
    level's history record; ``should_stop()`` is polled between levels and inside the local
    solves (a stop returns the current concatenated ``alpha`` with ``stopped=True``).
    ``keep_levels`` stores a copy of every level's solution in ``result.level_alpha``.
    ``landmark_candidates`` bounds the rows landmarks are chosen from (None:
    ``DEFAULT_LANDMARK_CANDIDATES``; a value >= M means all rows).  ``sample_weight``
    (positive) weights each row's loss; every partition's ``M`` is then its weights' sum.
    ``partition_gain`` (a fraction, e.g. 0.001 for 0.1 points; one level and no final
    global solve only): level 1 adds partitions while each raises the accuracy on the last
    partition's rows by at least this much, and the rest stay zero
    (:mod:`solver.sodm.partition_stop`; the level's record says how many were kept).
    """
    params.validate()
    kernel.validate()
    if p is not None and int(p) < 2:
        raise ValueError(f"p must be >= 2, got {p!r}")
    if warm_start not in ("rescale", "literal"):
        raise ValueError(f"warm_start must be 'rescale' or 'literal', got {warm_start!r}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if partition_gain is not None and not 0 <= partition_gain < 1:
        raise ValueError(f"partition_gain must be in [0, 1), got {partition_gain!r}")
    X, y = check_Xy(X, y)
    M = X.shape[0]
    sample_weight = check_weights(sample_weight, M)
    shape = resolve_structure(M, cache_size, p=p, levels=levels, n_strata=n_strata,
                              landmark_candidates=landmark_candidates,
                              final_global_solve=final_global_solve)
    p, L, S, final = shape.p, shape.levels, shape.n_strata, shape.final_global_solve
    if L < 0:
        raise ValueError(f"levels must be >= 0, got {levels!r}")
    if S < 1:
        raise ValueError(f"n_strata must be >= 1, got {n_strata!r}")
    seed = 0 if random_state is None else int(random_state)
    if X_val is None or y_val is None:
        X_val = y_val = None
    else:
        X_val = X_val if sp.issparse(X_val) else np.asarray(X_val, dtype=np.float64)
        y_val = np.asarray(y_val, dtype=np.float64).ravel()
    t_start = time.perf_counter()
    result = SODMResult(alpha=np.zeros((M, 2)), p=p)
    if M == 0:
        return result
    if L > 0:
        lm, strata = stratify(X, kernel, min(S, M), seed,
                              max_candidates=shape.landmark_candidates)
        finest = stratified_partitions(strata, p ** L, seed)
        result.landmarks, result.strata, result.partitions = lm, strata, finest
    else:
        finest = np.zeros(M, dtype=np.int64)
    # inline partitions of a level reuse each other's kernel-matrix pages (solver.core.buffers)
    with TaskPool(n_jobs if resolve_n_jobs(n_jobs) > 1 else 1, should_stop) as pool, \
            buffers.reuse():
        backend = PoolLevels(pool, X, y, kernel, params, finest, p, L, seed=seed, tol=tol,
                             max_iter=max_iter, cache_size=cache_size, shrinking=shrinking,
                             X_val=X_val, y_val=y_val, keep_levels=keep_levels,
                             sample_weight=sample_weight,
                             partition_gain=partition_gain if L == 1 and not final else None)
        run = run_levels(backend, L, final_global_solve=final, warm_start=warm_start,
                         convergence_test=convergence_test, progress=progress,
                         should_stop=should_stop, started=t_start)
    result.alpha, result.level_alpha = backend.alpha, backend.level_alpha
    result.kept_partitions = backend.kept_ids
    result.history, result.stopped = run.history, run.stopped
    result.converged_early, result.last_level = run.converged_early, run.last_level
    return result
