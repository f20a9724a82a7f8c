"""Parquet: a label column and numeric feature columns, or the sparse form (``indices`` /
``values`` list columns); the footer is checked against the caps before any column is read."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from app.config import get_settings
from app.problems import ProblemError
from app.services.ingest.errors import invalid, over_limit
from app.services.ingest.files import GZIP_MAGIC, PARQUET_MAGIC
from app.services.ingest.parsed import Parsed, check_classes


def parse_parquet(path: Path, label_column: str) -> Parsed:
    """A label column and numeric feature columns (a ``row_id`` column is ignored), or the
    sparse contract form (``indices``/``values`` list columns)."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head != PARQUET_MAGIC:
        detected = "compressed" if head[:2] == GZIP_MAGIC else "text" if _is_text(path) else None
        raise ProblemError(422, "Wrong format",
                           detail="declared format parquet but the file is not Parquet"
                                  + (f" (it looks like {detected})" if detected else ""),
                           type="wrong-format", declared="parquet", detected=detected)
    _check_parquet_footer(path)
    pf = _open_parquet(path, label_column)
    names = pf.schema_arrow.names
    if label_column not in names:
        raise ProblemError(422, "Missing label column",
                           detail=f"no column named {label_column!r} (set label_column)",
                           type="missing-label-column", format="parquet", column=label_column,
                           columns=names[:50])
    sparse = "indices" in names and "values" in names and pa.types.is_list(
        pf.schema_arrow.field("indices").type)
    if not sparse:
        _check_feature_types(pf, path, [n for n in names if n not in (label_column, "row_id")])
    try:
        table = pf.read()
    except (pa.ArrowException, OSError) as exc:
        raise invalid("parquet", f"unreadable Parquet file: {exc}") from exc
    if table.num_rows == 0:
        raise ProblemError(422, "Empty dataset", detail="the Parquet file has no rows",
                           type="empty-dataset", format="parquet")
    y = _parquet_labels(table.column(label_column), label_column)
    if sparse:
        X = _parquet_sparse(table)
        feature_names = None
    else:
        features = [n for n in names if n not in (label_column, "row_id")]
        if not features:
            raise invalid("parquet", "there are no feature columns besides the label",
                          column=label_column)
        X = np.empty((table.num_rows, len(features)), dtype=np.float64)
        for j, name in enumerate(features):
            X[:, j] = _parquet_numeric(table.column(name), name)
        feature_names = features
    check_classes(y, "parquet")
    return Parsed(X, y, feature_names=feature_names)


_PARQUET_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}


def _check_parquet_footer(path: Path) -> None:
    """Rows, columns and uncompressed bytes from the footer, before any column is read: a
    small file whose pages expand past the caps (a Parquet bomb) is refused unread. Values
    count at their decoded width (a run of zeros encodes to a few bytes)."""
    s = get_settings()
    try:
        md = pq.ParquetFile(path).metadata
    except (pa.ArrowException, OSError) as exc:
        raise invalid("parquet", f"unreadable Parquet file: {exc}") from exc
    expanded = 0
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        for j in range(rg.num_columns):
            col = rg.column(j)  # fixed-width values by count (runs of zeros encode to nothing)
            width = _PARQUET_WIDTHS.get(col.physical_type, 0)
            expanded += max(col.total_uncompressed_size, width * col.num_values)
    for what, value, limit, setting in (
            ("rows", md.num_rows, s.limit_rows, "SODM_LIMIT_ROWS"),
            ("columns", md.num_columns, s.limit_features + 2, "SODM_LIMIT_FEATURES"),
            ("uncompressed bytes", expanded, s.max_decompressed_bytes,
             "SODM_MAX_DECOMPRESSED_BYTES")):
        if value > limit:
            raise over_limit(what, value, limit, setting, format="parquet")


def _is_text(path: Path) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(4096)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head


def _parquet_numeric(col: pa.ChunkedArray, name: str) -> np.ndarray:
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t)):
        first = col.slice(0, 1).to_pylist()[0] if len(col) else None
        raise invalid("parquet", f"column {name!r} has type {t}, not a number", column=name,
                      value=str(first))
    if col.null_count:
        row = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
        raise invalid("parquet", f"row {row + 1}: column {name!r} is null", row=row + 1,
                      column=name, value="null")
    values = col.cast(pa.float64()).to_numpy()
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        row = int(bad[0])
        raise invalid("parquet", f"row {row + 1}: column {name!r} value {values[row]!r} is not "
                                 "finite", row=row + 1, column=name, value=str(values[row]))
    return values


def _open_parquet(path: Path, label_column: str) -> pq.ParquetFile:
    """The file, a text label column read dictionary-encoded: a few long strings repeated
    over many rows stay one copy each until their count and lengths are checked."""
    try:
        schema = pq.ParquetFile(path).schema_arrow
        label = schema.field(label_column).type if label_column in schema.names else None
        text = label is not None and (pa.types.is_string(label) or pa.types.is_large_string(label)
                                      or pa.types.is_binary(label))
        return pq.ParquetFile(path, read_dictionary=[label_column] if text else None)
    except (pa.ArrowException, OSError) as exc:
        raise invalid("parquet", f"unreadable Parquet file: {exc}") from exc


def _is_number_type(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t))


def _check_feature_types(pf: pq.ParquetFile, path: Path, features: list[str]) -> None:
    """Feature columns must be numbers: refused from the schema, before any column is read
    (only the offending column's first value is read, dictionary-encoded, to echo it)."""
    for name in features:
        t = pf.schema_arrow.field(name).type
        if _is_number_type(t):
            continue
        first = None
        if pf.metadata.num_row_groups and pf.metadata.row_group(0).num_rows:
            with contextlib.suppress(pa.ArrowException, OSError):
                one = pq.ParquetFile(path, read_dictionary=[name]).read_row_group(
                    0, columns=[name])
                first = one.column(name).slice(0, 1).to_pylist()[0]
        raise invalid("parquet", f"column {name!r} has type {t}, not a number", column=name,
                      value=str(first))


def _label_dictionary_caps(col: pa.ChunkedArray, name: str) -> None:
    """Distinct labels (classes cap) and their lengths (token cap) of a dictionary-encoded
    text label column, checked before the labels are decoded row by row."""
    s = get_settings()
    values = pa.chunked_array([c.dictionary for c in col.chunks], type=col.type.value_type)
    distinct = pc.unique(values)
    if len(distinct) > s.limit_classes:
        raise over_limit("classes", len(distinct), s.limit_classes, "SODM_LIMIT_CLASSES",
                         format="parquet", column=name)
    longest = int(pc.max(pc.binary_length(distinct)).as_py() or 0)
    if longest > s.limit_token_bytes:
        raise over_limit("token bytes", longest, s.limit_token_bytes,
                         "SODM_LIMIT_TOKEN_BYTES", format="parquet", column=name,
                         field="label")


def _parquet_labels(col: pa.ChunkedArray, name: str) -> np.ndarray:
    if pa.types.is_dictionary(col.type):
        if not _is_number_type(col.type.value_type):
            _label_dictionary_caps(col, name)
        col = col.cast(col.type.value_type)
    t = col.type
    if col.null_count:
        row = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
        raise invalid("parquet", f"row {row + 1}: the label is null", row=row + 1, column=name,
                      value="null")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.array(col.to_pylist(), dtype=str)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return col.cast(pa.int64()).to_numpy()
    return _parquet_numeric(col, name)


def _parquet_sparse(table: pa.Table) -> sp.csr_matrix:
    idx = table.column("indices").combine_chunks()
    val = table.column("values").combine_chunks()
    indptr = idx.offsets.to_numpy().astype(np.int64)
    indptr -= indptr[0]
    indices = idx.flatten().to_numpy(zero_copy_only=False)
    data = val.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
    if not np.array_equal(val.offsets.to_numpy() - val.offsets.to_numpy()[0], indptr):
        raise invalid("parquet", "indices and values lists differ in length", column="values")
    if indices.size and (indices.min() < 0 or not np.all(np.isfinite(data))):
        raise invalid("parquet", "negative index or non-finite value in the sparse columns",
                      column="indices")
    n_features = int(indices.max()) + 1 if indices.size else 1
    X = sp.csr_matrix((data, indices.astype(np.int32), indptr),
                      shape=(table.num_rows, n_features))
    if not X.has_sorted_indices:
        raise invalid("parquet", "indices must be sorted within each row", column="indices")
    return X
