"""Health and metrics endpoints on a real uvicorn process against real Postgres and Redis."""

from __future__ import annotations

import re

import httpx

from tests.fixtures.stack import free_port


def test_livez_needs_no_key(api_server: str) -> None:
    r = httpx.get(api_server + "/livez")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_readyz_ok_on_the_real_stack(api_server: str) -> None:
    r = httpx.get(api_server + "/readyz", timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["checks"] == {"database": "ok", "broker": "ok"}


def test_readyz_503_names_what_is_down(start_api, pg_url: str) -> None:
    closed = free_port()
    server = start_api(CELERY_BROKER_URL=f"redis://127.0.0.1:{closed}/0")
    r = httpx.get(server.url + "/readyz", timeout=10)
    assert r.status_code == 503
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == 503 and body["type"].endswith("/not-ready")
    assert body["down"] == ["broker"]
    assert body["checks"]["database"] == "ok"
    assert "broker" in body["detail"]
    assert str(closed) not in r.text  # no connection strings leak
    assert httpx.get(server.url + "/livez").status_code == 200  # alive while not ready


def test_readyz_503_when_database_down(start_api) -> None:
    closed = free_port()
    server = start_api(DATABASE_URL=f"postgresql+psycopg://postgres@127.0.0.1:{closed}/x")
    r = httpx.get(server.url + "/readyz", timeout=10)
    assert r.status_code == 503
    assert r.json()["down"] == ["database"]


def test_metrics_exposes_request_counters_and_job_gauges(api_server: str, client: httpx.Client,
                                                         stack_env: dict[str, str]) -> None:
    assert client.get("/livez").status_code == 200
    assert client.get("/datasets/does-not-exist").status_code == 404
    # its own scrape token, not a tenant's key
    assert httpx.get(api_server + "/metrics").status_code == 401
    assert client.get("/metrics").status_code == 401
    scrape = {"Authorization": f"Bearer {stack_env['SODM_METRICS_TOKEN']}"}
    r = httpx.get(api_server + "/metrics", headers=scrape)
    assert r.status_code == 200
    text = r.text
    assert re.search(r'sodm_http_requests_total\{method="GET",route="/livez",status="200"\} '
                     r"[1-9]", text)
    # the route template, not the concrete id, labels the request
    assert 'route="/datasets/{dataset_id}",status="404"' in text
    assert "does-not-exist" not in text
    assert 'sodm_http_request_duration_seconds_bucket{le="0.005",method="GET",route="/livez"}' \
        in text
    for state in ("QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLING", "CANCELLED"):
        assert re.search(rf'sodm_jobs\{{state="{state}"\}} \d+\.0', text), state
    assert re.search(r'sodm_queue_depth\{queue="sodm-test-[0-9a-f]+"\} 0\.0', text)


def test_unknown_route_and_method_are_problems(api_server: str) -> None:
    r = httpx.get(api_server + "/nope")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["title"] == "Not Found" and r.json()["instance"] == "/nope"
    r = httpx.delete(api_server + "/livez")
    assert r.status_code == 405
    assert r.json()["status"] == 405


def test_validation_errors_are_problems_naming_fields(client: httpx.Client) -> None:
    r = client.get("/datasets", params={"limit": 0})
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["type"].endswith("/validation-error") and body["instance"] == "/datasets"
    assert body["errors"][0]["location"] == ["query", "limit"]
    assert body["errors"][0]["field"] == "limit"


def test_unhandled_error_is_a_500_problem_that_leaks_nothing(caplog) -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app

    app = create_app()

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("secret-internal-detail /etc/passwd")

    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/boom")
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["type"].endswith("/internal-error")
    assert "secret" not in r.text and "passwd" not in r.text and "Traceback" not in r.text
    assert "secret-internal-detail" in caplog.text  # logged on the server side


def test_cors_closed_by_default_and_opened_by_setting(monkeypatch) -> None:
    from fastapi.testclient import TestClient

    from app.core.config import get_settings
    from app.main import create_app

    preflight = {"Origin": "https://ui.example", "Access-Control-Request-Method": "GET"}
    get_settings.cache_clear()
    with TestClient(create_app()) as c:
        r = c.options("/datasets", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
    monkeypatch.setenv("SODM_CORS_ORIGINS", "https://ui.example, https://other.example")
    get_settings.cache_clear()
    try:
        with TestClient(create_app()) as c:
            r = c.options("/datasets", headers=preflight)
            assert r.headers["access-control-allow-origin"] == "https://ui.example"
            r = c.options("/datasets", headers={**preflight, "Origin": "https://evil.example"})
            assert "access-control-allow-origin" not in r.headers
    finally:
        monkeypatch.delenv("SODM_CORS_ORIGINS")
        get_settings.cache_clear()


def test_the_api_paces_garbage_collection_and_an_in_process_app_restores_it() -> None:
    """The lifespan freezes the startup objects and raises the young-generation threshold
    (a full collection stalled every in-flight request, docs/serving.md); stopping an
    in-process app leaves the collector as it found it."""
    import gc

    from fastapi.testclient import TestClient

    from app.core.config import get_settings
    from app.main import GC_THRESHOLDS, create_app

    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # the interpreter's defaults
    try:
        get_settings.cache_clear()
        with TestClient(create_app()) as c:
            assert c.get("/livez").status_code == 200
            assert gc.get_threshold() == GC_THRESHOLDS and gc.get_freeze_count() > 0
        assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
    finally:
        gc.set_threshold(*before)
