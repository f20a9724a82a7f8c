"""Prediction: a bounded LRU cache of loaded models and strict parsing of ``instances``.

Rows are dense lists of numbers or sparse objects ``{"<0-based index>": value}``. Strings,
booleans, NaN and infinities are rejected (JSON parsers accept ``NaN``), as are wrong feature
counts, empty batches (422) and batches over ``SODM_MAX_PREDICT_ROWS`` (413).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from numbers import Real
from typing import Any

import numpy as np
import scipy.sparse as sp

from app.config import get_settings
from app.models import Model
from app.problems import ProblemError
from app.services.models import file_of

PROBLEM_BASE = "https://sodm.dev/problems/"

_lock = threading.Lock()
_cache: OrderedDict[str, Any] = OrderedDict()


def evict(model_id: str) -> None:
    with _lock:
        _cache.pop(model_id, None)


def load(m: Model) -> Any:
    """The fitted estimator of a model row, from the cache or its file (no pickle)."""
    with _lock:
        est = _cache.get(m.id)
        if est is not None:
            _cache.move_to_end(m.id)
            return est
    from solver.model_io import load_model

    path = file_of(m)
    if not path.is_file():
        raise ProblemError(404, "Model file missing", detail=f"model {m.id} has no file",
                           type=PROBLEM_BASE + "not-found")
    est = load_model(path)
    limit = max(1, get_settings().model_cache_size)
    with _lock:
        _cache[m.id] = est
        _cache.move_to_end(m.id)
        while len(_cache) > limit:
            _cache.popitem(last=False)
    return est


def _bad(detail: str, field: str) -> ProblemError:
    return ProblemError(422, "Invalid instances", detail=detail,
                        type=PROBLEM_BASE + "invalid-instances",
                        errors=[{"field": field, "message": detail}])


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, Real):
        raise _bad(f"{where}: {v!r} is not a number", where)
    f = float(v)
    if not math.isfinite(f):
        raise _bad(f"{where}: {v!r} is not finite", where)
    return f


def parse_instances(instances: list[Any], n_features: int) -> np.ndarray | sp.csr_matrix:
    """Dense ndarray when every row is dense, else a CSR matrix."""
    n = len(instances)
    if n == 0:
        raise _bad("instances is empty", "instances")
    max_rows = get_settings().max_predict_rows
    if n > max_rows:
        raise ProblemError(413, "Too many instances",
                           detail=f"{n} rows; at most {max_rows} per request",
                           type=PROBLEM_BASE + "too-many-instances", max_rows=max_rows)
    if all(isinstance(r, list) for r in instances):
        out = np.empty((n, n_features), dtype=np.float64)
        for i, row in enumerate(instances):
            if len(row) != n_features:
                raise _bad(f"instances[{i}] has {len(row)} features; the model expects "
                           f"{n_features}", f"instances[{i}]")
            for j, v in enumerate(row):
                out[i, j] = _number(v, f"instances[{i}][{j}]")
        return out
    indptr = [0]
    indices: list[int] = []
    data: list[float] = []
    for i, row in enumerate(instances):
        if isinstance(row, list):
            if len(row) != n_features:
                raise _bad(f"instances[{i}] has {len(row)} features; the model expects "
                           f"{n_features}", f"instances[{i}]")
            for j, v in enumerate(row):
                f = _number(v, f"instances[{i}][{j}]")
                if f != 0.0:
                    indices.append(j)
                    data.append(f)
        elif isinstance(row, dict):
            items = []
            for k, v in row.items():
                if not (isinstance(k, str) and k.isdigit()):
                    raise _bad(f"instances[{i}]: key {k!r} is not a 0-based feature index",
                               f"instances[{i}]")
                j = int(k)
                if j >= n_features:
                    raise _bad(f"instances[{i}]: feature index {j} >= {n_features} (the "
                               "model's feature count)", f"instances[{i}]")
                items.append((j, _number(v, f"instances[{i}][{k!r}]")))
            items.sort()
            for j, f in items:
                indices.append(j)
                data.append(f)
        else:
            raise _bad(f"instances[{i}] is neither a list nor an object", f"instances[{i}]")
        indptr.append(len(indices))
    return sp.csr_matrix((np.asarray(data, dtype=np.float64), np.asarray(indices, np.int32),
                          np.asarray(indptr, np.int64)), shape=(n, n_features))


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def predict(m: Model, instances: list[Any]) -> dict[str, Any]:
    """Labels in the dataset's original label values plus decision values."""
    X = parse_instances(instances, int(m.n_features))
    est = load(m)
    F = np.asarray(est.decision_function(X), dtype=np.float64)
    classes = est.classes_
    idx = (F > 0).astype(np.intp) if F.ndim == 1 else np.argmax(F, axis=1)
    labels = [_plain(v) for v in classes[idx]]
    return {"model_id": m.id, "labels": labels, "decision_values": F.tolist()}
