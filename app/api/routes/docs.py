"""Routes: ``/docs``, the Swagger UI of the API, served from the package (works offline).

The Swagger UI assets come from the ``swagger-ui-bundle-v2`` wheel (Apache-2.0, its licence
ships in the wheel's metadata) instead of a public CDN, so the page renders on a machine
without internet; only the three files the page loads are served.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from swagger_ui_bundle import swagger_ui_path

from app.api.downloads import Download
from app.core.problems import ProblemError

router = APIRouter(include_in_schema=False)

ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}


@router.get("/docs")
def docs(request: Request) -> HTMLResponse:
    """The interactive API reference (``Authorize`` takes an API key)."""
    base = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{base}/openapi.json", title="sodm API",
        swagger_js_url=f"{base}/docs/assets/swagger-ui-bundle.js",
        swagger_css_url=f"{base}/docs/assets/swagger-ui.css",
        swagger_favicon_url=f"{base}/docs/assets/favicon-32x32.png",
        swagger_ui_parameters={"persistAuthorization": True, "displayOperationId": True})


@router.get("/docs/assets/{name}")
def docs_asset(name: str) -> Download:
    """A Swagger UI file from the installed bundle (a fixed list: no path tricks)."""
    if name not in ASSETS:
        raise ProblemError(404, "Not found", detail=f"no docs asset {name!r}")
    return Download(str(swagger_ui_path / name), media_type=ASSETS[name],
                        headers={"Cache-Control": "public, max-age=86400"})
