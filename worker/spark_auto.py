"""Automatic hyperparameters ("auto") for a Spark job, with the local backend's result.

The search (``solver.autotune``) cross-validates the exact solver on subsamples of the
training rows in this process, as a local job's ``fit`` does; Spark then fits once with the
chosen values. The training rows are read here for the search (the rows a local job would
fit, in the same order), so the same request chooses the same values and Spark fits the
model the local backend fits. A dataset too large for this process needs values instead of
"auto".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from solver.autotune import AUTO, AUTO_PARAMS, with_final_fit

__all__ = ["has_auto", "choose", "record"]


def has_auto(params: dict[str, Any]) -> bool:
    return any(params.get(k) == AUTO for k in AUTO_PARAMS)


def choose(est: Any, dataset_dir: Path, train_rows: np.ndarray | None,
           params: dict[str, Any], *, progress: Callable[[float, str], None],
           should_stop: Callable[[], bool]) -> dict[str, Any]:
    """Run ``est``'s search on the job's training rows (``train_rows``: row ids, None for
    every row) and put the chosen values of the "auto" parameters into ``params``; the
    search's record (``fit_info["auto"]`` without the final fit)."""
    from app.services import storage

    if train_rows is None:
        X, y = storage.load_dataset(dataset_dir)
    else:
        keep = np.zeros(int(storage.read_meta(dataset_dir)["n_rows"]), dtype=bool)
        keep[np.asarray(train_rows)] = True
        X, y = storage.load_dataset(dataset_dir, keep=lambda rid: keep[rid])
    info = est.choose_auto(X, y, progress=lambda f, m, _r: progress(f, m),
                           should_stop=should_stop)
    if info is None:  # nothing to search (gamma "auto" with the linear kernel is unused)
        return {}
    params.update({name: info["chosen"][name] for name in info["auto"]})
    return info


def record(est: Any, info: dict[str, Any], final_cpu: float) -> None:
    """Put the search's record, with the Spark fit's CPU seconds, in the model's
    ``fit_info`` as a local fit does."""
    if info:
        est.fit_info_["auto"] = with_final_fit(info, final_cpu)
