"""Trained model versions: lookup by id or ``name[@version]``, listing, deletion."""

from __future__ import annotations

import logging
import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.orm import Dataset, Model, ModelAlias, ModelTag, Tenant, utcnow
from app.core.problems import ProblemError
from app.schemas.models import ALIAS_PATTERN, MAX_VERSION
from app.services.cursors import as_utc, page, split_page
from app.services.inference import cache
from app.services.inference.cache import ModelEntry
from app.services.model_registry import model_store, registry

log = logging.getLogger(__name__)



def _not_found(what: str) -> ProblemError:
    return ProblemError(404, "Model not found", detail=f"no model {what}",
                        type="not-found")


def get_model(session: Session, tenant: Tenant, model_id: str) -> Model:
    m = session.get(Model, model_id)
    if m is None or m.tenant_id != tenant.id or m.deleted_at is not None:
        raise _not_found(repr(model_id))
    return m


def resolve(session: Session, tenant: Tenant, model_id: str | None, ref: str | None) -> Model:
    """``model_id``, or ``ref`` = ``"name"`` / ``"name@latest"`` (the newest live version),
    ``"name@3"`` (version 3) or ``"name@champion"`` (the version an alias points at)."""
    if (model_id is None) == (ref is None):
        raise ProblemError(422, "Invalid model reference",
                           detail="give exactly one of model_id and model",
                           type="invalid-request",
                           errors=[{"field": "model_id", "message": "model_id xor model"}])
    if model_id is not None:
        return get_model(session, tenant, model_id)
    name, _, version = ref.partition("@")
    number = version.isascii() and version.isdigit()  # str.isdigit() alone takes "²"
    stmt = select(Model).where(Model.tenant_id == tenant.id, Model.name == name,
                               Model.deleted_at.is_(None))
    if version and not number and version != "latest":
        if not re.fullmatch(ALIAS_PATTERN, version):
            raise ProblemError(422, "Invalid model reference",
                               detail=f"{version!r} is neither a version number nor an alias",
                               type="invalid-request",
                               errors=[{"field": "model",
                                        "message": "name, name@<version> or name@<alias>"}])
        m = registry.alias_target(session, tenant, name, version)
        if m is None:
            raise _not_found(f"{ref!r} (no alias {version!r} of model {name!r})")
        return m
    if number:
        if int(version) > MAX_VERSION:  # no such version (and past the column's range)
            raise _not_found(repr(ref))
        stmt = stmt.where(Model.version == int(version))
    m = session.scalars(stmt.order_by(Model.version.desc()).limit(1)).first()
    if m is None:
        raise _not_found(repr(ref))
    return m


def list_models(session: Session, tenant: Tenant, cursor: str | None, limit: int, *,
                name: str | None = None, dataset_id: str | None = None,
                alias: str | None = None, tags: list[str] | None = None,
                dataset_sha256: str | None = None) -> tuple[list[Model], str | None]:
    """Live versions, newest first, filtered by name, dataset (by id, or by content hash:
    every dataset of the tenant with that content), alias and every tag given."""
    stmt = select(Model).where(Model.tenant_id == tenant.id, Model.deleted_at.is_(None))
    if name:
        stmt = stmt.where(Model.name == name)
    if dataset_id:
        stmt = stmt.where(Model.dataset_id == dataset_id)
    if dataset_sha256:
        stmt = stmt.where(Model.dataset_id.in_(select(Dataset.id).where(
            Dataset.tenant_id == tenant.id, Dataset.content_sha256 == dataset_sha256.lower())))
    if alias:
        stmt = stmt.where(Model.id.in_(select(ModelAlias.model_id).where(
            ModelAlias.tenant_id == tenant.id, ModelAlias.alias == alias)))
    for tag in tags or ():
        stmt = stmt.where(Model.id.in_(select(ModelTag.model_id).where(ModelTag.tag == tag)))
    return split_page(list(session.scalars(page(stmt, Model, cursor, limit))), limit)


def onnx_bytes(m: Model) -> bytes:
    """The model as an ONNX graph (``solver.io.export.to_onnx``), built from its stored file."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ProblemError(501, "ONNX export unavailable",
                           detail="this server lacks the onnx package (pip install "
                                  "'sodm[onnx]')", type="onnx-unavailable"
                           ) from None
    from solver.io.export import to_onnx_bytes

    est = model_store.load(m.id, m.file_sha256 or "")
    try:
        return to_onnx_bytes(est, name=f"{m.name}-v{m.version}")
    except ValueError as exc:  # e.g. too large for one protobuf
        raise ProblemError(422, "Model cannot be exported", detail=str(exc),
                           type="onnx-export-failed") from None


def delete_model(session: Session, tenant: Tenant, model_id: str) -> None:
    """Soft-delete the row (ids stay unique) and delete its bytes, in one transaction."""
    m = get_model(session, tenant, model_id)
    m.deleted_at = utcnow()
    registry.drop_aliases_of(session, m.id)
    model_store.delete(session, m.id)
    session.commit()
    from app.services.inference import invalidation

    invalidation.publish("model", model_id=m.id, tenant_id=m.tenant_id, name=m.name,
                         deleted=True)


async def resolve_cached(tenant: Tenant, model_id: str | None, ref: str | None) -> ModelEntry:
    """``resolve`` through the model-row cache (``SODM_MODEL_ROW_CACHE_SECONDS``; dropped
    in every API process when a model of that name is deleted or added)."""
    def lookup() -> ModelEntry:
        from app.core.db import get_read_sessionmaker

        with get_read_sessionmaker()() as session:
            m = resolve(session, tenant, model_id, ref)
            return ModelEntry(m.id, m.tenant_id, m.name, int(m.version), int(m.n_features),
                              m.file_sha256 or "",
                              tuple(m.feature_names) if m.feature_names else None)

    entry = await cache.model_loader().get((tenant.id, model_id, ref), lookup)
    if entry is None:  # lookup raises rather than return None
        raise _not_found(repr(ref or model_id))
    return entry


def models_out(session: Session, rows: list[Model]) -> list[dict[str, Any]]:
    """The API representation of a page of models (tags, aliases and the datasets' lineage
    in three queries)."""
    tags, aliases = registry.labels_of(session, [m.id for m in rows])
    lineage = dataset_lineage(session, {m.dataset_id for m in rows})
    return [model_out(m, tags.get(m.id, []), aliases.get(m.id, []), lineage.get(m.dataset_id))
            for m in rows]


def dataset_lineage(session: Session, ids: set[str]) -> dict[str, dict[str, Any]]:
    """What each model shows of its training dataset: id, name, content hash, rows and
    features (the dataset row stays after a delete: deletes are soft)."""
    if not ids:
        return {}
    rows = session.execute(select(Dataset.id, Dataset.name, Dataset.content_sha256,
                                  Dataset.n_rows, Dataset.n_features)
                           .where(Dataset.id.in_(ids))).all()
    return {i: {"id": i, "name": name, "content_sha256": digest, "n_rows": int(n),
                "n_features": int(d)} for i, name, digest, n, d in rows}


def model_out(m: Model, tags: list[str] | None = None, aliases: list[str] | None = None,
              dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": m.id, "name": m.name, "version": m.version, "algorithm": m.algorithm,
        "backend": m.backend, "dataset_id": m.dataset_id, "job_id": m.job_id,
        "dataset": dataset or {"id": m.dataset_id, "name": None, "content_sha256": None,
                               "n_rows": None, "n_features": None},
        "params": m.params or {}, "metrics": m.metrics or {}, "margin": m.margin or {},
        "fit_info": m.fit_info or {},
        "train_seconds": float(m.train_seconds or 0.0),
        "n_support_vectors": int(m.n_support_vectors or 0), "n_features": m.n_features,
        "feature_names": m.feature_names,
        "classes": list(m.classes or []), "file_sha256": m.file_sha256 or "",
        "description": m.description or "", "tags": tags or [], "aliases": aliases or [],
        "created_at": as_utc(m.created_at),
        "links": {"self": f"/models/{m.id}", "file": f"/models/{m.id}/file",
                  "onnx": f"/models/{m.id}/onnx", "job": f"/jobs/{m.job_id}"},
    }
