"""Route: ``GET /algorithms`` (every algorithm with its parameters, defaults and limits)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from app.api.auth import current_tenant
from app.core.orm import Tenant
from app.schemas.algorithms import AlgorithmList
from app.services.job_queue import algorithm_specs as algorithms

router = APIRouter(tags=["algorithms"])


@router.get("/algorithms", response_model=AlgorithmList, response_model_by_alias=True)
def list_algorithms(tenant: Tenant = Depends(current_tenant)) -> dict:
    """The algorithms ``POST /train`` accepts; each parameter with its type, default, bounds,
    this server's limit and description (the dashboard's train form is built from it)."""
    return {"items": algorithms.describe()}
