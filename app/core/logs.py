"""Logging of the API and the worker: one root handler for every library's records (ours,
uvicorn's, Celery's), rendered by structlog as readable lines (``SODM_LOG_FORMAT=text``, the
default) or one JSON object per line (``json``), each with the context bound to the request
or job being handled: ``request_id``, ``job_id``, ``attempt``.

The API binds ``request_id`` per request (``RequestIdMiddleware``): always one it made (a
random 32-hex id, sent back as ``X-Request-ID`` on every response), never the caller's, so
one tenant cannot make its requests' lines, or its jobs, carry another tenant's request id.
A caller's own ``X-Request-ID`` (when short printable ASCII) is kept beside it as
``client_request_id``. The job row keeps ``request_id``, and the worker binds it with the job
id and attempt while it runs that job (``worker.tasks``).
"""

from __future__ import annotations

import logging
import re
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from structlog.contextvars import bind_contextvars, get_contextvars, reset_contextvars

from app.core import access_log as access_lines

REQUEST_ID_HEADER = "X-Request-ID"
# a caller's id is logged (as client_request_id) when short printable ASCII without spaces
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=@-]{1,128}$")
# third-party loggers whose own handlers would bypass the root handler's format
_REROUTED = ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "celery.task")

_access: dict[str, Any] = {"on": True, "fmt": "text"}  # configure(access=False): no lines


def configure(fmt: str = "text", level: str | int = "INFO", access: bool = True) -> None:
    """Route every log record through one structlog-formatted handler on stderr; ``access``
    is whether the API logs one line per request."""
    _access["on"], _access["fmt"] = access, fmt
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "json":
        final: list[Any] = [structlog.processors.format_exc_info,
                            structlog.processors.JSONRenderer()]
    else:
        # plain tracebacks: rich's would print every frame's local variables (keys, bodies)
        final = [structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback)]
    # access lines arrive rendered and batched (app.core.access_log: the per-request cost)
    formatter = access_lines.Formatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final])
    handler = access_lines.Handler(sys.stderr)
    handler.setFormatter(formatter)
    handler.sodm = True  # type: ignore[attr-defined] - ours, replaced on reconfiguration
    root = logging.getLogger()
    for h in root.handlers:
        if getattr(h, "sodm", False):
            h.flush()  # what the replaced handler still holds
    root.handlers = [h for h in root.handlers if not getattr(h, "sodm", False)] + [handler]
    root.setLevel(level)
    for name in _REROUTED:
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
    # sodm.access logs each request once, with its id; uvicorn's access line would repeat it
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True)


def current_request_id() -> str | None:
    """The request id bound to this context (an API request, or the job a worker runs)."""
    value = get_contextvars().get("request_id")
    return str(value) if value else None


@contextmanager
def bound(**context: Any) -> Iterator[None]:
    """Bind ``context`` to every log record made inside the block (this thread/task)."""
    tokens = bind_contextvars(**{k: v for k, v in context.items() if v is not None})
    try:
        yield
    finally:
        reset_contextvars(**tokens)


def client_request_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The caller's ``X-Request-ID`` when acceptable (kept as ``client_request_id``)."""
    for name, value in headers:
        if name.lower() == b"x-request-id":
            text = value.decode("latin-1").strip()
            return text if _VALID_REQUEST_ID.match(text) else None
    return None


def new_request_id() -> str:
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Pure ASGI: binds a new ``request_id`` (and the caller's ``client_request_id``) for
    the request's log lines, keeps it in ``scope["state"]`` (error handlers outside this
    middleware read it there), adds ``X-Request-ID`` to the response and logs one access
    line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = new_request_id()
        theirs = client_request_id(scope.get("headers") or [])
        scope.setdefault("state", {})["request_id"] = rid
        start = time.perf_counter()
        status = {"code": 500}

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() != b"x-request-id"]
                message["headers"] = [*headers, (b"x-request-id", rid.encode())]
            await send(message)

        # Each request runs in its own task (its own context), so the binding ends with it;
        # it is not reset here so that an unhandled error is still logged with the id.
        bind_contextvars(request_id=rid, **({"client_request_id": theirs} if theirs else {}))
        await self.app(scope, receive, send_with_id)
        if _access["on"]:
            access_lines.emit(_access["fmt"], method=scope.get("method", ""),
                              path=scope.get("path", ""), status=status["code"],
                              duration_ms=round(1000 * (time.perf_counter() - start), 1))
