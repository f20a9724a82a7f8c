"""Reading a stored dataset into Spark and turning Arrow batches into model-space arrays.

The dataset is the storage contract's Parquet (``docs/architecture.md``): dense (``row_id``,
``label``, ``f0..``) or sparse (``row_id``, ``label``, ``indices``, ``values``). The driver
only reads ``meta.json``; everything else runs on the executors. The model-space transform
(min-max scaling, then the constant column when ``fit_intercept``) is the estimator's own
code (``solver.preprocessing``) applied per batch, so Spark and the local backend see
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

__all__ = ["sql", "DataInfo", "load_frame", "batch_X", "model_space", "feature_stats",
           "label_classes"]


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

    @property
    def input_cols(self) -> list[str]:
        return list(self.feature_cols) if self.layout == "dense" else ["indices", "values"]


def load_frame(spark: Any, dataset_dir: Path) -> tuple[Any, DataInfo]:
    """The dataset's DataFrame (read by the cluster from ``data.parquet``) and its layout."""
    meta = json.loads((Path(dataset_dir) / "meta.json").read_text())
    layout = meta.get("layout", "dense")
    n_features = int(meta["n_features"])
    df = spark.read.parquet(str(Path(dataset_dir).resolve() / "data.parquet"))
    cols = [f"f{j}" for j in range(n_features)] if layout == "dense" else []
    return df, DataInfo(layout=layout, n_features=n_features, feature_cols=cols)


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
    from solver.preprocessing import MinMaxScaler, append_constant

    if info.scaler_min is not None:
        X = MinMaxScaler(min_=info.scaler_min, scale_=info.scaler_scale).transform(X)
    if constant and info.fit_intercept:
        X = append_constant(X)
    return X


def feature_stats(df: Any, info: DataInfo) -> tuple[int, np.ndarray, np.ndarray]:
    """Row count and per-feature min / max (implicit zeros of sparse rows count), distributed.

    Each Arrow batch reduces to one row of partial results; only those small rows reach the
    driver.
    """
    d = info.n_features

    def partial(batches):
        for pdf in batches:
            X = batch_X(pdf, info)
            if X.shape[0] == 0:
                continue
            if sp.issparse(X):
                lo = np.asarray(X.min(axis=0).toarray()).ravel()
                hi = np.asarray(X.max(axis=0).toarray()).ravel()
            else:
                lo, hi = X.min(axis=0), X.max(axis=0)
            yield pd.DataFrame({"n": [X.shape[0]], "lo": [lo.astype(np.float64)],
                                "hi": [hi.astype(np.float64)]})

    rows = (df.select(*info.input_cols)
            .mapInPandas(partial, "n long, lo array<double>, hi array<double>").collect())
    if not rows:
        raise ValueError("the dataset has no rows")
    n = sum(int(r["n"]) for r in rows)
    lo = np.min(np.vstack([np.asarray(r["lo"], dtype=np.float64).reshape(1, d) for r in rows]),
                axis=0)
    hi = np.max(np.vstack([np.asarray(r["hi"], dtype=np.float64).reshape(1, d) for r in rows]),
                axis=0)
    return n, lo, hi


def scaled_variance(df: Any, info: DataInfo) -> float:
    """Variance of all entries of the scaled features (the estimator's ``gamma='scale'``).

    Sum and sum of squares per batch, combined on the driver: ``E[x^2] - E[x]^2`` like the
    estimator's sparse branch; for dense data this differs from ``np.var`` only by rounding.
    """

    def partial(batches):
        for pdf in batches:
            Xs = model_space(batch_X(pdf, info), info, constant=False)
            size = Xs.shape[0] * Xs.shape[1]
            data = Xs.data if sp.issparse(Xs) else np.asarray(Xs).ravel()
            yield pd.DataFrame({"n": [size], "s": [float(data.sum())],
                                "ss": [float(np.dot(data, data))]})

    rows = df.select(*info.input_cols).mapInPandas(partial, "n long, s double, ss double") \
        .collect()
    n = sum(int(r["n"]) for r in rows)
    if n == 0:
        return 0.0
    mean = sum(float(r["s"]) for r in rows) / n
    return float(sum(float(r["ss"]) for r in rows) / n - mean * mean)


def label_classes(df: Any) -> np.ndarray:
    """The sorted distinct labels (a tiny aggregate)."""
    vals = [r[0] for r in df.select("label").distinct().collect()]
    if any(v is None for v in vals):
        raise ValueError("the dataset has missing labels")
    return np.asarray(sorted(vals))
