"""The model registry around the model versions: aliases per model name, tags and
descriptions per version.

An alias (``champion``) points at one live version of a name and moves only when
``PUT /models/{name}/aliases/{alias}`` moves it: a new version never changes it, deleting the
version it points at removes it. ``/predict`` resolves ``name@alias`` through
``app.services.model_registry.model_versions.resolve``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.orm import Model, ModelAlias, ModelTag, Tenant, WebhookEvent, utcnow
from app.core.problems import ProblemError
from app.services.cursors import as_utc

MAX_TAGS = 32
# ``name@latest`` is the newest version; it cannot be set as an alias
RESERVED_ALIASES = frozenset({"latest"})


def _not_found(detail: str) -> ProblemError:
    return ProblemError(404, "Not found", detail=detail, type="not-found")


def _invalid(field: str, detail: str) -> ProblemError:
    return ProblemError(422, "Invalid request", detail=detail,
                        type="invalid-request",
                        errors=[{"field": field, "message": detail}])


# ---------------------------------------------------------------------------- aliases
def alias_target(session: Session, tenant: Tenant, name: str, alias: str) -> Model | None:
    """The live version ``alias`` points at, or None."""
    row = session.get(ModelAlias, (tenant.id, name, alias))
    if row is None:
        return None
    m = session.get(Model, row.model_id)
    return m if m is not None and m.deleted_at is None else None


def _version_of(session: Session, tenant: Tenant, name: str, version: int | None,
                model_id: str | None) -> Model:
    if (version is None) == (model_id is None):
        raise _invalid("version", "give exactly one of version and model_id")
    if model_id is not None:
        m = session.get(Model, model_id)
        if m is None or m.tenant_id != tenant.id or m.deleted_at is not None:
            raise _not_found(f"no model {model_id!r}")
        if m.name != name:
            raise _invalid("model_id", f"model {model_id} is version {m.version} of "
                                       f"{m.name!r}, not of {name!r}")
        return m
    m = session.scalars(select(Model).where(Model.tenant_id == tenant.id, Model.name == name,
                                            Model.version == version,
                                            Model.deleted_at.is_(None))).first()
    if m is None:
        raise _not_found(f"no version {version} of model {name!r}")
    return m


def set_alias(session: Session, tenant: Tenant, name: str, alias: str, *,
              version: int | None = None, model_id: str | None = None) -> ModelAlias:
    """Point ``name@alias`` at a live version (created, or moved from where it pointed)."""
    if alias in RESERVED_ALIASES:
        raise _invalid("alias", f"{alias!r} is reserved (name@latest is the newest version)")
    m = _version_of(session, tenant, name, version, model_id)
    for _ in range(2):  # a concurrent PUT of the same alias may win the insert: then update
        row = session.get(ModelAlias, (tenant.id, name, alias))
        before = None if row is None else row.model_id
        if row is None:
            row = ModelAlias(tenant_id=tenant.id, name=name, alias=alias, model_id=m.id,
                             updated_at=utcnow())
            session.add(row)
        else:
            row.model_id, row.updated_at = m.id, utcnow()
        if before != m.id:
            _announce(session, tenant, name, alias, m, before)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            continue
        _moved(tenant, name)
        return row
    raise ProblemError(409, "Conflict", detail="the alias changed concurrently; retry",
                       type="conflict")


def delete_alias(session: Session, tenant: Tenant, name: str, alias: str) -> None:
    res = session.execute(delete(ModelAlias).where(
        ModelAlias.tenant_id == tenant.id, ModelAlias.name == name, ModelAlias.alias == alias)
        .returning(ModelAlias.alias, ModelAlias.model_id))
    res = res.first()
    if res is None:
        session.rollback()
        raise _not_found(f"no alias {alias!r} of model {name!r}")
    _announce(session, tenant, name, alias, None, res.model_id)
    session.commit()
    _moved(tenant, name)


def _announce(session: Session, tenant: Tenant, name: str, alias: str, to: Model | None,
              before: str | None) -> None:
    """The ``model.alias_moved`` webhook event, in the transaction that moves the alias
    (``to`` None: the alias was deleted)."""
    from app.services.notifications import webhook_endpoints as webhooks

    webhooks.emit(session, tenant.id, WebhookEvent.MODEL_ALIAS_MOVED, {
        "name": name, "alias": alias, "model_id": to.id if to is not None else None,
        "version": int(to.version) if to is not None else None,
        "previous_model_id": before})


def _moved(tenant: Tenant, name: str) -> None:
    """Drop cached resolutions of the name (``name@alias`` included) in every API process."""
    from app.services.inference import invalidation

    invalidation.publish("model", tenant_id=tenant.id, name=name)


def list_aliases(session: Session, tenant: Tenant, name: str) -> list[ModelAlias]:
    return list(session.scalars(select(ModelAlias).where(
        ModelAlias.tenant_id == tenant.id, ModelAlias.name == name).order_by(ModelAlias.alias)))


def drop_aliases_of(session: Session, model_id: str) -> None:
    """Remove the aliases pointing at a version being deleted (the caller commits)."""
    session.execute(delete(ModelAlias).where(ModelAlias.model_id == model_id))


def alias_out(row: ModelAlias, session: Session) -> dict[str, Any]:
    m = session.get(Model, row.model_id)
    return {"name": row.name, "alias": row.alias, "model_id": row.model_id,
            "version": m.version if m is not None else None,
            "updated_at": as_utc(row.updated_at),
            "links": {"model": f"/models/{row.model_id}"}}


# ------------------------------------------------------------------ tags, description
def update_model(session: Session, m: Model, *, description: str | None,
                 tags: list[str] | None) -> None:
    """PATCH: a new description and/or the whole set of tags (``None``: unchanged)."""
    if description is not None:
        m.description = description
    if tags is not None:
        wanted = sorted(set(tags))
        if len(wanted) > MAX_TAGS:
            raise _invalid("tags", f"{len(wanted)} tags; at most {MAX_TAGS}")
        session.execute(delete(ModelTag).where(ModelTag.model_id == m.id))
        session.add_all(ModelTag(model_id=m.id, tag=t) for t in wanted)
    session.commit()


def labels_of(session: Session, model_ids: list[str]
              ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """``(tags, aliases)`` of each model id, in two queries for a whole page."""
    tags: dict[str, list[str]] = defaultdict(list)
    aliases: dict[str, list[str]] = defaultdict(list)
    if not model_ids:
        return tags, aliases
    for mid, tag in session.execute(select(ModelTag.model_id, ModelTag.tag)
                                    .where(ModelTag.model_id.in_(model_ids))
                                    .order_by(ModelTag.tag)):
        tags[mid].append(tag)
    for mid, alias in session.execute(select(ModelAlias.model_id, ModelAlias.alias)
                                      .where(ModelAlias.model_id.in_(model_ids))
                                      .order_by(ModelAlias.alias)):
        aliases[mid].append(alias)
    return tags, aliases
