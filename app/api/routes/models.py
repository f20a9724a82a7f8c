"""Routes: ``/models`` list (filters: name, dataset id or content hash, alias, tags), detail,
PATCH (description, tags), file and ONNX downloads, served-margin monitoring, delete;
``/models/{name}/aliases`` (list, PUT, DELETE)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from sqlalchemy.orm import Session

from app.api.auth import current_tenant
from app.api.downloads import Download
from app.core.db import get_session
from app.core.orm import Tenant
from app.schemas.common import ID_PATTERN, IdPath
from app.schemas.models import (
    ALIAS_PATTERN,
    MODEL_NAME_PATTERN,
    AliasList,
    AliasName,
    AliasOut,
    AliasPut,
    ModelList,
    ModelName,
    ModelOut,
    ModelPatch,
    MonitoringOut,
    Tag,
)
from app.services.inference import margin_reference, monitoring
from app.services.model_registry import model_store, registry
from app.services.model_registry import model_versions as models_service

router = APIRouter(tags=["models"])


@router.get("/models", response_model=ModelList)
def list_models(name: str | None = Query(default=None, max_length=200,
                                         pattern=MODEL_NAME_PATTERN),
                dataset_id: str | None = Query(default=None, pattern=ID_PATTERN),
                dataset_sha256: str | None = Query(
                    default=None, pattern=r"^[0-9a-fA-F]{64}$",
                    description="versions trained on a dataset with this content hash "
                                "(the datasets' content_sha256)"),
                alias: str | None = Query(default=None, pattern=ALIAS_PATTERN,
                                          description="versions this alias points at"),
                tag: Annotated[list[Tag] | None, Query(
                    max_length=8, description="versions with every tag given")] = None,
                cursor: str | None = None,
                limit: int = Query(default=50, ge=1, le=500),
                tenant: Tenant = Depends(current_tenant),
                session: Session = Depends(get_session)) -> dict:
    """Live model versions, newest first."""
    rows, next_cursor = models_service.list_models(session, tenant, cursor, limit, name=name,
                                                   dataset_id=dataset_id, alias=alias,
                                                   tags=tag, dataset_sha256=dataset_sha256)
    return {"items": models_service.models_out(session, rows), "next_cursor": next_cursor}


def _one(session: Session, m) -> dict:
    return models_service.models_out(session, [m])[0]


@router.get("/models/{model_id}", response_model=ModelOut)
def get_model(model_id: IdPath, tenant: Tenant = Depends(current_tenant),
              session: Session = Depends(get_session)) -> dict:
    return _one(session, models_service.get_model(session, tenant, model_id))


@router.patch("/models/{model_id}", response_model=ModelOut)
def update_model(model_id: IdPath, body: ModelPatch, tenant: Tenant = Depends(current_tenant),
                 session: Session = Depends(get_session)) -> dict:
    """Set the description and/or replace the tags of a model version."""
    m = models_service.get_model(session, tenant, model_id)
    registry.update_model(session, m, description=body.description, tags=body.tags)
    return _one(session, m)


@router.get("/models/{model_id}/file", response_class=Download,
            responses={200: {"content": {"application/octet-stream": {}}}})
def model_file(model_id: IdPath, tenant: Tenant = Depends(current_tenant),
               session: Session = Depends(get_session)) -> Download:
    """The portable model file (``solver.io.model_io.load_model`` reads it)."""
    m = models_service.get_model(session, tenant, model_id)
    path = model_store.cached_file(m.id, m.file_sha256 or "")
    return Download(path, media_type="application/octet-stream",
                        filename=f"{m.name}-v{m.version}.sodm")


@router.get("/models/{model_id}/onnx", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}},
                             "description": "an ONNX model (ai.onnx and ai.onnx.ml operators): "
                             "input X (float64, n x n_features); outputs label, "
                             "decision_function and, with probability=true, probabilities"}})
def model_onnx(model_id: IdPath, tenant: Tenant = Depends(current_tenant),
               session: Session = Depends(get_session)) -> Response:
    """The whole predictor as an ONNX graph (``solver.io.export``): input ``X`` (float64 rows
    of raw features), outputs ``label``, ``decision_function`` and, for a model trained with
    ``probability=true``, ``probabilities``."""
    m = models_service.get_model(session, tenant, model_id)
    data = models_service.onnx_bytes(m)
    return Response(data, media_type="application/octet-stream", headers={
        "Content-Disposition": f'attachment; filename="{m.name}-v{m.version}.onnx"'})


@router.get("/models/{model_id}/monitoring", response_model=MonitoringOut)
def model_monitoring(model_id: IdPath,
                     windows: int = Query(default=24, ge=1, le=1000,
                                          description="how many of the newest windows"),
                     tenant: Tenant = Depends(current_tenant),
                     session: Session = Depends(get_session)) -> dict:
    """The margins ``y_hat * f(x)`` this model served (every API process), window by
    window, against their distribution on its held-out data: mean, variance, share inside
    the theta band, PSI and KS distance; ``drift`` is true for a window whose PSI reaches
    the threshold."""
    m = models_service.get_model(session, tenant, model_id)
    margin_reference.ensure(session, m)
    return monitoring.report(session, m, windows)


@router.delete("/models/{model_id}", status_code=204)
def delete_model(model_id: IdPath, tenant: Tenant = Depends(current_tenant),
                 session: Session = Depends(get_session)) -> Response:
    """Delete a version (its file and the aliases pointing at it go with it)."""
    models_service.delete_model(session, tenant, model_id)
    return Response(status_code=204)


@router.get("/models/{name}/aliases", response_model=AliasList)
def list_aliases(name: ModelName, tenant: Tenant = Depends(current_tenant),
                 session: Session = Depends(get_session)) -> dict:
    """The aliases of a model name and the versions they point at."""
    return {"items": [registry.alias_out(a, session)
                      for a in registry.list_aliases(session, tenant, name)]}


@router.put("/models/{name}/aliases/{alias}", response_model=AliasOut)
def set_alias(name: ModelName, alias: AliasName, body: AliasPut,
              tenant: Tenant = Depends(current_tenant),
              session: Session = Depends(get_session)) -> dict:
    """Point ``name@alias`` at a version (by ``version`` or ``model_id``); ``/predict``
    with ``"model": "name@alias"`` uses it until the alias is moved or deleted."""
    row = registry.set_alias(session, tenant, name, alias, version=body.version,
                             model_id=body.model_id)
    return registry.alias_out(row, session)


@router.delete("/models/{name}/aliases/{alias}", status_code=204)
def delete_alias(name: ModelName, alias: AliasName, tenant: Tenant = Depends(current_tenant),
                 session: Session = Depends(get_session)) -> Response:
    registry.delete_alias(session, tenant, name, alias)
    return Response(status_code=204)
