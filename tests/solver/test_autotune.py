"""Automatic lam / gamma / theta ("auto", ``solver.auto.search``): what the search records, that
the final fit is the estimator at the chosen values, each parameter independently, the
budget, cancellation, small data, model files, and that it finds what the defaults miss."""

from __future__ import annotations

import lzma
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_svmlight_file, make_blobs
from sklearn.model_selection import train_test_split

from solver import FitCancelled, ODMClassifier, SODMClassifier
from solver.auto.search import SearchSettings, _rung_sizes, search
from solver.core.row_blocks import LazyRows, blocks_of, scan
from solver.estimators import CascadeODMClassifier, SVRGODMClassifier
from solver.io.model_io import dumps, loads

AUTO = {"lam": "auto", "gamma": "auto", "theta": "auto"}


@pytest.fixture(scope="module")
def heart(datasets_dir: Path):
    with lzma.open(datasets_dir / "heart_scale.xz") as fh:
        X, y = load_svmlight_file(fh)
    return X.toarray(), y.astype(int)


@pytest.fixture(scope="module")
def fitted(heart):
    X, y = heart
    return SODMClassifier(**AUTO, random_state=0).fit(X, y)


def checkerboard(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A 4 x 4 checkerboard on [0, 1]^2: needs a narrow RBF kernel ("scale" is too wide)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 2))
    y = ((np.floor(4 * X[:, 0]) + np.floor(4 * X[:, 1])) % 2).astype(int)
    return X, y


def test_fit_info_records_the_search(fitted):
    a = fitted.fit_info_["auto"]
    assert a["auto"] == ["lam", "gamma", "theta"]
    table = a["cv_table"]
    # 270 rows: one rung. The 7 lam x 5 gamma grid at theta 0.5; the best third of it (12
    # pairs) at the grid's other thetas on the same rows; then the refinement
    first = [r for r in table if r["stage"] == "halving 0"]
    assert len(first) == 35 and {r["theta"] for r in first} == {0.5}
    assert len({(r["lam"], r["gamma"]) for r in first}) == 35
    ranked = sorted(first, key=lambda r: (-r["mean_accuracy"], r["lam"], r["gamma"]))
    staged = [r for r in table if r["stage"] == "theta"]
    assert sorted((r["lam"], r["gamma"], r["theta"]) for r in staged) == sorted(
        (r["lam"], r["gamma"], t) for r in ranked[:12] for t in (0.2, 0.8))
    assert [r["stage"] for r in a["rungs"]] == ["halving 0", "theta"]
    assert "middle theta" in a["method"]
    assert len(table) > 35 + 24 and {r["stage"] for r in table[59:]} == {"refine"}
    chosen = a["chosen"]
    # the chosen point is the best CV accuracy on the last rung's rows
    last = [r for r in table if r["rows"] == a["rows"]]
    best = max(r["mean_accuracy"] for r in last)
    pick = [r for r in last if (r["lam"], r["gamma"], r["theta"])
            == (chosen["lam"], chosen["gamma"], chosen["theta"])]
    assert len(pick) == 1 and pick[0]["mean_accuracy"] == best
    # every candidate on all 3 folds, but those raced out of a halving rung (race_se)
    assert all(len(r["fold_accuracy"]) == a["folds"] == 3 for r in table if not r["raced"])
    assert all(len(r["fold_accuracy"]) < 3 and r["stage"].startswith("halving")
               for r in table if r["raced"])
    # the fitted model uses the chosen values; the parameters stay "auto" (sklearn rule)
    assert fitted.get_params()["lam"] == "auto"
    assert (fitted.lam_, fitted.gamma_, fitted.theta_) == (chosen["lam"], chosen["gamma"],
                                                          chosen["theta"])
    assert fitted.fit_info_["params"] == chosen
    # CPU seconds of the search and of the final fit, and the budget they were held to
    assert 0 < a["cpu_seconds"] <= a["budget_allowed_cpu_seconds"]
    assert a["within_budget"] is True and a["final_fit_cpu_seconds"] >= 0
    assert a["budget_allowed_cpu_seconds"] == max(10.0, 3 * a["final_fit_cpu_seconds"])


def test_final_fit_is_the_estimator_at_the_chosen_values(heart, fitted):
    X, y = heart
    c = fitted.fit_info_["auto"]["chosen"]
    plain = SODMClassifier(random_state=0, **c).fit(X, y)
    np.testing.assert_array_equal(plain.decision_function(X), fitted.decision_function(X))


def test_clone_keeps_auto_and_model_file_round_trip(heart, fitted):
    X, _ = heart
    assert clone(fitted).get_params()["theta"] == "auto"
    back = loads(dumps(fitted))
    assert back.get_params()["gamma"] == "auto"
    assert (back.lam_, back.theta_) == (fitted.lam_, fitted.theta_)
    assert back.fit_info_["auto"]["cv_table"] == fitted.fit_info_["auto"]["cv_table"]
    np.testing.assert_array_equal(back.decision_function(X), fitted.decision_function(X))


@pytest.mark.parametrize("name", ["lam", "gamma", "theta"])
def test_each_parameter_independently(heart, name):
    X, y = heart
    fixed = {"lam": 100.0, "gamma": 0.05, "theta": 0.3}
    est = ODMClassifier(random_state=1, **{**fixed, name: "auto"}).fit(X, y)
    a = est.fit_info_["auto"]
    assert a["auto"] == [name]
    for other, value in fixed.items():
        if other != name:
            assert [r[other] for r in a["cv_table"]] == pytest.approx(
                [value] * len(a["cv_table"]))
            assert est.fit_info_["params"][other] == pytest.approx(value)
    assert len({r[name] for r in a["cv_table"]}) > 3


def test_linear_kernel_searches_lam_and_theta_only(heart):
    X, y = heart
    est = SODMClassifier(kernel="linear", **AUTO, random_state=0).fit(X, y)
    a = est.fit_info_["auto"]
    assert a["auto"] == ["lam", "theta"] and est.gamma_ == 1.0


def test_multiclass_and_baselines():
    X, y = make_blobs(n_samples=150, centers=[[0, 0], [3, 0], [1.5, 3]], cluster_std=1.0,
                      random_state=3)
    est = ODMClassifier(lam="auto", gamma="auto", random_state=0).fit(X, y)
    assert len(est.classes_) == 3 and est.score(X, y) > 0.85
    assert est.fit_info_["auto"]["rows"] == 150
    svrg = SVRGODMClassifier(lam="auto", theta="auto", random_state=0).fit(X[y < 2], y[y < 2])
    assert svrg.fit_info_["auto"]["auto"] == ["lam", "theta"]
    casc = CascadeODMClassifier(lam="auto", random_state=0, n_jobs=1).fit(X[y < 2], y[y < 2])
    assert casc.fit_info_["auto"]["auto"] == ["lam"] and casc.score(X[y < 2], y[y < 2]) > 0.9


def test_finds_the_narrow_kernel_the_default_misses():
    """On a checkerboard the "scale" gamma underfits; the search must find a narrow kernel
    and beat the defaults on held-out rows by a wide margin."""
    X, y = checkerboard(1500, 0)
    Xt, yt = checkerboard(2000, 1)
    default = SODMClassifier(random_state=0).fit(X, y).score(Xt, yt)
    auto = SODMClassifier(lam="auto", gamma="auto", random_state=0).fit(X, y)
    assert auto.score(Xt, yt) > default + 0.05, (auto.score(Xt, yt), default)
    a = auto.fit_info_["auto"]
    assert a["chosen"]["gamma"] > a["gamma_scale"]
    # successive halving: the whole 7 x 5 grid on 1500 / 3 rows, a third of it on all rows
    assert [(r["rows"], r["candidates"]) for r in a["rungs"]] == [(500, 35), (1500, 12)]


def test_first_rung_holds_the_middle_theta():
    """With theta searched beside lam and gamma, the first rung scores the 35 (lam, gamma)
    pairs at theta 0.5 only; the 12 it promotes go on at all three thetas, 0.5 first.
    ``stage_theta=False`` puts the whole 105-point grid on the first rung."""
    X, y = checkerboard(1500, 4)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))

    def run(stage: bool):
        return search(lambda v: ODMClassifier(scale=False, random_state=0, **v), X, y,
                      linear=False, gamma_scale=1.0, fixed={}, auto=("lam", "gamma", "theta"),
                      seed=0, settings=SearchSettings(budget_floor_seconds=1e6,
                                                      stage_theta=stage))

    staged = run(True)
    assert [(r["rows"], r["candidates"]) for r in staged.rungs] == [(500, 35), (1500, 36)]
    first = [r for r in staged.table if r["stage"] == "halving 0"]
    assert {r["theta"] for r in first} == {0.5}
    ranked = sorted(first, key=lambda r: (-r["mean_accuracy"], r["lam"], r["gamma"]))
    second = [(r["lam"], r["gamma"], r["theta"]) for r in staged.table
              if r["stage"] == "halving 1"]
    assert second == [(r["lam"], r["gamma"], t) for r in ranked[:12] for t in (0.5, 0.2, 0.8)]
    assert staged.rows == 1500 and "middle theta" in staged.info()["method"]
    whole = run(False)
    assert [(r["rows"], r["candidates"]) for r in whole.rungs] == [(500, 105), (1500, 35)]
    assert "middle theta" not in whole.info()["method"]


def test_budget_stops_the_search():
    """With (almost) no budget the search stops after the first rung and refines nothing."""
    X, y = checkerboard(1500, 2)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    res = search(lambda v: ODMClassifier(scale=False, random_state=0, **v), X, y,
                 linear=False, gamma_scale=1.0, fixed={"gamma": 1.0, "theta": 0.2},
                 auto=("lam",), seed=0,
                 settings=SearchSettings(budget_floor_seconds=1e-6, budget_factor=0.0))
    assert res.stop_reason == "budget"
    assert [r["rows"] for r in res.rungs] == [500]
    assert {r["stage"] for r in res.table} == {"halving 0"}


def test_a_rung_that_does_not_fit_whole_takes_the_best_that_do():
    """A budget between "first rung only" and "the whole second rung" runs the second rung
    on the best of the promoted candidates that fit it; with room for fewer than two (after
    one refinement round's reserve) the search stops after the first rung."""
    X, y = checkerboard(1500, 2)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))

    def run(budget: float):
        return search(lambda v: ODMClassifier(scale=False, random_state=0, **v), X, y,
                      linear=False, gamma_scale=1.0, fixed={"theta": 0.2},
                      auto=("lam", "gamma"), seed=0,
                      settings=SearchSettings(budget_floor_seconds=budget, budget_factor=0.0))

    whole = run(1e6)
    assert [(r["rows"], r["candidates"]) for r in whole.rungs] == [(500, 35), (1500, 12)]
    first = whole.rungs[0]["predicted_cpu_seconds"]
    each = whole.rungs[1]["predicted_cpu_seconds"] / 12
    # room for 5 candidates after the reserve of one refinement round (2 x 2 neighbours)
    part = run(first + (4 + 5.5) * each)
    assert [(r["rows"], r["candidates"]) for r in part.rungs] == [(500, 35), (1500, 5)]
    rung0 = sorted((r for r in part.table if r["stage"] == "halving 0"),
                   key=lambda r: (-r["mean_accuracy"], r["lam"], r["gamma"]))
    promoted = {(r["lam"], r["gamma"]) for r in part.table if r["stage"] == "halving 1"}
    assert promoted == {(r["lam"], r["gamma"]) for r in rung0[:5]}
    # room for one: not worth a rung
    short = run(first + (4 + 1.5) * each)
    assert [r["rows"] for r in short.rungs] == [500] and short.stop_reason == "budget"


def test_cv_table_records_each_folds_faces():
    """Every CV entry keeps, per fold, the faces its Newton steps factored (what a cost
    model of counted work reads, bench.autotune_cost); large lam factors more of them."""
    X, y = checkerboard(900, 7)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    res = search(lambda v: ODMClassifier(scale=False, random_state=0, **v), X, y,
                 linear=False, gamma_scale=1.0, fixed={"gamma": 30.0, "theta": 0.2},
                 auto=("lam",), seed=0, settings=SearchSettings(refine_rounds=0, race_se=None))
    assert all(len(r["faces"]) == res.folds for r in res.table)
    assert all(0 < s <= r["rows"] for r in res.table for f in r["faces"] for s in f)

    def work(r: dict) -> float:
        return sum(s ** 3 for f in r["faces"] for s in f)

    first = [r for r in res.table if r["stage"] == "halving 0"]
    assert work(max(first, key=lambda r: r["lam"])) > work(min(first, key=lambda r: r["lam"]))


def test_too_few_rows_per_class_falls_back_to_defaults():
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    y = np.array([0, 0, 0, 1])
    est = ODMClassifier(**AUTO).fit(X, y)
    a = est.fit_info_["auto"]
    assert a["cv_table"] == [] and "defaults" in a["stop_reason"]
    assert (est.lam_, est.theta_) == (1000.0, 0.2)


def test_cancel_during_the_search(heart):
    X, y = heart
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] > 20

    with pytest.raises(FitCancelled):
        SODMClassifier(**AUTO).fit(X, y, should_stop=stop)


def test_progress_covers_search_then_final_fit(heart):
    X, y = heart
    seen: list[tuple[float, str]] = []
    SODMClassifier(lam="auto", random_state=0).fit(
        X, y, progress=lambda f, m, r: seen.append((f, m)))
    fractions = [f for f, _ in seen]
    assert any(m.startswith("auto search") for _, m in seen)
    assert any(m.startswith("final fit") for _, m in seen)
    assert all(0 <= f <= 1 for f in fractions) and max(fractions) == 1.0


def test_validation_names_auto(heart):
    X, y = heart
    with pytest.raises(ValueError, match="lam"):
        ODMClassifier(lam="automatic").fit(X, y)
    with pytest.raises(ValueError, match="'scale', 'auto'"):
        ODMClassifier(gamma="wide").fit(X, y)
    # held-out split of heart_scale: auto is no worse than the documented default here
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    auto = SODMClassifier(**AUTO, random_state=0).fit(Xtr, ytr).score(Xte, yte)
    assert auto > 0.75


def test_choices_do_not_depend_on_the_clock():
    """The budget decisions use predicted costs: a machine three times slower (every fit
    burns extra CPU) scores the same candidates on the same rows and picks the same values."""
    X, y = checkerboard(1500, 3)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))

    class Slow(ODMClassifier):
        def fit(self, X, y, **kw):  # noqa: N803 - sklearn's names
            t = time.process_time()
            out = super().fit(X, y, **kw)
            spent = time.process_time() - t
            while time.process_time() - t < 3 * spent + 0.002:
                pass
            return out

    def run(cls):
        return search(lambda v: cls(scale=False, random_state=0, **v), X, y, linear=False,
                      gamma_scale=1.0, fixed={"theta": 0.2}, auto=("lam", "gamma"), seed=0,
                      settings=SearchSettings(budget_floor_seconds=1.0))

    fast, slow = run(ODMClassifier), run(Slow)
    assert slow.cpu_seconds > 2 * fast.cpu_seconds
    keys = ("lam", "gamma", "theta", "rows", "stage", "mean_accuracy")
    assert ([[r[k] for k in keys] for r in fast.table]
            == [[r[k] for k in keys] for r in slow.table])
    assert (fast.lam, fast.gamma, fast.stop_reason) == (slow.lam, slow.gamma, slow.stop_reason)
    # the budget is predicted from the rows alone, and a small one stops the search early
    assert fast.budget_cpu_seconds == slow.budget_cpu_seconds == max(
        1.0, 3 * fast.final_fit_estimate_cpu_seconds)
    assert fast.stop_reason == "budget"
    assert fast.predicted_cpu_seconds <= fast.budget_cpu_seconds + fast.rungs[0][
        "predicted_cpu_seconds"]


def test_choose_auto_is_the_search_of_fit(heart, fitted):
    """``choose_auto`` (what a Spark job's worker runs before Spark fits) records the same
    search as ``fit`` and chooses the same values; nothing "auto": None."""
    X, y = heart
    info = SODMClassifier(**AUTO, random_state=0).choose_auto(X, y)
    a = fitted.fit_info_["auto"]
    def scores(table):  # every entry but the measured seconds
        return [{k: v for k, v in r.items() if k != "cpu_seconds"} for r in table]

    assert info["chosen"] == a["chosen"] and scores(info["cv_table"]) == scores(a["cv_table"])
    assert "final_fit_cpu_seconds" not in info
    assert SODMClassifier(lam=1.0, gamma=0.1, theta=0.2).choose_auto(X, y) is None
    assert SODMClassifier(kernel="linear", gamma="auto").choose_auto(X, y) is None


def test_lazy_rows_read_only_the_bound_and_choose_the_same():
    """Given rows read on demand (a Spark job's worker), the search reads the first
    ``row_bound`` rows of its order once, fewer than all when the budget cannot reach the
    last rung, and scores and chooses exactly what the in-memory rows give."""
    X, y = checkerboard(9000, 5)
    stats = scan(lambda: blocks_of(X))
    reads: list[np.ndarray] = []

    def read(positions: np.ndarray) -> np.ndarray:
        reads.append(positions)
        return X[positions]

    lazy = LazyRows(stats, read)
    est = ODMClassifier(lam="auto", gamma=30.0, theta=0.2, random_state=0)
    mem, got = est.choose_auto(X, y), est.choose_auto(lazy, y)
    # 9,000 rows give rungs of 1,000, 3,000, 9,000; the 10 s floor cannot pay for the last
    assert mem["row_bound"] == got["row_bound"] == 3000
    assert [len(p) for p in reads] == [3000] and lazy.rows_read == 3000
    assert np.all(np.diff(reads[0]) > 0)
    assert max(r["rows"] for r in mem["rungs"]) == 3000

    def scores(table):  # every entry but the measured seconds
        return [{k: v for k, v in r.items() if k != "cpu_seconds"} for r in table]

    assert got["chosen"] == mem["chosen"] and got["gamma_scale"] == mem["gamma_scale"]
    assert scores(got["cv_table"]) == scores(mem["cv_table"])
    with pytest.raises(ValueError, match="labels"):
        est.choose_auto(lazy, y[:-1])
    with pytest.raises(ValueError, match="scanned with scale=True"):
        clone(est).set_params(scale=False).choose_auto(lazy, y)


def test_rungs_over_max_rows_are_left_out():
    """``max_rows`` caps the rows of every rung (and so what the search reads); the stop
    reason says the cap, not "all rows used"."""
    X, y = checkerboard(6000, 6)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))

    def run(settings: SearchSettings):
        return search(lambda v: ODMClassifier(kernel="linear", scale=False, random_state=0,
                                              **v),
                      X, y, linear=True, gamma_scale=1.0, fixed={"gamma": 1.0, "theta": 0.2},
                      auto=("lam",), seed=0, settings=settings)

    capped = run(SearchSettings(max_rows=2500))
    assert [r["rows"] for r in capped.rungs] == [666, 2000]
    assert capped.row_bound == 2000 and capped.stop_reason == "row cap (2500)"
    whole = run(SearchSettings())
    assert [r["rows"] for r in whole.rungs] == [666, 2000, 6000]
    assert whole.row_bound == 6000 and whole.stop_reason == "all rows used"


def test_kernel_rungs_stay_within_the_cache():
    """A kernel rung has at most the rows whose fold fits hold no more rows than one solve of
    the final fit (``solve_rows``, what its float32 kernel cache holds), however large the
    budget: beyond it a fit runs on cached columns, dearer than the cost model's price.
    Larger sizes give way to one rung of that many rows where it is at least sqrt(eta)
    times the largest size under it, else the ladder ends there (no rung dearer than the
    ladder's); ``rungs_in_cache=False`` keeps the ladder."""
    s = SearchSettings()
    assert _rung_sizes(4500, s) == [500, 1500, 4500]
    assert _rung_sizes(4500, s, cache_rows=3000) == [500, 1500, 3000]
    assert _rung_sizes(4500, s, cache_rows=2100) == [500, 1500]  # 2,100 < sqrt(3) x 1,500
    assert _rung_sizes(4500, s, cache_rows=2700) == [500, 1500, 2700]
    assert _rung_sizes(4500, s, cache_rows=4500) == [500, 1500, 4500]
    assert _rung_sizes(4500, s, cache_rows=400) == [400]
    X, y = checkerboard(4500, 7)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))

    def run(settings: SearchSettings):
        return search(lambda v: ODMClassifier(scale=False, random_state=0, **v), X, y,
                      linear=False, gamma_scale=0.5, fixed={"gamma": 8.0, "theta": 0.3},
                      auto=("lam",), seed=0, solve_rows=2000, settings=settings)

    roomy = {"log_lam": (1.0, 3.0, 5.0), "budget_floor_seconds": 1e4, "refine_rounds": 0}
    capped = run(SearchSettings(**roomy))
    # 3,000-row rungs: 3 folds of 2,000 training rows
    assert [r["rows"] for r in capped.rungs] == [500, 1500, 3000]
    assert capped.row_bound == 3000 and capped.stop_reason == "kernel cache (3000 rows)"
    assert max(r["rows"] for r in capped.table) == 3000
    whole = run(SearchSettings(**roomy, rungs_in_cache=False))
    assert [r["rows"] for r in whole.rungs] == [500, 1500, 4500]
    assert whole.stop_reason == "all rows used"

    def scores(res, rows):  # the rungs both ran scored the same candidates the same
        return [(r["lam"], r["mean_accuracy"]) for r in res.table if r["rows"] == rows]

    assert scores(capped, 1500) == scores(whole, 1500)
