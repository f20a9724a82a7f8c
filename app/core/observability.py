"""Prometheus metrics and the request-metrics ASGI middleware.

Request counters and latency histograms are labelled by the route *template* (``/jobs/{job_id}``,
never the concrete path, so ids do not blow up cardinality). Job counts by state, the broker
queue depth, the job leases held and the live workers are computed when ``/metrics`` is
scraped, and so are the per-model gauges of the served margins. With
``PROMETHEUS_MULTIPROC_DIR`` set (``sodm serve --workers N``, ``sodm run``, the
compose file) every process (API processes, workers and their pool children) writes its
samples to that directory and a scrape adds them up (``scrape_registry``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("sodm.observability")

REQUESTS = Counter("sodm_http_requests_total", "HTTP requests by method, route and status",
                   ["method", "route", "status"])
LATENCY = Histogram("sodm_http_request_duration_seconds", "HTTP request latency by route",
                    ["method", "route"],
                    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
PREDICT_BATCH = Histogram("sodm_predict_batch_requests",
                          "/predict requests summed in one kernel pass (micro-batching)",
                          buckets=(1, 2, 4, 8, 16, 32, 64, 128))
DATASET_UPLOADS = Counter("sodm_dataset_uploads_total", "Dataset uploads by outcome",
                          ["outcome"])


def route_label(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class MetricsMiddleware:
    """Pure ASGI middleware (does not buffer streaming responses such as SSE)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = route_label(scope)
            method = scope.get("method", "GET")
            REQUESTS.labels(method, route, str(status["code"])).inc()
            LATENCY.labels(method, route).observe(time.perf_counter() - start)


class JobsCollector(Collector):
    """``sodm_jobs`` by state, ``sodm_queue_depth``, ``sodm_job_leases`` and
    ``sodm_workers_live``, computed at scrape time."""

    def describe(self) -> Iterable[Any]:
        """Static description, so registering does not query the database."""
        yield GaugeMetricFamily("sodm_jobs", "Jobs by state (all tenants)", labels=["state"])
        yield GaugeMetricFamily("sodm_queue_depth", "Messages waiting in the broker queue",
                                labels=["queue"])
        yield GaugeMetricFamily("sodm_job_leases", "Job leases held by workers now")
        yield GaugeMetricFamily("sodm_workers_live", "Workers whose heartbeat is recent")

    def collect(self) -> Iterable[Any]:
        from app.core.orm import JOB_STATES

        jobs = GaugeMetricFamily("sodm_jobs", "Jobs by state (all tenants)", labels=["state"])
        counts = job_counts()
        for state in JOB_STATES:
            jobs.add_metric([state], float(counts.get(state, 0)))
        yield jobs
        depth = queue_depth()
        if depth is not None:
            q = GaugeMetricFamily("sodm_queue_depth", "Messages waiting in the broker queue",
                                  labels=["queue"])
            from app.core.config import get_settings

            q.add_metric([get_settings().celery_queue], float(depth))
            yield q
        leases, live = worker_counts()
        if leases is not None:
            yield GaugeMetricFamily("sodm_job_leases", "Job leases held by workers now",
                                    value=float(leases))
            yield GaugeMetricFamily("sodm_workers_live", "Workers whose heartbeat is recent",
                                    value=float(live))


MARGIN_GAUGES = (
    ("sodm_model_margins", "Margins served by the model in its newest window", "n"),
    ("sodm_model_margin_mean", "Mean served margin y_hat*f(x) in the model's newest window",
     "mean"),
    ("sodm_model_margin_variance", "Variance of the served margins in the newest window",
     "variance"),
    ("sodm_model_margin_inside", "Share of served margins inside the theta band",
     "inside"),
    ("sodm_model_margin_psi", "PSI of the newest window's served margins against the "
     "held-out distribution", "psi"),
    ("sodm_model_margin_drift", "1 when the newest window's PSI reaches the threshold",
     "drift"),
)
MARGIN_LABELS = ["model_id", "name", "version"]


class MarginCollector(Collector):
    """Per model served recently, its newest window of served margins against its
    held-out reference (``app.services.inference.monitoring``), every API process added up: computed
    from the database at scrape time."""

    def describe(self) -> Iterable[Any]:
        for name, doc, _ in MARGIN_GAUGES:
            yield GaugeMetricFamily(name, doc, labels=MARGIN_LABELS)

    def collect(self) -> Iterable[Any]:
        try:
            from app.core.db import get_sessionmaker
            from app.services.inference.monitoring import newest_windows

            with get_sessionmaker()() as s:
                rows = newest_windows(s)
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail because the DB is down
            log.warning("margin gauges unavailable: %s", type(exc).__name__)
            return
        for name, doc, key in MARGIN_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=MARGIN_LABELS)
            for m, stats in rows:
                value = stats.get(key)
                if value is not None:
                    family.add_metric([m.id, m.name, str(m.version)], float(value))
            yield family


def worker_counts() -> tuple[int | None, int]:
    """(unexpired job leases, live workers); (None, 0) when the database is down."""
    try:
        from sqlalchemy import func, select

        from app.core.db import get_sessionmaker
        from app.core.orm import Job, JobState, utcnow
        from app.services.job_queue.worker_status import live_workers

        with get_sessionmaker()() as s:
            leases = s.scalar(select(func.count()).select_from(Job).where(
                Job.state.in_((JobState.RUNNING, JobState.CANCELLING)), Job.lease_until > utcnow()))
            return int(leases or 0), len(live_workers(s))
    except Exception as exc:  # noqa: BLE001 - a scrape must not fail because the DB is down
        log.warning("worker counts unavailable: %s", type(exc).__name__)
        return None, 0


def job_counts() -> dict[str, int]:
    try:
        from sqlalchemy import func, select

        from app.core.db import get_sessionmaker
        from app.core.orm import Job

        with get_sessionmaker()() as s:
            return dict(s.execute(select(Job.state, func.count()).group_by(Job.state)).all())
    except Exception as exc:  # noqa: BLE001 - a scrape must not fail because the DB is down
        log.warning("job counts unavailable: %s", type(exc).__name__)
        return {}


def queue_depth() -> int | None:
    """LLEN of the Celery queue on a Redis broker; None for other brokers or when down."""
    from app.core.config import get_settings

    settings = get_settings()
    url = settings.resolved_broker_url
    if not url.startswith(("redis://", "rediss://")):
        return None
    try:
        import redis

        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        try:
            return int(client.llen(settings.celery_queue))
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001
        log.warning("queue depth unavailable: %s", type(exc).__name__)
        return None


_collectors: list[Collector] = []


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def scrape_registry() -> CollectorRegistry:
    """What ``/metrics`` exposes: this process's registry, or under several API processes a
    fresh registry that adds up all of theirs plus the scrape-time job gauges."""
    if multiprocess_dir() is None:
        return REGISTRY
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(JobsCollector())
    registry.register(MarginCollector())
    return registry


def process_exiting() -> None:
    """Let the multiprocess files of this process's live gauges go (no-op otherwise)."""
    if multiprocess_dir() is not None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid())


def register_collectors() -> None:
    """Register the scrape-time collectors once per process."""
    if not _collectors:
        _collectors.extend((JobsCollector(), MarginCollector()))
        for collector in _collectors:
            REGISTRY.register(collector)
