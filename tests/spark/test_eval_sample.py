"""The evaluation rows of a Spark job: a streamed, deterministic, bounded sample of the
stored dataset (the worker never loads the data Spark trains on by path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.services.storage import load_dataset
from tests.fixtures.spark import write_dataset
from worker.spark_backend import evaluation_sample


def test_sample_is_a_bounded_deterministic_subset(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5000, 3))
    y = rng.integers(0, 2, 5000)
    d = write_dataset(tmp_path / "d", X, y)
    Xs, ys = evaluation_sample(d, 0.2, seed=3)
    assert 850 < len(ys) < 1150  # ~20 % of 5000
    Xs2, _ = evaluation_sample(d, 0.2, seed=3)
    np.testing.assert_array_equal(Xs, Xs2)
    assert not np.array_equal(evaluation_sample(d, 0.2, seed=4)[0][:50], Xs[:50])
    # every sampled row is a stored row with its own label, in row order
    Xf, yf = load_dataset(d)
    pos = [int(np.flatnonzero((Xf == row).all(axis=1))[0]) for row in Xs]
    assert pos == sorted(pos) and np.array_equal(yf[pos], ys)
    capped, _ = evaluation_sample(d, 0.5, seed=3, max_rows=300)
    assert 200 < len(capped) < 400
    tiny = write_dataset(tmp_path / "tiny", X[:2], y[:2])
    assert len(evaluation_sample(tiny, 0.01, seed=0)[1]) >= 1
