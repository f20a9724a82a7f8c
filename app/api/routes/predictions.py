"""Routes: batch prediction jobs ``/predictions`` (create, list, detail, cancel, progress
events, result download as Parquet or CSV)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from app.api.auth import current_tenant
from app.api.downloads import download
from app.api.routes.jobs import events_response
from app.core.db import get_session
from app.core.orm import JobState, Tenant
from app.schemas.common import IdPath
from app.schemas.predictions import PredictionJobList, PredictionJobOut, PredictionRequest
from app.services.job_queue import prediction_jobs as predictions
from app.services.job_queue import training_jobs as jobs_service

router = APIRouter(tags=["predictions"])


@router.post("/predictions", status_code=202, response_model=PredictionJobOut)
def create_prediction(body: PredictionRequest, response: Response,
                      tenant: Tenant = Depends(current_tenant),
                      session: Session = Depends(get_session)) -> dict:
    """Queue a batch prediction of a model over a stored dataset (any size: streamed);
    poll ``Location`` or stream its ``events``, then download the result."""
    job = predictions.create(session, tenant, body)
    jobs_service.enqueue(job.id)
    session.refresh(job)
    response.headers["Location"] = f"/predictions/{job.id}"
    response.headers["Retry-After"] = "2"
    return predictions.out(job)


@router.get("/predictions", response_model=PredictionJobList)
def list_predictions(state: JobState | None = None, cursor: str | None = None,
                     limit: int = Query(default=50, ge=1, le=500),
                     tenant: Tenant = Depends(current_tenant),
                     session: Session = Depends(get_session)) -> dict:
    rows, next_cursor = predictions.list_page(session, tenant, state, cursor, limit)
    return {"items": [predictions.out(j) for j in rows], "next_cursor": next_cursor}


@router.get("/predictions/{job_id}", response_model=PredictionJobOut)
def get_prediction(job_id: IdPath, tenant: Tenant = Depends(current_tenant),
                   session: Session = Depends(get_session)) -> dict:
    return predictions.out(predictions.get(session, tenant, job_id))


@router.post("/predictions/{job_id}/cancel", response_model=PredictionJobOut)
def cancel_prediction(job_id: IdPath, response: Response,
                      tenant: Tenant = Depends(current_tenant),
                      session: Session = Depends(get_session)) -> dict:
    """200 CANCELLED for a queued job, 202 for a running one (CANCELLING: the worker stops
    between batches; or CANCELLED already), 409 for a finished one."""
    res = predictions.cancel(session, tenant, job_id)
    response.status_code = 202 if res.stopping else 200
    return predictions.out(res.job)


@router.get("/predictions/{job_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
def prediction_events(job_id: IdPath, request: Request,
                      tenant: Tenant = Depends(current_tenant),
                      session: Session = Depends(get_session)) -> StreamingResponse:
    """Server-sent events ``state`` and ``progress``, as for training jobs."""
    predictions.get(session, tenant, job_id)
    return events_response(job_id, request, tenant)


@router.get("/predictions/{job_id}/result",
            responses={200: {"content": {"application/vnd.apache.parquet": {},
                                         "text/csv": {}},
                             "description": "row_id, true_label, predicted_label and "
                             "decision_value (or one decision_<class> per class)"}})
def prediction_result(job_id: IdPath,
                      format: Literal["parquet", "csv"] = "parquet",  # noqa: A002
                      tenant: Tenant = Depends(current_tenant),
                      session: Session = Depends(get_session)) -> Response:
    """The predictions of a SUCCEEDED job (409 before), as Parquet or streamed CSV."""
    job = predictions.get(session, tenant, job_id)
    where = predictions.result_file(job)
    stem = f"predictions-{job.model_name or 'model'}-{job.id[:8]}"
    if format == "csv":
        return StreamingResponse(predictions.csv_chunks(where), media_type="text/csv",
                                 headers={"Content-Disposition":
                                          f'attachment; filename="{stem}.csv"'})
    return download(where, media_type="application/vnd.apache.parquet",
                    filename=f"{stem}.parquet")
