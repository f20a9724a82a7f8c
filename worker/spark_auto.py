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

from solver.autotune import AUTO_PARAMS, is_auto, with_final_fit

__all__ = ["has_auto", "choose", "record"]


def has_auto(params: dict[str, Any]) -> bool:
    return any(is_auto(params.get(k)) for k in AUTO_PARAMS)


def choose(est: Any, dataset_dir: Path, train_rows: np.ndarray | None,
           params: dict[str, Any], *, progress: Callable[[float, str], None],
           should_stop: Callable[[], bool]) -> dict[str, Any] | None:
    """Run ``est``'s search on the job's training rows (``train_rows``: row ids, None for
    every row) and put the chosen values of the "auto" parameters into ``params``; the
    search's record (``fit_info["auto"]`` without the final fit), None when there was
    nothing to search (gamma "auto" with the linear kernel is unused)."""
    from app.services import storage

    X, y = (storage.load_dataset(dataset_dir) if train_rows is None
            else storage.load_rows(dataset_dir, train_rows))
    info = est.choose_auto(X, y, progress=lambda f, m, _r: progress(f, m),
                           should_stop=should_stop)
    if info is not None:
        params.update({name: info["chosen"][name] for name in info["auto"]})
    return info


def record(est: Any, info: dict[str, Any] | None, final_cpu: float) -> None:
    """Put the search's record, with the Spark fit's CPU seconds, in the model's
    ``fit_info`` as a local fit does."""
    if info is not None:
        est.fit_info_["auto"] = with_final_fit(info, final_cpu)
