"""Routes: the web dashboard, a single page served from the package (no CDN, works offline).

``/`` redirects to ``/dashboard``; every ``/dashboard/...`` path returns the same HTML shell
(the client routes on the path) and ``/dashboard/assets/{name}`` serves the JavaScript, CSS and
icon from ``app/api/static/dashboard``. The shell holds no data: the page signs in with an API key
and calls the JSON API with ``Authorization: Bearer``, so these routes need no key themselves.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.api.downloads import Download
from app.core.problems import ProblemError

router = APIRouter(include_in_schema=False)

STATIC_DIR = Path(__file__).resolve().parents[1] / "static" / "dashboard"
MEDIA_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Everything the page needs comes from this origin; inline script/style are not allowed.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
       "form-action 'self'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@lru_cache(maxsize=1)
def _shell_template() -> str:
    return (STATIC_DIR / "index.html").read_text(encoding="utf-8")


def _asset_names() -> frozenset[str]:
    """The servable asset paths (relative, POSIX); a fixed list, so no path tricks."""
    return frozenset(p.relative_to(STATIC_DIR).as_posix() for p in STATIC_DIR.rglob("*")
                     if p.is_file() and p.suffix in MEDIA_TYPES)


_ASSETS = _asset_names()


@router.get("/")
def root(request: Request) -> RedirectResponse:
    """The service's front page is the dashboard."""
    return RedirectResponse(request.scope.get("root_path", "") + "/dashboard", status_code=307)


@router.get("/dashboard/assets/{name:path}")
def asset(name: str) -> Download:
    """A JavaScript module, stylesheet or icon of the dashboard (ETag / Last-Modified)."""
    if name not in _ASSETS:
        raise ProblemError(404, "Not found", detail=f"no dashboard asset {name!r}")
    path = STATIC_DIR / name
    return Download(path, media_type=MEDIA_TYPES[path.suffix],
                        headers={"Cache-Control": "no-cache",
                                 "X-Content-Type-Options": "nosniff"})


@router.get("/dashboard")
@router.get("/dashboard/{page:path}")
def shell(request: Request, page: str = "") -> HTMLResponse:
    """The single-page shell; ``page`` is routed in the browser (jobs, models, datasets...)."""
    base = request.scope.get("root_path", "")
    html = _shell_template().replace("{{base}}", base)
    return HTMLResponse(html, headers=SECURITY_HEADERS)
