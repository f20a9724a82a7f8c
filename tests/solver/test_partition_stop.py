"""The held-out gain rule: SODM's level 1 stops adding partitions once one no longer raises
the accuracy on the last partition's rows (solver.sodm.partition_stop; docs/auto-params.md,
"The final fit's partitions, one by one")."""

from __future__ import annotations

import numpy as np
import pytest

from bench.data import load_split
from solver.core.formulation import ODMParams
from solver.core.kernels import Kernel, kernel_decision
from solver.estimators import average_local_duals
from solver.sodm.hierarchy import sodm_kernel
from solver.sodm.partition_stop import HeldOutCurve

KERNEL = Kernel("rbf", gamma=1.0)
PARAMS = ODMParams(lam=100.0, upsilon=0.5, theta=0.5)


def test_the_curve_stops_at_the_first_step_that_gains_too_little() -> None:
    y = np.array([1.0, 1.0, -1.0, -1.0, 1.0])
    curve = HeldOutCurve(y, min_gain=0.25)
    assert not curve.add(np.array([1.0, -1.0, 1.0, -1.0, -1.0]))  # 2 of 5 right: the first
    assert not curve.add(np.array([0.0, 2.0, -2.0, 0.0, 0.0]))  # 4 of 5: +0.4
    assert curve.add(np.array([0.0, 0.0, 0.0, 0.0, 1.5]))  # 5 of 5: +0.2, under 0.25
    assert curve.accuracies == pytest.approx([0.4, 0.8, 1.0])
    assert curve.gains == pytest.approx([0.4, 0.2])


def test_a_loss_stops_the_curve_and_weights_count() -> None:
    y = np.array([1.0, -1.0, 1.0])
    curve = HeldOutCurve(y, min_gain=0.0, weights=np.array([1.0, 1.0, 2.0]))
    assert not curve.add(np.array([1.0, 1.0, 1.0]))  # weighted 3 of 4
    assert curve.add(np.array([0.0, 0.0, -2.0]))  # the heavy row flips wrong: 1 of 4
    assert curve.gains == pytest.approx([-0.5])


@pytest.fixture(scope="module")
def guide() -> tuple[np.ndarray, np.ndarray]:
    s = load_split("svmguide1")
    idx = np.random.default_rng(0).permutation(len(s.y_train))  # the file is sorted by label
    return np.asarray(s.X_train, dtype=float)[idx], s.y_train[idx]


def _local_decisions(X, y, alpha, ids, rows) -> np.ndarray:
    nu = y * (alpha[:, 0] - alpha[:, 1])
    return np.stack([kernel_decision(X[ids == k], KERNEL, nu[ids == k], Z=X[rows])
                     for k in range(int(ids.max()) + 1)])


@pytest.mark.parametrize(("p", "seed", "gain", "expected"), [
    (6, 3, 0.5, 2),  # no partition gains half the rows: the second stops the fit
    (6, 0, 0.0, 3),  # the third is the first that gains nothing
    (3, 0, 0.0, 3),  # the second did not lose: the last (held-out) partition is solved too
])
def test_the_kept_partitions_are_the_whole_fits_first_ones(guide, p: int, seed: int,
                                                           gain: float, expected: int) -> None:
    # level 1's partitions are independent local solves: the rule keeps the first k of
    # them as the fit without it solved them and zeroes the rest; k is where the k-th
    # local model first gained less than ``gain`` on the last partition's rows
    X, y = guide
    whole = sodm_kernel(X, y, KERNEL, PARAMS, p=p, levels=1, random_state=seed)
    res = sodm_kernel(X, y, KERNEL, PARAMS, p=p, levels=1, random_state=seed,
                      partition_gain=gain)
    np.testing.assert_array_equal(res.partitions, whole.partitions)
    ids = res.partitions
    rec = res.history[0]
    k = rec["partitions_kept"]
    assert k == expected
    assert rec["partitions_planned"] == p and rec["partitions"] == k
    kept = np.isin(ids, res.kept_partitions)
    np.testing.assert_array_equal(res.alpha[kept], whole.alpha[kept])
    assert not res.alpha[~kept].any()
    # the rule's reading, recomputed from the whole fit's duals
    held = np.flatnonzero(ids == p - 1)
    assert rec["held_out_rows"] == held.size
    sums = np.cumsum(_local_decisions(X, y, whole.alpha, ids, held)[:p - 1], axis=0)
    acc = [float(np.mean(np.where(s > 0, 1.0, -1.0) == y[held])) for s in sums]
    first_small = next((j + 1 for j in range(1, p - 1) if acc[j] - acc[j - 1] < gain), None)
    if first_small is None:
        assert k == p and list(res.kept_partitions) == list(range(p))
        assert rec["held_out_accuracy"] == pytest.approx(acc)
    else:
        assert k == first_small and list(res.kept_partitions) == list(range(k))
        assert rec["held_out_accuracy"] == pytest.approx(acc[:k])


def test_the_rule_keeps_the_same_partitions_with_more_processes(guide) -> None:
    X, y = guide
    one = sodm_kernel(X, y, KERNEL, PARAMS, p=6, levels=1, random_state=0,
                      partition_gain=0.0, n_jobs=1)
    two = sodm_kernel(X, y, KERNEL, PARAMS, p=6, levels=1, random_state=0,
                      partition_gain=0.0, n_jobs=2)  # the third stops it, the fourth beside it
    assert one.history[0]["partitions_kept"] == 3
    np.testing.assert_array_equal(one.kept_partitions, two.kept_partitions)
    np.testing.assert_array_equal(one.alpha, two.alpha)


def test_without_one_level_the_rule_does_not_apply(guide) -> None:
    X, y = guide
    res = sodm_kernel(X, y, KERNEL, PARAMS, p=3, levels=2, random_state=3,
                      partition_gain=0.5)
    assert res.kept_partitions is None
    assert all("partitions_kept" not in h for h in res.history)
    with pytest.raises(ValueError, match="partition_gain"):
        sodm_kernel(X, y, KERNEL, PARAMS, p=3, levels=1, partition_gain=1.5)


def test_the_kept_partitions_alone_make_up_the_model_scale() -> None:
    # the estimator's size-weighted average of the local models: over the kept partitions'
    # rows only, so the decision stays on the ODM margin scale
    ids = np.array([0, 0, 1, 1, 1, 2, 2, 3])
    alpha = np.ones((8, 2))
    alpha[5:] = 0.0  # partitions 2 and 3 dropped
    out = average_local_duals(alpha, ids, kept=np.array([0, 1]))
    np.testing.assert_allclose(out[:, 0], [2 / 5, 2 / 5, 3 / 5, 3 / 5, 3 / 5, 0, 0, 0])
    np.testing.assert_allclose(average_local_duals(alpha, ids)[:5, 0],
                               [2 / 8, 2 / 8, 3 / 8, 3 / 8, 3 / 8])
