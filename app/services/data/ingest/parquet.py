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

from app.core.config import get_settings
from app.core.problems import ProblemError
from app.services.data.ingest.errors import first_true, invalid, over_limit
from app.services.data.ingest.files import GZIP_MAGIC, PARQUET_MAGIC
from app.services.data.ingest.parsed import Parsed, check_classes


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
    plain = _check_parquet_footer(path)
    pf = _open_parquet(path, plain, label_column)
    schema = pf.schema_arrow  # built on each access: once, not once per column
    names = schema.names
    if label_column not in names:
        raise ProblemError(422, "Missing label column",
                           detail=f"no column named {label_column!r} (set label_column)",
                           type="missing-label-column", format="parquet", column=label_column,
                           columns=names[:50])
    sparse = "indices" in names and "values" in names and _is_list(
        schema.field("indices").type)
    if not sparse:
        _check_feature_types(pf, schema, path,
                             [n for n in names if n not in (label_column, "row_id")])
    try:
        table = pf.read()
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
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


def _check_parquet_footer(path: Path) -> pq.ParquetFile:
    """Rows, columns and uncompressed bytes from the footer, before any column is read: a
    small file whose pages expand past the caps (a Parquet bomb) is refused unread. Values
    count at their decoded width (a run of zeros encodes to a few bytes). Returns the file
    (its footer is parsed once: seconds for 100,000 columns)."""
    s = get_settings()
    try:
        pf = pq.ParquetFile(path)
        md = pf.metadata
    except UnicodeDecodeError as exc:  # a column name's bytes (pyarrow decodes them here)
        raise invalid("parquet", f"a column name is not UTF-8 text ({exc})",
                      field="header") from None
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
    return pf


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
        row = first_true(pc.is_null(col))
        raise invalid("parquet", f"row {row + 1}: column {name!r} is null", row=row + 1,
                      column=name, value="null")
    # unsafe: an integer past 2**53 (uint64, int64) becomes the nearest double, as in a CSV
    values = col.cast(pa.float64(), safe=False).to_numpy()
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        row, value = int(bad[0]), float(values[bad[0]])
        raise invalid("parquet", f"row {row + 1}: column {name!r} value {value!r} is not "
                                 "finite", row=row + 1, column=name, value=str(value))
    return values


def _open_parquet(path: Path, plain: pq.ParquetFile, label_column: str) -> pq.ParquetFile:
    """The file, a text label column read dictionary-encoded: a few long strings repeated
    over many rows stay one copy each until their count and lengths are checked."""
    try:
        schema = plain.schema_arrow
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise invalid("parquet", f"unreadable Parquet file: {exc}") from exc
    names = schema.names
    if len(set(names)) != len(names):
        twice = _first_repeat(names)
        raise invalid("parquet", f"duplicate column name {twice!r}", column=twice)
    _check_column_names(names)
    try:
        label = schema.field(label_column).type if label_column in names else None
        text = label is not None and (pa.types.is_string(label) or pa.types.is_large_string(label)
                                      or pa.types.is_binary(label))
        if not text:
            return plain
        return pq.ParquetFile(path, metadata=plain.metadata, read_dictionary=[label_column])
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise invalid("parquet", f"unreadable Parquet file: {exc}") from exc


def _check_column_names(names: list[str]) -> None:
    """Column names become the model's feature names, stored as text and shown by every
    model answer: one with a NUL (not storable) is a 422, one longer than a token may be
    (``SODM_LIMIT_TOKEN_BYTES``, as a CSV header cell) a 413."""
    limit = get_settings().limit_token_bytes
    for name in names:
        if "\x00" in name:
            raise invalid("parquet", f"column name {name!r} contains NUL (\\x00)", column=name,
                          field="header")
        size = len(name.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise over_limit("token bytes", size, limit, "SODM_LIMIT_TOKEN_BYTES",
                             format="parquet", column=name, field="header")


def _first_repeat(names: list[str]) -> str:
    """The first name that stands again where it stands again (linear in the names)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    raise ValueError("no repeated name")


def _is_number_type(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t))


def _check_feature_types(pf: pq.ParquetFile, schema: pa.Schema, path: Path,
                         features: list[str]) -> None:
    """Feature columns must be numbers: refused from the schema, before any column is read
    (only the offending column's first value is read, dictionary-encoded, to echo it)."""
    for name in features:
        t = schema.field(name).type
        if _is_number_type(t):
            continue
        first = None
        if pf.metadata.num_row_groups and pf.metadata.row_group(0).num_rows:
            # best effort, only to echo a value: a nested column's name is not a leaf that
            # read_dictionary knows (KeyError), and whatever else fails leaves it None
            with contextlib.suppress(Exception):
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
        row = first_true(pc.is_null(col))
        raise invalid("parquet", f"row {row + 1}: the label is null", row=row + 1, column=name,
                      value="null")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        _check_utf8(col, name)
        nul = pc.match_substring(col, "\x00")
        if pc.any(nul).as_py():  # not storable text, and numpy's str drops a trailing one,
            # which would merge "x" and "x\x00" into one class
            row = first_true(nul)
            raise invalid("parquet", f"row {row + 1}: the label contains NUL (\\x00)",
                          row=row + 1, column=name, field="label", value=col[row].as_py())
        return np.array(col.to_pylist(), dtype=str)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        try:
            return col.cast(pa.int64()).to_numpy()
        except pa.ArrowInvalid:  # uint64 past 2**63 - 1
            big = pc.greater(col, pa.scalar(2**63 - 1, col.type)).to_numpy(zero_copy_only=False)
            row = int(np.flatnonzero(big)[0])
            value = col[row].as_py()
            raise invalid("parquet", f"row {row + 1}: label {value} is past the 64-bit "
                                     "integer range", row=row + 1, column=name,
                          value=str(value)) from None
    return _parquet_numeric(col, name)


def _check_utf8(col: pa.ChunkedArray, name: str) -> None:
    """A Parquet string column is UTF-8 by its type, not by its bytes: a label that is not
    was a ``UnicodeDecodeError`` (500) when the labels were decoded; a 422 naming its row."""
    start = 0
    for chunk in col.chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid:
            for k, raw in enumerate(chunk.cast(pa.binary()).to_pylist()):  # the error path
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise invalid("parquet", f"row {start + k + 1}: the label is not UTF-8 "
                                  "text", row=start + k + 1, column=name, field="label",
                                  value=repr(raw)) from None
            raise invalid("parquet", f"column {name!r} is not a valid string column",
                          column=name) from None
        start += len(chunk)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _sparse_column(table: pa.Table, name: str, integer: bool) -> tuple[np.ndarray, np.ndarray]:
    """A list column of the sparse form: its row offsets (from 0) and its flat values,
    refused (422 naming the column and row) unless every row is a list of numbers."""
    col = table.column(name).combine_chunks()
    t = col.type
    inner = t.value_type if _is_list(t) else None
    ok = inner is not None and (pa.types.is_integer(inner) if integer
                                else _is_number_type(inner))
    if not ok:
        want = "lists of integers" if integer else "lists of numbers"
        raise invalid("parquet", f"column {name!r} has type {t}; the sparse form needs {want}",
                      column=name)
    if col.null_count:
        row = first_true(pc.is_null(col))
        raise invalid("parquet", f"row {row + 1}: column {name!r} is null", row=row + 1,
                      column=name, value="null")
    offsets = col.offsets.to_numpy().astype(np.int64)
    flat = col.flatten()
    if flat.null_count:
        row = _row_of(offsets, first_true(pc.is_null(flat)))
        raise invalid("parquet", f"row {row + 1}: column {name!r} holds a null", row=row + 1,
                      column=name, value="null")
    if pa.types.is_dictionary(flat.type):
        flat = flat.cast(flat.type.value_type)
    if integer:
        # the features cap before the cast: a uint64 index may be past int64
        top, cap = pc.max(flat).as_py(), get_settings().limit_features
        if top is not None and top >= cap:
            raise over_limit("features", top + 1, cap, "SODM_LIMIT_FEATURES",
                             format="parquet", column=name)
        values = flat.cast(pa.int64())
    else:
        values = flat.cast(pa.float64(), safe=False)
    return offsets - offsets[0], values.to_numpy(zero_copy_only=False)


def _row_of(indptr: np.ndarray, k: int) -> int:
    """The row of entry ``k`` of a CSR layout."""
    return int(np.searchsorted(indptr, k, side="right")) - 1


def _parquet_sparse(table: pa.Table) -> sp.csr_matrix:
    """The sparse form: per row, strictly ascending 0-based ``indices`` and their
    ``values``, as many of each."""
    indptr, indices = _sparse_column(table, "indices", integer=True)
    val_ptr, data = _sparse_column(table, "values", integer=False)
    if not np.array_equal(val_ptr, indptr):
        row = int(np.flatnonzero(np.diff(val_ptr) != np.diff(indptr))[0])
        raise invalid("parquet", f"row {row + 1}: indices and values lists differ in length",
                      row=row + 1, column="values")
    for bad, what, column in ((indices < 0, "a negative index", "indices"),
                              (~np.isfinite(data), "a value that is not finite", "values")):
        if bad.any():
            row = _row_of(indptr, int(np.flatnonzero(bad)[0]))
            raise invalid("parquet", f"row {row + 1}: {what} in column {column!r}",
                          row=row + 1, column=column)
    # strictly ascending within each row: a step that is not up, unless it starts a row
    steps = np.flatnonzero(np.diff(indices) <= 0) + 1
    starts = np.zeros(indices.size, dtype=bool)
    starts[indptr[:-1][indptr[:-1] < indices.size]] = True
    within = steps[~starts[steps]]
    if within.size:
        row = _row_of(indptr, int(within[0]))
        raise invalid("parquet", f"row {row + 1}: indices must be strictly ascending within a "
                                 "row (no repeats)", row=row + 1, column="indices")
    n_features = int(indices.max()) + 1 if indices.size else 1
    return sp.csr_matrix((data, indices.astype(np.int32), indptr),
                         shape=(table.num_rows, n_features))
