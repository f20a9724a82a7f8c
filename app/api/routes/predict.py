"""Route: ``POST /predict`` by ``model_id`` or ``model`` (``name`` / ``name@version``).

Asynchronous end to end through ``app.services.inference.serving`` (the path every prediction
protocol shares: body decoded on the event loop or a thread, model row from the row cache,
kernel sum micro-batched on an evaluation thread). JSON in and out with orjson; ``.npy`` and
Arrow IPC bodies take the model from the query string.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request, Response

from app.api.auth import current_tenant
from app.core.orm import Tenant
from app.schemas.predict import PredictRequest, PredictResponse
from app.services.inference import instances
from app.services.inference.serving import serve

router = APIRouter(tags=["predict"])

_BINARY = {"schema": {"type": "string", "format": "binary"}}
OPENAPI_BODY: dict[str, Any] = {
    "parameters": [
        {"name": "model_id", "in": "query", "required": False,
         "description": "the model, for .npy and Arrow bodies", "schema": {"type": "string"}},
        {"name": "model", "in": "query", "required": False,
         "description": '"name" or "name@version", for .npy and Arrow bodies',
         "schema": {"type": "string"}},
    ],
    "requestBody": {"required": True, "content": {
        instances.JSON: {"schema": {"$ref": "#/components/schemas/PredictRequest"}},
        instances.NPY: _BINARY,
        instances.ARROW: _BINARY,
    }},
}


# named schemas the operation refers to (merged into the document's components by app.main)
OPENAPI_SCHEMAS = {"PredictRequest": PredictRequest.model_json_schema(
    ref_template="#/components/schemas/{model}")}


DECODER = instances.PredictDecoder()


@router.post("/predict", response_model=PredictResponse, openapi_extra=OPENAPI_BODY)
async def predict(request: Request, tenant: Tenant = Depends(current_tenant)) -> Response:
    """Labels and decision values of ``instances`` (JSON rows, or a ``.npy`` / Arrow body)."""
    served = await serve(request, tenant, DECODER)
    if served is None:  # the client left: nobody to answer
        return Response(status_code=499)
    return Response(orjson.dumps(served.out, option=orjson.OPT_SERIALIZE_NUMPY),
                    media_type="application/json")
