"""Webhook endpoints and their events: registration, the delivery outbox rows, signing.

Postgres is the truth: an event becomes one ``webhook_deliveries`` row per subscribed
endpoint, written in the transaction that makes the event true (an alias move) or, for a
job's end, by ``announce_jobs`` in the worker's main process, which turns every terminal
job not announced yet into rows and marks it announced in one transaction (so no write site
of a job's terminal state needs to know about webhooks, and none is missed). Nothing here
sends: ``app.services.notifications.webhook_delivery`` does, from the worker (``worker.webhooks``),
so a slow or dead endpoint never blocks a request or a training job.

Deliveries follow Standard Webhooks: the body ``{"type", "timestamp", "data"}``, headers
``webhook-id`` (the delivery id: a receiver dedupes retries by it), ``webhook-timestamp``
(Unix seconds of the attempt) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of
"id.timestamp.body">`` with the endpoint's secret, ``standardwebhooks.Webhook.sign``).
"""

from __future__ import annotations

import base64
import json
import secrets
import uuid
from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session
from standardwebhooks import Webhook as Signer

from app.core.config import get_settings
from app.core.orm import (
    TERMINAL_STATES,
    DeliveryStatus,
    Job,
    JobState,
    Tenant,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    utcnow,
)
from app.core.problems import ProblemError
from app.services.cursors import as_utc, page, split_page
from app.services.notifications import webhook_targets

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
ANNOUNCE_BATCH = 200
JOB_EVENTS = {JobState.SUCCEEDED: WebhookEvent.JOB_SUCCEEDED,
              JobState.FAILED: WebhookEvent.JOB_FAILED,
              JobState.CANCELLED: WebhookEvent.JOB_CANCELLED}


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def check_secret(secret: str) -> str:
    """A tenant's own secret: ``whsec_`` + base64 of 24 to 64 bytes (422 otherwise)."""
    raw = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(raw, validate=True)
    except ValueError:
        key = b""
    if not 24 <= len(key) <= 64:
        raise ProblemError(422, "Invalid webhook secret",
                           detail="the secret must be 'whsec_' followed by the base64 of 24 to "
                                  "64 random bytes (leave it out to get a generated one)",
                           type="invalid-webhook-secret", field="secret")
    return SECRET_PREFIX + raw


def check_url(url: str) -> None:
    """422 naming the reason when the URL may not be an endpoint (``webhook_targets``)."""
    try:
        webhook_targets.check(url, allow_private=get_settings().webhook_allow_private)
    except webhook_targets.TargetRefused as exc:
        raise ProblemError(422, "Webhook URL refused", detail=exc.reason,
                           type="webhook-url-refused", field="url", value=url[:200]) from None


def create(session: Session, tenant: Tenant, *, url: str, events: list[WebhookEvent],
           secret: str | None, description: str) -> Webhook:
    """Register an endpoint (its URL checked now and before every delivery)."""
    check_url(url)
    limit = get_settings().webhooks_per_tenant
    have = session.scalar(select(func.count()).select_from(Webhook)
                          .where(Webhook.tenant_id == tenant.id)) or 0
    if have >= limit:
        raise ProblemError(409, "Too many webhooks",
                           detail=f"this tenant has {have} webhooks, the most allowed "
                                  "(SODM_WEBHOOKS_PER_TENANT); delete one first",
                           type="webhook-limit", limit=limit)
    hook = Webhook(tenant_id=tenant.id, url=url, events=sorted({str(e) for e in events}),
                   secret=check_secret(secret) if secret else new_secret(),
                   description=description)
    session.add(hook)
    session.commit()
    return hook


def get(session: Session, tenant: Tenant, webhook_id: str) -> Webhook:
    hook = session.get(Webhook, webhook_id)
    if hook is None or hook.tenant_id != tenant.id:
        raise ProblemError(404, "Webhook not found", detail=f"no webhook {webhook_id!r}",
                           type="not-found")
    return hook


def list_webhooks(session: Session, tenant: Tenant, cursor: str | None,
                  limit: int) -> tuple[list[Webhook], str | None]:
    stmt = select(Webhook).where(Webhook.tenant_id == tenant.id)
    return split_page(list(session.scalars(page(stmt, Webhook, cursor, limit))), limit)


def delete_webhook(session: Session, tenant: Tenant, webhook_id: str) -> None:
    """Remove the endpoint and its deliveries (pending ones are never sent)."""
    hook = get(session, tenant, webhook_id)
    session.execute(delete(WebhookDelivery).where(WebhookDelivery.webhook_id == hook.id))
    session.delete(hook)
    session.commit()


def list_deliveries(session: Session, hook: Webhook, cursor: str | None, limit: int,
                    status: DeliveryStatus | None = None
                    ) -> tuple[list[WebhookDelivery], str | None]:
    stmt = select(WebhookDelivery).where(WebhookDelivery.webhook_id == hook.id)
    if status is not None:
        stmt = stmt.where(WebhookDelivery.status == status)
    return split_page(list(session.scalars(page(stmt, WebhookDelivery, cursor, limit))),
                      limit)


def webhook_out(hook: Webhook, *, secret: bool = False) -> dict[str, Any]:
    """An endpoint; the secret only in the answer that created it."""
    out: dict[str, Any] = {
        "id": hook.id, "url": hook.url, "events": list(hook.events or []),
        "description": hook.description or "", "created_at": as_utc(hook.created_at),
        "links": {"self": f"/webhooks/{hook.id}",
                  "deliveries": f"/webhooks/{hook.id}/deliveries"}}
    if secret:
        out["secret"] = hook.secret
    return out


def delivery_out(d: WebhookDelivery) -> dict[str, Any]:
    return {"id": d.id, "webhook_id": d.webhook_id, "event": d.event, "status": d.status,
            "attempts": int(d.attempts or 0), "payload": d.payload,
            "next_attempt_at": (as_utc(d.next_attempt_at)
                                if d.status == DeliveryStatus.PENDING else None),
            "last_attempt_at": as_utc(d.last_attempt_at),
            "last_status_code": d.last_status_code, "last_error": d.last_error,
            "created_at": as_utc(d.created_at), "delivered_at": as_utc(d.delivered_at)}


# ----------------------------------------------------------------------------- events
def payload(event: WebhookEvent, data: dict[str, Any], at: datetime) -> dict[str, Any]:
    """The Standard Webhooks body of an event."""
    return {"type": str(event), "timestamp": as_utc(at).isoformat().replace("+00:00", "Z"),
            "data": data}


def emit(session: Session, tenant_id: str, event: WebhookEvent, data: dict[str, Any]) -> int:
    """One pending delivery per endpoint of the tenant subscribed to ``event``, added to the
    caller's transaction (it commits); the number added."""
    hooks = session.scalars(select(Webhook).where(Webhook.tenant_id == tenant_id)).all()
    return _add_deliveries(session, [h for h in hooks if str(event) in (h.events or [])],
                           event, data)


def _add_deliveries(session: Session, hooks: list[Webhook], event: WebhookEvent,
                    data: dict[str, Any]) -> int:
    now = utcnow()
    body = payload(event, data, now)
    for hook in hooks:
        session.add(WebhookDelivery(id=f"msg_{uuid.uuid4().hex}", webhook_id=hook.id,
                                    event=str(event), payload=body,
                                    status=DeliveryStatus.PENDING, attempts=0,
                                    next_attempt_at=now, created_at=now))
    return len(hooks)


def job_event_data(job: Job) -> dict[str, Any]:
    """What a ``job.*`` event says about the job that ended."""
    links = {"job": f"/jobs/{job.id}"}
    if job.model_id and job.state == JobState.SUCCEEDED and job.kind == "train":
        links["model"] = f"/models/{job.model_id}"
    return {"job_id": job.id, "kind": job.kind, "state": job.state,
            "dataset_id": job.dataset_id, "model_name": job.model_name,
            "model_id": job.model_id, "error": job.error,
            "finished_at": (as_utc(job.finished_at).isoformat()
                            if job.finished_at is not None else None),
            "links": links}


def announce_jobs(session: Session, limit: int = ANNOUNCE_BATCH) -> int:
    """Turn up to ``limit`` ended, unannounced jobs into deliveries and mark them
    announced (the caller commits: both or neither). Rows another sender is announcing
    are skipped (``SKIP LOCKED``). Returns the jobs announced."""
    jobs = session.scalars(
        select(Job).where(Job.announced_at.is_(None), Job.state.in_(TERMINAL_STATES))
        .order_by(Job.finished_at).limit(limit).with_for_update(skip_locked=True)).all()
    if not jobs:
        return 0
    by_tenant: dict[str, list[Webhook]] = defaultdict(list)
    for hook in session.scalars(select(Webhook).where(
            Webhook.tenant_id.in_({j.tenant_id for j in jobs}))):
        by_tenant[hook.tenant_id].append(hook)
    for job in jobs:
        event = JOB_EVENTS[JobState(job.state)]
        hooks = [h for h in by_tenant.get(job.tenant_id, ()) if str(event) in (h.events or [])]
        if hooks:
            _add_deliveries(session, hooks, event, job_event_data(job))
    session.execute(update(Job).where(Job.id.in_([j.id for j in jobs]))
                    .values(announced_at=utcnow()))
    return len(jobs)


def body_of(delivery_payload: dict[str, Any]) -> str:
    """The exact bytes (as text) a delivery sends and signs."""
    return json.dumps(delivery_payload, separators=(",", ":"), sort_keys=True, default=str)


def signed_headers(delivery_id: str, secret: str, body: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt (signed at ``at``)."""
    return {"webhook-id": delivery_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": Signer(secret).sign(delivery_id, at, body),
            "content-type": "application/json", "user-agent": "sodm-webhooks/1"}
