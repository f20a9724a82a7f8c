"""Sending webhook deliveries: claim the due outbox rows, POST them, record the outcome.

A claim is a conditional UPDATE (``FOR UPDATE SKIP LOCKED`` on Postgres) that counts the
attempt and pushes ``next_attempt_at`` past the send's timeout, so several workers' senders
never send one attempt twice, and a sender that dies mid-send leaves the row due again
later (delivery is at least once: receivers dedupe by ``webhook-id``). Each attempt checks
the endpoint's URL again (``webhook_targets``: the host's addresses right now, DNS
rebinding included) and connects to the address it checked; redirects are not followed.
A 2xx answer delivers it; anything else schedules the next attempt after the next delay of
``SODM_WEBHOOK_RETRY_SECONDS`` (about a day in all), after which the delivery is failed.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import select, update

from app.core.config import get_settings
from app.core.db import db_now, session_scope
from app.core.orm import DeliveryStatus, Webhook, WebhookDelivery, utcnow
from app.services.notifications import webhook_targets
from app.services.notifications.webhook_endpoints import body_of, signed_headers

log = logging.getLogger(__name__)

CLAIM_GRACE_SECONDS = 30  # a claimed attempt is due again this long after its timeout
ERROR_CHARS = 300


@dataclass(frozen=True)
class Claimed:
    """One claimed attempt: what to send where, and which attempt of the delivery it is."""

    delivery_id: str
    attempt: int
    url: str
    secret: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    status_code: int | None  # None: no HTTP answer
    error: str | None  # None: delivered

    @property
    def delivered(self) -> bool:
        return self.error is None


def claim_due(limit: int) -> list[Claimed]:
    """Claim up to ``limit`` pending deliveries that are due (database clock)."""
    if limit <= 0:
        return []
    lease = timedelta(seconds=get_settings().webhook_timeout_seconds + CLAIM_GRACE_SECONDS)
    with session_scope() as s:
        now = db_now(s)
        rows = s.execute(
            select(WebhookDelivery.id, WebhookDelivery.attempts)
            .where(WebhookDelivery.status == DeliveryStatus.PENDING,
                   WebhookDelivery.next_attempt_at <= now)
            .order_by(WebhookDelivery.next_attempt_at).limit(limit)
            .with_for_update(skip_locked=True)).all()
        out = []
        for delivery_id, attempts in rows:
            s.execute(update(WebhookDelivery).where(WebhookDelivery.id == delivery_id)
                      .values(attempts=attempts + 1, next_attempt_at=now + lease,
                              last_attempt_at=now))
        if rows:
            found = s.execute(
                select(WebhookDelivery.id, WebhookDelivery.attempts, Webhook.url,
                       Webhook.secret, WebhookDelivery.payload)
                .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                .where(WebhookDelivery.id.in_([r[0] for r in rows]))).all()
            out = [Claimed(i, int(a), url, secret, body) for i, a, url, secret, body in found]
    return out


def send(c: Claimed) -> Outcome:
    """One signed POST to the checked address of the endpoint (never raises)."""
    s = get_settings()
    try:
        target = webhook_targets.check(c.url, allow_private=s.webhook_allow_private)
    except webhook_targets.TargetRefused as exc:
        return Outcome(None, f"refused: {exc.reason}")
    body = body_of(c.payload)
    headers = signed_headers(c.delivery_id, c.secret, body, utcnow())
    headers["host"] = _host_header(target)
    url = httpx.URL(scheme=target.scheme, host=target.address, port=target.port,
                    raw_path=target.path.encode("ascii", "replace"))
    deadline = _Deadline(s.webhook_timeout_seconds)
    extensions: dict[str, Any] = {"trace": deadline.trace}
    if target.scheme == "https":
        extensions["sni_hostname"] = target.host
    try:
        with deadline, httpx.Client(timeout=s.webhook_timeout_seconds, follow_redirects=False,
                                    trust_env=False) as client, \
                client.stream("POST", url, content=body.encode(), headers=headers,
                              extensions=extensions) as r:
            status = r.status_code  # the answer's body is never read
    except httpx.HTTPError as exc:
        if deadline.expired:
            return Outcome(None, f"no answer within {s.webhook_timeout_seconds:g} s")
        return Outcome(None, f"{type(exc).__name__}: {exc}"[:ERROR_CHARS])
    if 200 <= status < 300:
        return Outcome(status, None)
    return Outcome(status, f"HTTP {status}")


class _Deadline:
    """One attempt's whole time, the connection included: httpx's timeouts bound each read,
    so an endpoint sending its answer a byte at a time held a sender for as long as it
    liked. When ``seconds`` have passed, the connection's socket is shut down (which wakes
    the read blocked on it); ``trace`` is the httpx trace hook that hands over the socket."""

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self.expired = False

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return
        with self._lock:
            self._socks.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _host_header(t: webhook_targets.Target) -> str:
    host = f"[{t.host}]" if ":" in t.host else t.host
    default = 443 if t.scheme == "https" else 80
    return host if t.port == default else f"{host}:{t.port}"


def record(c: Claimed, outcome: Outcome) -> str:
    """Store an attempt's outcome (only if the row is still this attempt's); the status."""
    schedule = get_settings().webhook_retry_seconds
    values: dict[str, Any] = {"last_status_code": outcome.status_code,
                              "last_error": outcome.error}
    with session_scope() as s:
        if outcome.delivered:
            values.update(status=DeliveryStatus.DELIVERED, delivered_at=db_now(s))
        elif c.attempt <= len(schedule):
            values.update(next_attempt_at=db_now(s)
                          + timedelta(seconds=schedule[c.attempt - 1]))
        else:
            values.update(status=DeliveryStatus.FAILED)
        s.execute(update(WebhookDelivery).where(
            WebhookDelivery.id == c.delivery_id, WebhookDelivery.attempts == c.attempt,
            WebhookDelivery.status == DeliveryStatus.PENDING).values(**values))
    status = values.get("status", DeliveryStatus.PENDING)
    if not outcome.delivered:
        log.info("webhook delivery %s attempt %d: %s (%s)", c.delivery_id, c.attempt,
                 outcome.error, status)
    return str(status)


def attempt(c: Claimed) -> str:
    """Send a claimed attempt and record it (for a sender's thread pool)."""
    return record(c, send(c))


def deliver_due(limit: int = 100) -> int:
    """Claim and send the due deliveries one after the other, in this thread (tests, and
    a sender without a pool); the number of attempts made."""
    claimed = claim_due(limit)
    for c in claimed:
        attempt(c)
    return len(claimed)
