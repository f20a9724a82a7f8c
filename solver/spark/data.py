"""Reading a stored dataset into Spark and turning Arrow batches into model-space arrays.

The dataset is the storage contract's Parquet (``docs/architecture.md``): dense (``row_id``,
``label``, ``f0..``) or sparse (``row_id``, ``label``, ``indices``, ``values``), in a local
directory (Spark's own Parquet reader) or in an S3-compatible bucket (``s3://...``: each
executor reads its row groups through pyarrow's S3 filesystem, so no Hadoop S3 connector is
needed and credentials come from the executors' AWS variables or role). The driver reads
``meta.json`` (and, for a bucket, the Parquet footer); everything else runs on the
executors. The model-space transform
(min-max scaling, then the constant column when ``fit_intercept``) is the estimator's own
code (``solver.core.preprocessing``) applied per batch, so Spark and the local backend see
bit-identical feature rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

__all__ = ["sql", "DataInfo", "Summary", "RowSubset", "ddl_fields", "load_frame", "select_rows",
           "batch_X", "model_space", "summarize", "batch_moments", "merge_partials"]


def sql(obj: Any) -> tuple[Any, Any]:
    """``(functions, Window)`` for the kind of session behind ``obj`` (a DataFrame or session).

    The generic ``pyspark.sql.functions`` picks Connect or classic from process-wide state;
    a worker that talks to a Connect server while also holding a classic context (tests) needs
    the module that matches the DataFrame at hand.
    """
    if type(obj).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect import functions as F
        from pyspark.sql.connect.window import Window
    else:
        from pyspark.sql import Window
        from pyspark.sql import functions as F
    return F, Window


@dataclass
class DataInfo:
    """What a UDF needs to rebuild model-space rows (small; shipped inside the closures)."""

    layout: str  # "dense" | "sparse"
    n_features: int
    scaler_min: np.ndarray | None = None
    scaler_scale: np.ndarray | None = None
    fit_intercept: bool = True
    feature_cols: list[str] = field(default_factory=list)
    n_rows: int | None = None  # meta.json's row count (the summary pass checks it)
    # the rows' weight column (``class_weight``), carried with the features; None: unweighted
    weight_col: str | None = None
    weight_total: float | None = None  # the weights' sum over the training rows

    @property
    def input_cols(self) -> list[str]:
        cols = list(self.feature_cols) if self.layout == "dense" else ["indices", "values"]
        return cols + ([self.weight_col] if self.weight_col else [])

    def weights(self, pdf: pd.DataFrame) -> np.ndarray | None:
        """The batch's row weights (None when unweighted)."""
        if not self.weight_col:
            return None
        return pdf[self.weight_col].to_numpy(dtype=np.float64)


def ddl_fields(df: Any, exclude: tuple[str, ...] = ()) -> list[str]:
    """``df``'s columns as DDL fields (backquoted name, type), for a UDF returning them."""
    return [f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema.fields
            if f.name not in exclude]


def load_frame(spark: Any, dataset: str | Path) -> tuple[Any, DataInfo]:
    """The dataset's DataFrame (read by the cluster from ``data.parquet``) and its layout.
    ``dataset``: a local directory, or a store URI ``s3://bucket/prefix/datasets/{id}``
    (with pyarrow's options as its query, e.g. ``?endpoint_override=host:9000``)."""
    where = str(dataset)
    if "://" in where:
        meta, df = _bucket_frame(spark, where)
    else:
        meta = json.loads((Path(where) / "meta.json").read_text())
        df = spark.read.parquet(str(Path(where).resolve() / "data.parquet"))
    layout = meta.get("layout", "dense")
    n_features = int(meta["n_features"])
    cols = [f"f{j}" for j in range(n_features)] if layout == "dense" else []
    n_rows = int(meta["n_rows"]) if "n_rows" in meta else None
    return df, DataInfo(layout=layout, n_features=n_features, feature_cols=cols,
                        n_rows=n_rows)


_SPARK_TYPES = {"int64": "bigint", "int32": "int", "double": "double", "string": "string",
                "large_string": "string", "bool": "boolean"}


def _spark_type(t: Any) -> str:
    """The Spark SQL type of one of the contract's Arrow column types."""
    import pyarrow as pa

    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"array<{_spark_type(t.value_type)}>"
    name = str(t)
    if name not in _SPARK_TYPES:
        raise ValueError(f"a stored column of type {name} is not part of the contract")
    return _SPARK_TYPES[name]


def _bucket_frame(spark: Any, uri: str) -> tuple[dict[str, Any], Any]:
    """``meta.json`` and a DataFrame of ``data.parquet`` in a bucket: one partition per
    Parquet row group, each read by an executor with pyarrow (``uri`` is the dataset's
    prefix; credentials are the reader's own, never shipped in the plan)."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    base, _, query = uri.partition("?")
    fs, prefix = pafs.FileSystem.from_uri(uri)
    with fs.open_input_stream(f"{prefix}/meta.json") as fh:
        meta = json.loads(fh.read())
    pf = pq.ParquetFile(fs.open_input_file(f"{prefix}/data.parquet"))
    ddl = ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in pf.schema_arrow)
    data_uri = f"{base}/data.parquet" + (f"?{query}" if query else "")
    groups = max(1, pf.metadata.num_row_groups)

    def read(batches):  # noqa: ANN001, ANN202 - runs on an executor
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq

        fs, path = pafs.FileSystem.from_uri(data_uri)
        parquet = pq.ParquetFile(fs.open_input_file(path))
        for batch in batches:
            for g in batch.column(0).to_pylist():
                if g < parquet.metadata.num_row_groups:
                    yield from parquet.read_row_group(g).to_batches()

    return meta, spark.range(0, groups, 1, groups).mapInArrow(read, ddl)


@dataclass(frozen=True)
class RowSubset:
    """Some rows of a stored dataset (its ``row_id`` values), as the executors need them: a
    bitmap of ``n_rows / 8`` bytes plus the kept rows before every block of ``BLOCK`` rows.

    A kept row's new id is its rank among the kept rows, which is its row index in the local
    backend's ``X[ids]`` (row identity drives the reproducible partitions and samples)."""

    BLOCK = 8192

    n_rows: int
    size: int
    bits: np.ndarray  # uint8, little bit order: bit r says whether row r is kept
    before: np.ndarray  # int64: kept rows with id < b * BLOCK

    @classmethod
    def of(cls, ids: np.ndarray, n_rows: int) -> RowSubset:
        """The subset of the distinct row ids ``ids`` among ``0 .. n_rows - 1``."""
        mask = np.zeros(int(n_rows), dtype=bool)
        mask[np.asarray(ids, dtype=np.int64)] = True
        counts = np.concatenate([[0], np.cumsum(mask, dtype=np.int64)])
        return cls(n_rows=int(n_rows), size=int(counts[-1]),
                   bits=np.packbits(mask, bitorder="little"), before=counts[::cls.BLOCK])

    def rank(self, row_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(kept, new_id)`` for the row ids of one batch (``new_id`` valid where kept)."""
        rid = np.asarray(row_id, dtype=np.int64)
        if rid.size == 0:
            return np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64)
        inside = (rid >= 0) & (rid < self.n_rows)
        r = np.where(inside, rid, 0)
        lo = int(r.min()) // self.BLOCK * self.BLOCK
        hi = int(r.max()) + 1
        seg = np.unpackbits(self.bits[lo // 8:(hi + 7) // 8], bitorder="little",
                            count=hi - lo).astype(bool)
        kept = inside & seg[r - lo]
        new_id = self.before[lo // self.BLOCK] + np.cumsum(seg, dtype=np.int64)[r - lo] - 1
        return kept, new_id


def select_rows(df: Any, rows: RowSubset) -> Any:
    """``df`` restricted to ``rows``, each kept row's ``row_id`` replaced by its new id."""

    def keep(batches):
        for pdf in batches:
            kept, new_id = rows.rank(pdf["row_id"].to_numpy(dtype=np.int64))
            out = pdf[kept].copy()
            out["row_id"] = new_id[kept]
            yield out

    return df.mapInPandas(keep, ", ".join(ddl_fields(df)))


def batch_X(pdf: pd.DataFrame, info: DataInfo) -> np.ndarray | sp.csr_matrix:
    """Raw feature rows of a pandas batch: dense float64 or CSR (sorted indices)."""
    n = len(pdf)
    if info.layout == "dense":
        if not info.feature_cols:
            return np.zeros((n, 0))
        return np.ascontiguousarray(pdf[info.feature_cols].to_numpy(dtype=np.float64))
    idx_lists = pdf["indices"].to_numpy()
    val_lists = pdf["values"].to_numpy()
    lengths = np.fromiter((len(a) for a in idx_lists), dtype=np.int64, count=n)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    if indptr[-1]:
        indices = np.concatenate([np.asarray(a, dtype=np.int32) for a in idx_lists])
        values = np.concatenate([np.asarray(a, dtype=np.float64) for a in val_lists])
    else:
        indices, values = np.zeros(0, np.int32), np.zeros(0)
    X = sp.csr_matrix((values, indices, indptr), shape=(n, info.n_features))
    X.sort_indices()
    return X


def model_space(X: np.ndarray | sp.csr_matrix, info: DataInfo, *, constant: bool = True):
    """Scaled rows (the estimator's ``MinMaxScaler``), plus the constant column if asked."""
    from solver.core.preprocessing import MinMaxScaler, append_constant

    if info.scaler_min is not None:
        X = MinMaxScaler(min_=info.scaler_min, scale_=info.scaler_scale).transform(X)
    if constant and info.fit_intercept:
        X = append_constant(X)
    return X


@dataclass
class Summary:
    """What one pass over the dataset tells the fit: rows, sorted labels, per-feature min /
    max and the per-feature mean and centred sum of squares (implicit zeros of sparse rows
    count everywhere)."""

    n: int
    classes: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    wsum: float = 0.0  # the rows' weights' sum (``n`` when unweighted)
    # raw rows (``row_id`` + the input columns) of the landmark candidate sample, when asked
    candidates: pd.DataFrame | None = None

    def scaled_variance(self, scale_min: np.ndarray | None,
                        scale: np.ndarray | None) -> float:
        """Variance of all entries of the features after the min-max map ``(x - min) *
        scale`` (the estimator's ``gamma='scale'`` on the scaled data), from the per-feature
        moments: ``sum_j [M2_j s_j^2 + n (mu'_j - mu')^2] / (n d)`` with ``mu'_j`` the scaled
        feature means and ``mu'`` their average; equal to ``np.var`` of the scaled matrix up
        to rounding. With row weights ``n`` is their sum and the moments are weighted
        (``solver.core.training.weighted_variance``)."""
        d = self.mean.shape[0]
        n = float(self.wsum or self.n)
        if self.n == 0 or d == 0 or n <= 0:
            return 0.0
        mu, m2 = self.mean, self.m2
        if scale_min is not None and scale is not None:
            mu, m2 = (mu - scale_min) * scale, m2 * scale * scale
        overall = float(mu.mean())
        return float((m2.sum() + n * float(((mu - overall) ** 2).sum())) / (n * d))


def batch_moments(X, w: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-feature min, max, mean and centred sum of squares of one batch (the mean and sum
    of squares weighted by the rows' ``w`` when given)."""
    n = X.shape[0]
    if w is not None:
        Xd = X.toarray() if sp.issparse(X) else X
        total = float(w.sum())
        mean = (w @ Xd) / total if total > 0 else np.zeros(Xd.shape[1])
        return (Xd.min(axis=0), Xd.max(axis=0), mean, w @ ((Xd - mean) ** 2))
    if not sp.issparse(X):
        mean = X.mean(axis=0)
        return X.min(axis=0), X.max(axis=0), mean, ((X - mean) ** 2).sum(axis=0)
    d = X.shape[1]
    lo = np.asarray(X.min(axis=0).toarray()).ravel()
    hi = np.asarray(X.max(axis=0).toarray()).ravel()
    nnz = np.bincount(X.indices, minlength=d)
    mean = np.bincount(X.indices, weights=X.data, minlength=d) / n
    dev = X.data - mean[X.indices]
    m2 = np.bincount(X.indices, weights=dev * dev, minlength=d) + (n - nnz) * mean * mean
    return lo, hi, mean, m2


def summarize(df: Any, info: DataInfo, sample: tuple[int, int] | None = None) -> Summary:
    """Row count, labels, per-feature min / max and moments in one distributed pass.

    Each Arrow batch reduces to one row of partial results (its distinct labels and
    per-feature statistics); the driver merges them, the moments with Chan et al.'s pairwise
    update, so only these small rows reach it.  ``sample = (seed, max_candidates)`` also
    collects the raw rows of the landmark candidate sample (``solver.sodm.landmarks.is_candidate``
    on ``row_id`` with the row count of ``meta.json``, about ``max_candidates`` rows), which
    saves the landmark step its own pass; ``candidates`` stays ``None`` when the rows counted
    differ from ``meta.json``.
    """
    from solver.sodm.landmarks import is_candidate

    d = info.n_features
    label_type = df.schema["label"].dataType.simpleString()
    take = sample is not None and info.n_rows is not None
    n_meta = int(info.n_rows or 0)
    dense = info.layout == "dense"

    def partial(batches):
        for pdf in batches:
            if len(pdf) == 0:
                continue
            labels = pdf["label"]
            X = batch_X(pdf, info)
            w = info.weights(pdf)
            lo, hi, mean, m2 = batch_moments(X, w)
            row = {"n": [X.shape[0]], "w": [float(X.shape[0] if w is None else w.sum())],
                   "missing": [bool(labels.isna().any())],
                   "labels": [labels.dropna().unique().tolist()],
                   "lo": [np.asarray(lo, np.float64)], "hi": [np.asarray(hi, np.float64)],
                   "mean": [np.asarray(mean, np.float64)], "m2": [np.asarray(m2, np.float64)]}
            if take:
                rid = pdf["row_id"].to_numpy(dtype=np.int64)
                keep = is_candidate(rid.astype(np.uint64), n_meta, sample[0], sample[1])
                row["cand_ids"] = [rid[keep]]
                if dense:
                    row["cand_x"] = [list(X[keep])]
                else:
                    row["cand_idx"] = [list(pdf["indices"].to_numpy()[keep])]
                    row["cand_val"] = [list(pdf["values"].to_numpy()[keep])]
            yield pd.DataFrame(row)

    schema = (f"n long, w double, missing boolean, labels array<{label_type}>, "
              "lo array<double>, "
              "hi array<double>, mean array<double>, m2 array<double>")
    if take:
        schema += (", cand_ids array<long>, cand_x array<array<double>>" if dense else
                   ", cand_ids array<long>, cand_idx array<array<long>>, "
                   "cand_val array<array<double>>")
    cols = ["label", *info.input_cols] + (["row_id"] if take else [])
    rows = [r.asDict() for r in df.select(*cols).mapInPandas(partial, schema).collect()]
    summary = merge_partials(rows, d)
    if take and summary.n == n_meta:
        summary.candidates = _candidate_frame(rows, info)
    return summary


def _candidate_frame(rows: list[dict], info: DataInfo) -> pd.DataFrame:
    """The collected candidate rows as a batch (``row_id`` + input columns), by row id."""
    ids = np.concatenate([np.asarray(r["cand_ids"], dtype=np.int64) for r in rows])
    if info.layout == "dense":
        d = info.n_features
        X = np.vstack([np.asarray(r["cand_x"], dtype=np.float64).reshape(-1, d)
                       for r in rows])
        pdf = pd.DataFrame(X, columns=info.feature_cols)
    else:
        pdf = pd.DataFrame({"indices": [np.asarray(a, dtype=np.int64) for r in rows
                                        for a in r["cand_idx"]],
                            "values": [np.asarray(a, dtype=np.float64) for r in rows
                                       for a in r["cand_val"]]})
    pdf.insert(0, "row_id", ids)
    return pdf.sort_values("row_id", kind="stable").reset_index(drop=True)


def merge_partials(rows: list[dict], d: int) -> Summary:
    """The dataset's :class:`Summary` from the per-batch rows of :func:`summarize` (means and
    centred sums of squares combined with Chan et al.'s pairwise update)."""
    if not rows:
        raise ValueError("the dataset has no rows")
    if any(r["missing"] for r in rows):
        raise ValueError("the dataset has missing labels")
    n, wsum, mean, m2 = 0, 0.0, np.zeros(d), np.zeros(d)
    for r in rows:
        nb, wb = int(r["n"]), float(r.get("w", r["n"]))
        mb = np.asarray(r["mean"], dtype=np.float64).reshape(d)
        delta = mb - mean
        tot = wsum + wb
        if tot > 0:
            mean = mean + delta * (wb / tot)
            m2 = m2 + np.asarray(r["m2"], dtype=np.float64).reshape(d) \
                + delta * delta * (wsum * wb / tot)
        n, wsum = n + nb, tot

    def stack(key: str) -> np.ndarray:
        return np.vstack([np.asarray(r[key], dtype=np.float64).reshape(1, d) for r in rows])

    classes = np.asarray(sorted({v for r in rows for v in r["labels"]}))
    return Summary(n=n, classes=classes, lo=stack("lo").min(axis=0), hi=stack("hi").max(axis=0),
                   mean=mean, m2=m2, wsum=wsum)
