"""The dashboard's HTTP side: `/` redirects, the shell and every asset come from the package
(nothing from another origin, so it works offline) under a strict Content-Security-Policy."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from app.api.routes.dashboard import STATIC_DIR

pytestmark = pytest.mark.browser

ASSETS = sorted(p.relative_to(STATIC_DIR).as_posix() for p in STATIC_DIR.rglob("*")
                if p.is_file() and p.name != "index.html")


def test_root_redirects_and_shell_is_served(api_server: str) -> None:
    r = httpx.get(api_server + "/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/dashboard"
    for path in ("/dashboard", "/dashboard/jobs", "/dashboard/models/abc", "/dashboard/train"):
        r = httpx.get(api_server + path)
        assert r.status_code == 200, path
        assert r.headers["content-type"].startswith("text/html")
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert '<script type="module" src="/dashboard/assets/main.js">' in r.text


def test_every_asset_is_served_with_its_type(api_server: str) -> None:
    types = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
    assert {"main.js", "api.js", "charts.js", "app.css", "pages/job.js"} <= set(ASSETS)
    for name in ASSETS:
        r = httpx.get(f"{api_server}/dashboard/assets/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-type"].startswith(types[Path(name).suffix]), name
        assert r.content == (STATIC_DIR / name).read_bytes()
    r = httpx.get(f"{api_server}/dashboard/assets/nope.js")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")


def test_no_asset_refers_to_another_origin() -> None:
    """No CDN: the only absolute URL allowed is the SVG namespace name."""
    allowed = {"http://www.w3.org/2000/svg"}
    for p in STATIC_DIR.rglob("*"):
        if p.is_file():
            urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", p.read_text()))
            assert urls <= allowed, (p.name, urls - allowed)
