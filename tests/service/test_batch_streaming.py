"""worker.prediction.batch.predict_dataset streams: on a 100,000 x 20 stored dataset (16 MB as one
dense float64 matrix) with 256 KB batches the numpy memory it allocates stays a small fraction of
the whole matrix, and the output equals the model's decision function on all rows."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow.parquet as pq

from app.services.filestore import storage
from solver import ODMClassifier
from worker.prediction.batch import predict_dataset


def test_predict_dataset_memory_is_bounded_by_the_batch(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(100_000, 20))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1, -1)
    est = ODMClassifier(kernel="linear", random_state=0).fit(X[:2000], y[:2000])
    directory = tmp_path / "ds"
    directory.mkdir()
    meta = storage.write_dataset_files(directory, X, y)
    out = tmp_path / "out.parquet"
    ticks: list[int] = []
    del X
    tracemalloc.start()
    try:
        summary = predict_dataset(est, directory, out, meta, None, batch_bytes=256 << 10,
                                  progress=lambda done, total: ticks.append(done))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    full = 100_000 * 20 * 8
    print(f"peak {peak / 2**20:.1f} MiB of numpy for a {full / 2**20:.1f} MiB matrix")
    assert peak < full / 4, (peak, full)
    assert summary["rows"] == 100_000 and len(ticks) > 50 and ticks[-1] == 100_000
    table = pq.read_table(out)
    X_all, _ = storage.load_dataset(directory)
    np.testing.assert_allclose(table.column("decision_value").to_numpy(),
                               est.decision_function(X_all), rtol=1e-9, atol=1e-12)
    assert table.column("predicted_label").to_pylist() == est.predict(X_all).tolist()


def test_rows_whose_decision_overflows_get_nulls(tmp_path):
    """Finite inputs of 1e308 overflow a linear kernel sum: those rows get a null label and
    null decision values (not inf, not a label drawn from NaN), the others their model's
    answer, and the summary counts and names them (row_id, across batches)."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-0.1, 0.1, size=(3000, 2))  # min-max scaling multiplies by 5
    y = np.where(X[:, 0] > 0, 1, -1)
    y3 = np.digitize(X[:, 0], [-0.03, 0.03])
    huge = [7, 1500, 2999]
    X[huge] = [1e308, -1e308]
    directory = tmp_path / "ds"
    directory.mkdir()
    meta = storage.write_dataset_files(directory, X, y)
    ok = np.setdiff1d(np.arange(3000), huge)
    for labels, column in ((y, "decision_value"), (y3, "decision_0")):
        est = ODMClassifier(kernel="linear", random_state=0).fit(X[ok][:500], labels[ok][:500])
        out = tmp_path / f"{column}.parquet"
        summary = predict_dataset(est, directory, out, meta, None, batch_bytes=16 << 10)
        assert summary["rows"] == 3000 and summary["rows_out_of_range"] == 3, summary
        assert summary["out_of_range_row_ids"] == huge, summary
        table = pq.read_table(out)
        decision = table.column(column).to_numpy(zero_copy_only=False)
        labels_out = table.column("predicted_label").to_pylist()
        assert np.isnan(decision[huge]).all() and table.column(column).null_count == 3
        assert [labels_out[i] for i in huge] == [None, None, None]
        assert np.isfinite(decision[ok]).all()
        assert [labels_out[i] for i in ok] == est.predict(X[ok]).tolist()
