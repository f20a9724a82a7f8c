"""Request-body size limit for the JSON routes (``SODM_MAX_PREDICT_BODY_BYTES``).

Uploads (``POST /datasets``) stream to disk under their own limit (``SODM_MAX_UPLOAD_BYTES``,
:mod:`app.services.data.ingest`); every other body is JSON that FastAPI reads into memory before
validating it, so a client could otherwise make the API buffer any amount. This pure ASGI
middleware answers 413 problem+json as soon as a declared ``Content-Length`` is over the
limit, and counts the bytes of a chunked body as they arrive, stopping at the limit.
"""

from __future__ import annotations

import contextlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.problems import ProblemError, problem_response

_EXEMPT = {("POST", "/datasets")}


class BodyTooLarge(Exception):
    """Raised inside ``receive`` once the 413 for a streamed body is sent."""


def _too_large(limit: int, size: int | None) -> ProblemError:
    said = f"{size} bytes" if size is not None else "more bytes"
    return ProblemError(413, "Request body too large",
                        detail=f"the request body has {said}; the limit is {limit} bytes "
                               "(SODM_MAX_PREDICT_BODY_BYTES)",
                        type="body-too-large", limit_bytes=limit)


class BodyLimitMiddleware:
    """Refuse request bodies over ``limit`` bytes (uploads excepted) with a 413 problem."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = int(limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) in _EXEMPT:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await problem_response(_too_large(self.limit, declared),
                                   scope["path"])(scope, receive, send)
            return
        seen = 0
        started = responded = False

        async def counting_receive() -> Message:
            nonlocal seen, responded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit and not started:
                    # answer now: FastAPI turns any error while reading a body into a 400
                    responded = True
                    await problem_response(_too_large(self.limit, None),
                                           scope["path"])(scope, receive, send)
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if responded:  # the 413 is already out; drop what the app makes of the abort
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        with contextlib.suppress(BodyTooLarge):  # FastAPI usually turns it into a 400 first
            await self.app(scope, counting_receive, tracking_send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
