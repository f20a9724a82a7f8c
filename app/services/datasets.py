"""Datasets: the row's life (parsing -> ready | failed), the stored files; list, read, delete.

``begin_dataset`` inserts the row in state ``parsing`` (the API process, before the parse);
``parse_and_store`` runs in the ingest child (``app.services.ingest_process``): decompress,
parse and validate, check the caps, write the contract files into a temp directory renamed
to ``datasets/{id}``, then move the row to ``ready`` -- only if it is still ``parsing`` and
not deleted, else the files are removed again. A refusal moves it to ``failed`` with its
problem (``mark_failed``); a row left ``parsing`` past the ingest time limit (its child and
API process gone) is failed when read (``expire_stale``, on the database's clock).
"""

from __future__ import annotations

import contextlib
import logging
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, object_session

from app.config import get_settings
from app.db import session_scope
from app.models import ACTIVE_STATES, Dataset, DatasetState, Job, Tenant, new_id, utcnow
from app.problems import ProblemError
from app.services import ingest, storage
from app.services.cursors import as_utc, page, split_page

log = logging.getLogger(__name__)

# a row may stay parsing this long past the ingest time limit before it counts as abandoned
STALE_GRACE_SECONDS = 60


def default_name(filename: str | None) -> str:
    """A display name from the client's file name (metadata only, never a path)."""
    base = re.split(r"[\\/]", filename or "")[-1]
    for suffix in (".gz", ".xz"):
        base = base.removesuffix(suffix)
    base = re.sub(r"[^\w.\- ]+", "_", base).strip()[:200]
    return base or "dataset"


def begin_dataset(session: Session, tenant: Tenant, *, filename: str | None, fmt: str,
                  name: str | None, sha256: str, size_bytes: int) -> Dataset:
    """Insert and commit the row of an upload about to be parsed (state ``parsing``)."""
    dataset_id = new_id()
    row = Dataset(id=dataset_id, tenant_id=tenant.id,
                  name=(name or "").strip()[:255] or default_name(filename), format=fmt,
                  n_rows=0, n_features=0, classes={}, sparse=False,
                  storage_path=storage.dataset_relpath(dataset_id), size_bytes=size_bytes,
                  sha256=sha256, state=DatasetState.PARSING)
    session.add(row)
    session.commit()
    return row


def parse_and_store(dataset_id: str, upload: Path, *, fmt: str, label_column: str,
                    n_features: int | None = None, sha256: str = "") -> None:
    """Parse ``upload`` and store it as dataset ``dataset_id``, moving its row to ready;
    raises ``ProblemError`` when the upload is refused (the caller records it)."""
    settings = get_settings()
    compression = ingest.detect_compression(upload)
    source = upload
    expanded: Path | None = None
    try:
        if compression:
            expanded = storage.ingest_tmp_path(dataset_id)
            with storage.storage_errors():
                ingest.decompress(upload, compression, expanded, settings.max_decompressed_bytes)
            source = expanded
        parsed = ingest.parse_file(source, fmt, label_column, n_features)
    finally:
        if expanded is not None:
            expanded.unlink(missing_ok=True)
    classes = ingest.class_counts(parsed.y)
    ingest.check_caps(parsed, classes, fmt)
    final = storage.dataset_dir(dataset_id)
    extra: dict[str, Any] = {"source_format": fmt, "compression": compression,
                             "sha256": sha256, "label_column": label_column}
    if parsed.feature_names is not None:
        extra["feature_names"] = parsed.feature_names
    with storage.storage_errors(), storage.atomic_dir(final) as work:
        meta = storage.write_dataset_files(work, parsed.X, parsed.y, extra)
    try:
        with session_scope() as s:
            done = s.execute(
                update(Dataset)
                .where(Dataset.id == dataset_id, Dataset.state == DatasetState.PARSING,
                       Dataset.deleted_at.is_(None))
                .values(state=DatasetState.READY, n_rows=int(parsed.X.shape[0]),
                        n_features=int(parsed.X.shape[1]), classes=classes,
                        sparse=meta["layout"] == "sparse",
                        content_sha256=meta["content_sha256"])).rowcount
    except BaseException:
        storage.remove_dataset_files(dataset_id)
        raise
    if not done:  # deleted (or failed as abandoned) while it was parsed
        storage.remove_dataset_files(dataset_id)
        log.info("dataset %s parsed but no longer wanted: files removed", dataset_id)
        return
    log.info("dataset %s stored: %d x %d (%s, %s)", dataset_id, parsed.X.shape[0],
             parsed.X.shape[1], fmt, meta["layout"])


def backfill_content_hashes() -> tuple[int, list[str]]:
    """Compute the content hash of every ready dataset stored without one (before the
    column existed), streaming its stored rows; ``(hashed, ids whose files are missing)``.
    Idempotent; ``sodm backfill-hashes`` runs it."""
    with session_scope() as s:
        ids = list(s.scalars(select(Dataset.id).where(
            Dataset.content_sha256.is_(None), Dataset.state == DatasetState.READY,
            Dataset.deleted_at.is_(None)).order_by(Dataset.created_at)))
    done, missing = 0, []
    for dataset_id in ids:
        try:
            digest = storage.stored_content_sha256(storage.dataset_dir(dataset_id))
        except FileNotFoundError:
            missing.append(dataset_id)
            continue
        with session_scope() as s:
            s.execute(update(Dataset).where(Dataset.id == dataset_id,
                                            Dataset.content_sha256.is_(None))
                      .values(content_sha256=digest))
        done += 1
    return done, missing


def mark_failed(dataset_id: str, problem: dict[str, Any]) -> bool:
    """Move a parsing row to failed with its problem body; False when it was not parsing."""
    with session_scope() as s:
        return bool(s.execute(
            update(Dataset).where(Dataset.id == dataset_id,
                                  Dataset.state == DatasetState.PARSING)
            .values(state=DatasetState.FAILED, problem=problem)).rowcount)


def abandoned_problem() -> dict[str, Any]:
    limit = get_settings().ingest_time_limit_seconds
    return ProblemError(503, "Parse interrupted",
                        detail="the process parsing this upload stopped before it finished "
                               "(a restart of the service); upload it again",
                        type="ingest-interrupted", limit_seconds=limit).body()


def expire_stale(session: Session, tenant: Tenant) -> None:
    """Fail this tenant's rows left parsing past the ingest time limit (database clock)."""
    age = timedelta(seconds=get_settings().ingest_time_limit_seconds + STALE_GRACE_SECONDS)
    res = session.execute(
        update(Dataset).where(Dataset.tenant_id == tenant.id,
                              Dataset.state == DatasetState.PARSING,
                              Dataset.created_at < func.now() - age)
        .values(state=DatasetState.FAILED, problem=abandoned_problem()))
    if res.rowcount:
        session.commit()


def settle(session: Session, dataset_id: str) -> Dataset | None:
    """After the upload's wait: the row if ready or still parsing; a failed row is deleted
    (the client gets its problem as the answer, nothing is kept) and its problem raised."""
    ds = session.get(Dataset, dataset_id)
    if ds is None:
        return None
    session.refresh(ds)
    if ds.state == DatasetState.FAILED:
        problem = dict(ds.problem or {})
        session.execute(delete(Dataset).where(Dataset.id == dataset_id))
        session.commit()
        raise ProblemError.from_body(problem)
    return ds


def get_dataset(session: Session, tenant: Tenant, dataset_id: str) -> Dataset:
    """A live dataset of this tenant; anything else (other tenant, deleted) is a 404."""
    expire_stale(session, tenant)
    ds = session.get(Dataset, dataset_id)
    if ds is None or ds.tenant_id != tenant.id or ds.deleted_at is not None:
        raise ProblemError(404, "Dataset not found", detail=f"no dataset {dataset_id!r}",
                           type="not-found")
    return ds


def list_datasets(session: Session, tenant: Tenant, cursor: str | None,
                  limit: int) -> tuple[list[Dataset], str | None]:
    expire_stale(session, tenant)
    stmt = select(Dataset).where(Dataset.tenant_id == tenant.id, Dataset.deleted_at.is_(None))
    rows = list(session.scalars(page(stmt, Dataset, cursor, limit)).all())
    return split_page(rows, limit)


def delete_dataset(session: Session, tenant: Tenant, dataset_id: str) -> None:
    """Soft-delete the row, then remove the files. Refused (409) while a job uses it."""
    ds = get_dataset(session, tenant, dataset_id)
    active = session.scalar(
        select(Job.id).where(Job.state.in_(ACTIVE_STATES),
                             (Job.dataset_id == ds.id) | (Job.test_dataset_id == ds.id))
        .limit(1))
    if active is not None:
        raise ProblemError(409, "Dataset in use", detail=f"job {active} still uses this dataset",
                           type="dataset-in-use", job_id=active)
    ds.deleted_at = utcnow()
    session.commit()
    with contextlib.suppress(OSError):
        storage.remove_dataset_files(ds.id)


def duplicates_of(session: Session, rows: list[Dataset]) -> dict[str, str]:
    """``{dataset id: the id of the tenant's earliest live dataset with the same content}``
    for the rows that have such an earlier twin (one query for a page of rows)."""
    hashes = {d.content_sha256 for d in rows if d.content_sha256}
    if not hashes:
        return {}
    tenants = {d.tenant_id for d in rows}
    twins = session.execute(
        select(Dataset.id, Dataset.tenant_id, Dataset.content_sha256, Dataset.created_at)
        .where(Dataset.tenant_id.in_(tenants), Dataset.content_sha256.in_(hashes),
               Dataset.state == DatasetState.READY, Dataset.deleted_at.is_(None))
        .order_by(Dataset.created_at, Dataset.id)).all()
    first: dict[tuple[str, str], tuple[str, Any]] = {}
    for twin_id, tenant_id, digest, created in twins:
        first.setdefault((tenant_id, digest), (twin_id, as_utc(created)))
    out = {}
    for d in rows:
        twin = first.get((d.tenant_id, d.content_sha256 or ""))
        if twin is not None and twin[0] != d.id and twin[1] <= as_utc(d.created_at):
            out[d.id] = twin[0]
    return out


def datasets_out(session: Session, rows: list[Dataset]) -> list[dict[str, Any]]:
    """The API representation of a page of datasets (their duplicates in one query)."""
    dups = duplicates_of(session, rows)
    return [_out(d, dups.get(d.id)) for d in rows]


def dataset_out(ds: Dataset) -> dict[str, Any]:
    """One dataset (its earlier twin looked up in the row's own session)."""
    session = object_session(ds)
    return _out(ds, duplicates_of(session, [ds]).get(ds.id) if session is not None else None)


def _out(ds: Dataset, duplicate_of: str | None) -> dict[str, Any]:
    return {"id": ds.id, "name": ds.name, "format": ds.format, "n_rows": ds.n_rows,
            "n_features": ds.n_features, "classes": ds.classes,
            "layout": "sparse" if ds.sparse else "dense", "size_bytes": ds.size_bytes,
            "sha256": ds.sha256, "content_sha256": ds.content_sha256,
            "duplicate_of": duplicate_of, "state": ds.state, "problem": ds.problem,
            "created_at": as_utc(ds.created_at)}


def require_ready(ds: Dataset, field: str = "dataset_id") -> None:
    """409 unless the dataset is ready (still parsing, or its parse failed)."""
    if ds.state == DatasetState.READY:
        return
    detail = ("its upload is still being parsed; retry when GET /datasets/{id} says ready"
              if ds.state == DatasetState.PARSING else "its upload was refused (see its problem)")
    raise ProblemError(409, "Dataset not ready", detail=f"dataset {ds.id}: {detail}",
                       type="dataset-not-ready", field=field, state=ds.state)
