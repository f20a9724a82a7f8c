"""The FastAPI application: routers, problem+json handlers, CORS, metrics.

``create_app()`` builds a fresh app; ``app`` is the module-level instance for
``uvicorn app.main:app``.
"""

from __future__ import annotations

import gc
import inspect
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app import API_VERSION
from app.api.auth import current_tenant, metrics_token
from app.api.body_limit import BodyLimitMiddleware
from app.api.ratelimit import RateLimitMiddleware
from app.api.routes import (
    algorithms,
    dashboard,
    datasets,
    docs,
    health,
    invocations,
    jobs,
    models,
    predict,
    predictions,
    train,
    v2,
    webhooks,
)
from app.core.config import get_settings
from app.core.db import releasing
from app.core.logs import RequestIdMiddleware, configure
from app.core.observability import MetricsMiddleware, register_collectors
from app.core.problems import ERROR_SHAPES, install_problem_handlers
from app.schemas.common import problem_responses
from app.services.inference.open_inference import error_response as oip_error_response
from app.services.job_queue.algorithm_specs import ALGORITHM_NAMES

DESCRIPTION = """Train and serve Optimal margin Distribution Machines with the SODM algorithms.

Authenticate with `Authorization: Bearer <key>` (create keys with `sodm create-key`).
Errors are RFC 9457 `application/problem+json`. `GET /algorithms` lists every algorithm's
parameters with their defaults, bounds and this server's limits."""
SECURITY_SCHEME = {"bearer": {"type": "http", "scheme": "bearer",
                              "description": "an API key from `sodm create-key`"}}


# Problem responses every route of a router can give (documented in the OpenAPI schema so
# that clients and the schemathesis run see each status the service answers with).
_AUTHED = (400, 401, 422, 429, 500)
ROUTER_PROBLEMS = {
    "app.api.routes.health": problem_responses(503),
    "app.api.routes.datasets": problem_responses(400, 422, 429, 500),
    "app.api.routes.algorithms": problem_responses(401, 429, 500),
    "app.api.routes.train": problem_responses(*_AUTHED, 404, 413, 507),
    "app.api.routes.jobs": problem_responses(*_AUTHED, 404, 409),
    "app.api.routes.models": problem_responses(*_AUTHED, 404),
    "app.api.routes.predict": problem_responses(*_AUTHED, 404, 413, 415),
    "app.api.routes.predictions": problem_responses(*_AUTHED, 404, 409),
    "app.api.routes.invocations": problem_responses(*_AUTHED, 404, 413, 415),
    "app.api.routes.v2": v2.RESPONSES,
    "app.api.routes.webhooks": problem_responses(*_AUTHED, 404, 409),
}


GC_THRESHOLDS = (50_000, 20, 20)  # gc.set_threshold of an API process


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    """Per API process: BLAS on one thread (concurrency comes from the evaluation slots,
    ``app.services.inference.batcher``), the prediction loops compiled, the cache-invalidation
    subscriber, the ingest forkserver, the sweep of abandoned uploads and the served margins'
    flusher (``app.services.inference.monitoring``); at shutdown, uploads still waiting for a
    parse slot are failed."""
    from threadpoolctl import threadpool_limits

    from app.services.data import ingest_process, ingest_queue, ingest_sweep
    from app.services.inference import invalidation, monitoring
    from solver import kernel_sums

    blas = threadpool_limits(1)
    # the prediction loops compiled (or loaded from numba's cache) before the first request:
    # in a new container that would otherwise cost the first /predict a second or more
    kernel_sums.compile_serving_loops()
    invalidation.start()
    monitoring.start()
    threading.Thread(target=ingest_process.warm, daemon=True, name="sodm-ingest-warm").start()
    ingest_sweep.start_thread()
    # Garbage collection paced for serving (docs/serving.md): the objects of startup
    # (modules, schemas, routes) live as long as the process, so they leave the collector's
    # sight, and young collections run every 50,000 allocations instead of 700; full
    # collections otherwise stalled every request at once (the p99 at 50 connections,
    # docs/serving.md).
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)  # an in-process app (tests) leaves the GC as it was
        gc.unfreeze()
        invalidation.stop()
        ingest_sweep.stop_thread()
        ingest_queue.stop()
        monitoring.stop()
        blas.restore_original_limits()  # an in-process app (tests) leaves BLAS as it was
        from app.core.observability import process_exiting

        process_exiting()


def create_app() -> FastAPI:
    """Build the service application."""
    settings = get_settings()
    configure(settings.log_format, settings.log_level, access=settings.access_log)
    # operationId = the route function's name (stable: generated clients' method names)
    app = FastAPI(title="sodm", version=API_VERSION, description=DESCRIPTION, docs_url=None,
                  redoc_url=None, generate_unique_id_function=lambda route: route.name,
                  lifespan=lifespan)
    install_problem_handlers(app, union_tags=ALGORITHM_NAMES)
    ERROR_SHAPES["/v2"] = oip_error_response  # the Open Inference Protocol's {"error"}
    # the prediction routes first: a request is matched against the routes in this order
    for module in (predict, v2, invocations, health, algorithms, datasets, train, jobs, models,
                   predictions, webhooks, dashboard, docs):
        for route in module.router.routes:
            if not isinstance(route, APIRoute):
                continue
            if not inspect.iscoroutinefunction(route.endpoint):
                route.endpoint = releasing(route.endpoint)
            if _needs_key(route.dependant):
                route.openapi_extra = {**(route.openapi_extra or {}),
                                       "security": [{"bearer": []}]}
        app.include_router(module.router, responses=ROUTER_PROBLEMS.get(module.__name__, {}))
    _document_security(app)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "Idempotency-Key",
                                          "X-Request-ID"],
                           expose_headers=["Location", "Retry-After", "RateLimit",
                                           "RateLimit-Policy", "X-Request-ID"])
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_predict_body_bytes)
    app.add_middleware(RateLimitMiddleware)
    app.add_middleware(MetricsMiddleware)
    app.add_middleware(RequestIdMiddleware)  # every answer carries X-Request-ID
    if settings.trusted_proxies:  # outermost: every layer sees the forwarded client address
        app.add_middleware(ProxyHeadersMiddleware,
                           trusted_hosts=",".join(settings.trusted_proxies))
    register_collectors()
    return app


def _needs_key(dependant: Dependant) -> bool:
    return any(d.call in (current_tenant, metrics_token) or _needs_key(d)
               for d in dependant.dependencies)


def _document_security(app: FastAPI) -> None:
    """Declare the bearer scheme in the OpenAPI document (Swagger UI's Authorize button)."""
    plain = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = plain()
            schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEME
            schemas = schema["components"].setdefault("schemas", {})
            for extra in (predict.OPENAPI_SCHEMAS, v2.OPENAPI_SCHEMAS):
                schemas.update({k: v for k, v in extra.items() if k not in schemas})
        return app.openapi_schema or plain()

    app.openapi = openapi  # type: ignore[method-assign]


app = create_app()
