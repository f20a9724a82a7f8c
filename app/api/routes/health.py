"""Routes: ``/livez`` (process up), ``/readyz`` (database and broker reachable; live workers
reported), ``/workers`` (worker liveness as counts, the caller's jobs waiting), ``/metrics``.

``/livez`` and ``/readyz`` need no key (orchestrators probe them). ``/metrics`` takes its own
scrape token, ``SODM_METRICS_TOKEN`` (``authorization: {credentials: <token>}`` in
Prometheus' scrape config), not a tenant's key; it is off (404) while no token is set. Under
``sodm serve --workers N`` it adds up every worker process's counters and histograms
(prometheus_client's multiprocess mode). Its job gauges count all tenants' jobs by state,
with no ids.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.api.auth import current_tenant, metrics_token
from app.core.config import get_settings
from app.core.db import get_engine, get_read_sessionmaker, get_session
from app.core.observability import scrape_registry
from app.core.orm import Tenant
from app.core.problems import ProblemError
from app.schemas.common import problem_responses
from app.schemas.workers import WorkersOut
from app.services.job_queue import worker_status as workers_service

router = APIRouter(tags=["health"])
log = logging.getLogger("sodm.health")

CHECK_TIMEOUT_SECONDS = 2.0
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="readyz")


def check_database() -> None:
    with get_engine().connect() as conn:
        conn.execute(text("SELECT 1"))


def check_broker() -> None:
    url = get_settings().resolved_broker_url
    if url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(url, socket_timeout=CHECK_TIMEOUT_SECONDS,
                                      socket_connect_timeout=CHECK_TIMEOUT_SECONDS)
        try:
            client.ping()
        finally:
            client.close()
        return
    from kombu import Connection

    with Connection(url, connect_timeout=CHECK_TIMEOUT_SECONDS) as conn:
        conn.ensure_connection(max_retries=1, timeout=CHECK_TIMEOUT_SECONDS)


CHECKS: dict[str, Callable[[], None]] = {"database": check_database, "broker": check_broker}


def run_checks() -> dict[str, str]:
    """Each check's outcome: ``"ok"`` or the error class name (never connection strings)."""
    futures = {name: _pool.submit(fn) for name, fn in CHECKS.items()}
    results: dict[str, str] = {}
    for name, fut in futures.items():
        try:
            fut.result(timeout=CHECK_TIMEOUT_SECONDS + 0.5)
            results[name] = "ok"
        except concurrent.futures.TimeoutError:
            results[name] = "timeout"
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
            log.warning("readiness check %s failed: %s", name, type(exc).__name__)
            results[name] = type(exc).__name__
    return results


@router.get("/livez")
def livez() -> dict[str, str]:
    """The process is up and serving (no dependency checks)."""
    return {"status": "ok"}


def live_worker_count() -> int | None:
    """Workers with a recent heartbeat; None when that cannot be read."""
    try:
        with get_read_sessionmaker()() as s:
            return len(workers_service.live_workers(s))
    except Exception as exc:  # noqa: BLE001 - the database check reports the outage
        log.warning("worker liveness unavailable: %s", type(exc).__name__)
        return None


@router.get("/readyz", responses={503: {"description": "a dependency is down (problem+json)"}})
def readyz() -> dict:
    """200 when the database answers ``SELECT 1`` and the broker answers a ping, else 503.

    ``workers`` reports the live workers (heartbeats); none live does not make the API
    unready (it still accepts jobs, which wait), so it is reported, not checked."""
    checks = run_checks()
    down = sorted(name for name, outcome in checks.items() if outcome != "ok")
    if down:
        raise ProblemError(503, "Service not ready", detail=f"unreachable: {', '.join(down)}",
                           type="not-ready", checks=checks, down=down,
                           headers={"Retry-After": "5"})
    return {"status": "ok", "checks": checks, "workers": {"live": live_worker_count()}}


@router.get("/workers", response_model=WorkersOut, responses=problem_responses(401, 429))
def workers(tenant: Tenant = Depends(current_tenant),
            session: Session = Depends(get_session)) -> dict:
    """Live workers and their job slots (counts: no host names or process ids), and your
    jobs waiting and running."""
    return workers_service.status(session, tenant.id).as_dict()


@router.get("/metrics", response_class=Response, dependencies=[Depends(metrics_token)],
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}},
                       **problem_responses(401, 404)})
def metrics() -> Response:
    """Prometheus exposition: request counts and latencies (all API processes), the workers'
    job metrics (with a shared ``PROMETHEUS_MULTIPROC_DIR``), jobs by state, queue depth,
    leases and live workers."""
    return Response(generate_latest(scrape_registry()), media_type=CONTENT_TYPE_LATEST)
