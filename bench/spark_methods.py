"""Spark rows of ``bench.run``: SODM on the Spark backend and Spark MLlib's LinearSVC.

Each is an estimator with ``fit`` / ``predict`` like the local methods, so ``bench.child``
measures it the same way. Both run on a classic ``local[n_jobs]`` session (the same 2-core
budget as the local methods) that ``make`` starts *before* the timed ``fit`` and warms with
one fit of the same kind on 200 synthetic rows: JVM start-up, Spark's Python workers and
their solver imports are per-worker costs, not per-fit ones (``docs/spark-benchmarks.md``
reports the first fit after a session start apart; the local methods are warmed the same
way by ``bench.warm``).
``fit`` writes the training split in the service's storage layout (Parquet + meta.json, as an
upload leaves it; tens of milliseconds) and trains from that file:

* SODM: ``worker.spark.spark_backend.train_on_spark``, the service's own path (DataFrame API,
  ``applyInPandas`` local solves); prediction with the returned fitted ``SODMClassifier``.
* MLlib ``LinearSVC`` (OWL-QN on the hinge loss): LIBLINEAR's tuned ``C`` is mapped to
  ``regParam = 1 / (C n)`` with ``standardization=False`` (the same objective up to the
  unregularized intercept), ``maxIter=100``; prediction from its coefficients.

Spark needs Java 17 and the ``spark`` extra; the fork server of ``bench.child`` never starts
one (``bench.warm`` skips these methods), each task's JVM lives in the task's process group.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def write_dataset(directory: Path, X: np.ndarray, y: np.ndarray,
                  row_group_size: int = 8192) -> Path:
    """``X, y`` stored as an upload leaves them (``app.services.filestore.storage``), in row groups
    of ``row_group_size`` rows (the Spark read splits)."""
    from app.services.filestore.storage import write_dataset_files

    directory.mkdir(parents=True, exist_ok=True)
    write_dataset_files(directory, X, y, row_group_size=row_group_size)
    return directory


def local_settings(cores: int) -> Any:
    """Service settings for a classic ``local[cores]`` session, with the environment its
    Python workers need (this interpreter, loopback only)."""
    from app.core.config import Settings

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return Settings(SODM_SPARK_MASTER=f"local[{max(1, int(cores))}]")


def mllib_linearsvc(spark: Any, parquet: Path, n_features: int, reg: float, max_iter: int,
                    standardization: bool) -> tuple[np.ndarray, float]:
    """Fit MLlib ``LinearSVC`` on a stored Parquet file (labels -1/+1 or 0/1): ``(w, b)``."""
    from pyspark.ml.classification import LinearSVC
    from pyspark.ml.feature import VectorAssembler

    df = spark.read.parquet(str(parquet))
    data = VectorAssembler(inputCols=[f"f{j}" for j in range(n_features)],
                           outputCol="features").transform(df) \
        .selectExpr("features", "CAST(label > 0 AS DOUBLE) AS label")
    model = LinearSVC(regParam=reg, maxIter=max_iter,
                      standardization=standardization).fit(data)
    return np.asarray(model.coefficients.toArray()), float(model.intercept)


class _OnSpark:
    """Starts the ``local[cores]`` session at construction (outside the timed fit)."""

    def __init__(self, cores: int) -> None:
        from worker.spark.spark_backend import spark_session

        self.settings = local_settings(cores)
        with spark_session(self.settings, job_id="bench-start") as spark:
            spark.range(1).count()
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-spark-")

    def _store(self, X: np.ndarray, y: np.ndarray) -> Path:
        return write_dataset(Path(self._tmp.name) / "train", np.asarray(X), np.asarray(y))


    def _warm_up(self) -> None:
        """One fit on 200 synthetic rows, outside the timed fit."""
        rng = np.random.default_rng(0)
        X = rng.random((200, 4))
        self.fit(X, np.where(X[:, 0] > X[:, 1], 1.0, -1.0))


class SparkSODM(_OnSpark):
    """SODM (kernel or linear) trained by the service's Spark backend."""

    def __init__(self, params: dict[str, Any], seed: int, cores: int) -> None:
        super().__init__(cores)
        self.params, self.seed = dict(params), int(seed)
        self.model_: Any = None
        self._warm_up()

    def fit(self, X: np.ndarray, y: np.ndarray) -> SparkSODM:
        from worker.spark.spark_backend import train_on_spark

        self.model_ = train_on_spark(self._store(X, y), self.params, self.seed, None, None,
                                     f"bench-sodm-{self.seed}", settings=self.settings)
        self.support_vectors_ = getattr(self.model_, "support_vectors_", None)
        self.history_ = getattr(self.model_, "history_", None)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.model_.predict(X)


class MLlibLinearSVC(_OnSpark):
    """Spark MLlib ``LinearSVC`` with LIBLINEAR's ``C`` (see the module docstring)."""

    def __init__(self, C: float, cores: int, max_iter: int = 100) -> None:
        super().__init__(cores)
        self.C, self.max_iter = float(C), int(max_iter)
        self._warm_up()

    def fit(self, X: np.ndarray, y: np.ndarray) -> MLlibLinearSVC:
        from worker.spark.spark_backend import spark_session

        self.classes_ = np.unique(y)
        path = self._store(X, np.where(y == self.classes_[1], 1, -1))
        with spark_session(self.settings, job_id="bench-mllib") as spark:
            self.coef_, self.intercept_ = mllib_linearsvc(
                spark, path / "data.parquet", X.shape[1], 1.0 / (self.C * len(y)),
                self.max_iter, standardization=False)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        f = np.asarray(X) @ self.coef_ + self.intercept_
        return np.where(f > 0, self.classes_[1], self.classes_[0])
