"""Datasets: turn a received upload into stored files + a row; list, read, delete.

Order of effects on create: parse and validate (nothing written yet), write the contract files
into a temp directory and rename it to ``datasets/{id}``, then commit the row; a failure at
any step removes what was written, so a failed upload leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import get_settings
from app.models import ACTIVE_STATES, Dataset, Job, Tenant, new_id, utcnow
from app.problems import ProblemError
from app.services import ingest, storage
from app.services.cursors import as_utc, page, split_page

log = logging.getLogger(__name__)

def default_name(filename: str | None) -> str:
    """A display name from the client's file name (metadata only, never a path)."""
    base = re.split(r"[\\/]", filename or "")[-1]
    for suffix in (".gz", ".xz"):
        base = base.removesuffix(suffix)
    base = re.sub(r"[^\w.\- ]+", "_", base).strip()[:200]
    return base or "dataset"


def create_dataset(session: Session, tenant: Tenant, upload: Path, *, filename: str | None,
                   declared_format: str | None, name: str | None, label_column: str,
                   sha256: str, size_bytes: int, n_features: int | None = None) -> Dataset:
    """Validate and store an upload already on disk (the caller removes ``upload``)."""
    settings = get_settings()
    compression = ingest.detect_compression(upload)
    fmt = ingest.infer_format(declared_format, filename)
    source = upload
    expanded: Path | None = None
    try:
        if compression:
            expanded = storage.new_tmp_path(".raw")
            with storage.storage_errors():
                ingest.decompress(upload, compression, expanded, settings.max_decompressed_bytes)
            source = expanded
        parsed = ingest.parse_file(source, fmt, label_column, n_features)
    finally:
        if expanded is not None:
            expanded.unlink(missing_ok=True)
    classes = ingest.class_counts(parsed.y)
    dataset_id = new_id()
    final = storage.dataset_dir(dataset_id)
    extra: dict[str, Any] = {"source_format": fmt, "compression": compression,
                             "sha256": sha256, "label_column": label_column}
    if parsed.feature_names is not None:
        extra["feature_names"] = parsed.feature_names
    with storage.storage_errors(), storage.atomic_dir(final) as work:
        meta = storage.write_dataset_files(work, parsed.X, parsed.y, extra)
    row = Dataset(id=dataset_id, tenant_id=tenant.id,
                  name=(name or "").strip()[:255] or default_name(filename), format=fmt,
                  n_rows=int(parsed.X.shape[0]), n_features=int(parsed.X.shape[1]),
                  classes=classes, sparse=meta["layout"] == "sparse",
                  storage_path=storage.dataset_relpath(dataset_id), size_bytes=size_bytes,
                  sha256=sha256)
    try:
        session.add(row)
        session.commit()
    except BaseException:
        session.rollback()
        storage.remove_dataset_files(dataset_id)
        raise
    log.info("dataset %s stored: %d x %d (%s, %s)", dataset_id, row.n_rows, row.n_features,
             fmt, meta["layout"])
    return row


def get_dataset(session: Session, tenant: Tenant, dataset_id: str) -> Dataset:
    """A live dataset of this tenant; anything else (other tenant, deleted) is a 404."""
    ds = session.get(Dataset, dataset_id)
    if ds is None or ds.tenant_id != tenant.id or ds.deleted_at is not None:
        raise ProblemError(404, "Dataset not found", detail=f"no dataset {dataset_id!r}",
                           type="not-found")
    return ds


def list_datasets(session: Session, tenant: Tenant, cursor: str | None,
                  limit: int) -> tuple[list[Dataset], str | None]:
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


def dataset_out(ds: Dataset) -> dict[str, Any]:
    return {"id": ds.id, "name": ds.name, "format": ds.format, "n_rows": ds.n_rows,
            "n_features": ds.n_features, "classes": ds.classes,
            "layout": "sparse" if ds.sparse else "dense", "size_bytes": ds.size_bytes,
            "sha256": ds.sha256, "created_at": as_utc(ds.created_at)}
