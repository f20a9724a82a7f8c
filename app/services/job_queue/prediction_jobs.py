"""Batch prediction jobs: ``POST /predictions`` runs a model over a stored dataset.

They are rows of the jobs table with ``kind = "predict"`` (the model in ``model_id``), so
the training jobs' engine runs them: the same doorbell task, claim, lease, heartbeat,
progress, cancel and reaper (``worker.runner`` dispatches on the kind). The output is
``predictions/{job id}.parquet``; ``GET /predictions/{id}/result`` serves it as Parquet, or
as CSV converted batch by batch.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.orm import Dataset, Job, JobKind, JobState, Model, Tenant
from app.core.problems import ProblemError
from app.schemas.predictions import PredictionRequest
from app.services.cursors import as_utc, page, split_page
from app.services.data import dataset_catalog as datasets_service
from app.services.filestore import storage
from app.services.filestore.object_store import Location
from app.services.job_queue import training_jobs as jobs_service
from app.services.model_registry import model_versions as models_service
from app.services.tenancy import quotas

# the job's progress fraction while batches run: START + SPAN * rows done / rows in all
# (loading the model comes before START); ``rows_done`` reads the count back from it
PROGRESS_START, PROGRESS_SPAN = 0.02, 0.97


def batch_fraction(done: int, total: int) -> float:
    """The progress fraction the worker reports after ``done`` of ``total`` rows."""
    return PROGRESS_START + PROGRESS_SPAN * done / max(1, total)


def rows_done(job: Job) -> int | None:
    """Rows predicted so far, from the progress fraction (exact: ``batch_fraction``'s
    inverse, rounded); all of them once SUCCEEDED; None without a recorded total."""
    total = (job.request or {}).get("rows_total")
    if job.state == JobState.SUCCEEDED:
        record = (job.history or [{}])[-1]
        return int(record.get("rows", total or 0))
    if total is None:
        return None
    f = float(job.progress_fraction or 0.0)
    if f < PROGRESS_START:
        return 0
    return int(min(total, max(0, round((f - PROGRESS_START) / PROGRESS_SPAN * total))))


def _invalid(field: str, detail: str, **extra: Any) -> ProblemError:
    return ProblemError(422, "Invalid prediction request", detail=detail,
                        type="invalid-request",
                        errors=[{"field": field, "message": detail}], **extra)


def check_columns(m: Model, meta: dict[str, Any]) -> None:
    """The dataset must give the model every feature: by name when both have names, else by
    position (a narrower dataset is padded with zeros, a wider one refused)."""
    names = meta.get("feature_names")
    if m.feature_names and names:
        missing = [n for n in m.feature_names if n not in set(names)]
        if missing:
            raise _invalid("dataset_id", f"the dataset has no column(s) {missing[:20]} that "
                           "the model needs", missing=missing[:100])
    elif int(meta["n_features"]) > int(m.n_features):
        raise _invalid("dataset_id", f"the dataset has {meta['n_features']} features, the "
                       f"model {m.n_features}")


def create(session: Session, tenant: Tenant, body: PredictionRequest) -> Job:
    """Insert a QUEUED prediction job (the caller enqueues it after this commits)."""
    m = models_service.resolve(session, tenant, body.model_id, body.model)
    ds = session.get(Dataset, body.dataset_id)
    if ds is None or ds.tenant_id != tenant.id or ds.deleted_at is not None:
        raise ProblemError(404, "Dataset not found", detail=f"no dataset {body.dataset_id!r}",
                           type="not-found", field="dataset_id")
    datasets_service.require_ready(ds)
    check_columns(m, storage.read_meta(storage.dataset_dir(ds.id)))
    job = Job(tenant_id=tenant.id, kind=JobKind.PREDICT, dataset_id=ds.id, model_id=m.id,
              algorithm=m.algorithm, backend="local", params={},
              request={**body.model_dump(mode="json"), "model_id": m.id,
                       "version": int(m.version), "rows_total": int(ds.n_rows)},
              model_name=m.name, state=JobState.QUEUED, progress_fraction=0.0,
              progress_message="queued", history=[], attempt=0,
              max_attempts=get_settings().job_max_attempts)
    session.execute(select(Tenant.id).where(Tenant.id == tenant.id).with_for_update())
    quotas.check_active_jobs(session, tenant.id)
    session.add(job)
    session.commit()
    return job


def get(session: Session, tenant: Tenant, job_id: str) -> Job:
    job = session.get(Job, job_id)
    if job is None or job.tenant_id != tenant.id or job.kind != JobKind.PREDICT:
        raise ProblemError(404, "Prediction job not found", detail=f"no prediction job "
                           f"{job_id!r}", type="not-found")
    return job


def list_page(session: Session, tenant: Tenant, state: str | None, cursor: str | None,
              limit: int) -> tuple[list[Job], str | None]:
    stmt = select(Job).where(Job.tenant_id == tenant.id, Job.kind == JobKind.PREDICT)
    if state:
        stmt = stmt.where(Job.state == state)
    return split_page(list(session.scalars(page(stmt, Job, cursor, limit))), limit)


def cancel(session: Session, tenant: Tenant, job_id: str) -> jobs_service.CancelResult:
    get(session, tenant, job_id)
    return jobs_service.cancel_job(session, tenant, job_id)


RESULT_KEYS = ("rows", "seconds", "bytes", "rows_out_of_range", "out_of_range_row_ids")


def out(job: Job) -> dict[str, Any]:
    base = f"/predictions/{job.id}"
    done = job.state == JobState.SUCCEEDED
    record = (job.history or [{}])[-1] if done else {}
    links = {"self": base, "cancel": f"{base}/cancel", "events": f"{base}/events",
             "model": f"/models/{job.model_id}", "dataset": f"/datasets/{job.dataset_id}"}
    if done:
        links.update(parquet=f"{base}/result?format=parquet", csv=f"{base}/result?format=csv")
    return {
        "kind": "predict", "id": job.id, "state": job.state, "model_id": job.model_id,
        "model_name": job.model_name, "version": (job.request or {}).get("version"),
        "dataset_id": job.dataset_id,
        "progress": {"fraction": 1.0 if done else float(job.progress_fraction or 0.0),
                     "message": job.progress_message or ""},
        "rows_total": (job.request or {}).get("rows_total"), "rows_done": rows_done(job),
        "result": {"rows_out_of_range": 0, "out_of_range_row_ids": [],  # older records
                   **{k: v for k, v in record.items() if k in RESULT_KEYS}} if done else None,
        "error": job.error, "attempt": job.attempt, "created_at": as_utc(job.created_at),
        "started_at": as_utc(job.started_at), "finished_at": as_utc(job.finished_at),
        "links": links,
    }


def result_file(job: Job) -> Location:
    """The Parquet output of a SUCCEEDED job (409 before that, 404 when it is gone)."""
    if job.state != JobState.SUCCEEDED:
        raise ProblemError(409, "No result yet", detail=f"the job is {job.state}",
                           type="job-not-finished", state=job.state)
    where = storage.prediction_path(job.id)
    if not where.exists():
        raise ProblemError(404, "Result missing", detail=f"job {job.id} has no result file",
                           type="not-found")
    return where


def csv_chunks(where: Location) -> Iterator[bytes]:
    """The Parquet result as CSV, one record batch at a time (bounded memory)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(where.open_input())
    first = True
    for batch in pf.iter_batches(batch_size=65_536):
        buf = io.BytesIO()
        pacsv.write_csv(pa.Table.from_batches([batch]), buf,
                        pacsv.WriteOptions(include_header=first))
        first = False
        yield buf.getvalue()
    if first:  # no rows: the header alone
        buf = io.BytesIO()
        pacsv.write_csv(pf.schema_arrow.empty_table(), buf)
        yield buf.getvalue()
