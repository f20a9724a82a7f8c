"""``bench.ensemble_curve`` on a real SODM fit: the curve's last row is the estimator's model,
and the held-out columns are what the rule reads (docs/auto-params.md, "The final fit's
partitions, one by one")."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from bench.data import load_split
from bench.ensemble_curve import curve, level_one_fit, level_one_ids, main, stop_at


def test_the_curve_ends_on_the_estimators_model() -> None:
    from solver import SODMClassifier

    s = load_split("svmguide1")
    idx = np.random.default_rng(0).permutation(len(s.y_train))  # the file is sorted
    X, y = np.asarray(s.X_train[idx[:1600]], dtype=float), s.y_train[idx[:1600]]
    Xv, yv = np.asarray(s.X_train[idx[1600:]], dtype=float), s.y_train[idx[1600:]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SODMClassifier(kernel="rbf", lam=100.0, gamma=1.0, theta=0.5, scale=False,
                             random_state=0, n_jobs=1, p=4, levels=1).fit(X, y)
        res, kernel = level_one_fit(X, y, 1.0, 100.0, 0.5, p=4)
    ids = level_one_ids(res)
    assert ids is not None and sorted(np.unique(ids)) == [0, 1, 2, 3]
    rows = curve(res, kernel, ids, X, y, Xv, yv)
    assert [r["k"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["validation"] == est.score(Xv, yv)
    assert rows[-1]["support_vectors"] == est.support_.size
    assert rows[-1]["agrees_with_whole"] == 1.0
    assert 0 < rows[0]["support_vectors"] < rows[1]["support_vectors"]


def test_the_printed_curve_has_its_held_out_columns_where_they_apply(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dataset", "svmguide1", "--lam", "100", "--gamma-mult", "1", "--theta",
                 "0.5", "--p", "4"]) == 0
    out = capsys.readouterr().out
    head = re.search(r"(\d+) partitions, fit \S+ CPU s, (\d+) support vectors", out)
    assert head and int(head.group(1)) == 4, out
    rows = re.findall(r"^\| (\d) \| (\S+) \| (\S+) \| (\S+) \| (\S+) \| ([^|]+?)(?: %)? \| "
                      r"([\d,]+) \|", out, re.M)
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    assert [r[3] == "-" for r in rows] == [False, False, False, True]  # held out: k < p
    assert [r[4] == "-" for r in rows] == [True, False, False, True]  # a gain: 1 < k < p
    assert [r[5] == "-" for r in rows] == [True, False, False, True]
    for (_, _, _, before, _, _, _), (_, _, _, after, gain, flips, _) in zip(
            rows[:2], rows[1:3], strict=True):
        assert float(gain) == pytest.approx(100.0 * (float(after) - float(before)), abs=0.011)
        assert abs(float(gain)) <= float(flips)  # a gain needs flipped rows
    assert float(rows[-1][2]) == 1.0  # all p partitions are the model
    svs = [int(r[6].replace(",", "")) for r in rows]
    assert svs == sorted(svs) and svs[0] < svs[-1] == int(head.group(2))
    stops = re.findall(r"stop at the first held-out (gain|flips) .*: k = (\d) of 4", out)
    assert [s[0] for s in stops] == ["gain", "flips"] and all(2 <= int(s[1]) <= 4 for s in stops)


def test_a_rule_stops_at_the_first_small_step_or_keeps_every_partition() -> None:
    rows = [{"k": 1, "g": None}, {"k": 2, "g": 0.004}, {"k": 3, "g": 0.0005},
            {"k": 4, "g": -0.001}, {"k": 5, "g": None}]
    assert stop_at(rows, "g", 0.001) == 3
    assert stop_at(rows, "g", 0.0001) == 4  # a loss is under any threshold
    assert stop_at([rows[0], rows[1], rows[-1]], "g", 0.001) == 3  # none small: all of them
