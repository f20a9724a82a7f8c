"""The body of ``POST /predict``: the model reference and the rows, as a float64 matrix.

Three encodings:

* ``application/json`` (default): ``{"model_id" | "model", "instances"}``, rows dense lists
  of numbers, sparse objects ``{"<0-based index>": value}``, or, for a model trained on
  named columns (CSV, Parquet), objects keyed by those names (every name once: a missing or
  unknown name is a 422 naming it), parsed with orjson. Dense rows
  become one array in a single numpy call; only when that call cannot give a finite numeric
  matrix of the model's width (or the body contains a ``true``/``false`` token) does the
  cell-by-cell check run, to name the offending row and column;
* ``application/x-npy``: one 2-D numeric ``.npy`` array (no pickle), the model named by the
  query parameter ``model_id`` or ``model``;
* ``application/vnd.apache.arrow.stream``: an uncompressed Arrow IPC stream whose columns
  (integer or floating, no nulls) are the features in order, the model named as for ``.npy``.

Strings, booleans, NaN and infinities are refused (422) with the row and column, as are wrong
feature counts and empty batches; more than ``SODM_MAX_PREDICT_ROWS`` rows is a 413. A binary
body's declared shape (the ``.npy`` header, each Arrow batch's row count) is checked against
the row limit and the body's own size before anything is allocated, and the float64 matrix
is made only once the width matches the model's, so no body costs more memory than a legal
request of the same model.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

import numpy as np
import orjson
import scipy.sparse as sp
from pydantic import ValidationError

from app.core.config import get_settings
from app.core.problems import ProblemError
from app.schemas.predict import PredictRequest
from app.services.inference.cache import ModelEntry

JSON = "application/json"
NPY = "application/x-npy"
ARROW = "application/vnd.apache.arrow.stream"
MEDIA_TYPES = (JSON, NPY, ARROW)

Matrix = np.ndarray | sp.csr_matrix


@dataclass(frozen=True)
class PredictBody:
    """A parsed body: exactly one of ``model_id``/``model`` and the raw rows (JSON) or an
    already numeric matrix (binary encodings)."""

    model_id: str | None
    model: str | None
    rows: list[Any] | np.ndarray | Columns


def bad(detail: str, field: str) -> ProblemError:
    return ProblemError(422, "Invalid instances", detail=detail, type="invalid-instances",
                        errors=[{"field": field, "message": detail}])


def _envelope(data: Any) -> PredictRequest:
    try:
        return PredictRequest.model_validate(data)
    except ValidationError as exc:
        errors = [{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"],
                   "type": e["type"]} for e in exc.errors(include_url=False)]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        raise ProblemError(422, "Request validation failed", detail=detail,
                           type="validation-error", errors=errors) from None


def parse_body(body: bytes, content_type: str | None, query: Mapping[str, str]
               ) -> PredictBody:
    """Split a request into the model reference and its rows (by media type)."""
    media = (content_type or JSON).split(";", 1)[0].strip().lower()
    if media == JSON or media.endswith("+json"):
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ProblemError(422, "Malformed JSON", detail=f"the body is not JSON: {exc}",
                               type="invalid-json") from None
        req = _envelope(data)
        return PredictBody(req.model_id, req.model, req.instances)
    if media not in (NPY, ARROW):
        raise ProblemError(415, "Unsupported media type",
                           detail=f"Content-Type {media!r}; use one of {', '.join(MEDIA_TYPES)}",
                           type="unsupported-media-type", accepted=list(MEDIA_TYPES))
    req = _envelope({"model_id": query.get("model_id"), "model": query.get("model"),
                     "instances": []})
    X = _npy(body) if media == NPY else _arrow(body)
    return PredictBody(req.model_id, req.model, X)


class PredictDecoder:
    """``POST /predict``'s body format for ``app.services.inference.serving`` (the three encodings
    above; ``.npy`` and Arrow name the model in the query string)."""

    def parse(self, body: bytes, headers: Mapping[str, str], query: Mapping[str, str]
              ) -> PredictBody:
        return parse_body(body, headers.get("content-type"), query)

    def reference(self, parsed: PredictBody) -> tuple[str | None, str | None]:
        return parsed.model_id, parsed.model

    def matrix(self, parsed: PredictBody, model: ModelEntry, body: bytes) -> Matrix:
        return to_matrix(parsed.rows, model.n_features, body, model.feature_names)


def _npy(body: bytes) -> np.ndarray:
    """The array of a ``.npy`` body, a view of the body's bytes: its header is read and
    checked (numeric dtype, 1 or 2 dimensions, at most ``SODM_MAX_PREDICT_ROWS`` rows, a
    data size equal to the bytes that follow it) before anything is allocated, so a
    header that declares an enormous shape costs nothing."""
    fp = io.BytesIO(body)
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise ValueError(f".npy format {version[0]}.{version[1]}; use 1.0 or 2.0")
    except Exception as exc:  # noqa: BLE001 - numpy's header parser raises many kinds
        what = "an archive (.npz), not one array" if body[:4] == b"PK\x03\x04" \
            else f"not a .npy array: {exc}"
        raise ProblemError(422, "Invalid .npy body", detail=f"the body is {what}",
                           type="invalid-instances") from None
    if dtype.hasobject:
        raise ProblemError(422, "Invalid .npy body", detail="the body is not a .npy array of "
                           "numbers: it holds Python objects (a pickle is never loaded)",
                           type="invalid-instances")
    if dtype.kind not in "fiu" or len(shape) not in (1, 2):
        raise bad(f"expected a 1-D or 2-D numeric array, got {len(shape)}-D of dtype "
                  f"{dtype}", "body")
    check_rows(1 if len(shape) == 1 else shape[0])
    offset = fp.tell()
    count = math.prod(shape)
    if count * dtype.itemsize != len(body) - offset:
        raise bad(f"the header declares shape {shape} of {dtype} ({count * dtype.itemsize} "
                  f"bytes of data); the body holds {len(body) - offset}", "body")
    X = np.frombuffer(body, dtype=dtype, count=count, offset=offset)
    X = X.reshape(shape, order="F" if fortran else "C")
    return X[None, :] if X.ndim == 1 else X


@dataclass(frozen=True)
class Columns:
    """The numeric columns of an Arrow body (views of its buffers), made one float64 matrix
    only once their count matches the model's (``to_matrix``)."""

    arrays: tuple[np.ndarray, ...]
    n_rows: int


def _arrow(body: bytes) -> Columns:
    """The columns of an Arrow IPC stream body. Each record batch's declared row count is
    read from its message header and checked against ``SODM_MAX_PREDICT_ROWS`` before any
    batch is decoded, and compressed batches are refused: Arrow allocates a compressed
    buffer's declared size before it decompresses it."""
    import pyarrow as pa

    buf = pa.py_buffer(body)
    try:
        rows = 0
        for message in pa.ipc.MessageReader.open_stream(buf):
            if message.type == "schema":
                continue
            if message.type != "record batch":
                raise bad(f"an Arrow {message.type} message; only record batches of "
                          "numeric columns are read", "body")
            n, compressed = arrow_batch_header(message.metadata.to_pybytes())
            if compressed:
                raise bad("compressed Arrow record batches are not accepted; send the "
                          "stream uncompressed", "body")
            rows += n
            check_rows(max(rows, 1))
        reader = pa.ipc.open_stream(buf)  # the verifying reader decodes what was checked
        for f in reader.schema:
            if not (pa.types.is_integer(f.type) or pa.types.is_floating(f.type)):
                raise bad(f"column {f.name!r} has type {f.type}; features must be numbers",
                          f.name)
        table = reader.read_all()
        table.validate()  # buffers as long as the declared rows need
        if not table.num_columns:
            raise bad("the table has no columns", "body")
        cols = []
        for name, col in zip(table.column_names, table.columns, strict=True):
            if col.null_count:
                raise bad(f"column {name!r} has {col.null_count} null(s)", name)
            cols.append(col.to_numpy())
    except (ValueError, OSError, struct.error, IndexError, pa.ArrowException) as exc:
        # ValueError: also a column name that is not UTF-8
        raise ProblemError(422, "Invalid Arrow body", detail=f"not an Arrow IPC stream: {exc}",
                           type="invalid-instances") from None
    return Columns(tuple(cols), table.num_rows)


def arrow_batch_header(meta: bytes) -> tuple[int, bool]:
    """``(rows, compressed)`` of an Arrow IPC record batch message from its flatbuffer
    header (``Message.header`` -> ``RecordBatch.length`` and ``.compression``), without
    reading its body. Raises ``struct.error`` / ``IndexError`` on a malformed header."""

    def field(table: int, index: int) -> int | None:  # position of a table's field
        vtable = table - struct.unpack_from("<i", meta, table)[0]
        slot = 4 + 2 * index
        if vtable < 0 or slot + 2 > struct.unpack_from("<H", meta, vtable)[0]:
            return None
        offset = struct.unpack_from("<H", meta, vtable + slot)[0]
        return table + offset if offset else None

    def ref(pos: int) -> int:  # where an offset field points
        return pos + struct.unpack_from("<I", meta, pos)[0]

    header = field(ref(0), 2)  # Message.header
    if header is None:
        raise IndexError("a record batch message without its header")
    batch = ref(header)
    length = field(batch, 0)  # RecordBatch.length (absent: 0)
    rows = struct.unpack_from("<q", meta, length)[0] if length is not None else 0
    if rows < 0:
        raise IndexError(f"a record batch of {rows} rows")
    return rows, field(batch, 3) is not None  # RecordBatch.compression


def check_rows(n: int) -> None:
    """422 for no rows, 413 for more than ``SODM_MAX_PREDICT_ROWS``."""
    if n == 0:
        raise bad("instances is empty", "instances")
    max_rows = get_settings().max_predict_rows
    if n > max_rows:
        raise ProblemError(413, "Too many instances",
                           detail=f"{n} rows; at most {max_rows} per request",
                           type="too-many-instances", max_rows=max_rows)


def to_matrix(rows: list[Any] | np.ndarray | Columns, n_features: int, raw: bytes = b"",
              feature_names: tuple[str, ...] | None = None) -> Matrix:
    """The rows as float64 (dense ndarray, or CSR when any row is sparse), validated.

    ``raw`` is the JSON body the rows came from: a ``true``/``false`` token in it sends the
    rows to the cell-by-cell check (numpy would read booleans as 0 and 1).
    ``feature_names`` (the model's columns) lets object rows be keyed by name."""
    if isinstance(rows, Columns):  # Arrow: one float64 matrix once the width is right
        check_rows(rows.n_rows)
        _check_width(len(rows.arrays), n_features)
        return _finite_matrix(np.column_stack(rows.arrays).astype(np.float64, copy=False),
                              n_features)
    if isinstance(rows, np.ndarray):
        check_rows(rows.shape[0])
        return _finite_matrix(rows, n_features)
    check_rows(len(rows))
    if b"true" not in raw and b"false" not in raw:
        try:
            X = np.array(rows)
        except (ValueError, TypeError):  # ragged rows or objects: name the row below
            X = None
        if X is not None and X.ndim == 2 and X.dtype.kind in "fiu":
            return _finite_matrix(X, n_features)
    if feature_names and _keyed_by_name(rows):
        return named_matrix(rows, feature_names)
    return parse_cells(rows, n_features)


def _is_index(key: Any) -> bool:
    return isinstance(key, str) and key.isascii() and key.isdigit()


def _keyed_by_name(rows: list[Any]) -> bool:
    """Some object row has a key that is not a 0-based index (digit keys stay indices)."""
    return any(isinstance(r, dict) and not all(_is_index(k) for k in r) for r in rows)


def named_matrix(rows: list[Any], names: tuple[str, ...]) -> np.ndarray:
    """Rows keyed by the model's feature names (or dense lists) as a dense matrix; a row with
    a missing or unknown name is a 422 that names them (``missing``, ``unknown``)."""
    position = {name: j for j, name in enumerate(names)}
    out = np.empty((len(rows), len(names)), dtype=np.float64)
    for i, row in enumerate(rows):
        if isinstance(row, list):
            out[i] = _dense_row(row, i, len(names))
            continue
        if not isinstance(row, dict):
            raise bad(f"instances[{i}] is neither a list nor an object", f"instances[{i}]")
        unknown = [k for k in row if k not in position]
        missing = [n for n in names if n not in row]
        if unknown or missing:
            parts = ([f"unknown feature(s) {unknown[:20]}"] if unknown else []) + \
                    ([f"missing feature(s) {missing[:20]}"] if missing else [])
            detail = f"instances[{i}]: {'; '.join(parts)}; the model's features are " \
                     f"{list(names[:50])}"
            raise ProblemError(422, "Invalid instances", detail=detail,
                               type="invalid-instances", missing=missing[:100],
                               unknown=unknown[:100],
                               errors=[{"field": f"instances[{i}]", "message": detail}])
        for name, v in row.items():
            out[i, position[name]] = _number(v, f"instances[{i}][{name!r}]")
    return out


def _check_width(width: int, n_features: int) -> None:
    if width != n_features:
        raise bad(f"instances have {width} features; the model expects {n_features}",
                  "instances[0]")


def _finite_matrix(X: np.ndarray, n_features: int) -> np.ndarray:
    _check_width(X.shape[1], n_features)
    X = np.ascontiguousarray(X, dtype=np.float64)
    finite = np.isfinite(X)
    if not finite.all():
        i, j = (int(v) for v in np.argwhere(~finite)[0])
        raise bad(f"instances[{i}][{j}]: {X[i, j]!r} is not finite", f"instances[{i}][{j}]")
    return X


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, Real):
        raise bad(f"{where}: {v!r} is not a number", where)
    f = float(v)
    if not math.isfinite(f):
        raise bad(f"{where}: {v!r} is not finite", where)
    return f


def _dense_row(row: list[Any], i: int, n_features: int) -> list[float]:
    if len(row) != n_features:
        raise bad(f"instances[{i}] has {len(row)} features; the model expects {n_features}",
                  f"instances[{i}]")
    return [_number(v, f"instances[{i}][{j}]") for j, v in enumerate(row)]


def parse_cells(rows: list[Any], n_features: int) -> Matrix:
    """Cell-by-cell parse that names the first bad cell: a dense array when every row is a
    list, else CSR (sparse rows ``{"<index>": value}``)."""
    n = len(rows)
    if all(isinstance(r, list) for r in rows):
        out = np.empty((n, n_features), dtype=np.float64)
        for i, row in enumerate(rows):
            out[i] = _dense_row(row, i, n_features)
        return out
    indptr = [0]
    indices: list[int] = []
    data: list[float] = []
    for i, row in enumerate(rows):
        if isinstance(row, list):
            for j, f in enumerate(_dense_row(row, i, n_features)):
                if f != 0.0:
                    indices.append(j)
                    data.append(f)
        elif isinstance(row, dict):
            items = []
            for k, v in row.items():
                if not (isinstance(k, str) and k.isascii() and k.isdigit()):
                    raise bad(f"instances[{i}]: key {k!r} is not a 0-based feature index",
                              f"instances[{i}]")
                j = int(k)
                if j >= n_features:
                    raise bad(f"instances[{i}]: feature index {j} >= {n_features} (the "
                              "model's feature count)", f"instances[{i}]")
                items.append((j, _number(v, f"instances[{i}][{k!r}]")))
            items.sort()
            for (j, _), (j2, _) in zip(items, items[1:], strict=False):
                if j == j2:  # "1" and "01": one feature twice (a CSR sums duplicates)
                    raise bad(f"instances[{i}]: feature index {j} is given twice",
                              f"instances[{i}]")
            for j, f in items:
                indices.append(j)
                data.append(f)
        else:
            raise bad(f"instances[{i}] is neither a list nor an object", f"instances[{i}]")
        indptr.append(len(indices))
    return sp.csr_matrix((np.asarray(data, dtype=np.float64), np.asarray(indices, np.int32),
                          np.asarray(indptr, np.int64)), shape=(n, n_features))
