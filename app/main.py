"""The FastAPI application: routers, problem+json handlers, CORS, metrics.

``create_app()`` builds a fresh app; ``app`` is the module-level instance for
``uvicorn app.main:app``.
"""

from __future__ import annotations

import inspect
import logging

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute

from app.body_limit import BodyLimitMiddleware
from app.config import get_settings
from app.db import releasing
from app.observability import MetricsMiddleware, register_collectors
from app.problems import install_problem_handlers
from app.routes import dashboard, datasets, health, jobs, models, predict, train
from app.schemas.common import problem_responses

DESCRIPTION = """Train and serve Optimal margin Distribution Machines with the SODM algorithms.

Authenticate with `Authorization: Bearer <key>` (create keys with `sodm create-key`).
Errors are RFC 9457 `application/problem+json`."""


# Problem responses every route of a router can give (documented in the OpenAPI schema so
# that clients and the schemathesis run see each status the service answers with).
_AUTHED = (400, 401, 422, 429, 500)
ROUTER_PROBLEMS = {
    "app.routes.health": problem_responses(503),
    "app.routes.datasets": problem_responses(400, 422, 429, 500),
    "app.routes.train": problem_responses(*_AUTHED, 404, 413),
    "app.routes.jobs": problem_responses(*_AUTHED, 404, 409),
    "app.routes.models": problem_responses(*_AUTHED, 404),
    "app.routes.predict": problem_responses(*_AUTHED, 404, 413),
}


def create_app() -> FastAPI:
    """Build the service application."""
    settings = get_settings()
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = FastAPI(title="sodm", version="0.1.0", description=DESCRIPTION)
    install_problem_handlers(app)
    for module in (health, datasets, train, jobs, models, predict, dashboard):
        for route in module.router.routes:
            if isinstance(route, APIRoute) and not inspect.iscoroutinefunction(route.endpoint):
                route.endpoint = releasing(route.endpoint)
        app.include_router(module.router, responses=ROUTER_PROBLEMS.get(module.__name__, {}))
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
                           expose_headers=["Location", "Retry-After"])
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_predict_body_bytes)
    app.add_middleware(MetricsMiddleware)
    register_collectors()
    return app


app = create_app()
