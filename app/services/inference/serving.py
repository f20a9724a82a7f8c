"""The one request path of every prediction protocol: ``POST /predict``, the Open Inference
Protocol's ``/v2/models/{name}/infer`` and MLflow's ``/models/{name}/invocations``.

Each protocol supplies a ``Decoder`` (its body format: the model it names and the rows as a
float64 matrix); everything else is shared: the body is read and decoded on the event loop
(on a thread when large), the model row comes from the row cache
(``app.services.model_registry.model_versions.resolve_cached``), the rows are checked against the
model's width and the row limit, and the kernel sum runs on an evaluation slot, micro-batched with
the other small requests for the same model (``app.services.inference.batcher``). Keys and rate
limits are the routes' ``current_tenant`` dependency, body limits ``app.api.body_limit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request

from app.core.orm import Tenant
from app.services.inference import predictor
from app.services.inference.batcher import ClientGone, evaluations
from app.services.inference.cache import ModelEntry
from app.services.inference.instances import Matrix
from app.services.model_registry.model_versions import resolve_cached

# bodies larger than this are decoded on a thread, not on the event loop
PARSE_INLINE_BYTES = 256 << 10

P = TypeVar("P")


class Decoder(Protocol[P]):
    """A protocol's body format."""

    def parse(self, body: bytes, headers: Mapping[str, str], query: Mapping[str, str]) -> P:
        """The decoded body (``ProblemError`` when it is malformed)."""
        ...

    def reference(self, parsed: P) -> tuple[str | None, str | None]:
        """The model it names: ``(model_id, None)`` or ``(None, "name[@version|@alias]")``."""
        ...

    def matrix(self, parsed: P, model: ModelEntry, body: bytes) -> Matrix:
        """The rows as float64, checked against the model (width, finiteness, row limit)."""
        ...


@dataclass(frozen=True)
class Served(Generic[P]):
    """A request answered: what it sent, the model version and ``predictor.predict``'s
    output (labels, decision values, probabilities)."""

    parsed: P
    model: ModelEntry
    out: dict[str, Any]


async def serve(request: Request, tenant: Tenant, decoder: Decoder[P]) -> Served[P] | None:
    """Decode, resolve and evaluate one prediction request; ``None`` when the client left
    before its answer could matter (the route answers 499)."""
    ev = evaluations()
    ev.arriving += 1  # a batch waits (briefly) for requests still being read
    try:
        try:
            body = await request.body()
        except ClientDisconnect:
            return None
        headers, query = request.headers, request.query_params
        large = len(body) > PARSE_INLINE_BYTES
        if large:
            parsed = await run_in_threadpool(decoder.parse, body, headers, query)
        else:
            parsed = decoder.parse(body, headers, query)
        model_id, ref = decoder.reference(parsed)
        m = await resolve_cached(tenant, model_id, ref)
        if large:
            X = await run_in_threadpool(decoder.matrix, parsed, m, body)
        else:
            X = decoder.matrix(parsed, m, body)
    finally:
        ev.arriving -= 1

    async def connected() -> bool:
        return not await request.is_disconnected()

    try:
        out = await predictor.predict(m, X, connected)
    except ClientGone:  # nobody is waiting for a large request's answer: its work skipped
        return None
    return Served(parsed, m, out)
