"""Route: ``POST /models/{name}/invocations``, MLflow's scoring protocol (the endpoint of
``mlflow models serve``) for every model version a key can see, by ``name``,
``name@<version>``, ``name@<alias>`` or ``name@latest``; formats in
``app.services.inference.mlflow_scoring``, evaluation on ``/predict``'s path
(``app.services.inference.serving``: keys, rate limits, caches, micro-batching, limits)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request, Response

from app.api.auth import current_tenant
from app.api.routes.v2 import ModelRef
from app.core.orm import Tenant
from app.services.inference import mlflow_scoring
from app.services.inference.serving import serve

router = APIRouter(tags=["mlflow"])

_SPLIT = {"dataframe_split": {"columns": ["age", "chol"], "data": [[63.0, 233.0]]}}
OPENAPI_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {
        "schema": {"type": "object", "description": "exactly one of dataframe_split, "
                   "dataframe_records, instances, inputs; optional params "
                   '{"predict_method": "predict" | "decision_function" | "predict_proba"}',
                   "properties": {k: {} for k in (*mlflow_scoring.FORMATS, "params")}},
        "examples": {
            "dataframe_split": {"value": _SPLIT},
            "dataframe_records": {"value": {"dataframe_records": [{"age": 63.0,
                                                                   "chol": 233.0}]}},
            "instances": {"value": {"instances": [[63.0, 233.0]]}},
            "inputs": {"value": {"inputs": {"age": [63.0], "chol": [233.0]}}},
            "decision values": {"value": {**_SPLIT,
                                          "params": {"predict_method": "decision_function"}}},
        }},
    mlflow_scoring.CSV: {"schema": {"type": "string"},
                         "example": "age,chol\n63,233\n"},
}}}


@router.post("/models/{name}/invocations", openapi_extra=OPENAPI_BODY, responses={200: {
    "description": "the labels (or decision values, probabilities) per row",
    "content": {"application/json": {"example": {"predictions": [1, 0]}}}}})
async def invocations(name: ModelRef, request: Request,
                      tenant: Tenant = Depends(current_tenant)) -> Response:
    """Predictions in MLflow's scoring format: ``{"predictions": [...]}``."""
    served = await serve(request, tenant, mlflow_scoring.ScoringDecoder(name))
    if served is None:  # the client left: nobody to answer
        return Response(status_code=499)
    return Response(orjson.dumps(mlflow_scoring.predictions(served.parsed, served.out),
                                 option=orjson.OPT_SERIALIZE_NUMPY),
                    media_type="application/json")
