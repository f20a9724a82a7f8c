"""Training jobs: validation of ``POST /train``, idempotent creation, enqueue, cancel, list.

The database row is the truth; Celery is only the doorbell. A job is inserted QUEUED and
committed first, then ``worker.tasks.train_job`` is sent with ``task_id = job id``. If that
send is lost, the worker's reconciler (``worker.lifecycle.reaper``) re-sends QUEUED jobs whose
``enqueued_at`` (or ``created_at``) is older than ``SODM_REQUEUE_AFTER_SECONDS``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.logs import current_request_id
from app.core.orm import Dataset, Job, JobKind, JobState, Tenant, utcnow
from app.core.problems import ProblemError, scrub_detail
from app.schemas.jobs import TrainRequestBase
from app.services.cursors import as_utc, page, split_page
from app.services.data import dataset_catalog as datasets_service
from app.services.job_queue import algorithm_specs as algorithms
from app.services.job_queue import task_client
from app.services.job_queue.algorithm_specs import ParamError, build_estimator, estimator_class
from app.services.job_queue.autoparams import auto_conflict, auto_defaults
from app.services.tenancy import quotas
from solver.sodm.hierarchy import default_p

log = logging.getLogger(__name__)



def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The Cartesian product of a search grid, in a stable order."""
    keys = sorted(grid)
    return [dict(zip(keys, vals, strict=True))
            for vals in itertools.product(*(grid[k] for k in keys))]


def _check_search(body: TrainRequestBase) -> None:
    """Grid keys are parameters of the algorithm, every value valid for its key, the number
    of points and folds within this server's limits (``ParamError`` naming the field)."""
    settings = get_settings()
    search = body.search
    assert search is not None
    if search.folds > settings.limit_search_folds:
        raise ParamError("search.folds", f"{search.folds} folds is above this server's limit "
                         f"of {settings.limit_search_folds} (SODM_LIMIT_SEARCH_FOLDS)",
                         limit=settings.limit_search_folds, setting="SODM_LIMIT_SEARCH_FOLDS")
    n = 1
    for key, values in search.grid.items():
        if not values:
            raise ParamError(f"search.grid.{key}", "a grid needs at least one value")
        n *= len(values)
    if n > settings.limit_grid_points:
        raise ParamError("search.grid", f"{n} grid points is above this server's limit of "
                         f"{settings.limit_grid_points} (SODM_LIMIT_GRID_POINTS)",
                         limit=settings.limit_grid_points, setting="SODM_LIMIT_GRID_POINTS")
    given = body.param_values()
    for key, values in search.grid.items():
        for v in values:
            try:
                build_estimator(body.algorithm, {**given, key: v}, body.seed)
            except ParamError as exc:
                raise ParamError(f"search.grid.{key}", str(exc), limit=exc.limit,
                                 setting=exc.setting) from exc


def validate_request(body: TrainRequestBase) -> None:
    """Checks beyond the typed request: the estimator's own cross-parameter rules, the
    search grid, and the backend (422 problems naming the field)."""
    settings = get_settings()
    try:
        build_estimator(body.algorithm, body.param_values(), body.seed)
        conflict = auto_conflict(body.param_values(),
                                 grid=None if body.search is None else body.search.grid)
        if conflict is not None:
            raise ParamError(*conflict)
        if body.search is not None:
            _check_search(body)
    except ParamError as exc:
        if exc.limit is not None:
            raise ProblemError(422, "Parameter above this server's limit", detail=str(exc),
                               type="limit-exceeded",
                               errors=[exc.error()]) from exc
        raise ProblemError(422, "Invalid training parameters", detail=str(exc),
                           type="invalid-params", errors=[exc.error()]) from exc
    if body.test_dataset_id is not None and body.test_fraction is not None:
        raise ProblemError(422, "Invalid training request",
                           detail="give test_dataset_id or test_fraction, not both",
                           type="invalid-request",
                           errors=[{"field": "test_fraction", "message": "conflicts with "
                                    "test_dataset_id"}])
    if body.backend == "spark" and not (settings.spark_remote or settings.spark_master):
        raise ProblemError(422, "Spark backend not configured",
                           detail="set SODM_SPARK_REMOTE or SODM_SPARK_MASTER to train on Spark",
                           type="backend-unavailable",
                           errors=[{"field": "backend", "message": "spark is not configured"}])
    if body.backend == "spark" and body.algorithm != "sodm":
        raise ProblemError(422, "Invalid training request",
                           detail="the Spark backend trains algorithm sodm only",
                           type="invalid-request",
                           errors=[{"field": "algorithm", "value": body.algorithm,
                                    "message": "not with backend spark"}])


def request_hash(body: TrainRequestBase) -> str:
    """Fingerprint of the request body (Idempotency-Key reuse with another body -> 422)."""
    canon = json.dumps(body.stored(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


# ------------------------------------------------------------------------------ create
def _dataset(session: Session, tenant: Tenant, dataset_id: str, field: str) -> Dataset:
    ds = session.get(Dataset, dataset_id)
    if ds is None or ds.tenant_id != tenant.id or ds.deleted_at is not None:
        raise ProblemError(404, "Dataset not found", detail=f"no dataset {dataset_id!r}",
                           type="not-found", field=field)
    datasets_service.require_ready(ds, field)
    return ds


def _existing(session: Session, tenant: Tenant, key: str, digest: str) -> Job | None:
    job = session.scalars(select(Job).where(Job.tenant_id == tenant.id,
                                            Job.idempotency_key == key)).first()
    if job is not None and job.request_hash != digest:
        raise ProblemError(422, "Idempotency-Key reused with a different body",
                           detail="this Idempotency-Key was used for another request body",
                           type="idempotency-key-reused")
    return job


def create_job(session: Session, tenant: Tenant, body: TrainRequestBase,
               idempotency_key: str | None) -> tuple[Job, bool]:
    """Insert a QUEUED job (or find the idempotent twin); returns ``(job, created)``.

    The caller enqueues with ``enqueue(job.id)`` after this commits.
    """
    validate_request(body)
    digest = request_hash(body)
    key = idempotency_key.strip().strip('"') if idempotency_key else None
    if key is not None and not (0 < len(key) <= 255):
        raise ProblemError(400, "Invalid Idempotency-Key", detail="1 to 255 characters",
                           type="invalid-idempotency-key")
    if key is not None:
        job = _existing(session, tenant, key, digest)
        if job is not None:
            return job, False
    ds = _dataset(session, tenant, body.dataset_id, "dataset_id")
    if body.test_dataset_id is not None:
        test = _dataset(session, tenant, body.test_dataset_id, "test_dataset_id")
        if test.n_features > ds.n_features:
            raise ProblemError(422, "Incompatible test dataset",
                               detail=f"test dataset has {test.n_features} features, training "
                               f"dataset {ds.n_features}", type="invalid-request",
                               errors=[{"field": "test_dataset_id", "message": "too many "
                                        "features"}])
    params = body.param_values()
    check_partitions(params, training_rows(ds.n_rows, body))
    check_for_data(body, ds)
    # the tenant's row lock makes concurrent submissions count one another's jobs
    session.execute(select(Tenant.id).where(Tenant.id == tenant.id).with_for_update())
    quotas.check_active_jobs(session, tenant.id)
    quotas.check_storage(session, tenant.id)  # its model will be stored
    settings = get_settings()
    job = Job(
        tenant_id=tenant.id, dataset_id=ds.id, test_dataset_id=body.test_dataset_id,
        algorithm=body.algorithm, backend=body.backend, request=body.stored(),
        params=auto_defaults(estimator_class(body.algorithm), params,
                             searching=body.search is not None),
        model_name=body.name or default_model_name(ds.name, body.algorithm), state=JobState.QUEUED,
        progress_fraction=0.0, progress_message="queued", history=[], attempt=0,
        max_attempts=settings.job_max_attempts, idempotency_key=key, request_hash=digest,
        request_id=current_request_id(),
    )
    session.add(job)
    try:
        session.commit()
    except IntegrityError:
        # A concurrent request with the same key won the insert: answer with its job.
        session.rollback()
        if key is None:
            raise
        job = _existing(session, tenant, key, digest)
        if job is None:
            raise
        return job, False
    return job, True


def training_rows(n_rows: int, body: TrainRequestBase) -> int:
    """Rows the fit sees: the whole dataset with a test dataset, else the split's share."""
    if body.test_dataset_id is not None:
        return n_rows
    return n_rows - math.ceil((body.test_fraction or 0.2) * n_rows)


def check_for_data(body: TrainRequestBase, ds: Dataset) -> None:
    """Rules that need the dataset, before a job is queued (422 naming the field): the split
    leaves a training row per class (at least two), and the parameters, each point of a
    search grid included, keep a polynomial kernel in range on these features
    (``app.services.job_queue.algorithm_specs.check_for_data``)."""
    check_weights(body, ds)
    n_train, n_classes = training_rows(ds.n_rows, body), max(2, len(ds.classes or {}))
    if n_train < n_classes:
        msg = (f"test_fraction {body.test_fraction} leaves {n_train} of the dataset's "
               f"{ds.n_rows} rows for training; {n_classes} classes need at least {n_classes}")
        raise ProblemError(422, "Invalid training request", detail=msg, type="invalid-request",
                           errors=[{"field": "test_fraction", "message": msg}])
    given = body.param_values()
    points = [(None, given)] if body.search is None else [
        (sorted(point), {**given, **point}) for point in grid_points(body.search.grid)]
    for keys, params in points:
        try:
            algorithms.check_for_data(body.algorithm, params, ds.n_features)
        except ParamError as exc:
            field = exc.field
            if keys is not None and exc.field.removeprefix("params.") in keys:
                field = "search.grid." + exc.field.removeprefix("params.")
            raise ProblemError(422, "Invalid training parameters", detail=str(exc),
                               type="invalid-params",
                               errors=[{"field": field, "message": str(exc)}]) from exc


def _weights_problem(field: str, msg: str, value: Any = None) -> ProblemError:
    error: dict[str, Any] = {"field": field, "message": msg}
    if value is not None:
        error["value"] = value
    return ProblemError(422, "Invalid training request", detail=msg, type="invalid-request",
                        errors=[error])


def check_weights(body: TrainRequestBase, ds: Dataset) -> None:
    """``class_weight`` names labels of the dataset and ``weight_column`` a column of it (and
    of the test dataset) whose values are finite, >= 0 and not all 0: 422 naming the label,
    the column or the bad value."""
    from app.services.filestore import storage

    if isinstance(body.class_weight, dict):
        labels = sorted(ds.classes or {})
        for label in body.class_weight:
            if label not in labels:
                raise _weights_problem(
                    "class_weight", f"class_weight names label {label!r}, which dataset "
                    f"{ds.id} does not have (its labels: {', '.join(map(repr, labels))})",
                    label)
    column = body.weight_column
    if column is None:
        return
    for field, dataset_id in (("weight_column", ds.id), ("test_dataset_id",
                                                         body.test_dataset_id)):
        if dataset_id is None:
            continue
        with storage.storage_errors():
            j = storage.feature_index(storage.dataset_dir(dataset_id), column)
            if j is None:
                raise _weights_problem(field, f"dataset {dataset_id} has no column named "
                                       f"{column!r} (weight_column needs a CSV or Parquet "
                                       "dataset with that column)", column)
            w = storage.load_feature(storage.dataset_dir(dataset_id), j)
        bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
        if bad.size:
            raise _weights_problem(field, f"column {column!r} of dataset {dataset_id} has "
                                   f"the weight {float(w[bad[0]])!r} in row {int(bad[0])}; weights "
                                   "must be finite and >= 0", column)
        if field == "weight_column" and not np.any(w > 0):
            raise _weights_problem(field, f"every weight in column {column!r} is zero",
                                   column)


def check_partitions(params: dict[str, Any], n_train: int) -> None:
    """More partitions than training rows is refused (422 naming the parameter): ``p`` at
    the first level, ``p ** levels`` at the finest, or ``n_partitions``."""
    p, levels, k = params.get("p"), params.get("levels"), params.get("n_partitions")
    checks: list[tuple[str, int]] = []
    if isinstance(p, int) and not isinstance(p, bool):
        checks.append(("p", p))
    if isinstance(levels, int) and not isinstance(levels, bool) and levels >= 1:
        if isinstance(p, int) and not isinstance(p, bool) and p >= 2:
            p_used = p
        else:  # the estimator's default p, from the kernel budget
            cache = params.get("cache_size")
            ok = isinstance(cache, int | float) and not isinstance(cache, bool) \
                and math.isfinite(cache) and cache > 0
            cache = float(cache) if ok else 512.0
            p_used = default_p(n_train, cache)
        checks.append(("levels", p_used ** min(levels, 64)))
    if isinstance(k, int) and not isinstance(k, bool):
        checks.append(("n_partitions", k))
    for name, partitions in checks:
        if partitions > n_train:
            msg = (f"{partitions} partitions for {n_train} training rows; every partition "
                   "needs at least one row")
            raise ProblemError(422, "Invalid training parameters", detail=msg,
                               type="invalid-params",
                               errors=[{"field": f"params.{name}", "message": msg}])


def default_model_name(dataset_name: str, algorithm: str) -> str:
    """``<dataset stem>-<algorithm>`` restricted to the characters model names allow."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", dataset_name.rsplit("/", 1)[-1]).strip("-._")
    stem = stem[:150] or "model"
    return f"{stem}-{algorithm}"


def enqueue(job_id: str) -> bool:
    """Send the Celery doorbell; a failure is logged and left to the reconciler."""
    try:
        task_client.send_train(job_id)
    except Exception as exc:  # noqa: BLE001 - the reconciler re-sends QUEUED jobs
        log.warning("enqueue of job %s failed (%s); the reconciler will retry", job_id,
                    type(exc).__name__)
        return False
    try:
        with session_scope() as s:
            s.execute(update(Job).where(Job.id == job_id, Job.state == JobState.QUEUED)
                      .values(enqueued_at=utcnow()))
    except Exception:  # noqa: BLE001 - only delays a duplicate re-send
        log.warning("could not record enqueued_at of job %s", job_id)
    return True


# ------------------------------------------------------------------------ read / cancel
def get_job(session: Session, tenant: Tenant, job_id: str) -> Job:
    job = session.get(Job, job_id)
    if job is None or job.tenant_id != tenant.id:
        raise ProblemError(404, "Job not found", detail=f"no job {job_id!r}",
                           type="not-found")
    return job


def list_jobs(session: Session, tenant: Tenant, state: str | None, cursor: str | None,
              limit: int, *, dataset_id: str | None = None,
              name: str | None = None) -> tuple[list[Job], str | None]:
    stmt = select(Job).where(Job.tenant_id == tenant.id, Job.kind == JobKind.TRAIN)
    if state:
        stmt = stmt.where(Job.state == state)
    if dataset_id:
        stmt = stmt.where(Job.dataset_id == dataset_id)
    if name:
        stmt = stmt.where(Job.model_name == name)
    rows = list(session.scalars(page(stmt, Job, cursor, limit)))
    return split_page(rows, limit)


@dataclass(frozen=True)
class CancelResult:
    """A cancel that took: ``stopping`` when the job was running (the worker stops it, so it
    is CANCELLING, or already CANCELLED if the worker was quick), else it was queued and is
    CANCELLED now."""

    job: Job
    stopping: bool


def cancel_job(session: Session, tenant: Tenant, job_id: str) -> CancelResult:
    """QUEUED -> CANCELLED now (+ revoke); RUNNING -> CANCELLING (the worker stops the fit);
    CANCELLING -> unchanged; a terminal job (SUCCEEDED, FAILED, CANCELLED) -> 409. The
    outcome comes from the UPDATE that matched, not from re-reading the row: a worker that
    stops between the commit and the read has already made it CANCELLED."""
    job = get_job(session, tenant, job_id)
    now = utcnow()
    res = session.execute(
        update(Job).where(Job.id == job_id, Job.state == JobState.QUEUED)
        .values(state=JobState.CANCELLED, finished_at=now, progress_message="cancelled")
        .returning(Job.id))
    if res.first() is not None:
        session.commit()
        _revoke(job_id)
        session.refresh(job)
        return CancelResult(job, stopping=False)
    # no RETURNING here: an unread cursor would block the commit on SQLite
    running = session.execute(
        update(Job).where(Job.id == job_id, Job.state == JobState.RUNNING)
        .values(state=JobState.CANCELLING, progress_message="cancelling"))
    stopped_now = running.rowcount == 1
    session.commit()
    session.refresh(job)
    if stopped_now or job.state == JobState.CANCELLING:
        return CancelResult(job, stopping=True)
    raise ProblemError(409, "Job already finished", detail=f"job is {job.state}",
                       type="job-finished", state=job.state)


def _revoke(job_id: str) -> None:
    """Best effort: the claim would refuse a CANCELLED job anyway."""
    try:
        task_client.revoke(job_id)
    except Exception:  # noqa: BLE001 - e.g. a broker transport without broadcast
        log.info("revoke of %s not delivered (the claim refuses it anyway)", job_id)


def clean_error(error: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored job problem with its detail scrubbed (rows written before the worker
    scrubbed details may hold a traceback or paths)."""
    if not error or not isinstance(error.get("detail"), str):
        return error
    return {**error, "detail": scrub_detail(error["detail"])}


def job_out(job: Job) -> dict[str, Any]:
    """The API representation of a job."""
    base = f"/jobs/{job.id}"
    return {
        "kind": "train",
        "id": job.id,
        "state": job.state,
        "dataset_id": job.dataset_id,
        "test_dataset_id": job.test_dataset_id,
        "algorithm": job.algorithm,
        "backend": job.backend,
        "params": job.params or {},
        "request": job.request or {},
        "name": job.model_name,
        "progress": {"fraction": float(job.progress_fraction or 0.0),
                     "message": job.progress_message or "", "spark": job.spark_progress},
        "history": job.history or [],
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "model_id": job.model_id,
        "error": clean_error(job.error),
        "created_at": as_utc(job.created_at),
        "started_at": as_utc(job.started_at),
        "finished_at": as_utc(job.finished_at),
        "updated_at": as_utc(job.updated_at),
        "request_id": job.request_id,
        "links": {"self": base, "cancel": f"{base}/cancel", "events": f"{base}/events",
                  **({"model": f"/models/{job.model_id}"} if job.model_id else {})},
    }


def is_terminal(state: str) -> bool:
    return JobState(state).terminal
