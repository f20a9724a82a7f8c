"""Run one claimed job to its end: a training job here (load data, split, (search), fit,
evaluate, save, commit), a batch prediction in ``worker.prediction.predict_job``; the failure a job
shows; the lease checks and terminal writes both use are ``worker.lifecycle.job_state``.

Order of effects makes a retry harmless: the model file is written first to a path derived
from the job id (a rerun overwrites the same bytes), then ONE transaction inserts the
``models`` row (``job_id`` is unique, so at most one row per job) and marks the job
SUCCEEDED; that transaction is retried with backoff on database errors. Every write is
conditional on owning ``(worker, attempt)`` (see ``worker.lifecycle.lease``).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError, OperationalError

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.logs import current_request_id
from app.core.orm import Job, JobKind, JobState, Model, utcnow
from app.core.problems import scrub_detail
from app.services.job_queue.algorithm_specs import build_estimator
from app.services.model_registry import model_store
from solver.core.training import jsonable
from solver.exceptions import FitCancelled, InvalidParameterError
from worker.lifecycle.history import thin
from worker.lifecycle.job_state import (
    COMMIT_RETRIES,
    DatasetGone,
    JobLost,
    check_going,
    finish,
    problem,
    require_datasets,
    time_limit_problem,
    with_retries,
)
from worker.lifecycle.lease import ClaimedJob, Heartbeat, owned
from worker.lifecycle.memory import job_memory_limit, out_of_memory
from worker.prediction.predict_job import PredictionFailed, run_prediction
from worker.training.evaluation import evaluate, n_support_vectors
from worker.training.param_failure import is_parameter_failure, parameter_problem, require_finite

if TYPE_CHECKING:
    from worker.spark.spark_backend import SparkFailure

log = logging.getLogger(__name__)

MODEL_NAMESPACE = uuid.UUID("6f1d0c8e-5a0b-4bb8-9a38-3f0e3c1d2a77")


def model_id_for(job_id: str) -> str:
    """The model id is derived from the job id, so every attempt writes the same file."""
    return str(uuid.uuid5(MODEL_NAMESPACE, job_id))


# ------------------------------------------------------------------------------- data
def _load(dataset_id: str) -> tuple[Any, np.ndarray]:
    from app.services.filestore import storage

    return storage.load_dataset(storage.dataset_dir(dataset_id))


def _feature_names(dataset_id: str, n_features: int,
                   weight_column: str | None = None) -> list[str] | None:
    """The dataset's column names (CSV header, Parquet schema; the weight column taken out)
    when there is one per feature of the model; LIBSVM data has none."""
    from app.services.filestore import storage

    names = storage.read_meta(storage.dataset_dir(dataset_id)).get("feature_names")
    if names and weight_column is not None:
        names = [n for n in names if n != weight_column]
    return [str(n) for n in names] if names and len(names) == n_features else None


def _without_weights(dataset_id: str, X: Any, column: str | None
                     ) -> tuple[Any, np.ndarray | None]:
    """``X`` without the request's weight column, and that column (None without one)."""
    if column is None:
        return X, None
    from app.services.filestore import storage

    j = storage.feature_index(storage.dataset_dir(dataset_id), column)
    if j is None:
        raise ValueError(f"dataset {dataset_id} has no column named {column!r}")
    w = np.asarray(X[:, [j]].toarray() if sp.issparse(X) else X[:, j],
                   dtype=np.float64).ravel()
    keep = np.flatnonzero(np.arange(X.shape[1]) != j)
    return (X[:, keep] if sp.issparse(X) else np.ascontiguousarray(X[:, keep])), w


def _fit_width(X: Any, n_features: int) -> Any:
    """Pad a test matrix with fewer features (LIBSVM files omit trailing zero features)."""
    if X.shape[1] == n_features:
        return X
    if X.shape[1] > n_features:
        raise ValueError(f"test data has {X.shape[1]} features, the training data "
                         f"{n_features}")
    if sp.issparse(X):
        return sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))
    return np.hstack([X, np.zeros((X.shape[0], n_features - X.shape[1]))])


def split(X: Any, y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified train/test row indices (plain shuffle split when a class is too small)."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    _, counts = np.unique(y, return_counts=True)
    n_test = int(np.ceil(fraction * len(y)))
    stratify = y if counts.min() >= 2 and min(n_test, len(y) - n_test) >= len(counts) \
        else None
    tr, te = train_test_split(idx, test_size=fraction, random_state=seed, shuffle=True,
                              stratify=stratify)
    return np.sort(tr), np.sort(te)


# ------------------------------------------------------------------------------ commit
def _commit_success(c: ClaimedJob, model_fields: dict[str, Any], history: list[dict],
                    stored: model_store.ModelBytes) -> str:
    """One transaction: insert the model version (once per job) with its bytes and set
    SUCCEEDED."""

    def tx() -> str:
        with session_scope() as s:
            job = s.scalars(select(Job).where(owned(c.job_id, c.worker, c.attempt))
                            .with_for_update()).first()
            if job is None:
                raise JobLost(c.job_id)
            now = utcnow()
            if job.state == JobState.CANCELLING:
                job.state, job.finished_at, job.lease_until = JobState.CANCELLED, now, None
                job.progress_message = "cancelled"
                return JobState.CANCELLED
            if job.state != JobState.RUNNING:
                raise JobLost(c.job_id)
            existing = s.scalars(select(Model).where(Model.job_id == c.job_id)).first()
            if existing is None:
                top = s.scalar(select(func.max(Model.version)).where(
                    Model.tenant_id == job.tenant_id, Model.name == model_fields["name"]))
                s.add(Model(tenant_id=job.tenant_id, job_id=job.id, version=(top or 0) + 1,
                            **model_fields))
                s.flush()
                s.add(model_store.blob(model_fields["id"], stored))
            job.state, job.finished_at, job.lease_until = JobState.SUCCEEDED, now, None
            job.model_id = model_fields["id"]
            job.progress_fraction, job.progress_message = 1.0, "succeeded"
            job.history = history
            return JobState.SUCCEEDED

    delay = 0.2
    for attempt in range(COMMIT_RETRIES):
        try:
            return with_retries(tx, "final commit")
        except IntegrityError:  # a concurrent job took the same (name, version): recount
            if attempt == COMMIT_RETRIES - 1:
                raise
            time.sleep(delay)
            delay *= 2
    raise RuntimeError("unreachable")


# -------------------------------------------------------------------------------- run
def _spark_job(c: ClaimedJob, hb: Heartbeat) -> Any:
    """The job's Spark session (``worker.spark.spark_backend.SparkJob``); a previous attempt's
    Spark work is interrupted first."""
    from app.services.filestore import storage
    from worker.spark import spark_backend

    with session_scope() as s:
        old_sid = s.scalar(select(Job.spark_session_id).where(Job.id == c.job_id))
    if old_sid:
        try:
            spark_backend.interrupt_job(c.job_id, old_sid)
        except Exception:  # noqa: BLE001 - the old session may be gone already
            log.info("no previous Spark work of job %s to interrupt", c.job_id)

    def on_session(sid: str) -> None:
        with session_scope() as s:
            s.execute(update(Job).where(owned(c.job_id, c.worker, c.attempt))
                      .values(spark_session_id=sid))

    return spark_backend.SparkJob(storage.dataset_dir(c.dataset_id), c.job_id,
                                  should_stop=hb.should_stop, attempt=c.attempt,
                                  on_session=on_session, on_status=hb.report_spark)


@dataclass
class _SparkRows:
    """A Spark job's rows without its training features, which stay with Spark: the
    training row ids (None for all), their labels, the held-out rows, and with a weight
    column its feature position and the training rows' weights (rows of weight 0 are not
    among the training rows, as the local fit leaves them out)."""

    train_rows: np.ndarray | None
    y_train: np.ndarray
    X_test: Any
    y_test: np.ndarray
    weight_feature: int | None = None
    w_train: np.ndarray | None = None
    w_test: np.ndarray | None = None  # the held-out rows' weights (metrics["weighted"])


def _spark_rows(c: ClaimedJob) -> _SparkRows:
    """The split is the local backend's (same seed, same rows); only the held-out rows are
    loaded here (without the weight column)."""
    from app.services.filestore import storage

    ddir = storage.dataset_dir(c.dataset_id)
    y = storage.load_labels(ddir)
    j = w = None
    if c.weight_column is not None:
        j = storage.feature_index(ddir, c.weight_column)
        if j is None:
            raise ValueError(f"dataset {c.dataset_id} has no column named "
                             f"{c.weight_column!r}")
        w = storage.load_feature(ddir, j)
    if c.test_dataset_id:
        X_test, y_test = _load(c.test_dataset_id)
        X_test, w_test = _without_weights(c.test_dataset_id, X_test, c.weight_column)
        n_features = int(storage.read_meta(ddir)["n_features"]) - (j is not None)
        train_idx, X_test = None, _fit_width(X_test, n_features)
    else:
        train_idx, test_idx = split(None, y, c.test_fraction, c.seed)
        X_test, y_test = storage.load_rows(ddir, test_idx)
        X_test, w_test = _without_weights(c.dataset_id, X_test, c.weight_column)
    if w is None:
        rows = train_idx
    else:
        rows = np.arange(len(y)) if train_idx is None else train_idx
        rows = rows[w[rows] > 0]
    return _SparkRows(rows, y if rows is None else y[rows], X_test, y_test, j,
                      None if w is None else w[rows], w_test)


def run_claimed(c: ClaimedJob) -> str:
    """Run a claimed job to a terminal state; returns that state ("LOST" if reaped)."""
    hb = Heartbeat(c)
    hb.start()
    # a Spark job's memory lives in Spark (and its JVM would inherit the limit)
    limit_mb = 0 if c.backend == "spark" else get_settings().job_memory_limit_mb
    try:
        with job_memory_limit(limit_mb):
            return _run(c, hb)
    except JobLost:
        log.warning("job %s attempt %d lost its lease; stopping", c.job_id, c.attempt)
        return "LOST"
    except FitCancelled as exc:
        if hb.lost.is_set():
            return "LOST"
        history = thin(jsonable(exc.history or [])) or hb.history()
        ok = finish(c, JobState.CANCELLED, history=history, from_states=(JobState.CANCELLING,))
        if not ok:  # stopped although nobody asked (cannot happen) - record a failure
            finish(c, JobState.FAILED, error=problem(
                "training-failed", "Training stopped",
                "the solver stopped without a cancel request", 500))
            return JobState.FAILED
        return JobState.CANCELLED
    except OperationalError as exc:
        if not _caused_by(exc, SoftTimeLimitExceeded):
            # the database stayed unreachable through every retry: the job is not at fault;
            # leave it RUNNING so the lease reaper re-queues it once the database is back
            log.exception("job %s attempt %d: database unreachable; left to the reaper",
                          c.job_id, c.attempt)
            return "LOST"
        finish(c, JobState.FAILED, error=failure_problem(c, exc, hb, limit_mb),
               history=hb.history())
        return JobState.FAILED
    except Exception as exc:  # noqa: BLE001 - every failure becomes a problem object
        finish(c, JobState.FAILED, error=failure_problem(c, exc, hb, limit_mb),
               history=hb.history())
        return JobState.FAILED
    finally:
        hb.stop()


def failure_problem(c: ClaimedJob, exc: BaseException, hb: Heartbeat,
                    limit_mb: int) -> dict[str, Any]:
    """The problem object a failed job shows. The time limit is recognised anywhere in the
    exception's chain: the soft limit's signal can land inside a database call, which then
    raises its own error with the limit as its context."""
    if _caused_by(exc, SoftTimeLimitExceeded):  # numba wraps it in a SystemError
        return time_limit_problem()
    if out_of_memory(exc):
        need = (f"more than {limit_mb} MB of memory (SODM_JOB_MEMORY_LIMIT_MB)"
                if limit_mb else "more memory than the worker has")
        return problem("memory-limit", "Memory limit exceeded",
                       f"the job needed {need}; a smaller cache_size, sample or dataset "
                       "needs less")
    if isinstance(exc, DatasetGone):
        return problem("dataset-gone", "Dataset deleted", str(exc), 404)
    if isinstance(exc, PredictionFailed):
        return problem(exc.kind, exc.title, str(exc), exc.status)
    if (failure := _spark_failure(c, exc)) is not None:
        # the traceback (JVM and Python worker) goes to this log only
        log.error("job %s: Spark failed", c.job_id, exc_info=exc)
        return problem("spark-failed", "Spark job failed",
                       failure.detail(hb.message(), hb.spark_stage()), 500)
    if is_parameter_failure(exc):
        if not isinstance(exc, InvalidParameterError):  # the log keeps where it happened
            log.warning("job %s: the fit left float64's range", c.job_id, exc_info=exc)
        return parameter_problem(c.params, exc)
    if isinstance(exc, ValueError):
        return problem("training-failed", "Training failed", f"{exc}")
    # the log has the traceback; the job says only what a client can use
    log.error("job %s failed", c.job_id, exc_info=exc)
    return problem("training-failed", "Training failed",
                   f"{_user_message(exc)} (request id {current_request_id() or '-'})", 500)


def _user_message(exc: BaseException) -> str:
    """What a client may read of an unexpected error: the message of a Python error raised
    in a Spark worker (its last traceback line, scrubbed), else a generic sentence."""
    text = str(exc)
    if "Traceback (most recent call last)" in text and "ValueError: " in text:
        return scrub_detail(text) or "the training stopped on an internal error"
    return "the training stopped on an internal error"


def _spark_failure(c: ClaimedJob, exc: BaseException) -> SparkFailure | None:
    """A Spark job's Spark-side error in a few words (``SparkFailure``), else None."""
    if c.backend != "spark":
        return None
    from worker.spark.spark_backend import spark_failure

    return spark_failure(exc)


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """``exc`` or an exception in its ``__cause__`` / ``__context__`` chain is a ``kind``."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, kind):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _kind(job_id: str) -> str:
    with session_scope() as s:
        return s.scalar(select(Job.kind).where(Job.id == job_id)) or JobKind.TRAIN


def _run(c: ClaimedJob, hb: Heartbeat) -> str:
    if _kind(c.job_id) == JobKind.PREDICT:
        return run_prediction(c, hb)
    with contextlib.ExitStack() as spark_scope:
        return _run_in(c, hb, spark_scope)


@dataclass
class _TrainData:
    """The rows one training job fits and evaluates on: local matrices, or (Spark) the
    training row ids with the open Spark job that reads them by path."""

    X_train: Any
    y_train: np.ndarray
    X_test: Any
    y_test: np.ndarray
    train_rows: np.ndarray | None = None
    spark_job: Any = None
    w_train: np.ndarray | None = None  # the rows' weights (the request's weight_column)
    weight_feature: int | None = None  # Spark: the stored feature holding them
    w_test: np.ndarray | None = None  # the held-out rows' weights (metrics["weighted"])


def _run_in(c: ClaimedJob, hb: Heartbeat, spark_scope: contextlib.ExitStack) -> str:
    """Load, (search), train, evaluate and save one job; the committed job state."""
    seed = c.seed
    params = dict(c.params)
    est = build_estimator(c.algorithm, params, seed)
    if c.class_weight is not None:
        est.set_params(class_weight=c.class_weight)
    hb.report(0.01, "loading data")
    data = _training_data(c, hb, spark_scope)
    check_going(hb)
    search_result = _search(c, hb, est, params, data)
    auto_info = _spark_auto(c, hb, est, params, data)
    lo = 0.05 if search_result is None and auto_info is None else 0.5
    hb.report(lo, "training")
    est, train_seconds = _train(hb, est, params, seed, data, lo, spark_scope, auto_info)
    require_finite(est)
    check_going(hb)
    hb.report(0.92, "evaluating")
    metrics, margin, reference = evaluate(est, data.X_test, data.y_test, data.w_test)
    metrics["held_out"] = True
    if search_result is not None:
        metrics["search"] = jsonable(search_result)
    check_going(hb)
    hb.report(0.96, "saving model")
    return _save(c, hb, est, params, metrics, {"margin": margin, "margin_reference": reference},
                 train_seconds)


def _training_data(c: ClaimedJob, hb: Heartbeat, spark_scope: contextlib.ExitStack
                   ) -> _TrainData:
    """The job's training and test rows: the test dataset or a seeded split; on Spark the
    training rows stay on disk and a Spark job is opened in ``spark_scope``."""
    require_datasets(c)
    if c.backend == "spark":
        # Spark reads the training rows by path; this process loads labels and test rows
        r = _spark_rows(c)
        check_going(hb)
        spark_job = spark_scope.enter_context(_spark_job(c, hb))
        return _TrainData(None, r.y_train, r.X_test, r.y_test, r.train_rows, spark_job,
                          r.w_train, r.weight_feature, r.w_test)
    X, y = _load(c.dataset_id)
    X, w = _without_weights(c.dataset_id, X, c.weight_column)
    if c.test_dataset_id:
        X_test, y_test = _load(c.test_dataset_id)
        X_test, w_test = _without_weights(c.test_dataset_id, X_test, c.weight_column)
        keep = np.arange(len(y)) if w is None else np.flatnonzero(w > 0)
        return _TrainData(X[keep], y[keep], _fit_width(X_test, X.shape[1]), y_test,
                          w_train=None if w is None else w[keep], w_test=w_test)
    train_idx, test_idx = split(X, y, c.test_fraction, c.seed)
    if w is not None:  # rows of weight 0 are left out (as on Spark: the same CV folds)
        train_idx = train_idx[w[train_idx] > 0]
    return _TrainData(X[train_idx], y[train_idx], X[test_idx], y[test_idx],
                      w_train=None if w is None else w[train_idx],
                      w_test=None if w is None else w[test_idx])


def _search(c: ClaimedJob, hb: Heartbeat, est: Any, params: dict[str, Any],
            data: _TrainData) -> dict[str, Any] | None:
    """The job's grid search, if it asked for one: its best parameters are set on ``est``
    and ``params``; ``None`` without a search."""
    if c.search is None:
        return None
    from worker.training.search import grid_search, local_fit_score, spark_fit_score

    hb.report(0.05, "grid search")
    if data.spark_job is not None:
        fit_score = spark_fit_score(data.spark_job, spark_params(est, params), c.seed,
                                    data.train_rows, data.y_train, data.weight_feature,
                                    data.w_train)
    else:
        fit_score = local_fit_score(est, data.X_train, data.y_train, hb.should_stop,
                                    data.w_train)
    search_result = grid_search(
        data.y_train, c.search.grid, c.search.folds, c.seed, fit_score,
        progress=lambda f, m: hb.report(0.05 + 0.45 * f, m), should_stop=hb.should_stop)
    est.set_params(**search_result["best_params"])
    params.update(search_result["best_params"])
    return search_result


def _spark_auto(c: ClaimedJob, hb: Heartbeat, est: Any, params: dict[str, Any],
                data: _TrainData) -> dict[str, Any] | None:
    """A Spark job's "auto" parameters chosen here as a local job's fit chooses them
    (``worker.spark.spark_auto``); their values go into ``params``. None when there are none."""
    from worker.spark import spark_auto

    if data.spark_job is None or not spark_auto.has_auto(params):
        return None
    from app.services.filestore import storage

    hb.report(0.05, "auto search")
    return spark_auto.choose(est, storage.dataset_dir(c.dataset_id), data.train_rows,
                             data.y_train, params, weight_feature=data.weight_feature,
                             sample_weight=data.w_train,
                             progress=lambda f, m: hb.report(0.05 + 0.45 * f, m),
                             should_stop=hb.should_stop)


def spark_params(est: Any, params: dict[str, Any]) -> dict[str, Any]:
    """What a Spark fit is given: the job's parameters without the seed, with the request's
    ``class_weight`` (set on ``est``)."""
    out = {k: v for k, v in params.items() if k != "random_state"}
    if getattr(est, "class_weight", None) is not None:
        out["class_weight"] = est.class_weight
    return out


def _train(hb: Heartbeat, est: Any, params: dict[str, Any], seed: int, data: _TrainData,
           lo: float, spark_scope: contextlib.ExitStack,
           auto_info: dict[str, Any] | None = None) -> tuple[Any, float]:
    """Fit locally or on Spark (the Spark session ends with it), reporting progress in
    ``[lo, 0.9]``; the fitted estimator and the seconds it took. ``auto_info``: a Spark
    job's search record, kept in the model's ``fit_info`` with the fit's CPU seconds."""

    def progress(fraction: float, message: str, record: dict | None = None) -> None:
        hb.report(lo + (0.9 - lo) * float(fraction), message,
                  jsonable(record) if record else None)

    t0 = time.perf_counter()
    if data.spark_job is not None:
        from solver.core.cputime import CpuClock
        from worker.spark import spark_auto

        with CpuClock() as clock:  # this process tree's (the JVM of a local[N] master)
            est = data.spark_job.fit(spark_params(est, params), seed, rows=data.train_rows,
                                     progress=progress, weight_feature=data.weight_feature)
        spark_scope.close()  # the Spark session ends with the training
        spark_auto.record(est, auto_info, clock.seconds)
    else:
        est.fit(data.X_train, data.y_train, data.w_train, progress=progress,
                should_stop=hb.should_stop)
    return est, time.perf_counter() - t0


def _save(c: ClaimedJob, hb: Heartbeat, est: Any, params: dict[str, Any],
          metrics: dict[str, Any], margins: dict[str, Any], train_seconds: float) -> str:
    """Commit the model's row and bytes with the job's success and tell the API processes;
    a job cancelled meanwhile stores nothing."""
    from app.services.job_queue.algorithm_specs import portable

    model_id = model_id_for(c.job_id)
    stored = model_store.dump(portable(est))
    history = thin(jsonable(getattr(est, "history_", None) or hb.history()))
    fit_info = jsonable(dict(getattr(est, "fit_info_", None) or {}))
    # the model's parameters are the values it was fitted with ("auto" resolved)
    resolved = {k: v for k, v in (fit_info.get("params") or {}).items()
                if params.get(k) == "auto"}
    fields = {
        "id": model_id, "dataset_id": c.dataset_id, "name": c.model_name,
        "algorithm": c.algorithm, "backend": c.backend,
        "params": jsonable({**params, **resolved,
                            "random_state": est.get_params().get("random_state")}),
        "metrics": metrics, **margins, "fit_info": fit_info,
        "n_features": int(est.n_features_in_),
        "feature_names": _feature_names(c.dataset_id, int(est.n_features_in_),
                                        c.weight_column),
        "classes": jsonable(list(est.classes_)), "n_support_vectors": n_support_vectors(est),
        "train_seconds": float(train_seconds), "file_sha256": stored.sha256,
        "file_bytes": stored.size,
    }
    state = _commit_success(c, fields, history, stored)
    if state == JobState.SUCCEEDED:  # "name" now means this version in every API process
        from app.services.inference import invalidation

        invalidation.publish("model", model_id=model_id, tenant_id=c.tenant_id,
                             name=c.model_name)
    return state
