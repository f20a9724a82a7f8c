"""Dataset files and prediction outputs in the store, and this host's scratch space.

In the store (``app.services.filestore.object_store``: ``SODM_DATA_DIR`` or an S3 bucket), keys
derive from ids only (never from a user's file name):

- ``datasets/{id}/data.parquet`` + ``datasets/{id}/meta.json`` (the contract form of
  ``docs/architecture.md``: dense ``row_id, label, f0..`` or sparse ``row_id, label, indices,
  values``),
- ``predictions/{job id}.parquet``.

On this host, under ``SODM_DATA_DIR`` (never shared with another host):

- ``cache/`` for local copies of what Postgres holds (model files: ``model_store``),
- ``tmp/`` for uploads in flight (``tmp/upload-{id}/``, ``app.services.data.upload_dirs``),
  files being assembled before they are put in the store, and directories being removed.

Readers take a ``Location`` (or, for scripts and tests, a local directory).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from app.core.config import get_settings
from app.core.problems import ProblemError
from app.services.data.content_hash import BLOCK_CELLS, ContentHasher, content_sha256
from app.services.filestore.object_store import Location, get_store, local_location

DATA_FILE = "data.parquet"
META_FILE = "meta.json"
# wide sparse data is stored as lists of (index, value) per row
SPARSE_MIN_FEATURES = 1000
SPARSE_MAX_DENSITY = 0.10
# what one column costs a dense Parquet file besides its values (footer, chunk and page
# headers; measured: 312 bytes per column for 2 rows x 1,000,000 columns), and what one
# entry costs the sparse form (an int32 index and a float64 value)
DENSE_COLUMN_BYTES = 300
SPARSE_ENTRY_BYTES = 12
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                   errno.EFBIG}


def data_root() -> Path:
    return Path(get_settings().data_dir)


def dataset_dir(dataset_id: str) -> Location:
    """Where a stored dataset's files are (``datasets/{id}`` in the store)."""
    return get_store().at(dataset_relpath(dataset_id))


def datasets_root() -> Location:
    return get_store().at("datasets")


def as_location(where: Location | Path | str) -> Location:
    """A location as given, or a local directory's (scripts and tests)."""
    return where if isinstance(where, Location) else local_location(Path(where))


def dataset_relpath(dataset_id: str) -> str:
    return f"datasets/{_safe_id(dataset_id)}"


def predictions_dir() -> Location:
    return get_store().at("predictions")


def prediction_path(job_id: str) -> Location:
    """The output of a batch prediction job (``predictions/{job id}.parquet``)."""
    return predictions_dir() / f"{_safe_id(job_id)}.parquet"


def tmp_root() -> Path:
    path = data_root() / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _safe_id(value: str) -> str:
    if not value or not all(c.isalnum() or c in "-_" for c in value):
        raise ValueError(f"not a storage id: {value!r}")
    return value


def storage_problem(exc: OSError) -> ProblemError:
    """507 for a full or unwritable store (the error number, not the path, is reported)."""
    return ProblemError(507, "Insufficient storage",
                        detail=f"the data store cannot be written ({os.strerror(exc.errno or 0)})",
                        type="insufficient-storage")


@contextlib.contextmanager
def storage_errors() -> Iterator[None]:
    """Translate disk-full / read-only / permission errors into a 507 problem."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _STORAGE_ERRNOS:
            raise storage_problem(exc) from exc
        raise


def new_tmp_path(suffix: str = "") -> Path:
    return tmp_root() / f"{uuid.uuid4().hex}{suffix}"


@contextlib.contextmanager
def assembled_dir(final: Location, scratch: Path | None = None) -> Iterator[Path]:
    """Assemble a directory under ``scratch`` (default ``tmp/``, on this host) and put its
    files at ``final`` on success: renamed into place in a local store (atomic), uploaded to
    a bucket (what makes them visible there is the row's state). On any error the
    half-built directory is removed and nothing is left at ``final``."""
    work = (scratch / f"{uuid.uuid4().hex}.d") if scratch is not None else new_tmp_path(".d")
    work.mkdir()
    try:
        yield work
        _fsync_dir_files(work)
        publish_dir(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _move(source: Path, target: Path) -> None:
    """Rename onto ``target`` (atomic: the store and ``tmp/`` share ``SODM_DATA_DIR``);
    a copy when a caller's store is on another filesystem."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.move(source, target)


def publish_dir(work: Path, final: Location) -> None:
    """Put the files of the local directory ``work`` at ``final`` (consumes ``work``)."""
    target = final.local_path
    if target is not None:
        _move(work, target)
        return
    try:
        for p in sorted(work.iterdir()):
            (final / p.name).upload(p)
    except BaseException:
        final.delete()
        raise
    shutil.rmtree(work, ignore_errors=True)


def publish_file(tmp: Path, final: Location) -> None:
    """Put the local file ``tmp`` at ``final`` (renamed in a local store, else uploaded)."""
    target = final.local_path
    if target is not None:
        _move(tmp, target)
        return
    try:
        final.upload(tmp)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a same-directory temp file + fsync + rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync_dir_files(directory: Path) -> None:
    for p in directory.iterdir():
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())


def remove_dataset_files(dataset_id: str) -> None:
    """Delete a dataset's files (a local directory is moved aside first so a half-deleted
    one never shows)."""
    final = dataset_dir(dataset_id)
    local = final.local_path
    if local is None:
        final.delete()
        return
    if not local.exists():
        return
    trash = new_tmp_path(".trash")
    os.replace(local, trash)
    shutil.rmtree(trash, ignore_errors=True)


# ---------------------------------------------------------------- dataset files

def label_type_of(y: np.ndarray) -> str:
    """``"int"``, ``"float"`` or ``"str"``: integral floats are ints only within int64's
    range (1e19 or 1e70 as int64 were all -2**63: distinct labels merged into one)."""
    if y.dtype.kind in "iub":
        return "int"
    if y.dtype.kind == "f":
        integral = np.all(np.isfinite(y)) and np.all(y == np.round(y))
        in_range = integral and np.all((y >= -(2.0 ** 63)) & (y < 2.0 ** 63))
        return "int" if in_range else "float"
    return "str"


def normalize_labels(y: np.ndarray) -> tuple[np.ndarray, str]:
    """Labels in their stored dtype: integral numbers as int64, other numbers float64,
    text as str."""
    kind = label_type_of(y)
    if kind == "int":
        return y.astype(np.int64), kind
    if kind == "float":
        return y.astype(np.float64), kind
    return y.astype(str), kind


def choose_layout(n_rows: int, n_features: int, nnz: int) -> str:
    """Sparse for wide data that is sparse, or so short that a dense file would be mostly
    per-column overhead (2 rows x 1,000,000 features: 313 MB dense, 12 MB sparse);
    dense otherwise."""
    if n_features <= SPARSE_MIN_FEATURES:
        return "dense"
    if nnz < SPARSE_MAX_DENSITY * n_rows * n_features:
        return "sparse"
    dense_bytes = n_features * (8 * n_rows + DENSE_COLUMN_BYTES)
    return "sparse" if SPARSE_ENTRY_BYTES * nnz < dense_bytes else "dense"


def write_dataset_files(directory: Path, X: np.ndarray | sp.csr_matrix, y: np.ndarray,
                        extra_meta: dict[str, Any] | None = None,
                        row_group_size: int | None = None) -> dict[str, Any]:
    """Write ``data.parquet`` + ``meta.json`` into ``directory`` in the contract form;
    returns the meta dict (with the content hash, ``app.services.data.content_hash``). ``y``
    holds the original labels. ``row_group_size`` (rows; default
    pyarrow's) sets how many splits Spark reads the file as."""
    n_rows, n_features = X.shape
    y, label_type = normalize_labels(np.asarray(y))
    nnz = int(X.nnz) if sp.issparse(X) else int(np.count_nonzero(X))
    layout = choose_layout(n_rows, n_features, nnz)
    label_arr = pa.array(y.tolist() if label_type == "str" else y)
    cols: dict[str, pa.Array] = {"row_id": pa.array(np.arange(n_rows, dtype=np.int64)),
                                 "label": label_arr}
    if layout == "sparse":
        csr = sp.csr_matrix(X, dtype=np.float64)
        csr.sort_indices()
        csr.eliminate_zeros()
        offsets = pa.array(csr.indptr.astype(np.int32))
        cols["indices"] = pa.ListArray.from_arrays(offsets,
                                                   pa.array(csr.indices.astype(np.int32)))
        cols["values"] = pa.ListArray.from_arrays(offsets,
                                                  pa.array(csr.data.astype(np.float64)))
    else:
        dense = X.toarray() if sp.issparse(X) else np.asarray(X)
        dense = np.asarray(dense, dtype=np.float64)
        for j in range(n_features):
            cols[f"f{j}"] = pa.array(np.ascontiguousarray(dense[:, j]))
    table = pa.table(cols)
    pq.write_table(table, directory / DATA_FILE, compression="zstd",
                   row_group_size=row_group_size)
    meta = {"layout": layout, "n_features": int(n_features), "n_rows": int(n_rows),
            "label_type": label_type, "nnz": nnz,
            "content_sha256": content_sha256(X, y, label_type), **(extra_meta or {})}
    (directory / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
    return meta


def read_meta(directory: Location | Path | str) -> dict[str, Any]:
    return json.loads((as_location(directory) / META_FILE).read_bytes())


def parquet_file(directory: Location | Path | str) -> pq.ParquetFile:
    """The dataset's Parquet file, opened for random access (footer, row groups)."""
    return pq.ParquetFile((as_location(directory) / DATA_FILE).open_input())


def _read_rows(directory: Location, keep: Callable[[np.ndarray], np.ndarray]) -> pa.Table:
    """The rows whose ``keep(row_id)`` mask is true, read batch by batch (bounded memory)."""
    pf = parquet_file(directory)
    batches = [b.filter(pa.array(keep(b.column("row_id").to_numpy()), type=pa.bool_()))
               for b in pf.iter_batches(batch_size=65_536)]
    return pa.Table.from_batches(batches, schema=pf.schema_arrow)


def _labels(table: pa.Table, meta: dict[str, Any]) -> np.ndarray:
    y = table.column("label").to_numpy(zero_copy_only=False)
    return np.asarray(y, dtype=str) if meta.get("label_type") == "str" else y


def _read_table(directory: Location, columns: list[str] | None = None) -> pa.Table:
    data = directory / DATA_FILE
    return pq.read_table(data.path, filesystem=data.fs, columns=columns)


def load_labels(directory: Location | Path | str) -> np.ndarray:
    """The labels alone (original values, ``row_id`` order): what splitting the rows needs
    when the features stay with Spark."""
    directory = as_location(directory)
    table = _read_table(directory, ["row_id", "label"])
    row_id = table.column("row_id").to_numpy()
    if row_id.size and not np.all(row_id[:-1] < row_id[1:]):
        table = table.take(pa.array(np.argsort(row_id, kind="stable")))
    return _labels(table, read_meta(directory))


def feature_index(directory: Location | Path | str, column: str) -> int | None:
    """The feature position of the named column (CSV header, Parquet schema), None when the
    dataset has no such column (LIBSVM data has no names)."""
    names = read_meta(directory).get("feature_names") or []
    return names.index(column) if column in names else None


def load_feature(directory: Location | Path | str, j: int) -> np.ndarray:
    """Feature ``j`` of every row (``row_id`` order) as float64, reading only its column
    from a dense file, and a sparse file's index and value lists batch by batch (bounded
    memory: the API checks a weight column with it)."""
    directory = as_location(directory)
    meta = read_meta(directory)
    if meta["layout"] == "sparse":
        out = np.zeros(int(meta["n_rows"]))
        pf = parquet_file(directory)
        for b in pf.iter_batches(batch_size=65_536, columns=["row_id", "indices", "values"]):
            idx, val = b.column("indices"), b.column("values")
            lengths = np.diff(idx.offsets.to_numpy())
            flat = idx.flatten().to_numpy()
            hit = flat == j
            rows = np.repeat(b.column("row_id").to_numpy(), lengths)[hit]
            out[rows] = val.flatten().to_numpy()[hit]
        return out
    table = _read_table(directory, ["row_id", f"f{j}"])
    row_id = table.column("row_id").to_numpy()
    col = np.asarray(table.column(f"f{j}").to_numpy(), dtype=np.float64)
    return col[np.argsort(row_id, kind="stable")]


def load_rows(directory: Location | Path | str, row_ids: np.ndarray
              ) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
    """:func:`load_dataset` of the rows ``row_ids`` only (streamed, in ``row_id`` order)."""
    keep = _row_mask(read_meta(directory), row_ids)
    return load_dataset(directory, keep=lambda rid: keep[rid])


def _row_mask(meta: dict[str, Any], row_ids: np.ndarray) -> np.ndarray:
    """A mask over the stored rows that is true at ``row_ids``."""
    keep = np.zeros(int(meta["n_rows"]), dtype=bool)
    keep[np.asarray(row_ids)] = True
    return keep


def load_dataset(directory: Location | Path | str, *,
                 keep: Callable[[np.ndarray], np.ndarray] | None = None
                 ) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
    """Read a stored dataset: ``(X, y)`` with X dense float64 (n, d) or CSR for the sparse
    layout, rows in ``row_id`` order, and y the original labels (int64, float64 or str).
    ``keep(row_ids) -> bool mask`` reads only those rows (streamed; e.g. a sample)."""
    directory = as_location(directory)
    meta = read_meta(directory)
    table = _read_table(directory) if keep is None else _read_rows(directory, keep)
    row_id = table.column("row_id").to_numpy()
    if row_id.size and not np.all(row_id[:-1] < row_id[1:]):
        table = table.take(pa.array(np.argsort(row_id, kind="stable")))
    return _matrix(table, meta), _labels(table, meta)


def _matrix(table: pa.Table, meta: dict[str, Any]) -> np.ndarray | sp.csr_matrix:
    """The features of ``table``'s rows (in its order): dense float64 or CSR by layout."""
    n = table.num_rows
    d = int(meta["n_features"])
    if meta["layout"] == "sparse":
        idx = table.column("indices").combine_chunks()
        val = table.column("values").combine_chunks()
        indptr = idx.offsets.to_numpy().astype(np.int64)
        indptr = indptr - indptr[0]
        indices = idx.flatten().to_numpy().astype(np.int32)
        data = val.flatten().to_numpy().astype(np.float64)
        return sp.csr_matrix((data, indices, indptr), shape=(n, d))
    X = np.empty((n, d), dtype=np.float64)
    for j in range(d):
        X[:, j] = table.column(f"f{j}").to_numpy()
    return X


def iter_row_blocks(directory: Location | Path | str, row_ids: np.ndarray | None, block_rows: int
                    ) -> Iterator[np.ndarray | sp.csr_matrix]:
    """The features of the rows ``row_ids`` (ascending; None for all rows) in consecutive
    blocks of ``block_rows`` rows, the last one shorter: what :func:`load_rows` returns, cut
    into blocks, with only a block and one file batch in memory at a time."""
    directory = as_location(directory)
    meta = read_meta(directory)
    keep = None if row_ids is None else _row_mask(meta, row_ids)
    pending: list[pa.Table] = []
    count = emitted = 0
    last = -1
    pf = parquet_file(directory)
    for batch in pf.iter_batches(batch_size=65_536):
        rid = batch.column("row_id").to_numpy()
        if rid.size and (rid[0] <= last or not np.all(rid[:-1] < rid[1:])):
            raise ValueError(f"{directory.key}/{DATA_FILE}: rows are not in row_id order")
        last = int(rid[-1]) if rid.size else last
        if keep is not None:
            batch = batch.filter(pa.array(keep[rid], type=pa.bool_()))
        pending.append(pa.Table.from_batches([batch]))
        count += batch.num_rows
        while count >= block_rows:
            table = pa.concat_tables(pending)
            yield _matrix(table.slice(0, block_rows), meta)
            emitted += 1
            pending, count = [table.slice(block_rows)], count - block_rows
    if count or not emitted:
        table = (pa.concat_tables(pending) if pending
                 else pf.schema_arrow.empty_table())
        yield _matrix(table, meta)


def stored_content_sha256(directory: Location | Path | str) -> str:
    """The content hash of a stored dataset, read back one block of rows at a time (what
    the upload computed; ``sodm backfill-hashes`` fills it in for older datasets)."""
    directory = as_location(directory)
    meta = read_meta(directory)
    y = load_labels(directory)
    hasher = ContentHasher(int(meta["n_rows"]), int(meta["n_features"]), y,
                           meta.get("label_type") or normalize_labels(y)[1])
    n_rows = max(1, int(meta["n_rows"]))
    per_row = (int(meta.get("nnz") or 0) / n_rows if meta["layout"] == "sparse"
               else int(meta["n_features"]))  # cells or entries of an average row
    for block in iter_row_blocks(directory, None, max(1, int(BLOCK_CELLS // max(1, per_row)))):
        hasher.add_rows(block)
    return hasher.hexdigest()
