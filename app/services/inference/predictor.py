"""Prediction: a bounded LRU cache of loaded models and the decision values of a request.

A model's bytes are read from Postgres and loaded (no pickle) on its first request in a
process, on an evaluation
thread, once even when many requests ask for it at the same time, and kept as a
``ServingModel`` (``SODM_MODEL_CACHE_SIZE`` models per process). Deleting a model evicts it
here and, through ``app.services.inference.invalidation``, in every other API process.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from app.core.config import get_settings
from app.core.problems import ProblemError
from app.services.inference import monitoring
from app.services.inference.batcher import evaluations
from app.services.inference.evaluator import ServingModel
from app.services.model_registry import model_store
from solver.calibration import platt_probabilities

_lock = threading.Lock()
_cache: OrderedDict[str, ServingModel] = OrderedDict()
_loading: dict[str, asyncio.Future] = {}


class ModelLike(Protocol):
    id: str
    name: str
    version: int
    n_features: int
    file_sha256: str


def evict(model_id: str) -> None:
    with _lock:
        _cache.pop(model_id, None)


def clear() -> None:
    with _lock:
        _cache.clear()


def cached(model_id: str) -> ServingModel | None:
    with _lock:
        sm = _cache.get(model_id)
        if sm is not None:
            _cache.move_to_end(model_id)
        return sm


def load(m: ModelLike) -> ServingModel:
    """The prepared model of a model row, from the cache or Postgres (blocking)."""
    sm = cached(m.id)
    if sm is not None:
        return sm
    return remember(m.id, ServingModel(model_store.load(m.id, m.file_sha256)))


def remember(model_id: str, sm: ServingModel) -> ServingModel:
    """Keep a prepared model in the cache (the least recently used one beyond
    ``SODM_MODEL_CACHE_SIZE`` goes)."""
    limit = max(1, get_settings().model_cache_size)
    with _lock:
        _cache[model_id] = sm
        _cache.move_to_end(model_id)
        while len(_cache) > limit:
            _cache.popitem(last=False)
    return sm


async def load_async(m: ModelLike) -> ServingModel:
    """``load`` without blocking the event loop; concurrent first requests share one load."""
    sm = cached(m.id)
    if sm is not None:
        return sm
    pending = _loading.get(m.id)
    if pending is not None:
        return await asyncio.shield(pending)
    fut = asyncio.ensure_future(evaluations().run(load, m))
    _loading[m.id] = fut
    try:
        return await asyncio.shield(fut)
    finally:
        if fut.done():
            _loading.pop(m.id, None)
        else:
            fut.add_done_callback(lambda _f: _loading.pop(m.id, None))


async def predict(m: ModelLike, X: np.ndarray | sp.csr_matrix,
                  wanted: Callable[[], Awaitable[bool]] | None = None) -> dict[str, Any]:
    """Labels in the dataset's original label values plus decision values (``wanted``: see
    ``Evaluations.decision``), and class probabilities (columns in the model's class order)
    when the model has them. Every route that predicts comes here, so the served margins
    are recorded here (``app.services.inference.monitoring``)."""
    sm = await load_async(m)
    F = await evaluations().decision(m.id, sm.decision, X, wanted)
    check_finite_decisions(F, X)
    monitoring.recorder().observe(m.id, monitoring.model_theta(sm.est), F)
    values: Any = F[:, 0] if len(sm.classes) == 2 else F
    platt = getattr(sm.est, "platt_", None)  # trained with probability=True
    return {"model_id": m.id, "model_name": m.name, "version": int(m.version),
            "classes": sm.classes.tolist(), "labels": sm.labels(F), "decision_values": values,
            "probabilities": None if platt is None else platt_probabilities(values, platt)}


def check_finite_decisions(F: np.ndarray, X: np.ndarray | sp.csr_matrix) -> None:
    """A 422 naming the first row (and its largest value) whose decision value is not
    finite: finite inputs such as 1e308 overflow the kernel sum, and an infinite or NaN
    margin is neither a label nor JSON."""
    bad_rows = ~np.isfinite(F).reshape(F.shape[0], -1).all(axis=1)
    if not bad_rows.any():
        return
    rows = np.flatnonzero(bad_rows)
    i = int(rows[0])
    row = np.abs(X[i].toarray().ravel() if sp.issparse(X) else np.asarray(X[i]).ravel())
    j = int(np.argmax(row)) if row.size else 0
    value = float(X[i, j]) if row.size else 0.0
    raise ProblemError(
        422, "Values out of range",
        detail=f"row {i}: the decision value is not finite (the model's kernel sum overflows "
               f"float64); its largest value is feature {j} = {value!r}, scale the features "
               "as the training data was", type="values-out-of-range",
        field=f"instances[{i}][{j}]", row=i, rows=[int(r) for r in rows[:100]],
        n_rows=int(rows.size))
