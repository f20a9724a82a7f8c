"""Routes: the Open Inference Protocol's REST API (KServe / Triton "V2") over the same models,
keys, rate limits and evaluation path as ``/predict``.

``GET /v2`` (server metadata), ``/v2/health/live``, ``/v2/health/ready`` (the ``/readyz``
checks) need no key, like ``/livez`` and ``/readyz``. The model routes take a model name as
``/predict``'s ``model`` does: ``name``, ``name@3``, ``name@champion`` (an alias) or
``name@latest``; ``/versions/{v}`` is the same as ``name@v``. Every error is the protocol's
``{"error": "..."}`` with the status ``/predict`` would give (``app.core.problems.ERROR_SHAPES``).
Formats: ``app.services.inference.open_inference``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app import API_VERSION
from app.api.auth import current_tenant
from app.api.routes.health import run_checks
from app.core.db import get_session
from app.core.orm import Model, Tenant
from app.core.problems import ProblemError
from app.schemas.v2 import (
    InferenceError,
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    ModelReady,
    ServerLive,
    ServerMetadata,
    ServerReady,
)
from app.services.inference import open_inference as oip
from app.services.inference.serving import serve
from app.services.model_registry import model_store
from app.services.model_registry import model_versions as models_service

router = APIRouter(tags=["open inference protocol"])

# a model name as /predict's "model" takes it: name, name@<version>, name@<alias>
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9_-]{1,64})?$"
NAME_DESCRIPTION = "name, name@<version>, name@<alias> or name@latest"
VERSION_PATTERN = r"^[0-9]{1,10}$"
ModelRef = Annotated[str, Path(min_length=1, max_length=270, pattern=NAME_PATTERN,
                               description=NAME_DESCRIPTION, examples=["churn@champion"])]
Version = Annotated[str, Path(pattern=VERSION_PATTERN, description="a version number",
                              examples=["3"])]
_NAME, _VERSION = re.compile(NAME_PATTERN), re.compile(VERSION_PATTERN)


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries of the protocol's error body for the given codes."""
    schema = {"schema": {"$ref": "#/components/schemas/InferenceError"}}
    return {code: {"model": InferenceError, "content": {"application/json": schema}}
            for code in codes}


# every route of this router can answer these (documented for clients and schemathesis)
RESPONSES = error_responses(400, 401, 404, 422, 429, 500)
_BINARY_BODY = {"schema": {"type": "string", "format": "binary"},
                "description": "binary tensor extension: the JSON header "
                "(Inference-Header-Content-Length bytes), then each tensor's raw bytes"}
_NAME_PARAM = {"name": "name", "in": "path", "required": True,
               "description": NAME_DESCRIPTION, "example": "churn@champion",
               "schema": {"type": "string", "minLength": 1, "maxLength": 270,
                          "pattern": NAME_PATTERN}}
_VERSION_PARAM = {"name": "version", "in": "path", "required": True, "example": "3",
                  "description": "a version number",
                  "schema": {"type": "string", "pattern": VERSION_PATTERN}}


def _infer_openapi(*path: dict[str, Any]) -> dict[str, Any]:
    """The infer routes' documentation (their path parameters are read from the request,
    not declared: FastAPI's validation of declared ones was a tenth of the route's cost)."""
    return {
        "parameters": [*path, {"name": "Inference-Header-Content-Length", "in": "header",
                               "required": False, "schema": {"type": "integer", "minimum": 0},
                               "description": "binary tensor extension: bytes of the JSON "
                                              "header"}],
        "requestBody": {"required": True, "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/InferenceRequest"}},
            "application/octet-stream": _BINARY_BODY}},
        "responses": {"200": {"content": {"application/octet-stream": _BINARY_BODY}}},
    }


def _request_schemas() -> dict[str, Any]:
    """``InferenceRequest`` and the schemas it refers to, as OpenAPI components."""
    schema = InferenceRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    return {"InferenceRequest": schema, **schema.pop("$defs", {})}


# named schemas the operations refer to (merged into the document's components by app.main)
OPENAPI_SCHEMAS = _request_schemas()


def _path_ref(request: Request) -> str:
    """The model reference of an infer route's path, checked as the declared parameters of
    the other routes are."""
    params = request.path_params
    name, version = params["name"], params.get("version")
    if len(name) > 270 or not _NAME.match(name):
        raise ProblemError(422, "Request validation failed", type="validation-error",
                           detail=f"name: {name[:80]!r} is not {NAME_DESCRIPTION}")
    if version is not None and not _VERSION.match(version):
        raise ProblemError(422, "Request validation failed", type="validation-error",
                           detail=f"version: {version[:20]!r} is not a version number")
    return oip.model_ref(name, version)


async def _infer(request: Request, tenant: Tenant) -> Response:
    served = await serve(request, tenant, oip.InferDecoder(_path_ref(request)))
    if served is None:  # the client left: nobody to answer
        return Response(status_code=499)
    return oip.response(served.parsed, served.model, served.out)


# the infer routes first: requests are matched against this router's routes in order
@router.post("/v2/models/{name}/infer", response_model=InferenceResponse,
             responses=error_responses(413, 415), openapi_extra=_infer_openapi(_NAME_PARAM))
async def v2_infer(request: Request, tenant: Tenant = Depends(current_tenant)) -> Response:
    """Labels, decision values and (calibrated models) probabilities of the input rows,
    micro-batched with every other prediction of the model (as ``/predict``)."""
    return await _infer(request, tenant)


@router.post("/v2/models/{name}/versions/{version}/infer", response_model=InferenceResponse,
             responses=error_responses(413, 415),
             openapi_extra=_infer_openapi(_NAME_PARAM, _VERSION_PARAM))
async def v2_version_infer(request: Request,
                           tenant: Tenant = Depends(current_tenant)) -> Response:
    """Inference on one version."""
    return await _infer(request, tenant)


@router.get("/v2", response_model=ServerMetadata)
def v2_server_metadata() -> dict[str, Any]:
    """The server's name, version and protocol extensions."""
    return {"name": "sodm", "version": API_VERSION, "extensions": oip.EXTENSIONS}


@router.get("/v2/health/live", response_model=ServerLive)
def v2_server_live() -> dict[str, bool]:
    """200 while the process serves (``/livez``)."""
    return {"live": True}


@router.get("/v2/health/ready", response_model=ServerReady,
            responses=error_responses(503))
def v2_server_ready() -> dict[str, bool]:
    """200 when the database and the broker answer (``/readyz``), else 503."""
    down = sorted(name for name, outcome in run_checks().items() if outcome != "ok")
    if down:
        raise ProblemError(503, "Service not ready", detail=f"unreachable: {', '.join(down)}",
                           headers={"Retry-After": "5"})
    return {"ready": True}


def _model(session: Session, tenant: Tenant, ref: str) -> Model:
    return models_service.resolve(session, tenant, None, ref)


def _metadata(session: Session, tenant: Tenant, ref: str) -> dict[str, Any]:
    m = _model(session, tenant, ref)
    versions = session.scalars(select(Model.version).where(
        Model.tenant_id == tenant.id, Model.name == m.name, Model.deleted_at.is_(None))
        .order_by(Model.version)).all()
    return oip.metadata(m.name, m, list(versions))


def _ready(session: Session, tenant: Tenant, ref: str) -> dict[str, Any]:
    m = _model(session, tenant, ref)
    if not model_store.is_stored(session, m.id):
        raise ProblemError(404, "Model file missing", detail=f"model {m.id} has no stored file")
    return {"name": m.name, "ready": True}


@router.get("/v2/models/{name}", response_model=ModelMetadata)
def v2_model_metadata(name: ModelRef, tenant: Tenant = Depends(current_tenant),
                      session: Session = Depends(get_session)) -> dict[str, Any]:
    """Inputs, outputs, platform and versions of the model the name resolves to."""
    return _metadata(session, tenant, oip.model_ref(name))


@router.get("/v2/models/{name}/versions/{version}", response_model=ModelMetadata)
def v2_model_version_metadata(name: ModelRef, version: Version,
                              tenant: Tenant = Depends(current_tenant),
                              session: Session = Depends(get_session)) -> dict[str, Any]:
    """The metadata of one version."""
    return _metadata(session, tenant, oip.model_ref(name, version))


@router.get("/v2/models/{name}/ready", response_model=ModelReady)
def v2_model_ready(name: ModelRef, tenant: Tenant = Depends(current_tenant),
                   session: Session = Depends(get_session)) -> dict[str, Any]:
    """200 when the model exists and its file is there (it loads on its first inference)."""
    return _ready(session, tenant, oip.model_ref(name))


@router.get("/v2/models/{name}/versions/{version}/ready", response_model=ModelReady)
def v2_model_version_ready(name: ModelRef, version: Version,
                           tenant: Tenant = Depends(current_tenant),
                           session: Session = Depends(get_session)) -> dict[str, Any]:
    return _ready(session, tenant, oip.model_ref(name, version))
