"""File downloads (model files, prediction results, dashboard assets) whose refusals of a
``Range`` header are RFC 9457 problems like every other error of the API.

Starlette's ``FileResponse`` answers a malformed range with a ``text/plain`` 400 and a range
past the end of the file with an empty 416; :class:`Download` sends the same statuses (and
the 416's ``Content-Range``) as ``application/problem+json``. Everything else, 206 partial
content included, is ``FileResponse``'s own.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import FileResponse
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from app.problems import ProblemError, problem_response

__all__ = ["Download"]


class Download(FileResponse):
    """A ``FileResponse`` whose Range refusals are problem+json (the module docstring)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused: dict[str, Any] = {}

        async def guarded(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in (400, 416):
                refused["start"] = message  # only a Range refusal answers these
                return
            if "start" not in refused:
                await send(message)
            elif message["type"] == "http.response.body" and "sent" not in refused:
                refused["sent"] = True
                await _problem(scope, refused["start"], message.get("body", b""))(
                    scope, receive, send)

        await super().__call__(scope, receive, guarded)


def _problem(scope: Scope, start: Message, body: bytes) -> Any:
    asked = Headers(scope=scope).get("range", "")
    if start["status"] == 416:
        content_range = Headers(raw=start["headers"]).get("content-range", "")
        problem = ProblemError(416, "Range not satisfiable",
                               detail=f"Range {asked!r} starts past the end of the file "
                                      f"({content_range})", type="range-not-satisfiable",
                               headers={"Content-Range": content_range})
    else:
        why = body.decode(errors="replace").removeprefix("Range header: ") or "malformed"
        problem = ProblemError(400, "Invalid Range header", detail=f"Range {asked!r}: {why}",
                               type="invalid-range")
    return problem_response(problem, scope.get("path"))
