"""Route: ``POST /train`` (202 + Location; Idempotency-Key replays the same job)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Header, Response
from sqlalchemy.orm import Session

from app.api.auth import current_tenant
from app.core.db import get_session
from app.core.orm import Tenant
from app.schemas.jobs import TRAIN_EXAMPLES, JobOut, TrainRequest
from app.services.job_queue import training_jobs as jobs_service

router = APIRouter(tags=["jobs"])


@router.post("/train", status_code=202, response_model=JobOut)
def train(body: Annotated[TrainRequest, Body(openapi_examples=TRAIN_EXAMPLES)],
          response: Response,
          idempotency_key: str | None = Header(default=None, alias="Idempotency-Key"),
          tenant: Tenant = Depends(current_tenant),
          session: Session = Depends(get_session)) -> dict:
    """Queue a training job; poll ``Location`` or stream ``/jobs/{id}/events``."""
    job, created = jobs_service.create_job(session, tenant, body.root, idempotency_key)
    if created:
        jobs_service.enqueue(job.id)
        session.refresh(job)
    response.headers["Location"] = f"/jobs/{job.id}"
    response.headers["Retry-After"] = "2"
    return jobs_service.job_out(job)
