"""Routes: ``/webhooks`` register, list, detail, delete, and an endpoint's deliveries."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Response
from sqlalchemy.orm import Session

from app.api.auth import current_tenant
from app.core.db import get_session
from app.core.orm import DeliveryStatus, Tenant
from app.schemas.common import IdPath
from app.schemas.webhooks import (
    DeliveryList,
    WebhookCreate,
    WebhookCreated,
    WebhookList,
    WebhookOut,
)
from app.services.notifications import webhook_endpoints as webhooks

router = APIRouter(tags=["webhooks"])


@router.post("/webhooks", status_code=201, response_model=WebhookCreated)
def create_webhook(body: WebhookCreate, response: Response,
                   tenant: Tenant = Depends(current_tenant),
                   session: Session = Depends(get_session)) -> dict[str, Any]:
    """Register an endpoint for job and registry events. Deliveries are signed (Standard
    Webhooks: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature``) and retried with
    backoff for about a day; the answer carries the secret, shown only here."""
    hook = webhooks.create(session, tenant, url=body.url, events=body.events,
                           secret=body.secret, description=body.description)
    response.headers["Location"] = f"/webhooks/{hook.id}"
    return webhooks.webhook_out(hook, secret=True)


@router.get("/webhooks", response_model=WebhookList)
def list_webhooks(cursor: str | None = None, limit: int = Query(default=50, ge=1, le=500),
                  tenant: Tenant = Depends(current_tenant),
                  session: Session = Depends(get_session)) -> dict[str, Any]:
    rows, next_cursor = webhooks.list_webhooks(session, tenant, cursor, limit)
    return {"items": [webhooks.webhook_out(h) for h in rows], "next_cursor": next_cursor}


@router.get("/webhooks/{webhook_id}", response_model=WebhookOut)
def get_webhook(webhook_id: IdPath, tenant: Tenant = Depends(current_tenant),
                session: Session = Depends(get_session)) -> dict[str, Any]:
    return webhooks.webhook_out(webhooks.get(session, tenant, webhook_id))


@router.delete("/webhooks/{webhook_id}", status_code=204, response_class=Response)
def delete_webhook(webhook_id: IdPath, tenant: Tenant = Depends(current_tenant),
                   session: Session = Depends(get_session)) -> Response:
    """Remove the endpoint; its pending deliveries are dropped."""
    webhooks.delete_webhook(session, tenant, webhook_id)
    return Response(status_code=204)


@router.get("/webhooks/{webhook_id}/deliveries", response_model=DeliveryList)
def list_deliveries(webhook_id: IdPath, status: DeliveryStatus | None = None,
                    cursor: str | None = None, limit: int = Query(default=50, ge=1, le=500),
                    tenant: Tenant = Depends(current_tenant),
                    session: Session = Depends(get_session)) -> dict[str, Any]:
    """The endpoint's deliveries, newest first, with their status and last attempt."""
    hook = webhooks.get(session, tenant, webhook_id)
    rows, next_cursor = webhooks.list_deliveries(session, hook, cursor, limit, status)
    return {"items": [webhooks.delivery_out(d) for d in rows], "next_cursor": next_cursor}
