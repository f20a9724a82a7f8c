"""A Spark job's "auto" search reads the stored training rows in blocks and only the rows
its budget can use (``worker.spark.spark_auto``, ``storage.iter_row_blocks``), and still chooses
what the local backend's fit chooses from the whole training matrix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from app.services.filestore import storage
from solver import FitCancelled, SODMClassifier
from solver.core.row_blocks import BLOCK_ROWS, blocks_of, scan
from worker.runner import split
from worker.spark import spark_auto


def _store(tmp_path: Path, name: str, X, y) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    storage.write_dataset_files(directory, X, y, row_group_size=4096)
    return directory


def _stacked(blocks):
    blocks = list(blocks)
    return (sp.vstack(blocks, format="csr") if sp.issparse(blocks[0])
            else np.vstack(blocks)), [b.shape[0] for b in blocks]


@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_blocks_of_the_stored_rows_give_the_in_memory_statistics(tmp_path, layout):
    rng = np.random.default_rng(2)
    n = 2 * BLOCK_ROWS + 5000
    if layout == "dense":
        X = rng.normal(size=(n, 4)) * [1.0, 5.0, 0.2, 1.0] + [0.0, 3.0, -1.0, 0.0]
    else:
        X = sp.random(n, 1200, density=0.005, format="csr", random_state=3)
        X.data[X.indices < 3] -= 1.5  # three columns with negative minima: scaling shifts them
    y = rng.integers(0, 2, n)
    directory = _store(tmp_path, layout, X, y)
    assert storage.read_meta(directory)["layout"] == layout
    train, _ = split(None, y, 0.3, 0)
    X_train, _ = storage.load_rows(directory, train)
    got, sizes = _stacked(storage.iter_row_blocks(directory, train, 1000))
    assert sizes == [1000] * (len(train) // 1000) + [len(train) % 1000]
    assert (got != X_train).nnz == 0 if sp.issparse(got) else np.array_equal(got, X_train)
    everything, _ = _stacked(storage.iter_row_blocks(directory, None, BLOCK_ROWS))
    assert everything.shape == X.shape
    rows = spark_auto.stored_rows(directory, train, scale=True)
    local = scan(lambda: blocks_of(X_train))
    assert rows.stats.variance == local.variance and rows.stats.width == local.width
    assert np.array_equal(rows.stats.scaler.min_, local.scaler.min_)
    assert np.array_equal(rows.stats.scaler.scale_, local.scaler.scale_)
    assert rows.rows_read == 0  # statistics come from the blocks; no row is held for them


def test_the_search_on_stored_rows_is_the_local_search(tmp_path):
    """12,000 rows, a fifth held out: the search's budget reaches 3,200 of the 9,600
    training rows (rungs 1,066 / 3,200 / 9,600), which is all it reads; its table and
    choice are the local estimator's on the loaded training matrix."""
    rng = np.random.default_rng(7)
    X = rng.random((12_000, 2))
    y = ((np.floor(4 * X[:, 0]) + np.floor(4 * X[:, 1])) % 2).astype(int)
    directory = _store(tmp_path, "board", X, y)
    train, _ = split(None, y, 0.2, 0)
    est = SODMClassifier(lam="auto", gamma=30.0, theta=0.2, random_state=0)
    rows = spark_auto.stored_rows(directory, train, scale=True)
    info = est.choose_auto(rows, y[train])  # what spark_auto.choose runs
    X_train, y_train = storage.load_rows(directory, train)
    local = est.choose_auto(X_train, y_train)

    def scores(table):  # every entry but the measured seconds
        return [{k: v for k, v in r.items() if k != "cpu_seconds"} for r in table]

    assert info["row_bound"] == local["row_bound"] == 3200
    assert rows.rows_read == 3200 < len(train)
    assert info["chosen"] == local["chosen"]
    assert scores(info["cv_table"]) == scores(local["cv_table"])


def test_a_cancel_stops_the_scan_and_the_read_of_the_stored_rows(tmp_path):
    X = np.arange(6000.0).reshape(3000, 2)
    directory = _store(tmp_path, "small", X, np.arange(3000) % 2)
    stopped = spark_auto.stored_rows(directory, None, scale=True, should_stop=lambda: True)
    with pytest.raises(FitCancelled, match="reading the training rows"):
        stopped.stats  # noqa: B018  (the scan runs on first use)
    polls: list[int] = []

    def stop_after_the_scan() -> bool:  # one block: a poll per pass, then the read's
        polls.append(1)
        return len(polls) > 2

    rows = spark_auto.stored_rows(directory, None, scale=True,
                                  should_stop=stop_after_the_scan)
    assert rows.stats.n_rows == 3000
    with pytest.raises(FitCancelled, match="reading the training rows"):
        rows.load(np.arange(100))
    assert len(polls) == 3


def test_nothing_to_search_reads_nothing(tmp_path):
    """gamma "auto" with the linear kernel is unused: no search, and no pass over the file
    (the statistics are scanned on first use; the poll would count the blocks)."""
    X = np.arange(6000.0).reshape(3000, 2)
    directory = _store(tmp_path, "linear", X, np.arange(3000) % 2)
    polls: list[int] = []
    est = SODMClassifier(kernel="linear", lam=1.0, gamma="auto", theta=0.2)
    params = {"kernel": "linear", "lam": 1.0, "gamma": "auto", "theta": 0.2}
    info = spark_auto.choose(est, directory, None, np.arange(3000) % 2, params,
                             progress=lambda f, m: None,
                             should_stop=lambda: bool(polls.append(1)))
    assert info is None and polls == [] and params["gamma"] == "auto"


def test_a_flat_learning_curve_gives_the_spark_fit_the_local_partitions(tmp_path):
    """Two separated blobs, 20,000 stored rows: the search on the stored rows finds the CV
    accuracy flat, and ``choose`` sets the Spark fit's ``p`` to the partitions the local
    fit cuts (4 of 5,000 rows, not the cache's 2); a request that gives ``p`` keeps it."""
    rng = np.random.default_rng(5)
    y = np.repeat([0, 1], 10_000)
    X = rng.normal(size=(20_000, 2)) * 0.3 + np.where(y[:, None] == 1, 3.0, -3.0)
    directory = _store(tmp_path, "blobs", X, y)
    auto = {"lam": "auto", "gamma": "auto", "theta": "auto"}
    params: dict = dict(auto)
    info = spark_auto.choose(SODMClassifier(random_state=0, **auto), directory, None, y,
                             params, progress=lambda f, m: None, should_stop=lambda: False)
    assert info is not None and info["plateau_rows"] is not None
    assert params["p"] == 4
    local = SODMClassifier(random_state=0, **auto).fit(X, y)
    assert [h["partitions"] for h in local.history_] == [4]
    assert local.fit_info_["auto"]["chosen"] == info["chosen"]
    given: dict = {**auto, "p": 3}
    spark_auto.choose(SODMClassifier(random_state=0, p=3, **auto), directory, None, y, given,
                      progress=lambda f, m: None, should_stop=lambda: False)
    assert given["p"] == 3
