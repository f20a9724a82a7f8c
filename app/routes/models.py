"""Routes: ``/models`` list (optionally by name), detail, file download, delete."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import FileResponse
from sqlalchemy.orm import Session

from app.auth import current_tenant
from app.db import get_session
from app.models import Tenant
from app.problems import ProblemError
from app.schemas.common import IdPath
from app.schemas.models import ModelList, ModelOut
from app.services import models as models_service

router = APIRouter(tags=["models"])


@router.get("/models", response_model=ModelList)
def list_models(name: str | None = Query(default=None, max_length=200,
                                         pattern=r"^[^\x00-\x1f\x7f]+$"),
                cursor: str | None = None,
                limit: int = Query(default=50, ge=1, le=500),
                tenant: Tenant = Depends(current_tenant),
                session: Session = Depends(get_session)) -> dict:
    rows, next_cursor = models_service.list_models(session, tenant, name, cursor, limit)
    return {"items": [models_service.model_out(m) for m in rows], "next_cursor": next_cursor}


@router.get("/models/{model_id}", response_model=ModelOut)
def get_model(model_id: IdPath, tenant: Tenant = Depends(current_tenant),
              session: Session = Depends(get_session)) -> dict:
    return models_service.model_out(models_service.get_model(session, tenant, model_id))


@router.get("/models/{model_id}/file", response_class=FileResponse,
            responses={200: {"content": {"application/octet-stream": {}}}})
def model_file(model_id: IdPath, tenant: Tenant = Depends(current_tenant),
               session: Session = Depends(get_session)) -> FileResponse:
    """The portable model file (``solver.model_io.load_model`` reads it)."""
    m = models_service.get_model(session, tenant, model_id)
    path = models_service.file_of(m)
    if not path.is_file():
        raise ProblemError(404, "Model file missing", detail=f"model {m.id} has no file",
                           type=models_service.PROBLEM_BASE + "not-found")
    return FileResponse(path, media_type="application/octet-stream",
                        filename=f"{m.name}-v{m.version}.sodm")


@router.delete("/models/{model_id}", status_code=204)
def delete_model(model_id: IdPath, tenant: Tenant = Depends(current_tenant),
                 session: Session = Depends(get_session)) -> Response:
    models_service.delete_model(session, tenant, model_id)
    return Response(status_code=204)
