"""Route: ``POST /predict`` by ``model_id`` or ``model`` (``name`` / ``name@version``).

Asynchronous end to end: the body is parsed on the event loop (on a thread when large), the
model row comes from the row cache, and the kernel sum runs on an evaluation thread, batched
with other small requests for the same model (``app.services.batcher``). JSON in and out with
orjson; ``.npy`` and Arrow IPC bodies take the model from the query string.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from app.auth import current_tenant
from app.models import Tenant
from app.schemas.predict import PredictRequest, PredictResponse
from app.services import instances, predictor
from app.services import models as models_service
from app.services.batcher import ClientGone, evaluations

router = APIRouter(tags=["predict"])

# bodies larger than this are parsed on a thread, not on the event loop
PARSE_INLINE_BYTES = 256 << 10

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


def _parse(body: bytes, content_type: str | None, query: dict[str, str]
           ) -> instances.PredictBody:
    return instances.parse_body(body, content_type, query)


@router.post("/predict", response_model=PredictResponse, openapi_extra=OPENAPI_BODY)
async def predict(request: Request, tenant: Tenant = Depends(current_tenant)) -> Response:
    """Labels and decision values of ``instances`` (JSON rows, or a ``.npy`` / Arrow body)."""
    ev = evaluations()
    ev.arriving += 1
    try:
        try:
            body = await request.body()
        except ClientDisconnect:  # the client left while sending: nobody to answer
            return Response(status_code=499)
        ctype = request.headers.get("content-type")
        query = dict(request.query_params)
        if len(body) > PARSE_INLINE_BYTES:
            parsed = await run_in_threadpool(_parse, body, ctype, query)
        else:
            parsed = _parse(body, ctype, query)
        m = await models_service.resolve_cached(tenant, parsed.model_id, parsed.model)
        if len(body) > PARSE_INLINE_BYTES:
            X = await run_in_threadpool(instances.to_matrix, parsed.rows, m.n_features, body,
                                        m.feature_names)
        else:
            X = instances.to_matrix(parsed.rows, m.n_features, body, m.feature_names)
    finally:
        ev.arriving -= 1

    async def connected() -> bool:
        return not await request.is_disconnected()

    try:
        out = await predictor.predict(m, X, connected)
    except ClientGone:  # nobody is waiting for a large request's answer: skip its work
        return Response(status_code=499)
    return Response(orjson.dumps(out, option=orjson.OPT_SERIALIZE_NUMPY),
                    media_type="application/json")

