"""The search's cost levers of issue 34 (``solver.auto.search.SearchSettings``): a looser CV
tolerance, warm starts along the lam path, the refinement's plateau stop, the lam weight
of the predicted cost, one kernel matrix per (rows, fold, gamma) and its float32 values.
Each is off or on by its setting; these tests check that each does what it says, not what
it saves (that is measured by ``bench.auto_params``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from solver import ODMClassifier
from solver.auto.search import SearchSettings, _full_dual, search


def checkerboard(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.random((n, 2))
    y = ((np.floor(4 * X[:, 0]) + np.floor(4 * X[:, 1])) % 2).astype(int)
    return X, y


def run(settings: SearchSettings, make=None, auto=("lam", "gamma"), fixed=None):
    X, y = checkerboard(900, 3)
    make = make or (lambda v: ODMClassifier(scale=False, random_state=0, **v))
    return search(make, X, y, linear=False, gamma_scale=1.0,
                  fixed=fixed if fixed is not None else {"theta": 0.2}, auto=auto, seed=0,
                  settings=settings)


def cv_table(res) -> list[tuple]:
    """A search's CV table without its timings: what two runs of one search share."""
    return [(r["lam"], r["gamma"], r["rows"], r["stage"], r["fold_accuracy"])
            for r in res.table]


def test_the_rebuilt_dual_restarts_a_fit_at_its_optimum():
    """``_full_dual`` rebuilds the whole dual from the support vectors: a fit started from
    it (``_dual_start``) is already at the optimum, converges in one epoch and keeps the
    same support, decision values within the tolerance's reach and so the same predictions
    wherever the decision is farther from 0 than that (a point at 1e-5 may flip)."""
    X, y = checkerboard(600, 1)
    cold = ODMClassifier(lam=1e3, gamma=20.0, scale=False, random_state=0).fit(X, y)
    alpha = _full_dual(cold, np.unique(y, return_inverse=True)[1])
    assert alpha.shape == (600, 2) and (alpha >= 0).all()
    assert ((alpha[:, 0] > 0) & (alpha[:, 1] > 0)).sum() == 0
    warm = ODMClassifier(lam=1e3, gamma=20.0, scale=False, random_state=0)
    warm._dual_start = alpha
    warm.fit(X, y)
    assert warm.n_iter_[0] == 1 < cold.n_iter_[0]
    assert np.array_equal(warm.support_, cold.support_)
    dc, dw = cold.decision_function(X), warm.decision_function(X)
    moved = float(np.abs(dc - dw).max())
    assert moved < 1e-2
    far = np.abs(dc) > moved
    assert far.sum() >= 590
    assert np.array_equal(warm.predict(X)[far], cold.predict(X)[far])


def test_warm_lam_starts_from_the_nearest_lam_and_is_repeatable():
    """With ``warm_lam`` (the default) every candidate after the first lam of a (gamma, theta, rows)
    starts from a scored neighbour's duals: fewer epochs over the table, the same table
    twice (the order of the search decides the starts, not the clock)."""
    epochs: dict[bool, list[int]] = {True: [], False: []}

    def maker(warm: bool):
        def make(v):
            est = ODMClassifier(scale=False, random_state=0, **v)
            fit = est.fit

            def counted(*a, **k):
                out = fit(*a, **k)
                epochs[warm].append(int(est.n_iter_[0]))
                return out
            est.fit = counted
            return est
        return make

    s = SearchSettings(budget_floor_seconds=1e6, refine_rounds=0, warm_lam=False,
                       race_se=None)  # every candidate on every fold
    cold = run(s, maker(False))
    warm = run(SearchSettings(**{**s.__dict__, "warm_lam": True}), maker(True))
    again = run(SearchSettings(**{**s.__dict__, "warm_lam": True}))
    assert len(epochs[True]) == len(epochs[False]) == 3 * len(cold.table)
    assert sum(epochs[True]) < sum(epochs[False])
    assert [(r["lam"], r["gamma"], r["mean_accuracy"]) for r in warm.table] == \
        [(r["lam"], r["gamma"], r["mean_accuracy"]) for r in again.table]
    assert (warm.lam, warm.gamma) == (again.lam, again.gamma)


def test_cv_tol_reaches_the_cv_fits():
    """``cv_tol`` is passed to ``make`` as ``tol`` (the estimators' own ``make`` keeps the
    looser of it and the estimator's ``tol``); without it ``make`` gets no ``tol``."""
    seen: list[float] = []

    def make(v):
        seen.append(v.get("tol", -1.0))
        return ODMClassifier(scale=False, random_state=0, **v)

    run(SearchSettings(cv_tol=0.02, refine_rounds=0), make, auto=("lam",),
        fixed={"gamma": 10.0, "theta": 0.2})
    assert seen and set(seen) == {0.02}
    seen.clear()
    run(SearchSettings(refine_rounds=0), make, auto=("lam",),
        fixed={"gamma": 10.0, "theta": 0.2})
    assert set(seen) == {-1.0}


def test_refine_min_gain_stops_at_the_plateau():
    """With a gain no neighbour can reach, the refinement only moves to an equally
    accurate smaller lam: the choice is as accurate as the best point of the last rung."""
    res = run(SearchSettings(budget_floor_seconds=1e6, refine_min_gain=1.0))
    rows = res.rows
    last = [r for r in res.table if r["rows"] == rows and r["stage"] != "refine"]
    best = max(r["mean_accuracy"] for r in last)
    chosen = [r for r in res.table if r["rows"] == rows and r["lam"] == res.lam
              and r["gamma"] == res.gamma]
    assert chosen and chosen[0]["mean_accuracy"] == best
    assert any(r["stage"] == "refine" for r in res.table)


def test_lam_cost_slope_weights_large_lam_predictions():
    """(On by default at 0.5.) With the budget at least twice its floor, the predicted cost
    of a candidate at lam 10^6 is ``1 + 3 slope`` times its rows' cost (three decades over
    10^3), in between the weight is scaled by the budget's excess over the floor; below
    10^3, or with the budget at its floor, it is the rows' cost."""
    base = SearchSettings(budget_floor_seconds=0.0, budget_factor=1e6, refine_rounds=0,
                          lam_cost_slope=0.0)
    slope = SearchSettings(**{**base.__dict__, "lam_cost_slope": 1.0})
    fixed = {"lam": 1e6, "gamma": 10.0}
    plain = run(base, auto=("theta",), fixed=fixed)
    weighted = run(slope, auto=("theta",), fixed=fixed)
    assert len(plain.table) == len(weighted.table)
    assert np.isclose(weighted.predicted_cpu_seconds, 4.0 * plain.predicted_cpu_seconds)
    small = run(slope, auto=("theta",), fixed={"lam": 100.0, "gamma": 10.0})
    assert np.isclose(small.predicted_cpu_seconds, plain.predicted_cpu_seconds)
    floor = SearchSettings(**{**slope.__dict__, "budget_floor_seconds": 1e6,
                              "budget_factor": 0.0})
    at_floor = run(floor, auto=("theta",), fixed=fixed)
    assert np.isclose(at_floor.predicted_cpu_seconds, plain.predicted_cpu_seconds)
    # just above the floor the weight is the budget's excess over it, a share of the floor:
    # no step (a budget of 1.5x the floor gets half the weight, 2x and more all of it)
    for ratio, share in ((1.5, 0.5), (2.0, 1.0), (4.0, 1.0)):
        floor_s = plain.budget_cpu_seconds / ratio
        part = run(SearchSettings(**{**slope.__dict__, "budget_floor_seconds": floor_s}),
                   auto=("theta",), fixed=fixed)
        assert np.isclose(part.budget_cpu_seconds, plain.budget_cpu_seconds)
        assert np.isclose(part.predicted_cpu_seconds,
                          (1.0 + 3.0 * share) * plain.predicted_cpu_seconds)


def test_share_kernels_gives_the_same_table_from_fewer_matrices():
    """``share_kernels`` (the default): the CV fits of every lam of a (rows, fold, gamma) read
    one kept matrix, so the table (every fold's accuracy) and the choice are those of the
    search that computes a matrix per fit, from one matrix per (rows, fold, gamma); a memo
    too small for any matrix computes every one (and keeps none)."""
    from solver.exact.kernel_memo import KernelMemo

    s = SearchSettings(budget_floor_seconds=1e6, refine_rounds=1, share_kernels=False,
                       race_se=None)
    alone = run(s)
    shared = run(SearchSettings(**{**s.__dict__, "share_kernels": True}))

    assert cv_table(shared) == cv_table(alone)
    assert (shared.lam, shared.gamma) == (alone.lam, alone.gamma)
    assert alone.kernel_matrices == {}
    fits = 3 * len(shared.table)
    keys = {(r["rows"], r["gamma"]) for r in shared.table}
    assert shared.kernel_matrices == {"computed": 3 * len(keys), "shared": fits - 3 * len(keys)}
    memo = KernelMemo(max_bytes=50)  # less than one 3x3 float64 matrix (72 bytes)
    ones = [memo.matrix("k", (3, 3), np.float64, lambda: np.ones((3, 3))) for _ in range(2)]
    assert memo.computed == 2 and memo.hits == 0 and ones[0] is not ones[1]
    memo = KernelMemo(max_bytes=200)  # room for one 4x3 float64 matrix (96 bytes) at a time
    a = memo.matrix("a", (4, 3), np.float64, lambda: np.zeros((4, 3)))
    assert memo.matrix("a", (4, 3), np.float64, lambda: np.ones((4, 3))) is a
    memo.matrix("b", (4, 3), np.float64, lambda: np.zeros((4, 3)))
    memo.matrix("c", (4, 3), np.float64, lambda: np.zeros((4, 3)))  # "a" is dropped
    assert memo.matrix("a", (4, 3), np.float64, lambda: np.ones((4, 3)))[0, 0] == 1.0
    assert memo.nbytes <= 200


def test_a_rung_computes_each_kept_matrix_once_when_one_fits_the_memo():
    """A rung's CV fits run by gamma, then fold, so a memo with room for one fold's matrix
    (cache_size 3 MB; a 600-row float64 matrix, ``cv_float32`` off, is 2.9 MB) still
    computes one matrix per (fold, gamma), not one per fit as a candidate's three folds in a
    row would; the table is the one a search without kept matrices gives, fold by fold."""
    def make(v):
        return ODMClassifier(scale=False, random_state=0, cache_size=3.0, **v)

    s = SearchSettings(budget_floor_seconds=1e6, refine_rounds=0, cv_float32=False,
                       race_se=None)
    alone = run(SearchSettings(**{**s.__dict__, "share_kernels": False}), make=make)
    shared = run(s, make=make)

    assert cv_table(shared) == cv_table(alone)
    assert (shared.lam, shared.gamma) == (alone.lam, alone.gamma)
    gammas = {r["gamma"] for r in shared.table}
    assert len(shared.table) > len(gammas) > 1
    assert shared.kernel_matrices == {"computed": 3 * len(gammas),
                                      "shared": 3 * (len(shared.table) - len(gammas))}


def test_cv_float32_keeps_the_cv_fits_kernel_matrices_in_float32(monkeypatch):
    """``cv_float32`` (the default): every CV fit's kernel matrix is float32 where the fold's
    float64 matrix would fit its budget (these small folds: float64 with the setting off),
    and the search scores the same grid; the rounding of the kernel values is all that
    differs."""
    from solver.exact.kernel_memo import KernelMemo

    seen: list[np.dtype] = []
    plain = KernelMemo.matrix

    def recorded(self, key, shape, dtype, compute):
        seen.append(np.dtype(dtype))
        return plain(self, key, shape, dtype, compute)

    monkeypatch.setattr(KernelMemo, "matrix", recorded)
    s = SearchSettings(budget_floor_seconds=1e6, refine_rounds=0)
    assert s.cv_float32
    narrow = run(s)
    assert seen and set(seen) == {np.dtype(np.float32)}
    seen.clear()
    wide = run(SearchSettings(**{**s.__dict__, "cv_float32": False}))
    assert seen and set(seen) == {np.dtype(np.float64)}
    assert [r["lam"] for r in narrow.table] == [r["lam"] for r in wide.table]
    assert abs(max(r["mean_accuracy"] for r in narrow.table)
               - max(r["mean_accuracy"] for r in wide.table)) < 0.01


def test_select_se_takes_the_cheapest_candidate_within_the_standard_error():
    """``select_se``: the choice is the candidate the cost model predicts cheapest (large
    lam weighted up, ``lam_cost_slope``) among those whose CV accuracy on the last rung's
    rows is within ``select_se`` binomial standard errors of the best there, the most
    accurate of those on a tie; 0 keeps the most accurate. With the budget at its floor the
    predictions do not depend on lam and the rule keeps the most accurate too."""
    s = SearchSettings(budget_floor_seconds=0.0, budget_factor=1e6, refine_rounds=1,
                       refine_capped=False, select_work=0.0, refine_under_floors=None)
    lam_only = {"auto": ("lam",), "fixed": {"gamma": 10.0, "theta": 0.2}}
    plain = run(s, **lam_only)
    ruled = run(SearchSettings(**{**s.__dict__, "select_se": 3.0}), **lam_only)

    def last(res):
        return [r for r in res.table if r["rows"] == res.rows]

    def chosen(res):
        return next(r for r in last(res) if (r["lam"], r["gamma"]) == (res.lam, res.gamma))

    def weight(r):
        return 1.0 + 0.5 * max(0.0, np.log10(r["lam"]) - 3.0)

    assert chosen(plain)["mean_accuracy"] == max(r["mean_accuracy"] for r in last(plain))
    top = max(r["mean_accuracy"] for r in last(ruled))
    floor = top - 3.0 * np.sqrt(top * (1 - top) / ruled.rows)
    within = [r for r in last(ruled) if r["mean_accuracy"] >= floor - 1e-12]
    cheapest = min(weight(r) for r in within)
    assert weight(chosen(ruled)) == cheapest
    assert chosen(ruled)["mean_accuracy"] == max(
        r["mean_accuracy"] for r in within if weight(r) == cheapest)
    # on this board the rule gives up accuracy for a smaller lam (this can fail)
    assert ruled.lam < plain.lam
    assert chosen(ruled)["mean_accuracy"] < chosen(plain)["mean_accuracy"]
    again = run(SearchSettings(**{**s.__dict__, "select_se": 3.0}), **lam_only)
    assert again.lam == ruled.lam
    at_floor = run(SearchSettings(budget_floor_seconds=1e6, refine_rounds=1, select_se=3.0),
                   **lam_only)
    assert chosen(at_floor)["mean_accuracy"] == max(
        r["mean_accuracy"] for r in last(at_floor))


def test_select_work_takes_the_least_work_within_the_standard_error():
    """``select_work`` (on by default): among the last rung's candidates within that many
    binomial standard errors of the most accurate and with at least its lam, the one whose
    CV fits did the least counted work, where that is at most half the most accurate's;
    the CV table is the same as without the rule, which only picks. A search whose budget
    is under twice its floor keeps the most accurate."""
    from solver.auto.search import WORK_SHARE

    X, y = checkerboard(900, 3)

    def go(**kw):
        s = SearchSettings(**{"budget_floor_seconds": 0.0, "budget_factor": 1e6,
                              "refine_rounds": 1, "refine_capped": False,
                              "refine_under_floors": None, "race_se": None, **kw})
        return search(lambda v: ODMClassifier(scale=False, random_state=0, **v), X, y,
                      linear=False, gamma_scale=1.0, fixed={},
                      auto=("lam", "gamma", "theta"), seed=0, settings=s)

    def key(r):
        return (r["lam"], r["gamma"], r["theta"])

    plain, ruled = go(select_work=0.0), go()
    assert ruled.settings.select_work == 1.0
    assert [(key(r), r["rows"], r["fold_accuracy"], r["work"]) for r in plain.table] == [
        (key(r), r["rows"], r["fold_accuracy"], r["work"]) for r in ruled.table]
    last = [r for r in ruled.table if r["rows"] == ruled.rows]
    best = min(last, key=lambda r: (-r["mean_accuracy"], r["lam"], r["gamma"],
                                    abs(r["theta"] - 0.5)))
    assert (plain.lam, plain.gamma, plain.theta) == key(best) and plain.passed_over is None
    acc = best["mean_accuracy"]
    floor = acc - math.sqrt(acc * (1 - acc) / ruled.rows)
    near = [r for r in last if r["mean_accuracy"] >= floor and r["lam"] >= best["lam"]]
    cheapest = min(near, key=lambda r: r["work"])
    # on this board the rule moves (this can fail): the most accurate ran into max_iter
    assert cheapest["work"] <= WORK_SHARE * best["work"]
    assert (ruled.lam, ruled.gamma, ruled.theta) == key(cheapest) != key(best)
    over = ruled.info()["passed_over"]
    assert (over["lam"], over["gamma"], over["theta"]) == key(best)
    assert over["work"] == best["work"] and over["chosen_work"] == cheapest["work"]
    assert cheapest["lam"] >= best["lam"] and cheapest["mean_accuracy"] < acc
    # counted work: s^3 / 3 per factored face plus EPOCH_WORK per kernel value swept
    assert all(len(r["epochs"]) == 3 and min(r["epochs"]) >= 1 for r in last)
    small = go(budget_floor_seconds=1e6, budget_factor=3.0)
    assert small.passed_over is None
    small_last = [r for r in small.table if r["rows"] == small.rows]
    assert next(r for r in small_last if key(r) == (small.lam, small.gamma, small.theta))[
        "mean_accuracy"] == max(r["mean_accuracy"] for r in small_last)


def test_the_refinement_spends_at_most_the_budget_floor():
    """By default (``refine_capped``) the refinement's predicted seconds stay within the
    budget's floor, whatever the budget: the same rungs (the refinement's reserve kept) as
    without the cap, fewer refinement steps where the budget is larger; a search whose
    budget is its floor refines as before."""
    large = SearchSettings(budget_floor_seconds=0.2, budget_factor=1e6, lam_cost_slope=0.0,
                           refine_under_floors=None)
    capped = run(large)
    free = run(SearchSettings(**{**large.__dict__, "refine_capped": False}))

    def refine_seconds(res):
        rows = res.rows
        before = sum(r["predicted_cpu_seconds"] for r in res.rungs)
        assert all(r["rows"] == rows for r in res.table if r["stage"] == "refine")
        return res.predicted_cpu_seconds - before

    assert capped.rungs == [{**r, "cpu_seconds": c["cpu_seconds"]}
                            for r, c in zip(free.rungs, capped.rungs, strict=True)]
    n_capped = sum(r["stage"] == "refine" for r in capped.table)
    n_free = sum(r["stage"] == "refine" for r in free.table)
    assert 0 < n_capped < n_free
    assert refine_seconds(capped) <= 0.2 < refine_seconds(free)
    small = SearchSettings(budget_floor_seconds=1e6)
    assert cv_table(run(small)) == cv_table(run(SearchSettings(**{**small.__dict__,
                                                                  "refine_capped": False})))


def test_the_refinement_runs_only_under_twice_the_floor():
    """``refine_under_floors`` (2.0 by default): a kernel search whose budget is at least
    twice its floor does not refine (its choice is the last rung's, the rungs the same as
    with the refinement, whose reserve they keep); under it, with None, or for the linear
    kernel it refines."""
    large = SearchSettings(budget_floor_seconds=0.2, budget_factor=1e6, lam_cost_slope=0.0)
    plain = run(large)
    refined = run(SearchSettings(**{**large.__dict__, "refine_under_floors": None}))
    assert not any(r["stage"] == "refine" for r in plain.table)
    assert any(r["stage"] == "refine" for r in refined.table)
    assert plain.rungs == [{**r, "cpu_seconds": c["cpu_seconds"]}
                           for r, c in zip(refined.rungs, plain.rungs, strict=True)]
    assert cv_table(plain) == [r for r in cv_table(refined) if r[3] != "refine"]
    at_floor = run(SearchSettings(budget_floor_seconds=1e6))
    assert any(r["stage"] == "refine" for r in at_floor.table)
    X, y = checkerboard(900, 3)
    linear = search(lambda v: ODMClassifier(kernel="linear", scale=False, random_state=0, **v),
                    X, y, linear=True, gamma_scale=1.0, fixed={"gamma": 1.0, "theta": 0.2},
                    auto=("lam",), seed=0, settings=large)
    assert linear.budget_cpu_seconds >= 2 * 0.2
    assert any(r["stage"] == "refine" for r in linear.table)  # the linear kernel refines


def test_the_search_maps_the_pages_of_its_large_arrays_once_and_reuses_them(monkeypatch):
    """The search's CV fits run inside ``buffers.reuse()``: a kernel matrix or face factor
    whose array is gone hands its mapped pages to the next one of about its size, so the
    search maps far fewer than it allocates, with the same CV table. (The 32 MB floor of
    ``buffers`` is lowered so these small fits' matrices are mappings.)"""
    import contextlib

    from solver.core import buffers

    monkeypatch.setattr(buffers, "_MIN_BYTES", 1 << 16)
    made: list[int] = []
    mapped: list[int] = []
    init, plain = buffers._Mapping.__init__, buffers._mapped

    def counted_init(self, nbytes: int) -> None:
        made.append(nbytes)
        init(self, nbytes)

    def counted_mapped(nbytes: int):
        mapped.append(nbytes)
        return plain(nbytes)

    monkeypatch.setattr(buffers._Mapping, "__init__", counted_init)
    monkeypatch.setattr(buffers, "_mapped", counted_mapped)
    s = SearchSettings(budget_floor_seconds=1e6, refine_rounds=1)
    reused = run(s)
    reused_made, reused_mapped = len(made), len(mapped)
    made.clear()
    mapped.clear()
    monkeypatch.setattr(buffers, "reuse", contextlib.nullcontext)
    alone = run(s)
    assert cv_table(reused) == cv_table(alone)
    assert (reused.lam, reused.gamma) == (alone.lam, alone.gamma)
    assert not made and len(mapped) >= 20  # one mapping per large array without reuse
    assert reused_mapped == 0 and 0 < reused_made <= len(mapped) // 2


def test_the_plateau_is_read_from_the_last_two_halving_rungs():
    """``plateau_rows``: the previous halving rung's fold-training rows when the last rung's
    best CV accuracy is less than ``points`` points above it; None while it rises by
    ``points`` or more, with one halving rung, or with the rule off. Refinement scores on the
    last rung's rows do not count."""
    from solver.auto.search import _Point, _Score, plateau_rows

    def score(stage: str, rows: int, acc: float) -> _Score:
        return _Score(point=_Point(3.0, 0.0, 0.5), rows=rows, stage=stage, mean_accuracy=acc,
                      std_accuracy=0.0, fold_accuracy=[acc] * 3, cpu_seconds=0.0, faces=[])

    rungs = [{"stage": "halving 0", "rows": 700}, {"stage": "halving 1", "rows": 2100},
             {"stage": "halving 2", "rows": 6300}]
    table = [score("halving 0", 700, 0.90), score("halving 1", 2100, 0.950),
             score("halving 1", 2100, 0.951), score("halving 2", 6300, 0.9515),
             score("halving 2", 6300, 0.9400), score("refine", 6300, 0.999)]
    assert plateau_rows(rungs, table, 3, 0.1) == 1400
    assert plateau_rows(rungs, table, 3, 0.04) is None  # rose by 0.05 points
    assert plateau_rows(rungs, table, 5, 0.1) == 1680
    assert plateau_rows(rungs, table, 3, None) is None
    assert plateau_rows(rungs[:1], table, 3, 0.1) is None
    rising = table[:-2] + [score("halving 2", 6300, 0.9611)]
    assert plateau_rows(rungs, rising, 3, 0.1) is None
    theta_stage = [rungs[0], {"stage": "theta", "rows": 700}]
    assert plateau_rows(theta_stage, table, 3, 0.1) is None


def test_a_flat_learning_curve_gives_the_final_fit_smaller_partitions():
    """Two separated blobs (every rung's CV accuracy 1.0): the search reports the plateau,
    and SODM's final fit cuts 20,000 rows into partitions of at least 5,000 (p 4) instead of
    the two its 512 MB cache holds; the model is the one an explicit ``p=4`` fits. With
    ``p`` or ``levels`` given, or the linear DSVRG solver, the plateau sets nothing."""
    from solver import SODMClassifier
    from solver.sodm.hierarchy import default_p, plateau_p

    rng = np.random.default_rng(5)
    y = np.repeat([0, 1], 10_000)
    X = rng.normal(size=(20_000, 2)) * 0.3 + np.where(y[:, None] == 1, 3.0, -3.0)
    auto = SODMClassifier(random_state=0).set_params(lam="auto", gamma="auto",
                                                     theta="auto").fit(X, y)
    info = auto.fit_info_["auto"]
    assert info["plateau_rows"] is not None and info["plateau_rows"] < 5000
    assert default_p(20_000) == 2 and plateau_p(20_000, info["plateau_rows"]) == 4
    assert [h["partitions"] for h in auto.history_] == [4]
    fixed = SODMClassifier(lam=auto.lam_, gamma=auto.gamma_, theta=auto.theta_, p=4,
                           random_state=0).fit(X, y)
    assert np.array_equal(auto.decision_function(X), fixed.decision_function(X))
    assert SODMClassifier(p=3).merge_factor(20_000, 1400) == 3
    assert SODMClassifier(levels=1).merge_factor(20_000, 1400) is None
    assert SODMClassifier(kernel="linear").merge_factor(20_000, 1400) is None
    assert SODMClassifier().merge_factor(20_000, None) is None
    assert SODMClassifier().merge_factor(59_535, 1470) == 11


def test_theta_rung_defers_the_other_thetas_to_a_later_rung():
    """``theta_rung=1`` (off by default, 0): the first two rungs score the middle theta
    only; the (lam, gamma) pairs the second promotes get the other thetas on its rows
    (stage "theta") when no later rung runs. With 0 the second rung scores every theta."""
    X, y = checkerboard(1800, 4)

    def searched(theta_rung: int):
        return search(lambda v: ODMClassifier(scale=False, random_state=0, **v), X, y,
                      linear=False, gamma_scale=1.0, fixed={}, auto=("lam", "gamma", "theta"),
                      seed=0, settings=SearchSettings(budget_floor_seconds=1e6,
                                                      refine_rounds=0, theta_rung=theta_rung))

    late, early = searched(1), searched(0)
    assert [r["stage"] for r in late.rungs] == ["halving 0", "halving 1", "theta"]
    assert [r["stage"] for r in early.rungs] == ["halving 0", "halving 1"]
    thetas = {r["stage"]: {t["theta"] for t in late.table if t["stage"] == r["stage"]}
              for r in late.rungs}
    assert thetas == {"halving 0": {0.5}, "halving 1": {0.5}, "theta": {0.2, 0.8}}
    promoted = {(t["lam"], t["gamma"]) for t in late.table if t["stage"] == "theta"}
    assert len(promoted) == math.ceil(late.rungs[1]["candidates"] / 3)
    assert {t["theta"] for t in early.table if t["stage"] == "halving 1"} == {0.2, 0.5, 0.8}


def test_halve_pairs_takes_the_third_of_the_pairs_after_the_theta_rung():
    """``halve_pairs`` (off by default): the rung after the one that gets every theta
    promotes a third of that rung's (lam, gamma) pairs, not a third of its candidates (the
    pairs times the thetas); without it, a third of the candidates. Earlier rungs are the
    same either way."""
    X, y = checkerboard(1800, 4)

    def searched(halve: bool):
        return search(lambda v: ODMClassifier(scale=False, random_state=0, **v), X, y,
                      linear=False, gamma_scale=1.0, fixed={}, auto=("lam", "gamma", "theta"),
                      seed=0, settings=SearchSettings(budget_floor_seconds=1e6, min_rows=150,
                                                      refine_rounds=0, halve_pairs=halve,
                                                      race_se=None))

    pairs, plain = searched(True), searched(False)
    stages = [r["stage"] for r in plain.rungs]
    assert stages[:3] == ["halving 0", "halving 1", "halving 2"]
    assert [r["stage"] for r in pairs.rungs][:3] == stages[:3]
    first = plain.rungs[1]["candidates"]  # promoted pairs x 3 thetas
    assert pairs.rungs[1]["candidates"] == first and first % 3 == 0
    assert plain.rungs[2]["candidates"] == max(2, math.ceil(first / 3))
    assert pairs.rungs[2]["candidates"] == max(2, math.ceil(first / 9))
    assert pairs.rungs[:2] == [{**r, "cpu_seconds": c["cpu_seconds"]}
                               for r, c in zip(plain.rungs[:2], pairs.rungs[:2], strict=True)]


def test_refine_screen_scores_each_neighbour_on_the_previous_rung_first():
    """``refine_screen`` (off by default): a refinement neighbour is scored on the previous
    halving rung's rows first and reaches the last rung's rows only where it would move the
    search there too; the rungs are the same as without the screen."""
    s = SearchSettings(budget_floor_seconds=1e6, min_rows=100, refine_screen=True)
    res = run(s)
    plain = run(SearchSettings(**{**s.__dict__, "refine_screen": False}))
    halving = [r["rows"] for r in res.rungs if r["stage"].startswith("halving")]
    assert len(halving) >= 2 and res.rungs == [
        {**r, "cpu_seconds": c["cpu_seconds"]}
        for r, c in zip(plain.rungs, res.rungs, strict=True)]

    def points(res, stage):
        return [(r["lam"], r["gamma"], r["theta"]) for r in res.table if r["stage"] == stage]

    screen, refine = points(res, "refine screen"), points(res, "refine")
    assert screen and all(r["rows"] == halving[-2] for r in res.table
                          if r["stage"] == "refine screen")
    assert all(r["rows"] == halving[-1] for r in res.table if r["stage"] == "refine")
    assert set(refine) < set(screen)  # some neighbours stopped at their screen
    assert len(refine) < len(points(plain, "refine"))
    assert "refine screen" not in {r["stage"] for r in plain.table}


def _folds_search(X, y, linear: bool = False, **kw):
    """A small lam (and gamma) search on ``X, y`` with the fold levers' test settings."""
    s = SearchSettings(**{"refine_rounds": 0, "log_lam": (1.0, 3.0),
                          "log_gamma_mult": (0.0, 1.0), "race_se": None, **kw})

    def make(v):
        return ODMClassifier(kernel="linear" if linear else "rbf", scale=False,
                             random_state=0, **v)

    return search(make, X, y, linear=linear, gamma_scale=1.0,
                  fixed={"theta": 0.2} if not linear else {"theta": 0.2, "gamma": 1.0},
                  auto=("lam",) if linear else ("lam", "gamma"), seed=0, settings=s)


def _folds_used(res) -> set[int]:
    return {len(r["fold_accuracy"]) for r in res.table}


def test_a_large_search_uses_large_folds():
    """``large_folds`` (off by default; 2 here): a kernel search whose budget is at least
    twice its floor scores each candidate on that many folds (each rung's rows still
    validated once), and says so; under twice the floor, for the linear kernel, or with
    None (the default), ``folds``."""
    assert SearchSettings().large_folds is None
    X, y = checkerboard(900, 3)

    def go(linear: bool = False, **kw):
        return _folds_search(X, y, linear, **{"large_folds": 2, **kw})

    large = go(budget_floor_seconds=0.5, budget_factor=1e6)
    assert large.budget_cpu_seconds >= 2 * 0.5
    assert large.folds == 2 and large.settings.folds == 2 and _folds_used(large) == {2}
    assert large.info()["folds"] == 2
    small = go(budget_floor_seconds=1e6)
    assert small.budget_cpu_seconds < 2 * 1e6 and small.folds == 3 and _folds_used(small) == {3}
    off = go(budget_floor_seconds=0.5, budget_factor=1e6, large_folds=None)
    assert off.folds == 3 and _folds_used(off) == {3}
    linear = go(linear=True, budget_floor_seconds=0.5, budget_factor=1e6)
    assert linear.folds == 3 and _folds_used(linear) == {3}
    # the same large search twice: the same folds, scores and choice
    again = go(budget_floor_seconds=0.5, budget_factor=1e6)
    assert cv_table(again) == cv_table(large) and again.lam == large.lam


def test_a_large_search_scores_two_of_three_folds():
    """``score_folds`` (off by default; 2 here): a kernel search whose budget is at least
    twice its floor scores each candidate on the first 2 of its 3 folds, fold fits on two
    thirds of a rung's rows as with every fold (the same first two folds' accuracies as the
    full CV), the same rungs and candidates, and says so; under twice the floor, for the
    linear kernel, or with None (the default), every fold."""
    assert SearchSettings().score_folds is None
    X, y = checkerboard(900, 3)

    def go(linear: bool = False, **kw):
        return _folds_search(X, y, linear, **{"score_folds": 2, "select_work": 0.0, **kw})

    large = go(budget_floor_seconds=0.5, budget_factor=1e6)
    full = go(budget_floor_seconds=0.5, budget_factor=1e6, score_folds=None)
    assert large.budget_cpu_seconds >= 2 * 0.5
    assert large.folds == 3 and large.scored_folds == 2 and _folds_used(large) == {2}
    assert large.info()["scored_folds"] == 2 and full.info()["scored_folds"] == 3
    assert _folds_used(full) == {3}
    # the same rungs and candidates as the full CV, each on its first two folds
    assert [r["rows"] for r in large.rungs] == [r["rows"] for r in full.rungs]
    by_key = {(r["lam"], r["gamma"], r["rows"]): r for r in full.table}
    for r in large.table:
        twin = by_key[(r["lam"], r["gamma"], r["rows"])]
        assert r["fold_accuracy"] == twin["fold_accuracy"][:2]
    small = go(budget_floor_seconds=1e6)
    assert small.budget_cpu_seconds < 2 * 1e6 and _folds_used(small) == {3}
    linear = go(linear=True, budget_floor_seconds=0.5, budget_factor=1e6)
    assert _folds_used(linear) == {3}


def test_race_se_stops_the_clearly_behind_after_a_fold():
    """``race_se`` (2 by default): after each fold but the last, a halving rung's candidate
    whose accuracy on the rows validated so far is more than 2 standard errors of the
    difference below the rung's ``keep``-th best (its best where no later rung or theta
    stage follows) stops there, ranked after the candidates scored on every fold. The
    promotions and the choice are those of scoring every fold, from fewer fits; the same
    search twice gives the same table; a weighted score races nothing."""
    from solver.auto.search import CVWeights

    X, y = checkerboard(1800, 4)

    def go(weights=None, **kw):
        s = SearchSettings(**{"budget_floor_seconds": 1e6, "min_rows": 150,
                              "refine_rounds": 0, **kw})
        return search(lambda v: ODMClassifier(scale=False, random_state=0, **v), X, y,
                      linear=False, gamma_scale=1.0, fixed={},
                      auto=("lam", "gamma", "theta"), seed=0, settings=s, weights=weights)

    def key(r):
        return (r["lam"], r["gamma"], r["theta"])

    raced, full = go(), go(race_se=None)
    assert SearchSettings().race_se == 2.0
    assert [r["rows"] for r in raced.rungs] == [r["rows"] for r in full.rungs]
    assert len(raced.rungs) >= 3 and all(r["raced_for"] is None for r in full.rungs)
    # the theta rung races for its promotions, the last halving rung for its best
    promoted = [sum(1 for r in raced.table if r["stage"] == g["stage"])
                for g in raced.rungs[1:]]
    assert raced.rungs[0]["raced_for"] == math.ceil(raced.rungs[0]["candidates"] / 3)
    assert raced.rungs[-1]["raced_for"] == 1
    assert sum(g["raced_out"] for g in raced.rungs) > 0  # on this board some stop (can fail)
    out = [r for r in raced.table if r["raced"]]
    assert out and all(len(r["fold_accuracy"]) < 3 and r["stage"].startswith("halving")
                       for r in out)
    assert sum(len(r["fold_accuracy"]) for r in raced.table) < \
        sum(len(r["fold_accuracy"]) for r in full.table)
    # each stopped candidate was that far behind the rung's keep-th best on its folds
    for r in out:
        j, rows = len(r["fold_accuracy"]), r["rows"]
        rung = next(g for g in raced.rungs if g["stage"] == r["stage"])
        a = float(np.mean(r["fold_accuracy"]))
        ahead = 0
        for o in raced.table:
            if o["stage"] != r["stage"] or len(o["fold_accuracy"]) <= j - 1 or o is r:
                continue
            b = float(np.mean(o["fold_accuracy"][:j]))
            if a + 2.0 * math.sqrt((a * (1 - a) + b * (1 - b)) / (rows * j / 3)) < b:
                ahead += 1
        assert ahead >= rung["raced_for"], r
    # the same promotions (each later rung's candidates) and choice as scoring every fold
    assert promoted == [sum(1 for r in full.table if r["stage"] == g["stage"])
                        for g in full.rungs[1:]]
    for g in raced.rungs[1:]:
        assert {key(r) for r in raced.table if r["stage"] == g["stage"]} == \
            {key(r) for r in full.table if r["stage"] == g["stage"]}
    assert (raced.lam, raced.gamma, raced.theta) == (full.lam, full.gamma, full.theta)
    assert cv_table(go()) == cv_table(raced)
    weighted = go(weights=CVWeights(balanced=True))
    assert all(r["raced_for"] is None for r in weighted.rungs)
    assert not any(r["raced"] for r in weighted.table)


def test_the_search_reports_progress_fold_by_fold():
    """A rung runs fold by fold, so its progress moves with each fold fit (a stopped
    candidate's unrun folds at once), never back, and ends at the predicted seconds
    charged, before any candidate of the rung has finished its last fold."""
    X, y = checkerboard(1800, 4)
    seen: list[tuple[float, str]] = []
    s = SearchSettings(budget_floor_seconds=1e6, min_rows=150, refine_rounds=0)
    res = search(lambda v: ODMClassifier(scale=False, random_state=0, **v), X, y,
                 linear=False, gamma_scale=1.0, fixed={}, auto=("lam", "gamma", "theta"),
                 seed=0, settings=s, progress=lambda f, m: seen.append((f, m)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and 0 < fractions[-1] <= 0.99
    assert fractions[-1] == pytest.approx(min(0.99, res.predicted_cpu_seconds / 1e6))
    first = [(f, m) for f, m in seen if m.startswith("auto search: halving 1 ")]
    early = [f for f, m in first if "fold 1/3, 0/" in m]
    assert len(set(early)) > 1  # it moved while no candidate had finished
    n = res.rungs[1]["candidates"]
    assert first[-1][1].endswith(f"fold 3/3, {n}/{n} candidates done")
