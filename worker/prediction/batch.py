"""Batch prediction: one model over a whole stored dataset, streamed, into a Parquet file.

The dataset's Parquet is read batch by batch (``batch_rows`` rows at a time, sized so a
batch's dense float64 matrix stays near ``batch_bytes``, ``SODM_PREDICT_BATCH_BYTES``); each
batch's decision values and labels are appended to the output with a ``ParquetWriter``, so
memory does not grow with the dataset. The output (``row_id``, ``true_label``,
``predicted_label`` and ``decision_value`` for two classes or one ``decision_<class>`` column
per class) is written under a unique temporary name in this host's ``tmp/`` and then put at
``predictions/{job id}.parquet`` in the store whole: a retried job rewrites it.

A row whose decision value is not finite (finite inputs such as 1e308 overflow a linear or
polynomial kernel sum) gets nulls for its label and decision values, never ``inf`` or a label
drawn from NaN; the summary counts those rows and names the first ``row_id`` s (``/predict``
answers a 422 for them instead: one bad row should not fail a whole batch).

Columns: a model with feature names reads the dataset's columns by name (the API checked
they are all there); otherwise by position, a narrower dataset padded with zeros (LIBSVM
files omit trailing zero features).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from app.services.filestore import storage
from app.services.filestore.object_store import Location
from solver.exceptions import FitCancelled

# rows per batch: at least this many (per-batch overhead), at most that many (progress ticks)
MIN_BATCH_ROWS = 1_024
MAX_BATCH_ROWS = 65_536
# the row_ids of rows out of range named in the summary (the count covers all of them)
NAMED_OUT_OF_RANGE = 100


def batch_rows(n_features: int, batch_bytes: int) -> int:
    """Rows whose dense float64 matrix is about ``batch_bytes`` (the kernel blocks of
    ``decision_function`` have their own bound)."""
    return int(min(MAX_BATCH_ROWS, max(MIN_BATCH_ROWS, batch_bytes // (8 * max(1, n_features)))))


def column_map(model_names: list[str] | None, meta: dict[str, Any]) -> list[int] | None:
    """The dataset column of each model feature, when both have names; None: by position."""
    names = meta.get("feature_names")
    if not model_names or not names:
        return None
    where = {n: j for j, n in enumerate(names)}
    missing = [n for n in model_names if n not in where]
    if missing:
        raise ValueError(f"the dataset has no column(s) {missing[:20]} that the model needs")
    return [where[n] for n in model_names]


def _matrix(batch: pa.RecordBatch, meta: dict[str, Any], width: int,
            mapping: list[int] | None) -> np.ndarray | sp.csr_matrix:
    """A record batch of the stored contract form as the model's (rows, width) matrix."""
    n, d = batch.num_rows, int(meta["n_features"])
    if meta["layout"] == "sparse":
        idx = batch.column("indices")
        val = batch.column("values")
        indptr = idx.offsets.to_numpy().astype(np.int64)
        X = sp.csr_matrix((val.values.to_numpy().astype(np.float64),
                           idx.values.to_numpy().astype(np.int32), indptr - indptr[0]),
                          shape=(n, d))
        if mapping is not None:
            return sp.csr_matrix(X[:, mapping])
        if d < width:
            X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(n, width))
        return X
    cols = mapping if mapping is not None else range(min(d, width))
    X = np.zeros((n, width), dtype=np.float64)
    for k, j in enumerate(cols):
        X[:, k] = batch.column(f"f{j}").to_numpy(zero_copy_only=False)
    return X


def _output_schema(classes: np.ndarray, label_type: pa.DataType) -> pa.Schema:
    def arrow_type(values: np.ndarray) -> pa.DataType:
        return pa.array(values[:1].tolist()).type

    fields = [pa.field("row_id", pa.int64()), pa.field("true_label", label_type),
              pa.field("predicted_label", arrow_type(classes))]
    if len(classes) == 2:
        fields.append(pa.field("decision_value", pa.float64()))
    else:
        fields += [pa.field(f"decision_{c}", pa.float64()) for c in classes.tolist()]
    return pa.schema(fields)


def predict_dataset(est: Any, directory: Location | Path, out: Location | Path,
                    meta: dict[str, Any],
                    model_names: list[str] | None, *, batch_bytes: int = 32 << 20,
                    progress: Callable[[int, int], None] | None = None,
                    should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Write the predictions of ``est`` for every row of the stored dataset ``directory``
    to ``out`` (assembled under this host's ``tmp/``, then put in the store whole);
    returns ``{rows, seconds, bytes, rows_out_of_range, out_of_range_row_ids}``.
    ``progress(done, total)`` after each batch; ``should_stop()`` before each batch (a stop
    raises ``FitCancelled``)."""
    t0 = time.perf_counter()
    directory, out = storage.as_location(directory), storage.as_location(out)
    width = int(est.n_features_in_)
    mapping = column_map(model_names, meta)
    if mapping is None and int(meta["n_features"]) > width:
        raise ValueError(f"the dataset has {meta['n_features']} features, the model {width}")
    classes = np.asarray(est.classes_)
    pf = storage.parquet_file(directory)
    schema = _output_schema(classes, pf.schema_arrow.field("label").type)
    total = pf.metadata.num_rows
    tmp = storage.new_tmp_path(f".{out.key.rsplit('/', 1)[-1]}")  # <uuid>.<job id>.parquet
    done = 0
    bad_count, bad_ids = 0, []
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for batch in pf.iter_batches(batch_size=batch_rows(width, batch_bytes)):
                if should_stop is not None and should_stop():
                    raise FitCancelled("batch prediction cancelled")
                F = np.asarray(est.decision_function(_matrix(batch, meta, width, mapping)),
                               dtype=np.float64)
                F = F.reshape(F.shape[0], -1)
                bad = ~np.isfinite(F).all(axis=1)
                idx = (F[:, 0] > 0).astype(np.intp) if len(classes) == 2 else F.argmax(axis=1)
                mask = bad if bad.any() else None
                cols = [batch.column("row_id"), batch.column("label"),
                        pa.array(classes[idx].tolist(), type=schema.field(2).type, mask=mask)]
                cols += [pa.array(F[:, k], mask=mask) for k in range(F.shape[1])]
                if mask is not None:
                    bad_count += int(bad.sum())
                    room = NAMED_OUT_OF_RANGE - len(bad_ids)
                    if room > 0:
                        ids = batch.column("row_id").to_numpy(zero_copy_only=False)
                        bad_ids += [int(r) for r in ids[bad][:room]]
                writer.write_table(pa.Table.from_arrays(cols, schema=schema))
                done += batch.num_rows
                if progress is not None:
                    progress(done, total)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        size = tmp.stat().st_size
        storage.publish_file(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {"rows": done, "seconds": time.perf_counter() - t0, "bytes": size,
            "rows_out_of_range": bad_count, "out_of_range_row_ids": bad_ids}
