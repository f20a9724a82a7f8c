"""Request and response bodies of the ``/webhooks`` resources."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.core.orm import DeliveryStatus, WebhookEvent
from app.schemas.common import StoredBody
from app.services.notifications.webhook_targets import MAX_URL_LENGTH


class WebhookCreate(StoredBody):
    """``POST /webhooks``: where to send which events, signed with which secret."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"url": "https://ci.example.com/hooks/sodm",
         "events": ["job.succeeded", "job.failed"], "description": "retrain pipeline"}]})

    url: str = Field(max_length=MAX_URL_LENGTH, description="an http(s) URL whose host "
                     "resolves to public addresses only (unless the operator allows private "
                     "ones); checked again before every delivery")
    events: list[WebhookEvent] = Field(min_length=1, max_length=len(WebhookEvent),
                                       description="the events to deliver")
    secret: str | None = Field(
        default=None, max_length=128, pattern=r"^whsec_[A-Za-z0-9+/=]+$",
        description="'whsec_' + base64 of 24 to 64 random bytes; left out, one is generated "
                    "and returned once in this answer")
    description: str = Field(default="", max_length=1000)


class WebhookOut(BaseModel):
    id: str
    url: str
    events: list[WebhookEvent]
    description: str
    created_at: datetime
    links: dict[str, str]


class WebhookCreated(WebhookOut):
    secret: str = Field(description="the signing secret (Standard Webhooks); shown only in "
                        "this answer")


class WebhookList(BaseModel):
    items: list[WebhookOut]
    next_cursor: str | None = None


class DeliveryOut(BaseModel):
    """One event sent (or to be sent) to one endpoint."""

    id: str = Field(description="the webhook-id header of every attempt (dedupe by it)")
    webhook_id: str
    event: WebhookEvent
    status: DeliveryStatus = Field(description="pending (next_attempt_at says when), "
                                   "delivered (a 2xx answer) or failed (retries ran out)")
    attempts: int
    payload: dict[str, Any] = Field(description="the body sent: type, timestamp, data")
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_status_code: int | None = Field(description="the endpoint's last HTTP status; "
                                         "null when it gave none")
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None


class DeliveryList(BaseModel):
    items: list[DeliveryOut]
    next_cursor: str | None = None
