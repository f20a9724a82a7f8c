"""RFC 9457 problem details: the ``ProblemError`` exception and its JSON renderer.

Any code (routes, services, dependencies) raises ``ProblemError``; the handlers installed by
``install_problem_handlers`` turn it, FastAPI's validation errors, Starlette's HTTP errors and
unexpected exceptions into ``application/problem+json`` responses.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from http import HTTPStatus
from itertools import islice
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

log = logging.getLogger("sodm.problems")

PROBLEM_BASE = "https://sodm.dev/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"
_RESERVED = {"type", "title", "status", "detail", "instance"}

# Bounds of a problem's text (every problem is built here: answers, datasets' and jobs'
# stored ``error``): a title, a detail, any other string, items of a list or an object.
MAX_TITLE_CHARS = 200
MAX_DETAIL_CHARS = 2_000
MAX_TEXT_CHARS = 1_000
MAX_ITEMS = 100
MAX_DEPTH = 6
# control characters (C0, DEL, C1), line and paragraph separators, lone surrogates: none is
# storable everywhere (a NUL ends a Postgres JSONB value, a surrogate is not UTF-8)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_SPACES = frozenset("\t\n\r")


def problem_type(slug: str) -> str:
    """The ``type`` URI of a problem slug (``"invalid-libsvm"`` -> full URI)."""
    return slug if "://" in slug or slug == "about:blank" else PROBLEM_BASE + slug


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    if ch in _SPACES:
        return " "
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def clean_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` without control characters or lone surrogates (tab, newline and carriage
    return become spaces, the others their ``\\xNN`` / ``\\uNNNN`` escape), cut to ``limit``
    characters (``...`` marks the cut). Linear in ``limit``: longer input is cut first."""
    text = str(text)
    cut = len(text) > limit
    out = _UNSAFE.sub(_escape, text[:limit])
    if cut or len(out) > limit:
        out = out[:max(0, limit - 3)] + "..."
    return out


def clean_value(value: Any, depth: int = 0) -> Any:
    """A problem member made safe to send and store: strings cleaned (``clean_text``),
    lists and objects cut to ``MAX_ITEMS`` entries and ``MAX_DEPTH`` levels, non-finite
    numbers (not JSON) as their names."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if value is None or isinstance(value, bool | int):
        return value
    if depth >= MAX_DEPTH:
        return clean_text(repr(value), 100)
    if isinstance(value, dict):
        return {clean_text(k, 100): clean_value(v, depth + 1)
                for k, v in islice(value.items(), MAX_ITEMS)}
    if isinstance(value, list | tuple | set | frozenset):
        return [clean_value(v, depth + 1) for v in islice(value, MAX_ITEMS)]
    return value  # numbers of other types, dates, ids: jsonable_encoder renders them


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "problem"


class ProblemError(Exception):
    """An error that renders as a problem+json response.

    ``type`` is a slug or URI (default: derived from ``title``); extra keyword arguments
    become extension members (``line``, ``field``, ``errors``, ...). ``headers`` is taken
    out of the extensions and sent as response headers (``Retry-After``, ...). Every text
    is cleaned and bounded here (``clean_text``, ``clean_value``), so no problem carries a
    control character or an unbounded echo of the input into an answer, a log or a row.
    """

    def __init__(self, status: int, title: str, detail: str | None = None,
                 type: str | None = None, **extensions: Any) -> None:  # noqa: A002
        self.headers: dict[str, str] = dict(extensions.pop("headers", None) or {})
        self.status = int(status)
        self.title = clean_text(title, MAX_TITLE_CHARS)
        self.detail = None if detail is None else clean_text(detail, MAX_DETAIL_CHARS)
        self.type = clean_text(problem_type(type or _slug(self.title)))
        self.extensions = {k: clean_value(v) for k, v in extensions.items()
                           if k not in _RESERVED}
        super().__init__(f"{status} {self.title}: {self.detail}" if self.detail
                         else f"{status} {self.title}")

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> ProblemError:
        """The problem a stored ``body()`` describes (a failed parse kept on its row)."""
        ext = {k: v for k, v in body.items() if k not in _RESERVED}
        return cls(int(body.get("status", 500)), str(body.get("title", "Error")),
                   detail=body.get("detail"), type=body.get("type"), **ext)

    def body(self, instance: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "title": self.title, "status": self.status}
        if self.detail is not None:
            out["detail"] = self.detail
        if instance is not None:  # the request's path, as the client wrote it
            out["instance"] = clean_text(instance)
        out.update(self.extensions)
        return out


# path prefix -> the error body a protocol's clients expect instead of problem+json (the
# Open Inference Protocol's {"error": "..."}, app.api.routes.v2); set by app.main.create_app
ERROR_SHAPES: dict[str, Callable[[ProblemError], Response]] = {}


def problem_response(problem: ProblemError, instance: str | None = None) -> Response:
    """Render a ``ProblemError`` (``instance`` is usually the request path): problem+json,
    or the error shape registered in ``ERROR_SHAPES`` for the path's prefix."""
    if instance is not None:
        for prefix, render in ERROR_SHAPES.items():
            if instance == prefix or instance.startswith(prefix + "/"):
                return render(problem)
    return JSONResponse(jsonable_encoder(problem.body(instance)), status_code=problem.status,
                        media_type=PROBLEM_MEDIA_TYPE, headers=problem.headers or None)


def _loc_to_field(loc: tuple | list, tags: frozenset[str] = frozenset()) -> str:
    """``("body", "sodm", "params", "lam")`` -> ``"params.lam"``: the request part and the
    tag of a discriminated union (``tags``) are not part of the field's name."""
    parts = [str(p) for i, p in enumerate(loc)
             if p not in ("body", "query", "path", "header", "form")
             and not (i == 1 and loc[0] == "body" and p in tags)]
    return ".".join(parts) if parts else ".".join(str(p) for p in loc)


def _validation_error(e: dict[str, Any], tags: frozenset[str]) -> dict[str, Any]:
    out = {"location": [str(p) for p in e.get("loc", ())],
           "field": _loc_to_field(e.get("loc", ()), tags),
           "message": e.get("msg", ""), "type": e.get("type", "")}
    if out["type"] == "limit_exceeded":  # a server maximum: name it
        ctx = e.get("ctx") or {}
        out.update(limit=ctx.get("limit"), setting=ctx.get("setting"))
    return out


async def _problem_handler(request: Request, exc: ProblemError) -> Response:
    return problem_response(exc, request.url.path)


def _validation_handler(tags: frozenset[str]):
    async def handle(request: Request, exc: RequestValidationError) -> Response:
        errors = [_validation_error(e, tags) for e in exc.errors()]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5]) or None
        if errors and all(e["type"] == "limit_exceeded" for e in errors):
            problem = ProblemError(422, "Parameter above this server's limit", detail=detail,
                                   type="limit-exceeded", errors=errors)
        else:
            problem = ProblemError(422, "Request validation failed", detail=detail,
                                   type="validation-error", errors=errors)
        return problem_response(problem, request.url.path)

    return handle


async def _http_handler(request: Request, exc: StarletteHTTPException) -> Response:
    try:
        title = HTTPStatus(exc.status_code).phrase
    except ValueError:
        title = "Error"
    detail = exc.detail if isinstance(exc.detail, str) and exc.detail != title else None
    problem = ProblemError(exc.status_code, title, detail=detail,
                           type="about:blank" if exc.status_code in (404, 405) else None,
                           headers=dict(exc.headers or {}))
    return problem_response(problem, request.url.path)


async def _unhandled_handler(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    # Starlette answers this outside the middleware stack: the request id is added here
    rid = getattr(request.state, "request_id", None)
    return problem_response(ProblemError(500, "Internal server error",
                                         detail="an unexpected error occurred; it was logged",
                                         type="internal-error",
                                         headers={"X-Request-ID": rid} if rid else None),
                            request.url.path)


def install_problem_handlers(app: FastAPI, union_tags: tuple[str, ...] = ()) -> None:
    """Register every problem+json exception handler on ``app``; ``union_tags`` are the
    discriminator values of request unions (left out of the fields errors name)."""
    app.add_exception_handler(ProblemError, _problem_handler)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError,  # type: ignore[arg-type]
                              _validation_handler(frozenset(union_tags)))
    app.add_exception_handler(StarletteHTTPException, _http_handler)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unhandled_handler)


# ------------------------------------------------------------------ leak-free details
_TRACEBACK_HEAD = "Traceback (most recent call last):"
_FRAME_LINE = re.compile(r"^\s*(File \"|at [\w$.]+\(|\.\.\. \d+ more|Caused by: |at py4j\.)")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)): ?(.*)$")
_PATH = re.compile(r"(?<![\w.~])(?:/[\w.+@~-]+){2,}/?|[A-Za-z]:\\[^\s\"']+")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
SCRUB_INPUT_CHARS = 20_000
SCRUB_OUTPUT_CHARS = 1_000


def scrub_detail(text: str) -> str:
    """A problem detail without tracebacks, file system paths or memory addresses.

    A traceback is reduced to its final ``SomeError: message`` line (its message only);
    stack frames (Python ``File "..."``, JVM ``at ...``) are dropped, absolute paths become
    ``<path>``. Linear in the input (no backtracking pattern over an unbounded token), which
    is cut to ``SCRUB_INPUT_CHARS`` first."""
    lines = str(text)[:SCRUB_INPUT_CHARS].splitlines()
    if any(_TRACEBACK_HEAD in line for line in lines) or any(
            _FRAME_LINE.match(line) for line in lines):
        kept = [line for line in lines if line.strip() and _TRACEBACK_HEAD not in line
                and not _FRAME_LINE.match(line) and not line.startswith((" ", "\t"))]
        last = next((m for line in reversed(kept) if (m := _EXC_LINE.match(line.strip()))),
                    None)
        lines = [last.group(3) or last.group(1).rsplit(".", 1)[-1]] if last else kept[:1]
    out = " ".join(line.strip() for line in lines if line.strip())
    out = _PATH.sub("<path>", out)
    out = _ADDRESS.sub("", out)
    return out[:SCRUB_OUTPUT_CHARS]
