"""Route: ``POST /predict`` by ``model_id`` or ``model`` (``name`` / ``name@version``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from app.auth import current_tenant
from app.db import get_read_session
from app.models import Tenant
from app.schemas.predict import PredictRequest, PredictResponse
from app.services import models as models_service
from app.services import predictor

router = APIRouter(tags=["predict"])


@router.post("/predict", response_model=PredictResponse)
def predict(body: PredictRequest, tenant: Tenant = Depends(current_tenant),
            session: Session = Depends(get_read_session)) -> dict:
    m = models_service.resolve(session, tenant, body.model_id, body.model)
    return predictor.predict(m, body.instances)
