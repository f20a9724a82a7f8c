"""Automatic ``lam`` / ``gamma`` / ``theta`` ("auto") for the ODM estimators.

Every choice is made on the training rows given to ``fit`` (already min-max scaled with the
model's own scaler), by k-fold stratified cross-validation accuracy of the *exact* solver
(``ODMClassifier`` with the estimator's kernel, ``upsilon``, ``tol`` and intercept option):

1. **Coarse grid** over the axes that are "auto" (the others keep the estimator's value):
   ``lam`` in 10^0 .. 10^6 (one point per decade), ``gamma`` as a multiple 10^-1 .. 10^3 of
   the "scale" value ``1 / (n_features Var(X))`` (RBF and polynomial kernels only),
   ``theta`` in {0.2, 0.5, 0.8}.
2. **Successive halving** (Jamieson & Talwalkar, AISTATS 2016): all candidates are scored on
   a stratified subsample of ``n / eta^k`` rows (the smallest such size of at least
   ``min_rows``; all rows when there are fewer than ``eta * min_rows``), the best ``1/eta`` of
   them (at least two) go on to ``eta`` times more rows (nested subsamples, the last one all
   rows), until all rows are used or the next rung would not fit the budget. A rung that
   would not fit whole takes the best of the promoted candidates that do (at least two).
   Rungs of more than ``max_rows`` rows (default 200,000) are left out. A kernel rung is
   at most the rows whose fold fits hold no more rows than one solve of the final fit
   (``solve_rows``: those whose float32 kernel fits ``cache_size``; ``rungs_in_cache``):
   larger sizes give way to one rung of that many rows where it is at least sqrt(eta) times
   the largest size under it (else the ladder ends there). Beyond it a CV fit runs on cached
   kernel columns, up to several times dearer than the cost model's price
   (docs/auto-params.md, "Rungs within the kernel cache"), and scores a model larger than
   any of the final fit's partitions.
   When ``theta`` is searched with ``lam`` or ``gamma`` (``stage_theta``), the first rung
   scores only the middle theta (0.5), a third of the grid; each (lam, gamma) it promotes
   goes on at every grid theta, the middle one first. If no later rung runs, those are
   scored on the first rung's rows (stage "theta") before the refinement.
3. **Local refinement** on the last rung's rows: a pattern search around the best point,
   steps of half a decade in ``lam`` and ``gamma`` and 0.15 in ``theta``, then half those
   steps, while the budget lasts, and spending at most the budget's floor
   (``refine_capped``; 10 s predicted, so a search whose budget is its floor refines as
   before): a larger budget buys rows, not refinement. On larger data the refinement's
   moves were within the folds' standard error and it cost up to three quarters of the
   search (issue 34, docs/auto-params.md), so a kernel search whose budget is at least
   twice its floor does not refine at all (``refine_under_floors``): there ``select_work``
   takes such moves as ties. The rungs keep its reserve either way.

**Warm starts along the lam path** (``warm_lam``, on by default; binary kernel problems):
each CV fit starts from the duals of the same fold's fit at the nearest lam already scored
with the same gamma, theta and rows (the smaller lam on a tie), scaled by the ratio of the
pair step's diagonals (:func:`_rescaled_dual`). The start depends only on the order of the
search, so the choice stays the same on any machine; the optimum is the same, the work to
reach it smaller (issue 34, docs/auto-params.md "Levers for issue 34").

**One kernel matrix per (rows, fold, gamma)** (``share_kernels``, on by default; binary
kernel problems): the CV fits of every lam and theta with the same gamma on the same fold
read the matrix the first of them computed (:mod:`solver.exact.kernel_memo`, at most the
fits' ``cache_size`` of matrices kept, least recently used dropped): the same values, the
same choice, fewer kernel evaluations.

**Float32 kernel values** (``cv_float32``, on by default): every CV fit keeps its kernel
matrix in float32, as LIBSVM's cache does, where the fold's float64 matrix would fit its
``cache_size`` (the final fit's partitions are float32 already): half the memory each
matrix-vector product and sweep reads, twice the matrices the memo keeps; the solves are
refined in float64 against those values, so a CV score moves only by their rounding.

**A rung's fits by kernel** (always): a rung scores its candidates by gamma, then fold, so
each kept matrix is computed once per rung even where the memo holds one, the scores those
of scoring the candidates one by one (:meth:`_Search.score_all`).

**Pages mapped once** (always): the CV fits run inside ``solver.core.buffers.reuse()``, so a
kernel matrix or face factor whose array is gone hands its mapped pages to the next one of
about its size instead of mapping new ones.

**Large lam predicted dearer** (``lam_cost_slope``, 0.5 by default): where the budget is
above its floor, a kernel candidate's predicted cost is multiplied by ``1 + e slope (log10
lam - 3)`` for lam over 10^3 (the Newton step factors larger faces there, which a model of
rows alone does not see), so the budget buys fewer of the slowest fits; ``e`` = (budget -
floor) / floor, at most 1, so the weight has no step at the floor. ``cv_tol``,
``refine_min_gain``, ``halve_pairs`` (the rung after the theta rung promotes a third of its
(lam, gamma) pairs, not of its candidates), ``select_se`` (the cheapest candidate within
that many standard errors of the best, :meth:`_Search.pick`), ``theta_rung`` (the rung
whose promoted candidates get the other thetas; 0, the first), ``refine_screen`` (a refinement
neighbour scored on the previous rung's rows first) and ``partition_gain`` (points: SODM's
final fit stops adding level-1 partitions once one gains less held-out accuracy,
:mod:`solver.sodm.partition_stop`; the local backend only) are levers measured beside
these, off by default.

**The learning curve's plateau** (``plateau_points``, 0.1 by default): when the best CV
accuracy of the last halving rung is less than 0.1 points above the previous rung's, models
trained on the previous rung's fold-training rows were as accurate as on three times more,
and the result says so (``plateau_rows``, :func:`plateau_rows`). SODM's final fit then cuts
its partitions to about that size (at least its 5,000-row minimum) instead of the largest
its cache holds (:func:`solver.sodm.hierarchy.plateau_p`); while the curve still rises
the partitions stay as large as the cache allows. Only CV accuracies decide, so the choice
is the same on any machine.

**The least work among the equally accurate** (``select_work``, 1.0 by default): within
one binomial standard error of the most accurate candidate on the last rung's rows the
accuracies do not rank the candidates, while their final fits' costs differ severalfold (a
theta band of 0.2 against 0.5 at lam 10^6 gives larger Newton faces). So the choice is the
candidate whose CV fits did the least counted work (:attr:`_Score.work`: factored faces and
swept kernel values, the same on any machine) among those within that error and with at
least the most accurate's lam, where that work is at most half the most accurate's; else
the most accurate. Only where the budget is at least twice its floor; the most accurate
candidate passed over is recorded (``passed_over``).

**Racing the folds** (``race_se``, 2 by default): a halving rung scores its candidates fold
by fold, and after each fold but the last a candidate whose accuracy on the rows validated
so far is more than ``race_se`` standard errors of the difference (binomial, both
candidates') below the rung's ``keep``-th best stops there (Maron & Moore's Hoeffding races,
NIPS 1993, with a normal bound). ``keep`` is the rung's promotions, or 1 (its best) where
the predicted budget says no later rung follows and no theta stage takes its promotions.
A stopped candidate keeps the folds it ran and ranks after every candidate scored on all
of them, so it is never promoted, chosen, nor counted by ``select_work`` or the plateau.
Only decisions on CV accuracies, so the same request races the same candidates on any
machine; the budget still charges each candidate its whole prediction, so the rungs are
those of scoring every fold. A weighted or balanced score races nothing (its error is not
binomial).

**Two folds for a large search** (``large_folds``, off by default; a lever measured and
not adopted): with 2, a kernel search whose budget is at least twice its floor scores every
candidate by 2-fold CV instead of ``folds``. Two fits on half the rows cost about a third
of three on two thirds, but the choices were less accurate on ijcnn1's validation draws and
test split (docs/auto-params.md, "Tried and not adopted: two folds for a large search").

**Scoring two of three folds** (``score_folds``, off by default; a lever measured and not
adopted: its choices were noisier on ijcnn1's and ijcnn1.t's validation draws,
docs/auto-params.md, "Tried and not adopted: two of three folds"): with 2, a
kernel search whose budget is at least twice its floor scores each candidate on the first 2
of its ``folds`` folds only. The fold fits keep their ``(folds - 1) / folds`` of a rung's
rows and the cost model still prices every fold, so the rungs and candidates are those of
the full CV and the search costs about two thirds; its scores rest on two thirds of a
rung's rows, and ``select_work``'s and ``select_se``'s errors count those validated rows.

Equal CV accuracy goes to the smaller ``lam``, then the smaller ``gamma`` (the smoother,
cheaper model), then ``theta`` nearer 0.5. A candidate is scored by the mean accuracy of its
folds on the validation rows; every score is kept in the CV table of ``fit_info["auto"]``.
With weights (:class:`CVWeights`) every CV fit gets its rows' weights and a fold's score is
the accuracy weighted by the rows' ``sample_weight``, or with ``class_weight`` set the
(sample-weighted) balanced accuracy: the score the weights say the model is for.

**Budget**: the search may spend ``max(floor_seconds, factor * F)`` CPU seconds, ``F`` the
CPU seconds of the final fit (defaults 10 s and 3). The decisions are made on *predicted*
seconds (:class:`CostModel`: a fit of ``m`` rows costs ``q (c0 + c1 m^a (d + d0))``, ``d``
the mean nonzeros per row, ``q`` the binary problems, ``a`` 2 for kernels and 1 for the
linear kernel), never on the clock, so the same rows and request give the same choice on
any machine and under any load (the service's job and the library's fit agree). ``F`` is
predicted the same way: SODM solves ``n / m`` partitions of ``m`` rows (those whose float32
kernel fits ``cache_size``), the linear solvers all rows at once. The first rung always
runs; a later rung, or a refinement step, only when its predicted cost fits what is left.
The measured CPU seconds of the search (and, by the caller, of the final fit) are recorded
beside the prediction, with the budget checked on the measured numbers.

**Rows read**: before scoring anything, the search knows the largest rung its budget can
ever allow (``row_bound``); it only touches the first ``row_bound`` rows of its stratified
order. Given :class:`~solver.core.row_blocks.LazyRows` instead of a matrix (a Spark job's worker,
whose rows stay in the stored file), it reads just those rows, so the memory it needs
grows with the budget, not with the data.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from solver.core import buffers
from solver.core.cputime import CpuClock
from solver.core.row_blocks import LazyRows
from solver.exact.kernel_memo import KernelMemo
from solver.exceptions import FitCancelled

__all__ = ["AUTO", "AUTO_PARAMS", "CostModel", "KERNEL_COST", "LINEAR_COST", "SearchSettings",
           "AutoResult", "factored_faces", "is_auto", "plateau_rows", "search",
           "with_final_fit"]

AUTO = "auto"
AUTO_PARAMS = ("lam", "gamma", "theta")


MakeFn = Callable[[dict[str, float]], Any]


@dataclass(frozen=True)
class CVWeights:
    """Row weights of a search: ``fit`` (sample x class weight) for the CV fits, ``score``
    (the sample weights alone, or None) for the validation rows' score, and ``balanced``:
    score by balanced accuracy (the model has a ``class_weight``)."""

    fit: np.ndarray | None = None
    score: np.ndarray | None = None
    balanced: bool = False

    def fold_score(self, y: np.ndarray, pred: np.ndarray, va: np.ndarray) -> float:
        """The score of predictions ``pred`` of validation rows ``va`` (labels ``y``)."""
        w = None if self.score is None else self.score[va]
        if self.balanced:
            from sklearn.metrics import balanced_accuracy_score

            return float(balanced_accuracy_score(y, pred, sample_weight=w))
        return float(np.average(pred == y, weights=w))


def is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == AUTO


@dataclass(frozen=True)
class CostModel:
    """Predicted CPU seconds of one exact-solver fit (one BLAS thread): ``q * (overhead +
    unit * rows**exponent * (width + width_offset))``, ``width`` the mean nonzeros per row.
    The constants come from ``bench.autotune_cost`` (docs/auto-params.md); the faces the
    Newton step factors grow with lam, so one fit may take a few times more or less."""

    exponent: float
    overhead: float
    unit: float
    width_offset: float

    def fit_seconds(self, rows: float, width: float, problems: int) -> float:
        return problems * (self.overhead
                           + self.unit * rows ** self.exponent * (width + self.width_offset))


KERNEL_COST = CostModel(exponent=2.0, overhead=1e-4, unit=3.29e-10, width_offset=100.0)
LINEAR_COST = CostModel(exponent=1.0, overhead=1.26e-3, unit=4.9e-8, width_offset=0.0)
# One kernel value a coordinate-descent epoch reads, counted as this many flops of a face
# factorization: a hand-set weight (a sweep is bound by memory, a factorization by
# arithmetic), not fitted (docs/auto-params.md, "The cheapest of the equally accurate").
EPOCH_WORK = 40.0
# ``select_work`` takes a cheaper candidate only at most this share of the best's work, so
# last-bit differences in counted faces between machines cannot flip the choice
WORK_SHARE = 0.5


@dataclass(frozen=True)
class SearchSettings:
    """The search's knobs (see the module docstring)."""

    folds: int = 3
    eta: int = 3
    min_rows: int = 500
    keep_min: int = 2
    log_lam: tuple[float, ...] = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    log_gamma_mult: tuple[float, ...] = (-1.0, 0.0, 1.0, 2.0, 3.0)
    theta: tuple[float, ...] = (0.2, 0.5, 0.8)
    stage_theta: bool = True
    log_step: float = 0.5
    theta_step: float = 0.15
    refine_rounds: int = 2
    theta_bounds: tuple[float, float] = (0.05, 0.95)
    log_lam_bounds: tuple[float, float] = (-2.0, 8.0)
    log_gamma_bounds: tuple[float, float] = (-3.0, 5.0)
    budget_factor: float = 3.0
    budget_floor_seconds: float = 10.0
    max_rows: int | None = 200_000
    cv_tol: float | None = None
    warm_lam: bool = True
    refine_min_gain: float = 0.0
    lam_cost_slope: float = 0.5
    share_kernels: bool = True
    select_se: float = 0.0
    refine_capped: bool = True
    plateau_points: float | None = 0.1
    theta_rung: int = 0
    refine_screen: bool = False
    partition_gain: float | None = None
    cv_float32: bool = True
    halve_pairs: bool = False
    rungs_in_cache: bool = True
    select_work: float = 1.0
    refine_under_floors: float | None = 2.0
    large_folds: int | None = None
    race_se: float | None = 2.0
    score_folds: int | None = None


# what ``search`` uses when given no settings (``bench.auto_params --settings`` replaces it
# in its own process for A/B runs)
DEFAULT_SETTINGS = SearchSettings()


@dataclass(frozen=True, order=True)
class _Point:
    """A candidate: log10 lam, log10 (gamma / scale gamma), theta (rounded keys)."""

    log_lam: float
    log_gamma_mult: float
    theta: float


@dataclass
class _Score:
    point: _Point
    rows: int
    stage: str
    mean_accuracy: float
    std_accuracy: float
    fold_accuracy: list[float]
    cpu_seconds: float
    faces: list[list[int]]  # per fold: the faces its Newton steps factored (NewtonWork)
    epochs: list[int] = field(default_factory=list)  # per fold: coordinate-descent epochs
    fit_rows: list[int] = field(default_factory=list)  # per fold: the rows it was fitted on
    raced: bool = False  # stopped before its last fold (``race_se``): ranked after the rest

    @property
    def work(self) -> float:
        """The CV fits' counted work (the same on any machine): the faces' factorizations,
        ``s^3 / 3`` each, plus ``EPOCH_WORK`` per kernel value each epoch reads (``m^2``
        for ``m`` fold-training rows)."""
        factors = sum(float(s) ** 3 / 3.0 for fold in self.faces for s in fold)
        sweeps = sum(EPOCH_WORK * e * float(m) ** 2 for e, m in zip(self.epochs, self.fit_rows,
                                                                  strict=True))
        return factors + sweeps


@dataclass
class AutoResult:
    """The chosen values and how they were found (``info()`` is what ``fit_info`` keeps)."""

    lam: float
    gamma: float
    theta: float
    auto: tuple[str, ...]
    gamma_scale: float
    table: list[dict[str, Any]]
    rungs: list[dict[str, Any]]
    folds: int
    rows: int
    cpu_seconds: float
    predicted_cpu_seconds: float
    wall_seconds: float
    budget_cpu_seconds: float
    final_fit_estimate_cpu_seconds: float
    stop_reason: str
    row_bound: int = 0
    settings: SearchSettings = field(default_factory=SearchSettings)
    kernel_matrices: dict[str, int] = field(default_factory=dict)
    plateau_rows: int | None = None
    # select_work: the most accurate candidate the choice passed over, and both works
    passed_over: dict[str, Any] | None = None
    scored_folds: int | None = None  # of ``folds`` (``score_folds``); None: every fold

    def info(self) -> dict[str, Any]:
        s = self.settings
        staged = " (first rung at the middle theta only)" if _stages_theta(s, self.auto) else ""
        return {
            "auto": list(self.auto),
            "chosen": {"lam": self.lam, "gamma": self.gamma, "theta": self.theta},
            "gamma_scale": self.gamma_scale,
            "method": (f"successive halving (eta={s.eta}, first rung >= {s.min_rows} rows) over "
                       f"lam 10^{s.log_lam[0]:g}..10^{s.log_lam[-1]:g}, gamma "
                       f"10^{s.log_gamma_mult[0]:g}..10^{s.log_gamma_mult[-1]:g} x scale, "
                       f"theta {list(s.theta)}{staged}; then pattern search on the last rung; "
                       f"{self.folds}-fold stratified CV accuracy, exact solver"),
            "folds": self.folds,
            "scored_folds": self.scored_folds or self.folds,
            "rows": self.rows,
            "row_bound": self.row_bound,
            "rungs": self.rungs,
            "cv_table": self.table,
            "cpu_seconds": self.cpu_seconds,
            "predicted_cpu_seconds": self.predicted_cpu_seconds,
            "wall_seconds": self.wall_seconds,
            "budget_cpu_seconds": self.budget_cpu_seconds,
            "final_fit_estimate_cpu_seconds": self.final_fit_estimate_cpu_seconds,
            "budget_rule": (f"search CPU <= max({s.budget_floor_seconds:g} s, "
                            f"{s.budget_factor:g} x final fit CPU), both predicted by the "
                            "cost model for the decisions, measured for the check"),
            "budget_floor_seconds": s.budget_floor_seconds,
            "budget_factor": s.budget_factor,
            "stop_reason": self.stop_reason,
            "kernel_matrices": self.kernel_matrices,
            "plateau_rows": self.plateau_rows,
            "plateau_points": s.plateau_points,
            "passed_over": self.passed_over,
        }


def factored_faces(est) -> list[int]:
    """The size of every face a fitted estimator's Newton steps factored, from its history
    (``NewtonWork.record``; none for the linear kernel)."""
    return [int(f) for rec in est.history_ for f in rec.get("faces_factored", ())]


def _full_dual(est, y_idx: np.ndarray) -> np.ndarray:
    """The ``(m, 2)`` dual ``[zeta, beta]`` of a fitted binary kernel ``ODMClassifier``,
    rebuilt from its support vectors' coefficients ``y (zeta - beta)`` (one of the pair is
    zero at the solver's every step)."""
    alpha = np.zeros((len(y_idx), 2))
    sign = np.where(y_idx[est.support_] == 1, 1.0, -1.0)
    d = sign * est.dual_coef_[0]
    alpha[est.support_, 0] = np.maximum(d, 0.0)
    alpha[est.support_, 1] = np.maximum(-d, 0.0)
    return alpha


def _rescaled_dual(alpha: np.ndarray, old: _Point, new: _Point, m: int,
                   upsilon: float) -> np.ndarray:
    """``alpha`` (the duals at ``old``'s lam) scaled towards ``new``'s lam as a pair's
    closed-form step scales with its diagonal: ``(1 + d_old) / (1 + d_new)``, ``d`` the
    zeta (``m c upsilon``) or beta (``m c``) diagonal term of each lam, unit kernel
    diagonal (so about ``lam_new / lam_old`` where ``d`` dominates, 1 at large lam)."""
    def diag(p: _Point) -> np.ndarray:
        c = (1.0 - p.theta) ** 2 / (10.0 ** p.log_lam * upsilon)
        return np.array([m * c * upsilon, m * c])

    return alpha * ((1.0 + diag(old)) / (1.0 + diag(new)))


def _mean_width(X) -> float:
    """Mean nonzeros per row (sparse or dense)."""
    n = max(1, X.shape[0])
    nnz = X.nnz if hasattr(X, "nnz") else np.count_nonzero(X)
    return float(nnz) / n


def _stratified_order(y_idx: np.ndarray, folds: int, rng: np.random.Generator) -> np.ndarray:
    """A row order whose every prefix holds the classes in proportion (nested subsamples);
    the first ``folds`` rows of each class come first so every rung can be stratified."""
    n = len(y_idx)
    rank = np.empty(n)
    for c in np.unique(y_idx):
        idx = np.flatnonzero(y_idx == c)
        idx = idx[rng.permutation(len(idx))]
        r = (np.arange(len(idx)) + rng.random(len(idx))) / len(idx)
        r[:folds] -= 1.0
        rank[idx] = r
    return np.argsort(rank, kind="stable")


def plateau_rows(rungs: list[dict[str, Any]], table: list[_Score], folds: int,
                 points: float | None) -> int | None:
    """The training rows from which the learning curve is flat: the previous halving rung's
    fold-training rows when the best CV accuracy of the last halving rung is less than
    ``points`` accuracy points above that rung's; None while the curve still rises, with
    fewer than two halving rungs or with ``points`` None."""
    halving = [r for r in rungs if str(r["stage"]).startswith("halving")]
    if points is None or len(halving) < 2:
        return None
    prev, last = halving[-2], halving[-1]

    def best(rung: dict[str, Any]) -> float:
        return max(sc.mean_accuracy for sc in table
                   if sc.stage == rung["stage"] and sc.rows == rung["rows"] and not sc.raced)

    if best(last) - best(prev) >= points / 100.0:
        return None
    return int(prev["rows"]) * (folds - 1) // folds


def _stages_theta(s: SearchSettings, auto: tuple[str, ...]) -> bool:
    """The first rung holds the middle theta only: theta is searched with lam or gamma."""
    return s.stage_theta and "theta" in auto and len(auto) > 1 and len(s.theta) > 1


def _cache_rows(s: SearchSettings, solve_rows: int | None) -> int | None:
    """With ``rungs_in_cache``, the most rows of a rung whose fold fits (``(k - 1) / k`` of
    them) have at most ``solve_rows`` rows (at least ``min_rows``); None: no such cap."""
    if not s.rungs_in_cache or solve_rows is None:
        return None
    return max(s.min_rows, solve_rows * s.folds // (s.folds - 1))


def _with_large_folds(s: SearchSettings, budget: float, linear: bool) -> SearchSettings:
    """``s`` with ``large_folds`` folds for a kernel search whose budget is at least twice
    its floor (where ``select_work`` applies and nothing refines); else ``s`` (also with
    ``large_folds`` None, the default)."""
    k = s.large_folds
    if (k is None or linear or k >= s.folds
            or budget < 2.0 * s.budget_floor_seconds):
        return s
    return replace(s, folds=k)


def _scored_folds(s: SearchSettings, budget: float, linear: bool) -> int:
    """How many of its ``folds`` folds a candidate is scored on: ``score_folds`` for a
    kernel search whose budget is at least twice its floor, else all of them."""
    k = s.score_folds
    if (k is None or linear or k >= s.folds or k < 1
            or budget < 2.0 * s.budget_floor_seconds):
        return s.folds
    return k


def _rung_sizes(n: int, s: SearchSettings, cache_rows: int | None = None) -> list[int]:
    """Rows per rung: n, n/eta, n/eta^2, ... down to the first size of at least ``min_rows``
    (all rows when n < eta * min_rows), smallest first; sizes over ``max_rows`` are left
    out (the smallest always stays). Sizes over ``cache_rows`` give way to one rung of
    ``cache_rows`` when it is at least sqrt(eta) times the largest size under it, else the
    ladder ends there: no two rungs of about the same rows, and no rung dearer than the
    ladder's."""
    sizes = [n]
    while sizes[-1] // s.eta >= s.min_rows:
        sizes.append(sizes[-1] // s.eta)
    capped = [m for m in sizes if s.max_rows is None or m <= s.max_rows] or sizes[-1:]
    capped = capped[::-1]
    if cache_rows is not None and capped[-1] > cache_rows:
        capped = [m for m in capped if m <= cache_rows]
        if not capped or capped[-1] * math.sqrt(s.eta) <= cache_rows:
            capped.append(cache_rows)
    return capped


class _Search:
    def __init__(self, make: MakeFn, linear: bool, Xs, y: np.ndarray, *, gamma_scale: float,
                 fixed: dict[str, float], auto: tuple[str, ...], seed: int,
                 settings: SearchSettings, should_stop: Callable[[], bool] | None,
                 progress: Callable[[float, str], None] | None,
                 solve_rows: int | None, weights: CVWeights | None = None) -> None:
        self.make = make
        self.weights = weights or CVWeights()
        self.Xs = Xs
        self.y = y
        self.gamma_scale = gamma_scale
        self.fixed = fixed
        self.auto = auto
        self.seed = seed
        self.s = settings
        self.should_stop = should_stop
        self.progress = progress
        self.scores: dict[tuple[_Point, int], _Score] = {}
        self.table: list[_Score] = []
        classes, y_idx = np.unique(y, return_inverse=True)
        self.y_idx = y_idx
        self.cost = LINEAR_COST if linear else KERNEL_COST
        self.problems = 1 if len(classes) <= 2 else len(classes)
        # warm starts along the lam path: binary kernel problems (the duals of each fold)
        self.warm = settings.warm_lam and not linear and self.problems == 1
        self.duals: dict[tuple[_Point, int, int], np.ndarray] = {}
        # one kernel matrix per (rows, fold, gamma), kept within the fits' cache_size
        self.shared = settings.share_kernels and not linear and self.problems == 1
        self.memo: KernelMemo | None = None
        self.folds_reversed = False  # the next scoring runs its folds last to first
        self.passed_over: _Score | None = None  # the most accurate, where select_work took another
        lazy = isinstance(Xs, LazyRows)
        self.width = Xs.stats.width if lazy else _mean_width(Xs)
        n = float(len(y))
        m_solve = n if linear or solve_rows is None else min(n, float(solve_rows))
        self.final_estimate = n / m_solve * self.fit_seconds(m_solve)
        self.budget = max(settings.budget_floor_seconds,
                          settings.budget_factor * self.final_estimate)
        settings = self.s = _with_large_folds(settings, self.budget, linear)
        self.scored_folds = _scored_folds(settings, self.budget, linear)
        self.predicted = 0.0  # predicted CPU seconds of the candidates scored so far
        self.reported = 0.0  # the share of those of the folds fitted so far (progress)
        self.order = _stratified_order(y_idx, settings.folds, np.random.default_rng(seed))
        self._splits: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        cache_rows = _cache_rows(settings, None if linear else solve_rows)
        self.sizes = _rung_sizes(len(y), settings, cache_rows)
        # why the last rung may hold fewer than all rows
        self.cut = (f"row cap ({settings.max_rows})" if self.sizes == _rung_sizes(len(y), settings)
                    else f"kernel cache ({cache_rows} rows)")
        self.row_bound = self._row_bound()
        # rows read on demand: only the prefix of the order that some rung may use
        self.positions = np.sort(self.order[:self.row_bound]) if lazy else None
        self.Xs = Xs.load(self.positions) if lazy else Xs

    # ---------------------------------------------------------------------- candidates
    def point(self, log_lam: float, log_gm: float, theta: float) -> _Point:
        lo, hi = self.s.theta_bounds
        return _Point(round(float(log_lam), 4), round(float(log_gm), 4),
                      round(min(hi, max(lo, float(theta))), 4))

    def mid_theta(self) -> float:
        return sorted(self.s.theta)[len(self.s.theta) // 2]

    def grid(self, only_mid_theta: bool = False) -> list[_Point]:
        lams = self.s.log_lam if "lam" in self.auto else (math.log10(self.fixed["lam"]),)
        gms = (self.s.log_gamma_mult if "gamma" in self.auto
               else (math.log10(self.fixed["gamma"] / self.gamma_scale),))
        thetas = self.s.theta if "theta" in self.auto else (self.fixed["theta"],)
        if only_mid_theta:
            thetas = (self.mid_theta(),)
        return [self.point(a, b, c) for a in lams for b in gms for c in thetas]

    def all_thetas(self, cands: list[_Point]) -> list[_Point]:
        """Each promoted (lam, gamma) at every grid theta, the middle one first."""
        mid = self.mid_theta()
        thetas = sorted(self.s.theta, key=lambda t: abs(t - mid))
        return [self.point(p.log_lam, p.log_gamma_mult, t) for p in cands for t in thetas]

    def rows(self, idx: np.ndarray):
        """The scaled training rows at positions ``idx``."""
        if self.positions is None:
            return self.Xs[idx]
        return self.Xs[np.searchsorted(self.positions, idx)]

    def values(self, p: _Point) -> dict[str, float]:
        return {"lam": 10.0 ** p.log_lam, "gamma": self.gamma_scale * 10.0 ** p.log_gamma_mult,
                "theta": p.theta}

    def fit_values(self, p: _Point) -> dict[str, float]:
        """What ``make`` gets for a CV fit: the candidate's values, plus ``tol`` when the
        settings loosen the CV fits' tolerance (``cv_tol``)."""
        vals = self.values(p)
        if self.s.cv_tol is not None:
            vals["tol"] = float(self.s.cv_tol)
        return vals

    def pick(self, rows: int) -> _Score:
        """The choice among the candidates scored on ``rows`` rows: the most preferred, or
        with ``select_se > 0`` the one the cost model predicts cheapest (:meth:`candidate_seconds`,
        then :meth:`preference`) among those whose accuracy is within ``select_se`` standard
        errors of the best's (a cost-aware one-standard-error rule, after Hastie, Tibshirani
        & Friedman, ESL 7.10; the binomial error of the best's accuracy on ``rows``
        validation predictions). Where the predictions do not depend on lam (the budget at
        its floor, lam up to 10^3) that is the most preferred."""
        scored = sorted((sc for (_, m), sc in self.scores.items() if m == rows),
                        key=self.preference)
        best = scored[0]
        if self.s.select_se <= 0:
            return best
        acc = best.mean_accuracy
        floor = acc - self.s.select_se * math.sqrt(max(acc * (1.0 - acc), 0.0)
                                                   / self.validated(rows))
        return min((sc for sc in scored if sc.mean_accuracy >= floor and not sc.raced),
                   key=lambda sc: (self.candidate_seconds(sc.point, rows),
                                   self.preference(sc)))

    @staticmethod
    def preference(sc: _Score) -> tuple:
        """Sort key: scored on every fold, best accuracy, then :meth:`tie_break`."""
        return (sc.raced, -sc.mean_accuracy, *_Search.tie_break(sc.point))

    @staticmethod
    def tie_break(p: _Point) -> tuple:
        """Among equal accuracies: smaller lam, smaller gamma, theta nearer 0.5."""
        return (p.log_lam, p.log_gamma_mult, abs(p.theta - 0.5))

    # ------------------------------------------------------------------------ scoring
    def splits(self, rows: int) -> list[tuple[np.ndarray, np.ndarray]]:
        if rows not in self._splits:
            from sklearn.model_selection import StratifiedKFold

            idx = np.sort(self.order[:rows])
            skf = StratifiedKFold(n_splits=self.s.folds, shuffle=True,
                                  random_state=self.seed % (2**31 - 1))
            self._splits[rows] = [(idx[tr], idx[va])
                                  for tr, va in skf.split(np.zeros(rows), self.y_idx[idx])
                                  ][:self.scored_folds]
        return self._splits[rows]

    def validated(self, rows: int) -> int:
        """The validation predictions a score on ``rows`` rows rests on (every fold's, or
        ``score_folds``' share)."""
        return sum(len(va) for _, va in self.splits(rows))

    def score(self, p: _Point, rows: int, stage: str) -> _Score:
        """``p``'s CV score on ``rows`` rows (computed once)."""
        return self.score_all([p], rows, stage)[0]

    def score_all(self, cands: list[_Point], rows: int, stage: str,
                  done: Callable[[int, int], None] | None = None,
                  race: int | None = None) -> list[_Score]:
        """The CV scores of ``cands`` on ``rows`` rows, in their order (each computed once).

        The fits run fold by fold, each fold grouped by gamma and then in ``cands``' order,
        so the search's kept kernel matrix of each (rows, fold, gamma) is computed once, and
        each call runs its folds in the other direction from the one before (a single
        candidate starts on the fold whose matrix the last call left in the memo). A fit's
        warm start is the nearest lam of its gamma and theta fitted on the same fold before
        it, as when the candidates are scored one after another. With ``race`` (the rung's
        promotions, 1 where only its best matters; ``race_se``) a candidate stops after a
        fold where it is clearly behind (:meth:`_raced_out`). ``done(i, f)`` is called
        after each fold fit, ``i`` the candidates of ``cands`` finished and ``f`` the folds
        begun (the search's progress moves fold by fold)."""
        todo = [q for q in dict.fromkeys(cands) if (q, rows) not in self.scores]
        groups: dict[float, list[_Point]] = {}
        for q in todo:
            groups.setdefault(q.log_gamma_mult, []).append(q)
        splits = self.splits(rows)
        k = len(splits)
        folds = list(range(k))[::-1] if self.folds_reversed else list(range(k))
        self.folds_reversed = not self.folds_reversed
        accs: dict[_Point, list[float]] = {q: [] for q in todo}
        faces: dict[_Point, list[list[int]]] = {q: [] for q in todo}
        epochs: dict[_Point, list[int]] = {q: [] for q in todo}
        cpu: dict[_Point, float] = dict.fromkeys(todo, 0.0)
        finished: dict[_Point, _Score] = {}

        def fitted(q: _Point, folds: int, fold: int) -> None:
            # progress moves by ``folds`` of ``q``'s k: one per fit, a stopped one's unrun
            self.reported += self.candidate_seconds(q, rows) * folds / k
            if done is not None:
                done(len(cands) - len(todo) + len(finished), fold)

        def finish(q: _Point, raced: bool) -> None:
            ran = folds[:len(accs[q])]
            finished[q] = _Score(q, rows, stage, float(np.mean(accs[q])), float(np.std(accs[q])),
                                 accs[q], cpu[q], faces[q], epochs[q],
                                 [len(splits[f][0]) for f in ran], raced=raced)

        for j, f in enumerate(folds):
            tr, va = splits[f]
            for group in groups.values():
                for q in group:
                    if q in finished:
                        continue
                    if j == 0:
                        self.predicted += self.candidate_seconds(q, rows)
                    t0 = time.process_time()
                    acc, fq, eq = self._fold_fit(q, rows, f, tr, va,
                                                 self.warm_source(q, rows, f))
                    cpu[q] += time.process_time() - t0
                    accs[q].append(acc)
                    faces[q].append(fq)
                    epochs[q].append(eq)
                    if j == k - 1:
                        finish(q, raced=False)
                    fitted(q, 1, j + 1)
            if race is not None and j < k - 1:
                validated = sum(len(splits[g][1]) for g in folds[:j + 1])
                for q in self._raced_out([q for q in todo if q not in finished], accs, race,
                                         validated):
                    finish(q, raced=True)
                    fitted(q, k - j - 1, j + 1)
        for q in todo:  # recorded in the candidates' order
            self.scores[(q, rows)] = finished[q]
            self.table.append(finished[q])
        return [self.scores[(q, rows)] for q in cands]

    def _raced_out(self, alive: list[_Point], accs: dict[_Point, list[float]], keep: int,
                   validated: int) -> list[_Point]:
        """``race_se``: the candidates of ``alive`` whose accuracy on the ``validated`` rows
        of their folds so far is more than ``race_se`` standard errors of the difference
        below the ``keep``-th best's (binomial errors of both on those rows). Such a
        candidate would not be promoted or chosen on the rung's folds unless its last folds
        moved it that far (Maron & Moore's Hoeffding races, NIPS 1993, with a normal bound);
        the rest go on to the next fold."""
        z = self.s.race_se
        if z is None or len(alive) <= keep:
            return []
        mean = {q: float(np.mean(accs[q])) for q in alive}
        ranked = sorted(alive, key=lambda q: (-mean[q], *self.tie_break(q)))
        ref = mean[ranked[keep - 1]]
        out = []
        for q in ranked[keep:]:
            a = mean[q]
            se = math.sqrt((ref * (1.0 - ref) + a * (1.0 - a)) / validated)
            if a + z * se < ref:
                out.append(q)
        return out

    def _fold_fit(self, p: _Point, rows: int, f: int, tr: np.ndarray, va: np.ndarray,
                  start: _Point | None) -> tuple[float, list[int], int]:
        """Fit ``p`` on fold ``f``'s training rows (warm from ``start``'s duals of that fold
        when given); its validation score, the faces its Newton steps factored and its
        coordinate-descent epochs."""
        from sklearn.exceptions import ConvergenceWarning

        if self.should_stop is not None and self.should_stop():
            raise FitCancelled("cancelled during the hyperparameter search")
        est = self.make(self.fit_values(p))
        if self.shared:
            est._kernel_memo = self.kernel_memo(est).slot((rows, f, p.log_gamma_mult))
        if self.s.cv_float32:
            est._kernel_dtype = np.float32
        if start is not None:
            est._dual_start = _rescaled_dual(self.duals[(start, rows, f)], start, p,
                                             len(tr), getattr(est, "upsilon", 1.0))
        with warnings.catch_warnings():
            # a candidate that stops at max_iter is scored as it stands (its accuracy
            # says what it is worth); one warning per CV fit would drown the log
            warnings.simplefilter("ignore", ConvergenceWarning)
            kw = {} if self.weights.fit is None else {"sample_weight": self.weights.fit[tr]}
            est.fit(self.rows(tr), self.y[tr], should_stop=self.should_stop, **kw)
        acc = self.weights.fold_score(self.y[va], est.predict(self.rows(va)), va)
        if self.warm:
            self.duals[(p, rows, f)] = _full_dual(est, self.y_idx[tr])
        return acc, factored_faces(est), int(np.sum(est.n_iter_))

    def kernel_memo(self, est) -> KernelMemo:
        """The search's kept kernel matrices (``share_kernels``): as many bytes as one CV
        fit's kernel may use (its ``cache_size``), so the search needs at most twice that."""
        if self.memo is None:
            self.memo = KernelMemo(float(getattr(est, "cache_size", 512.0)) * 2**20)
        return self.memo

    def warm_source(self, p: _Point, rows: int, fold: int = 0) -> _Point | None:
        """The scored candidate whose duals start ``p``'s folds (``warm_lam``): the same
        gamma, theta and rows, the nearest lam (the smaller on a tie), among those fitted on
        ``fold`` (the first fold ``p`` runs); None if none."""
        if not self.warm:
            return None
        near = [q for (q, m, f) in self.duals if m == rows and f == fold
                and q.log_gamma_mult == p.log_gamma_mult and q.theta == p.theta
                and q.log_lam != p.log_lam]
        if not near:
            return None
        return min(near, key=lambda q: (abs(q.log_lam - p.log_lam), q.log_lam))

    # ------------------------------------------------------------------------- budget
    def fit_seconds(self, rows: float) -> float:
        return self.cost.fit_seconds(rows, self.width, self.problems)

    def cv_seconds(self, rows: int) -> float:
        """Predicted CPU seconds of scoring one candidate on ``rows`` rows (k fits)."""
        k = self.s.folds
        return k * self.fit_seconds(rows * (k - 1) / k)

    def candidate_seconds(self, p: _Point, rows: int) -> float:
        """Predicted CPU seconds of scoring candidate ``p`` on ``rows`` rows: the rows'
        :meth:`cv_seconds`, weighted up for large lam (``lam_cost_slope`` per decade over
        10^3; kernels only) where the Newton step factors larger faces. The weight grows
        with the budget's excess over its floor, in full from twice the floor: a small
        search keeps the candidates it always had, and a budget just above the floor is
        treated as the floor, not as a large search (no step at the floor)."""
        base = self.cv_seconds(rows)
        floor = self.s.budget_floor_seconds
        if self.s.lam_cost_slope <= 0 or self.cost is LINEAR_COST or self.budget <= floor:
            return base
        excess = min(1.0, (self.budget - floor) / floor) if floor > 0 else 1.0
        return base * (1.0 + excess * self.s.lam_cost_slope * max(0.0, p.log_lam - 3.0))

    def left(self) -> float:
        return self.budget - self.predicted

    def _row_bound(self) -> int:
        """The most rows a rung can use: the first rung's, or the largest later one whose
        ``keep_min`` candidates and the refinement reserve fit the whole budget (what
        :meth:`fits` allows before anything is spent)."""
        bound = self.sizes[0]
        for rows in self.sizes[1:]:
            each = self.cv_seconds(rows)
            if (self.budget - 2 * max(1, len(self.auto)) * each) // each < self.s.keep_min:
                break
            bound = rows
        return bound

    # ------------------------------------------------------------------------- search
    def run(self) -> tuple[_Score, list[dict[str, Any]], str]:
        s = self.s
        sizes = self.sizes
        staged = _stages_theta(s, self.auto)
        cands = self.grid(only_mid_theta=staged)
        rungs: list[dict[str, Any]] = []
        ranked: list[_Score] = []
        stop = "all rows used" if sizes[-1] == len(self.y) else self.cut
        halved = len(cands)  # the count the next rung's share is taken of
        for r, rows in enumerate(sizes):
            if r > 0:
                fits = self.fits(rows)
                if fits < s.keep_min:
                    stop = "budget"
                    break
                cands = cands[:fits]
                halved = min(halved, len(cands))
            keep = max(s.keep_min, math.ceil(halved / s.eta))
            ranked = self.rung(rungs, f"halving {r}", rows, cands,
                               race=self.race_keep(r, rows, cands, keep, staged))
            cands = [sc.point for sc in ranked[:keep]]
            halved = len(cands)
            if staged and r == s.theta_rung:
                cands = self.all_thetas(cands)
                if not s.halve_pairs:
                    halved = len(cands)
        if staged and len(rungs) <= s.theta_rung + 1:
            # no later rung took the other thetas: score them on the last rung's rows
            if len(rungs) <= s.theta_rung:
                cands = self.all_thetas(cands)
            rows = ranked[0].rows
            todo = [p for p in cands if (p, rows) not in self.scores][:max(0, self.fits(rows))]
            if todo:
                self.rung(rungs, "theta", rows, todo)
                ranked = sorted((sc for (_, m), sc in self.scores.items() if m == rows),
                                key=self.preference)
        rows = ranked[0].rows
        best, refine_stop = self.pick(rows), "not refined"
        if self.refines():
            best, refine_stop = self._refine(best, rows, self.screen_rows(rungs, rows))
        if refine_stop == "budget":
            stop = "budget"
        return self.least_work(best, rows), rungs, stop

    def least_work(self, best: _Score, rows: int) -> _Score:
        """``select_work``: among the candidates scored on ``rows`` rows whose CV accuracy is
        within ``select_work`` binomial standard errors of ``best``'s and whose lam is at
        least ``best``'s, the one whose CV fits did the least counted work
        (:attr:`_Score.work`), where that is at most ``WORK_SHARE`` of ``best``'s; else
        ``best``. Within the folds' error the accuracies do not rank the candidates, and the
        final fit's cost follows its CV fits' work (a wider theta band, fewer and smaller
        faces). Never a smaller lam: a CV on a subsample already leans to a smaller lam than
        all rows want (docs/auto-params.md, "The cheapest of the equally accurate"). Only
        where the budget is at least twice its floor (a final fit predicted dear enough for
        its cost to matter; a small search keeps its choice) and for kernel problems (a
        linear fit factors nothing)."""
        z = self.s.select_work
        if (z <= 0 or self.cost is LINEAR_COST
                or self.budget < 2.0 * self.s.budget_floor_seconds):
            return best
        acc = best.mean_accuracy
        floor = acc - z * math.sqrt(max(acc * (1.0 - acc), 0.0) / self.validated(rows))
        near = [sc for (_, m), sc in self.scores.items() if m == rows and not sc.raced
                and sc.mean_accuracy >= floor and sc.point.log_lam >= best.point.log_lam]
        cheapest = min(near, key=lambda sc: (sc.work, self.preference(sc)))  # best is near
        if cheapest is not best and cheapest.work <= WORK_SHARE * best.work:
            self.passed_over = best
            return cheapest
        return best

    def refines(self) -> bool:
        """Whether the refinement runs (``refine_under_floors``): always with None or for the
        linear kernel, else only where the budget is under that many floors. Above it the
        kernel searches' refinement moved within the folds' standard error
        (docs/auto-params.md), which ``select_work`` takes as ties; the rungs keep its
        reserve either way, so they are the same rungs."""
        k = self.s.refine_under_floors
        return (k is None or self.cost is LINEAR_COST
                or self.budget < k * self.s.budget_floor_seconds)

    def fits(self, rows: int, spent: float = 0.0) -> int:
        """How many candidates on ``rows`` rows fit what is left of the budget (less
        ``spent`` predicted seconds more), keeping one refinement round (two neighbours per
        axis) in reserve."""
        each = self.cv_seconds(rows)
        return int((self.left() - spent - 2 * max(1, len(self.auto)) * each) // each)

    def race_keep(self, r: int, rows: int, cands: list[_Point], keep: int,
                  staged: bool) -> int | None:
        """What halving rung ``r`` races for (``race_se``): its ``keep`` promotions, or 1
        (its best) where no later rung can follow (the budget's prediction after scoring
        ``cands`` is known before it) and no theta stage takes its promotions; None
        without ``race_se`` or where a fold's score is weighted (its binomial error is
        not the score's)."""
        if self.s.race_se is None or self.weights.score is not None or self.weights.balanced:
            return None
        if staged and r == self.s.theta_rung:
            return keep
        spent = sum(self.candidate_seconds(q, rows) for q in dict.fromkeys(cands)
                    if (q, rows) not in self.scores)
        last = r + 1 >= len(self.sizes) or self.fits(self.sizes[r + 1], spent) < self.s.keep_min
        return 1 if last else keep

    def rung(self, rungs: list[dict[str, Any]], stage: str, rows: int,
             cands: list[_Point], race: int | None = None) -> list[_Score]:
        """Score ``cands`` on ``rows`` rows (racing for ``race`` of them), record the rung,
        return the scores ranked."""
        t_rung = time.process_time()

        def done(i: int, fold: int) -> None:
            self._report(f"auto search: {stage} ({rows} rows), fold {fold}/{self.s.folds}, "
                         f"{i}/{len(cands)} candidates done")

        scored = self.score_all(cands, rows, stage, done, race)
        rungs.append({"rung": len(rungs), "stage": stage, "rows": rows,
                      "candidates": len(cands), "raced_for": race,
                      "raced_out": sum(sc.raced for sc in scored),
                      "predicted_cpu_seconds": len(cands) * self.cv_seconds(rows),
                      "cpu_seconds": time.process_time() - t_rung})
        return sorted(scored, key=self.preference)

    def _neighbours(self, p: _Point, step: float, tstep: float) -> list[_Point]:
        out = []
        lo_l, hi_l = self.s.log_lam_bounds
        lo_g, hi_g = self.s.log_gamma_bounds
        for d in (-1, 1):
            if "lam" in self.auto and lo_l <= p.log_lam + d * step <= hi_l:
                out.append(self.point(p.log_lam + d * step, p.log_gamma_mult, p.theta))
            if "gamma" in self.auto and lo_g <= p.log_gamma_mult + d * step <= hi_g:
                out.append(self.point(p.log_lam, p.log_gamma_mult + d * step, p.theta))
            if "theta" in self.auto:
                q = self.point(p.log_lam, p.log_gamma_mult, p.theta + d * tstep)
                if q != p:
                    out.append(q)
        return out

    def moves(self, sc: _Score, best: _Score) -> bool:
        """Whether the refinement moves from ``best`` to the neighbour ``sc``: preferred
        and either at least ``refine_min_gain`` more accurate, or as accurate with a smaller
        lam (the plateau stop: gains below the folds' resolution do not buy more steps)."""
        if self.preference(sc) >= self.preference(best):
            return False
        gain = sc.mean_accuracy - best.mean_accuracy
        return gain >= self.s.refine_min_gain or (
            gain >= 0 and sc.point.log_lam < best.point.log_lam)

    def screen_rows(self, rungs: list[dict[str, Any]], rows: int) -> int | None:
        """The rows a refinement step is screened on (``refine_screen``): the halving rung's
        before the last one's, when the last rung is a halving rung on ``rows``; else None."""
        halving = [int(r["rows"]) for r in rungs if str(r["stage"]).startswith("halving")]
        if (not self.s.refine_screen or self.s.select_se > 0 or len(halving) < 2
                or halving[-1] != rows or str(rungs[-1]["stage"]) == "theta"):
            return None
        return halving[-2]

    def screened_out(self, q: _Point, best: _Score, rows: int) -> bool:
        """Whether neighbour ``q`` fails its screen on ``rows`` (the previous rung's): it
        would not move the refinement from ``best`` there (both scored on those rows)."""
        return not self.moves(self.score(q, rows, "refine screen"),
                              self.score(best.point, rows, "refine screen"))

    def _refine(self, best: _Score, rows: int,
                screen: int | None = None) -> tuple[_Score, str]:
        """Pattern search around ``best`` on ``rows`` rows. With ``screen`` rows (the previous
        rung's, ``refine_screen``), a neighbour is first scored there and goes on to
        ``rows`` only where it would move the search on those rows too."""
        step, tstep = self.s.log_step, self.s.theta_step
        # refine_capped: the refinement spends at most the budget's floor
        cap = self.predicted + (self.s.budget_floor_seconds if self.s.refine_capped
                                else math.inf)
        for _ in range(self.s.refine_rounds):
            improved = True
            while improved:
                improved = False
                for q in self._neighbours(best.point, step, tstep):
                    if (q, rows) in self.scores:
                        continue
                    if screen is not None:
                        cost = self.candidate_seconds(q, screen)
                        if cost > self.left() or self.predicted + cost > cap:
                            return best, "budget"
                        if self.screened_out(q, best, screen):
                            continue
                    cost = self.candidate_seconds(q, rows)
                    if cost > self.left() or self.predicted + cost > cap:
                        return best, "budget"
                    sc = self.score(q, rows, "refine")
                    self._report(f"auto search: refining on {rows} rows")
                    if self.s.select_se > 0:
                        sc = self.pick(rows)  # the rule's choice over every score so far
                        if sc is not best:
                            best = sc
                            improved = True
                            break
                    elif self.moves(sc, best):
                        best = sc
                        improved = True
                        break
            step, tstep = step / 2, tstep / 2
        return best, "refined"

    def _report(self, message: str) -> None:
        if self.progress is not None:
            self.progress(min(0.99, self.reported / max(self.budget, 1e-9)), message)


def search(make: MakeFn, Xs, y: np.ndarray, *, linear: bool, gamma_scale: float,
           fixed: dict[str, float], auto: tuple[str, ...], seed: int,
           solve_rows: int | None = None, settings: SearchSettings | None = None,
           should_stop: Callable[[], bool] | None = None,
           progress: Callable[[float, str], None] | None = None,
           weights: CVWeights | None = None) -> AutoResult:
    """Choose the ``auto`` parameters for training rows ``Xs`` (scaled) and labels ``y``.

    ``Xs``: the scaled rows, or :class:`~solver.core.row_blocks.LazyRows` that reads the ones
    the search uses (the same result); ``make(values)``: a fresh exact-solver estimator
    (``ODMClassifier`` with the model's kernel, degree, coef0, upsilon, tol, max_iter,
    cache_size and intercept option, and ``scale=False`` since ``Xs`` is already scaled) at
    ``values`` = ``{lam, gamma, theta}``; ``linear``: the kernel is linear (no gamma; cost
    linear in the rows); ``fixed``: the values of the parameters that are not auto
    (``gamma`` numeric); ``gamma_scale``: the "scale" gamma of ``Xs``; ``solve_rows``: the
    rows of one solve of the final fit (SODM's partitions), None for all rows; ``weights``:
    the rows' weights and the score they ask for (:class:`CVWeights`). With fewer
    than two rows of some class per fold there is nothing to cross-validate and the
    estimator's documented defaults are returned (``stop_reason`` says so).
    """
    s = settings or DEFAULT_SETTINGS
    auto = tuple(a for a in AUTO_PARAMS if a in auto)
    y = np.asarray(y)
    t0 = time.perf_counter()
    _, counts = np.unique(y, return_counts=True)
    folds = int(min(s.folds, counts.min())) if len(counts) else 0
    with CpuClock() as clock:
        if folds < 2:
            chosen = {"lam": fixed.get("lam", 1000.0), "gamma": fixed.get("gamma", gamma_scale),
                      "theta": fixed.get("theta", 0.2)}
            return AutoResult(**chosen, auto=auto, gamma_scale=gamma_scale, table=[],
                              rungs=[], folds=0, rows=0, cpu_seconds=0.0,
                              predicted_cpu_seconds=0.0, wall_seconds=time.perf_counter() - t0,
                              budget_cpu_seconds=s.budget_floor_seconds,
                              final_fit_estimate_cpu_seconds=0.0,
                              stop_reason="too few rows per class to cross-validate; "
                                          "defaults used", settings=s)
        if folds != s.folds:
            s = replace(s, folds=folds)
        srch = _Search(make, linear, Xs, y, gamma_scale=gamma_scale, fixed=fixed, auto=auto,
                       seed=seed,
                       settings=s, should_stop=should_stop, progress=progress,
                       solve_rows=solve_rows, weights=weights)
        # One BLAS thread: the CV problems are small and idle OpenBLAS threads spin
        # (docs/auto-params.md, "One BLAS thread").
        import scipy.linalg  # noqa: F401  (load scipy's BLAS so the limit covers it)
        from threadpoolctl import threadpool_limits

        # the CV fits reuse each other's pages of kernel matrices and face factors
        with threadpool_limits(limits=1, user_api="blas"), buffers.reuse():
            try:
                best, rungs, stop = srch.run()
            finally:
                if srch.memo is not None:  # not held through the final fit
                    srch.memo.clear()
    vals = srch.values(best.point)
    table = [{**srch.values(sc.point), "gamma_mult": 10.0 ** sc.point.log_gamma_mult,
              "rows": sc.rows, "stage": sc.stage, "mean_accuracy": sc.mean_accuracy,
              "std_accuracy": sc.std_accuracy, "fold_accuracy": sc.fold_accuracy,
              "cpu_seconds": sc.cpu_seconds, "faces": sc.faces, "epochs": sc.epochs,
              "work": sc.work, "raced": sc.raced} for sc in srch.table]
    over = srch.passed_over
    passed_over = None if over is None else {
        **srch.values(over.point), "mean_accuracy": over.mean_accuracy, "work": over.work,
        "chosen_mean_accuracy": best.mean_accuracy, "chosen_work": best.work}
    s = srch.s  # with the folds the search used
    return AutoResult(lam=vals["lam"], gamma=vals["gamma"], theta=vals["theta"], auto=auto,
                      gamma_scale=gamma_scale, table=table, rungs=rungs, folds=s.folds,
                      rows=best.rows, cpu_seconds=clock.seconds,
                      predicted_cpu_seconds=srch.predicted,
                      wall_seconds=time.perf_counter() - t0, budget_cpu_seconds=srch.budget,
                      final_fit_estimate_cpu_seconds=srch.final_estimate, stop_reason=stop,
                      row_bound=srch.row_bound, settings=s,
                      kernel_matrices={} if srch.memo is None else {
                          "computed": srch.memo.computed, "shared": srch.memo.hits},
                      plateau_rows=plateau_rows(rungs, srch.table, s.folds,
                                                s.plateau_points),
                      passed_over=passed_over, scored_folds=srch.scored_folds)


def with_final_fit(search_info: dict[str, Any], final_cpu: float) -> dict[str, Any]:
    """The search record plus the final fit's CPU seconds and the budget check on the
    measured numbers."""
    rule = max(search_info["budget_floor_seconds"],
               search_info["budget_factor"] * final_cpu)
    return {**search_info, "final_fit_cpu_seconds": final_cpu,
            "budget_allowed_cpu_seconds": rule,
            "within_budget": bool(search_info["cpu_seconds"] <= rule)}
