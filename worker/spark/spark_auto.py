"""Automatic hyperparameters ("auto") for a Spark job, with the local backend's result.

The search (``solver.auto.search``) cross-validates the exact solver on subsamples of the
training rows in this process, as a local job's ``fit`` does; Spark then fits once with the
chosen values. The training rows stay in the stored file: two streamed passes over them in
``solver.core.row_blocks`` blocks give the scaler, the "scale" gamma and the mean row width
(to the bit what the local fit computes), then the search reads only the rows its budget
can ever use (``row_bound``, the first rows of its stratified order). The same request
chooses the same values, and Spark fits the model the local backend fits, with memory that
grows with the search's budget, not with the dataset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from solver.auto.search import AUTO_PARAMS, is_auto, with_final_fit
from solver.core.row_blocks import BLOCK_ROWS, LazyRows, scan
from solver.exceptions import FitCancelled

__all__ = ["has_auto", "choose", "record", "stored_rows"]


def has_auto(params: dict[str, Any]) -> bool:
    return any(is_auto(params.get(k)) for k in AUTO_PARAMS)


def stored_rows(dataset_dir: Path, train_rows: np.ndarray | None, *, scale: bool,
                should_stop: Callable[[], bool] = lambda: False,
                weights: np.ndarray | None = None,
                weight_feature: int | None = None) -> LazyRows:
    """The job's training rows (``train_rows``: ascending row ids, None for every row) as
    :class:`LazyRows`: their statistics scanned from the stored file when first needed
    (the variance weighted by the rows' ``weights``), rows read on demand, both block by
    block with ``should_stop`` polled between blocks; ``weight_feature`` (a weight column)
    is taken out of every block."""
    from app.services.filestore import storage
    from worker.training.search import drop_feature

    ids = (np.arange(int(storage.read_meta(dataset_dir)["n_rows"])) if train_rows is None
           else np.asarray(train_rows))
    if ids.size > 1 and not np.all(ids[:-1] < ids[1:]):
        raise ValueError("training row ids must be ascending")

    def blocks(row_ids: np.ndarray | None) -> Iterator[Any]:
        for block in storage.iter_row_blocks(dataset_dir, row_ids, BLOCK_ROWS):
            if should_stop():
                raise FitCancelled("cancelled while reading the training rows")
            yield block if weight_feature is None else drop_feature(block, weight_feature)

    def read(positions: np.ndarray) -> Any:
        got = list(blocks(ids[positions]))
        return sp.vstack(got, format="csr") if sp.issparse(got[0]) else np.vstack(got)

    return LazyRows(lambda: scan(lambda: blocks(train_rows), scale=scale, weights=weights),
                    read)


def choose(est: Any, dataset_dir: Path, train_rows: np.ndarray | None, y_train: np.ndarray,
           params: dict[str, Any], *, progress: Callable[[float, str], None],
           should_stop: Callable[[], bool], weight_feature: int | None = None,
           sample_weight: np.ndarray | None = None) -> dict[str, Any] | None:
    """Run ``est``'s search on the job's training rows (``train_rows``: row ids, None for
    every row; ``y_train`` their labels) and put the chosen values of the "auto"
    parameters into ``params``, with SODM's ``p`` where the search's learning curve was
    flat (as the local fit sets it); the search's record (``fit_info["auto"]`` without the final
    fit), None when there was nothing to search (gamma "auto" with the linear kernel is
    unused). ``weight_feature``/``sample_weight``: the request's weight column (its stored
    position, the training rows' values, none of them 0)."""
    from solver.estimators import row_weights

    progress(0.0, "auto search: reading the training rows")
    weights = row_weights(est, np.asarray(y_train), sample_weight)  # as the fit's
    rows = stored_rows(dataset_dir, train_rows, scale=bool(est.scale), should_stop=should_stop,
                       weights=weights, weight_feature=weight_feature)
    info = est.choose_auto(rows, y_train, sample_weight,
                           progress=lambda f, m, _r: progress(f, m), should_stop=should_stop)
    if info is not None:
        params.update({name: info["chosen"][name] for name in info["auto"]})
        # the local fit's partitions after a flat learning curve (SODMClassifier)
        merge_factor = getattr(est, "merge_factor", None)
        p = None if merge_factor is None else merge_factor(len(y_train),
                                                           info.get("plateau_rows"))
        if p is not None:
            params["p"] = p
    return info


def record(est: Any, info: dict[str, Any] | None, final_cpu: float) -> None:
    """Put the search's record, with the Spark fit's CPU seconds, in the model's
    ``fit_info`` as a local fit does."""
    if info is not None:
        est.fit_info_["auto"] = with_final_fit(info, final_cpu)
