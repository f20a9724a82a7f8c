"""The Spark fit's one-pass dataset summary, merged from per-batch partial results."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from solver.core.preprocessing import MinMaxScaler
from solver.core.training import overall_variance
from solver.spark.data import batch_moments, merge_partials


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_batch_partials_merge_to_the_whole_datasets_statistics(sparse: bool) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(loc=1e4, scale=3.0, size=(1000, 5))  # a large offset: no cancellation
    X[:, 4] = 7.0  # a constant feature
    X[rng.random(X.shape) < 0.3] = 0.0
    labels = rng.choice(["no", "yes"], size=1000)
    rows = []
    for s, e in ((0, 1), (1, 400), (400, 1000)):  # uneven batches, one of a single row
        Xb = sp.csr_matrix(X[s:e]) if sparse else X[s:e]
        lo, hi, mean, m2 = batch_moments(Xb)
        rows.append({"n": e - s, "missing": False, "labels": sorted(set(labels[s:e])),
                     "lo": lo, "hi": hi, "mean": mean, "m2": m2})
    summary = merge_partials(rows, 5)
    assert summary.n == 1000 and list(summary.classes) == ["no", "yes"]
    np.testing.assert_array_equal(summary.lo, X.min(axis=0))
    np.testing.assert_array_equal(summary.hi, X.max(axis=0))
    np.testing.assert_allclose(summary.mean, X.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(summary.m2, ((X - X.mean(axis=0)) ** 2).sum(axis=0),
                               rtol=1e-9, atol=1e-6)
    scaler = MinMaxScaler.fit(X)
    expected = overall_variance(scaler.transform(X))  # what the estimator's gamma uses
    assert summary.scaled_variance(scaler.min_, scaler.scale_) == pytest.approx(expected,
                                                                                rel=1e-12)
    assert summary.scaled_variance(None, None) == pytest.approx(np.var(X), rel=1e-12)


def test_missing_labels_and_empty_data_are_refused() -> None:
    row = {"n": 1, "missing": True, "labels": [1], "lo": [0.0], "hi": [0.0], "mean": [0.0],
           "m2": [0.0]}
    with pytest.raises(ValueError, match="missing labels"):
        merge_partials([row], 1)
    with pytest.raises(ValueError, match="no rows"):
        merge_partials([], 1)


@pytest.mark.spark
def test_the_statistics_pass_collects_the_landmark_candidates(local_settings,
                                                              spark_dataset) -> None:
    """On a real session: the one pass returns the candidate sample's raw rows (the local
    rule on row ids, in row-id order), and none when meta.json's row count is wrong."""
    import pandas as pd

    from solver.sodm.landmarks import is_candidate
    from solver.spark.data import load_frame, summarize
    from worker.spark.spark_backend import spark_session

    stored = pd.read_parquet(spark_dataset / "data.parquet").sort_values("row_id")
    n = len(stored)
    with spark_session(local_settings, job_id="summary") as spark:
        df, info = load_frame(spark, spark_dataset)
        assert info.n_rows == n
        summary = summarize(df, info, sample=(5, 100))
        want = np.flatnonzero(is_candidate(np.arange(n, dtype=np.uint64), n, 5, 100))
        np.testing.assert_array_equal(summary.candidates["row_id"], want)
        cols = info.feature_cols
        np.testing.assert_array_equal(summary.candidates[cols].to_numpy(),
                                      stored.set_index("row_id").loc[want, cols].to_numpy())
        assert summary.n == n and len(summary.classes) == 2
        info.n_rows = n + 1
        assert summarize(df, info, sample=(5, 100)).candidates is None
