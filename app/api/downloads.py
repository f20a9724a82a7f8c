"""File downloads (model files, prediction results, dashboard assets) whose refusals of a
``Range`` header are RFC 9457 problems like every other error of the API, and the objects
of a bucket streamed with the same rules (:func:`download`).

Starlette's ``FileResponse`` answers a malformed range with a ``text/plain`` 400 and a range
past the end of the file with an empty 416; :class:`Download` sends the same statuses (and
the 416's ``Content-Range``) as ``application/problem+json``. Everything else, 206 partial
content included, is ``FileResponse``'s own.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import FileResponse, Response
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from app.core.problems import ProblemError, problem_response
from app.services.filestore.object_store import Location

__all__ = ["Download", "ObjectDownload", "download"]


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


CHUNK = 1 << 20


def download(where: Location, *, media_type: str, filename: str) -> Any:
    """A stored object as a download: a ``Download`` of its file in a local store, else
    streamed from the bucket (one ``Range`` honoured as a 206; several, the whole object)."""
    local = where.local_path
    if local is not None:
        return Download(local, media_type=media_type, filename=filename)
    return ObjectDownload(where, media_type=media_type, filename=filename)


def _single_range(header: str, size: int) -> tuple[int, int] | None | ProblemError:
    """``(first, last)`` of a one-range ``bytes=`` header, None to send everything (no
    header, several ranges), or the problem of a bad or unsatisfiable one."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or not spec.strip():
        return ProblemError(400, "Invalid Range header", detail=f"Range {header!r}: malformed",
                            type="invalid-range")
    if "," in spec:
        return None
    first_s, dash, last_s = spec.strip().partition("-")
    if not dash or not (first_s + last_s).isascii() or not (
            (first_s.isdigit() or not first_s) and (last_s.isdigit() or not last_s)) or not (
            first_s or last_s):
        return ProblemError(400, "Invalid Range header", detail=f"Range {header!r}: malformed",
                            type="invalid-range")
    if not first_s:  # the last N bytes
        n = int(last_s)
        return (max(0, size - n), size - 1) if n and size else ProblemError(
            416, "Range not satisfiable", detail=f"Range {header!r}: nothing to send",
            type="range-not-satisfiable", headers={"Content-Range": f"bytes */{size}"})
    first = int(first_s)
    last = min(int(last_s), size - 1) if last_s else size - 1
    if first >= size or (last_s and int(last_s) < first):
        return ProblemError(416, "Range not satisfiable",
                            detail=f"Range {header!r} starts past the end of the file "
                                   f"(bytes */{size})", type="range-not-satisfiable",
                            headers={"Content-Range": f"bytes */{size}"})
    return first, last


class ObjectDownload(Response):
    """An object of a bucket streamed in 1 MiB reads (``Content-Length``, ``Accept-Ranges``,
    one ``Range`` as a 206; refusals as problems like :class:`Download`'s)."""

    def __init__(self, where: Location, *, media_type: str, filename: str) -> None:
        super().__init__(media_type=media_type)
        self.where, self.filename = where, filename

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        import anyio

        f = await anyio.to_thread.run_sync(self.where.open_input)
        try:
            size = int(f.size())
            asked = _single_range(Headers(scope=scope).get("range", ""), size)
            if isinstance(asked, ProblemError):
                await problem_response(asked, scope.get("path"))(scope, receive, send)
                return
            first, last = asked if asked is not None else (0, size - 1)
            headers = [(b"content-type", str(self.media_type).encode()),
                       (b"content-length", str(max(0, last - first + 1)).encode()),
                       (b"accept-ranges", b"bytes"),
                       (b"content-disposition",
                        f'attachment; filename="{self.filename}"'.encode())]
            if asked is not None:
                headers.append((b"content-range", f"bytes {first}-{last}/{size}".encode()))
            await send({"type": "http.response.start", "status": 206 if asked else 200,
                        "headers": headers})
            at = first
            while at <= last:
                n = min(CHUNK, last - at + 1)
                chunk = await anyio.to_thread.run_sync(f.read_at, n, at)
                at += len(chunk)
                await send({"type": "http.response.body", "body": bytes(chunk),
                            "more_body": at <= last and bool(chunk)})
                if not chunk:
                    break
            if first > last:
                await send({"type": "http.response.body", "body": b""})
        finally:
            f.close()
