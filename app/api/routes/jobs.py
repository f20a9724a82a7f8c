"""Routes: ``/jobs`` list, detail, cancel and the server-sent-events progress stream."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from app.api.auth import bearer_key, current_tenant, key_still_valid
from app.core.db import get_read_sessionmaker, get_session
from app.core.orm import Job, JobKind, JobState, Tenant
from app.core.problems import ProblemError
from app.schemas.common import ID_PATTERN, IdPath
from app.schemas.jobs import JobList
from app.schemas.predictions import AnyJobOut
from app.services.job_queue import prediction_jobs as predictions
from app.services.job_queue import training_jobs as jobs_service
from app.services.job_queue.worker_status import annotate_waiting
from app.services.tenancy import quotas

router = APIRouter(tags=["jobs"])

SSE_POLL_SECONDS = 0.5
SSE_KEEPALIVE_SECONDS = 15.0
SSE_KEY_CHECK_SECONDS = 1.0


@router.get("/jobs", response_model=JobList)
def list_jobs(state: JobState | None = None,
              dataset_id: str | None = Query(default=None, pattern=ID_PATTERN,
                                             description="jobs training on this dataset"),
              name: str | None = Query(default=None, max_length=200,
                                       pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                                       description="jobs producing this model name"),
              cursor: str | None = None, limit: int = Query(default=50, ge=1, le=500),
              tenant: Tenant = Depends(current_tenant),
              session: Session = Depends(get_session)) -> dict:
    """The tenant's jobs, newest first, optionally by state, dataset and model name."""
    rows, next_cursor = jobs_service.list_jobs(session, tenant, state, cursor, limit,
                                               dataset_id=dataset_id, name=name)
    items = annotate_waiting(session, [jobs_service.job_out(j) for j in rows])
    return {"items": items, "next_cursor": next_cursor}


def _out(job: Job) -> dict:
    """A job in its own shape: a training job's, or a batch prediction job's (``kind``)."""
    if job.kind == JobKind.PREDICT:
        return predictions.out(job)
    return jobs_service.job_out(job)


@router.get("/jobs/{job_id}", response_model=AnyJobOut)
def get_job(job_id: IdPath, tenant: Tenant = Depends(current_tenant),
            session: Session = Depends(get_session)) -> dict:
    """A training job, or a batch prediction job in the shape of ``/predictions/{id}``
    (told apart by ``kind``)."""
    job = _out(jobs_service.get_job(session, tenant, job_id))
    return job if job["kind"] == JobKind.PREDICT else annotate_waiting(session, [job])[0]


@router.post("/jobs/{job_id}/cancel", response_model=AnyJobOut)
def cancel_job(job_id: IdPath, response: Response, tenant: Tenant = Depends(current_tenant),
               session: Session = Depends(get_session)) -> dict:
    """200 with CANCELLED for a queued job, 202 for a running one (CANCELLING: the worker
    stops the fit, then CANCELLED; or CANCELLED already), 409 problem for a finished job."""
    res = jobs_service.cancel_job(session, tenant, job_id)
    response.status_code = 202 if res.stopping else 200
    return _out(res.job)


def _sse(event: str, data: dict, event_id: int) -> str:
    return f"id: {event_id}\nevent: {event}\ndata: {json.dumps(data, default=str)}\n\n"


def _read_job(job_id: str) -> dict | None:
    with get_read_sessionmaker()() as s:
        job = s.get(Job, job_id)
        return None if job is None else jobs_service.job_out(job)


async def event_stream(job_id: str, key_valid: Callable[[], Awaitable[bool]] | None = None,
                       slot: quotas.StreamSlot | None = None,
                       gone: Callable[[], Awaitable[bool]] | None = None) -> AsyncIterator[str]:
    """Poll the job row; emit ``state`` and ``progress`` events until a terminal state.

    Async on purpose: between polls a stream waits on the event loop, and each poll takes a
    worker thread only for its query, so open streams never hold the threads that sync
    routes need (docs/reliability.md measures what a sleeping sync generator cost).
    ``key_valid`` is asked every ``SSE_KEY_CHECK_SECONDS``: a revoked key ends the stream
    with an ``error`` event; ``slot`` (the tenant's stream quota) is renewed while open and
    released at the end, also when ``gone`` says the client left (with ASGI 2.4 servers
    Starlette notices that only at the next write, up to a keep-alive period later)."""
    try:
        async for chunk in _events(job_id, key_valid, slot, gone):
            yield chunk
    finally:
        if slot is not None:  # also when the client went away and the stream is cancelled
            with anyio.CancelScope(shield=True):
                await run_in_threadpool(slot.release)


async def _events(job_id: str, key_valid: Callable[[], Awaitable[bool]] | None,
                  slot: quotas.StreamSlot | None,
                  gone: Callable[[], Awaitable[bool]] | None) -> AsyncIterator[str]:
    last_state: str | None = None
    last_progress: tuple | None = None
    last_sent = last_check = last_renew = time.monotonic()
    n = 0
    while True:
        if gone is not None and await gone():
            return
        if time.monotonic() - last_check > SSE_KEY_CHECK_SECONDS:
            last_check = time.monotonic()
            if key_valid is not None and not await key_valid():
                yield _sse("error", ProblemError(
                    401, "Unauthorized", detail="the API key was revoked",
                    type="unauthorized").body(), n + 1)
                return
        if slot is not None and time.monotonic() - last_renew > quotas.STREAM_TTL_SECONDS / 4:
            last_renew = time.monotonic()
            await run_in_threadpool(slot.renew)
        out = await run_in_threadpool(_read_job, job_id)
        if out is None:
            return
        spark = out["progress"].get("spark")
        progress = (out["progress"]["fraction"], out["progress"]["message"],
                    None if spark is None else tuple(sorted(spark.items())))
        if out["state"] != last_state:
            n += 1
            last_state = out["state"]
            yield _sse("state", {"state": last_state, "attempt": out["attempt"],
                                 "model_id": out["model_id"], "error": out["error"]}, n)
            last_sent = time.monotonic()
        if progress != last_progress:
            n += 1
            last_progress = progress
            yield _sse("progress", {"fraction": progress[0], "message": progress[1],
                                    "spark": spark, "state": last_state}, n)
            last_sent = time.monotonic()
        if jobs_service.is_terminal(last_state):
            return
        if time.monotonic() - last_sent > SSE_KEEPALIVE_SECONDS:
            yield ": keep-alive\n\n"
            last_sent = time.monotonic()
        await asyncio.sleep(SSE_POLL_SECONDS)


@router.get("/jobs/{job_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
def job_events(job_id: IdPath, request: Request, tenant: Tenant = Depends(current_tenant),
               session: Session = Depends(get_session)) -> StreamingResponse:
    """Server-sent events: ``state`` and ``progress`` (JSON data); ends at a terminal state,
    or with an ``error`` event when the key is revoked. 429 past the tenant's quota of open
    streams (``SODM_QUOTA_EVENT_STREAMS``)."""
    jobs_service.get_job(session, tenant, job_id)  # 404 for unknown / other tenant's jobs
    return events_response(job_id, request, tenant)


def events_response(job_id: str, request: Request, tenant: Tenant) -> StreamingResponse:
    """The event stream of a job the tenant owns, counted against its stream quota and
    ended when the request's key is revoked."""
    slot = quotas.open_stream(tenant.id)
    key = bearer_key(request)
    return StreamingResponse(event_stream(job_id, lambda: key_still_valid(key), slot,
                                          request.is_disconnected),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
