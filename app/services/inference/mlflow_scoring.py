"""MLflow's scoring format (``POST /invocations`` of ``mlflow models serve``) for
``POST /models/{name}/invocations``.

JSON bodies hold exactly one of ``dataframe_split`` (``{"columns", "data"}``),
``dataframe_records`` (a list of ``{column: value}``), ``instances`` (rows: lists, or
objects as records) or ``inputs`` (rows, or ``{column: [values]}``), and optionally
``params``; ``text/csv`` is a header of column names, then rows. Columns are matched by
name for a model trained on named columns (CSV, Parquet), by position otherwise. The
answer is ``{"predictions": [...]}``: the labels, as a scikit-learn classifier's pyfunc
gives them, or, with ``"params": {"predict_method": "decision_function" |
"predict_proba"}``, the decision values or the probabilities. Rows are checked by
``app.services.inference.instances`` (the messages name the row and column) and evaluated by
``app.services.inference.serving``, as ``/predict``'s.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from app.core.problems import ProblemError
from app.services.inference.cache import ModelEntry
from app.services.inference.instances import Matrix, check_rows, to_matrix

FORMATS = ("dataframe_split", "dataframe_records", "instances", "inputs")
METHODS = ("predict", "decision_function", "predict_proba")
CSV = "text/csv"


def _bad(detail: str, status: int = 422) -> ProblemError:
    return ProblemError(status, "Invalid scoring request", detail=detail,
                        type="invalid-scoring-request")


@dataclass(frozen=True)
class Scoring:
    """A decoded body: the rows (a matrix already for CSV), the column names they carry
    (``None``: positional) and the prediction method."""

    rows: list[Any] | np.ndarray
    columns: list[str] | None
    method: str


def _method(params: Any) -> str:
    if params is None:
        return "predict"
    if not isinstance(params, dict):
        raise _bad("params must be an object")
    method = params.get("predict_method", "predict")
    if method not in METHODS:
        raise _bad(f"params.predict_method {str(method)[:40]!r}: one of {', '.join(METHODS)}")
    return method


def _csv(body: bytes) -> Scoring:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    try:
        table = pcsv.read_csv(io.BytesIO(body))
    except (pa.ArrowInvalid, pa.ArrowException) as exc:
        raise _bad(f"not a CSV table with a header row: {exc}") from None
    cols = []
    for name, col in zip(table.column_names, table.columns, strict=True):
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise _bad(f"column {name!r} holds {col.type} values; features must be numbers")
        if col.null_count:
            raise _bad(f"column {name!r} has {col.null_count} empty cell(s)")
        cols.append(col.to_numpy())
    if not cols:
        raise _bad("the CSV has no columns")
    return Scoring(np.column_stack(cols).astype(np.float64, copy=False),
                   list(table.column_names), "predict")


def _columnar(data: dict[str, Any]) -> tuple[list[Any], list[str]]:
    """``{column: [values]}`` as rows and the column names."""
    names = list(data)
    values = list(data.values())
    if not all(isinstance(v, list) for v in values):
        raise _bad("inputs as an object maps each column to a list of values")
    if len({len(v) for v in values}) > 1:
        raise _bad("the columns of inputs have different lengths")
    return [list(r) for r in zip(*values, strict=True)], names


def parse(body: bytes, content_type: str | None) -> Scoring:
    media = (content_type or "application/json").split(";", 1)[0].strip().lower()
    if media == CSV:
        return _csv(body)
    if media != "application/json" and not media.endswith("+json"):
        raise ProblemError(415, "Unsupported media type",
                           detail=f"Content-Type {media!r}; use application/json or text/csv",
                           type="unsupported-media-type", accepted=["application/json", CSV])
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProblemError(422, "Malformed JSON", detail=f"the body is not JSON: {exc}",
                           type="invalid-json") from None
    if not isinstance(doc, dict):
        raise _bad("the body must be a JSON object")
    given = [k for k in FORMATS if k in doc]
    unknown = sorted(set(doc) - set(FORMATS) - {"params"})
    if len(given) != 1 or unknown:
        raise _bad(f"give exactly one of {', '.join(FORMATS)} (and optionally params); "
                   f"got {sorted(doc)[:10]}")
    kind, payload, method = given[0], doc[given[0]], _method(doc.get("params"))
    if kind == "dataframe_split":
        if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
            raise _bad('dataframe_split is {"columns": [...], "data": [[...], ...]}')
        columns = payload.get("columns")
        if columns is not None and not (isinstance(columns, list) and all(
                isinstance(c, str | int) and not isinstance(c, bool) for c in columns)):
            raise _bad("dataframe_split.columns must be a list of column names")
        return Scoring(payload["data"], None if columns is None else [str(c) for c in columns],
                       method)
    if kind == "inputs" and isinstance(payload, dict):
        rows, names = _columnar(payload)
        return Scoring(rows, names, method)
    if not isinstance(payload, list):
        raise _bad(f"{kind} must be a list of rows")
    return Scoring(payload, None, method)


def _reorder(X: Matrix, columns: list[str], model: ModelEntry) -> Matrix:
    """The columns of ``X`` (named ``columns``) in the model's feature order."""
    names = model.feature_names
    if names is None:  # positional: only the count must match
        if len(columns) != model.n_features:
            raise _bad(f"{len(columns)} columns; the model expects {model.n_features} features")
        return X
    position = {c: j for j, c in enumerate(columns)}
    unknown = [c for c in columns if c not in set(names)]
    missing = [n for n in names if n not in position]
    if unknown or missing or len(position) != len(columns):
        raise ProblemError(422, "Invalid scoring request", detail=(
            f"columns {columns[:20]} do not match the model's features {list(names[:50])}"),
            type="invalid-scoring-request", missing=missing[:100], unknown=unknown[:100])
    return X[:, [position[n] for n in names]]


def to_rows(req: Scoring, model: ModelEntry, body: bytes) -> Matrix:
    """The request's rows as the model's float64 matrix."""
    if isinstance(req.rows, np.ndarray):  # CSV
        check_rows(req.rows.shape[0])
        if not np.isfinite(req.rows).all():
            raise _bad("the CSV holds a value that is not finite")
        return _reorder(req.rows, req.columns or [], model)
    if req.columns is None:  # rows as /predict takes them (lists, or objects by name)
        return to_matrix(req.rows, model.n_features, body, model.feature_names)
    X = to_matrix(req.rows, len(req.columns), body)
    return _reorder(X, req.columns, model)


def predictions(req: Scoring, out: dict[str, Any]) -> dict[str, Any]:
    """``{"predictions": ...}`` for the request's method."""
    if req.method == "decision_function":
        return {"predictions": out["decision_values"]}
    if req.method == "predict_proba":
        if out["probabilities"] is None:
            raise _bad("this model version has no probabilities (train it with "
                       "probability=true)", 400)
        return {"predictions": out["probabilities"]}
    return {"predictions": out["labels"]}


class ScoringDecoder:
    """The invocations route's body format for ``app.services.inference.serving``; the model comes
    from the path."""

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def parse(self, body: bytes, headers: Mapping[str, str], query: Mapping[str, str]
              ) -> Scoring:
        return parse(body, headers.get("content-type"))

    def reference(self, parsed: Scoring) -> tuple[str | None, str | None]:
        return None, self.ref

    def matrix(self, parsed: Scoring, model: ModelEntry, body: bytes) -> Matrix:
        return to_rows(parsed, model, body)
