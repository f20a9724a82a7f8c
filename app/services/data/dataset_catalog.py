"""Datasets: the row's life (parsing -> ready | failed), the stored files; list, read, delete.

``begin_dataset`` inserts the row in state ``parsing``, owned by the API process that
received the upload (``ingest_owner``, ``heartbeat_at``); ``claim_parse`` gives it a parse
slot (``parse_started_at``) unless its tenant already has ``SODM_INGEST_TENANT_PARSES``
parses running in the whole service; the parsing child then takes it over (``take_over``,
``heartbeat``). ``parse_and_store`` runs in that child (``app.services.data.ingest_process``):
decompress (charged to the tenant's storage quota as it is written), parse and validate,
check the caps, write the contract files into the upload's directory and rename them to
``datasets/{id}``, then move the row to ``ready`` -- only if it is still ``parsing`` and
not deleted, else the files are removed again. A refusal moves it to ``failed`` with its
problem (``mark_failed``). A row whose owner is gone (``fail_stuck``: the owner process is
dead on this machine, or, where that cannot be told, its heartbeat is older than
``STALE_SECONDS``) is failed ``ingest-interrupted`` by the sweep and when read.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, object_session

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.orm import ACTIVE_STATES, Dataset, DatasetState, Job, Tenant, new_id, utcnow
from app.core.problems import ProblemError, problem_type
from app.services.cursors import as_utc, page, split_page
from app.services.data import ingest, process_owner
from app.services.data.upload_dirs import UploadDir
from app.services.filestore import storage
from app.services.tenancy import quotas

log = logging.getLogger(__name__)

# a row whose owner cannot be checked from here is abandoned once its heartbeat (every
# 10 s, app.services.data.ingest_process / ingest_queue) is this old
STALE_SECONDS = 40.0
# the problem type of a parse whose owner died (abandoned_problem)
INTERRUPTED = "ingest-interrupted"


class Claim(Enum):
    """What ``claim_parse`` found: the parse may start, the tenant has its share of
    parses running, or the row is no longer waiting (deleted, failed)."""

    STARTED = "started"
    TENANT_BUSY = "tenant-busy"
    GONE = "gone"


def default_name(filename: str | None) -> str:
    """A display name from the client's file name (metadata only, never a path)."""
    base = re.split(r"[\\/]", filename or "")[-1]
    for suffix in (".gz", ".xz"):
        base = base.removesuffix(suffix)
    base = re.sub(r"[^\w.\- ]+", "_", base).strip()[:200]
    return base or "dataset"


def _db_now(session: Session) -> Any:
    """The database's clock (Postgres ``now()``); SQLite, one machine: this process's."""
    return func.now() if session.get_bind().dialect.name == "postgresql" else utcnow()


def begin_dataset(session: Session, tenant: Tenant, *, filename: str | None, fmt: str,
                  name: str | None, sha256: str, size_bytes: int,
                  dataset_id: str | None = None) -> Dataset:
    """Insert and commit the row of an upload about to be parsed (state ``parsing``, owned
    by this process, charged its ``size_bytes``)."""
    dataset_id = dataset_id or new_id()
    row = Dataset(id=dataset_id, tenant_id=tenant.id,
                  name=(name or "").strip()[:255] or default_name(filename), format=fmt,
                  n_rows=0, n_features=0, classes={}, sparse=False,
                  storage_path=storage.dataset_relpath(dataset_id), size_bytes=size_bytes,
                  stored_bytes=size_bytes, sha256=sha256, state=DatasetState.PARSING,
                  ingest_owner=process_owner.me().token, heartbeat_at=_db_now(session))
    session.add(row)
    session.commit()
    return row


def _waiting(dataset_id: str) -> Any:
    return (Dataset.id == dataset_id) & (Dataset.state == DatasetState.PARSING) & (
        Dataset.deleted_at.is_(None))


def claim_parse(dataset_id: str, tenant_id: str) -> Claim:
    """Give the row a parse slot unless its tenant has ``SODM_INGEST_TENANT_PARSES``
    parses running in any API process (counted under the tenant's row lock, so concurrent
    claims see one another; a dead owner's rows are failed first)."""
    cap = get_settings().ingest_tenant_parses
    with session_scope() as s:
        s.execute(select(Tenant.id).where(Tenant.id == tenant_id).with_for_update())
        fail_stuck(s, tenant_id)
        running = s.scalar(select(func.count()).select_from(Dataset).where(
            Dataset.tenant_id == tenant_id, Dataset.state == DatasetState.PARSING,
            Dataset.deleted_at.is_(None), Dataset.parse_started_at.is_not(None))) or 0
        if running >= cap:
            waiting = s.scalar(select(func.count()).select_from(Dataset).where(
                _waiting(dataset_id)))
            return Claim.TENANT_BUSY if waiting else Claim.GONE
        now = _db_now(s)
        hit = s.execute(update(Dataset).where(_waiting(dataset_id),
                                              Dataset.parse_started_at.is_(None))
                        .values(parse_started_at=now, heartbeat_at=now)).rowcount
    return Claim.STARTED if hit else Claim.GONE


def take_over(dataset_id: str) -> bool:
    """The parsing child becomes the row's owner; False when the row is no longer
    waiting for it."""
    with session_scope() as s:
        return bool(s.execute(update(Dataset).where(_waiting(dataset_id)).values(
            ingest_owner=process_owner.me().token, heartbeat_at=_db_now(s))).rowcount)


def heartbeat(dataset_id: str) -> bool:
    """Refresh the row's heartbeat; False when it is no longer parsing (deleted, failed)."""
    with session_scope() as s:
        return bool(s.execute(update(Dataset).where(_waiting(dataset_id))
                              .values(heartbeat_at=_db_now(s))).rowcount)


def heartbeat_owned(dataset_ids: list[str]) -> None:
    """Refresh the rows of uploads this process holds while they wait for a slot."""
    if not dataset_ids:
        return
    with session_scope() as s:
        s.execute(update(Dataset).where(Dataset.id.in_(dataset_ids),
                                        Dataset.state == DatasetState.PARSING)
                  .values(heartbeat_at=_db_now(s)))


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def parse_and_store(dataset_id: str, upload: UploadDir, *, tenant_id: str, fmt: str,
                    label_column: str, n_features: int | None = None, sha256: str = "",
                    on_bytes: Callable[[int], None] = lambda n: None) -> None:
    """Parse ``upload`` and store it as dataset ``dataset_id``, moving its row to ready;
    raises ``ProblemError`` when the upload is refused (the caller records it).
    ``on_bytes(n)``: the parse reads ``n`` bytes (the upload, then what it decompresses to
    as it grows): the child's budget follows it. The bytes on disk are charged to the
    tenant's storage quota as they are written (``quotas.StorageCharge``)."""
    settings = get_settings()
    body = upload.body.stat().st_size
    charge = quotas.StorageCharge(dataset_id, tenant_id, charged=body)
    compression = ingest.detect_compression(upload.body)
    source = upload.body
    if compression:
        def grew(expanded: int) -> None:
            on_bytes(expanded)
            charge.update(body + expanded)

        with storage.storage_errors():
            ingest.decompress(upload.body, compression, upload.expanded,
                              settings.max_decompressed_bytes, progress=grew)
        source = upload.expanded
    parsed = ingest.parse_file(source, fmt, label_column, n_features)
    upload.body.unlink(missing_ok=True)
    upload.expanded.unlink(missing_ok=True)
    classes = ingest.class_counts(parsed.y)
    ingest.check_caps(parsed, classes, fmt)
    final = storage.dataset_dir(dataset_id)
    extra: dict[str, Any] = {"source_format": fmt, "compression": compression,
                             "sha256": sha256, "label_column": label_column}
    if parsed.feature_names is not None:
        extra["feature_names"] = parsed.feature_names
    with storage.storage_errors(), storage.assembled_dir(final, scratch=upload.path) as work:
        meta = storage.write_dataset_files(work, parsed.X, parsed.y, extra)
        stored = dir_bytes(work)
        charge.update(stored, force=True)  # 507 before the files are put in place
    try:
        with session_scope() as s:
            done = s.execute(
                update(Dataset).where(_waiting(dataset_id))
                .values(state=DatasetState.READY, n_rows=int(parsed.X.shape[0]),
                        n_features=int(parsed.X.shape[1]), classes=classes,
                        sparse=meta["layout"] == "sparse", stored_bytes=stored,
                        content_sha256=meta["content_sha256"])).rowcount
    except BaseException:
        storage.remove_dataset_files(dataset_id)
        raise
    if not done:  # deleted (or failed as abandoned) while it was parsed
        storage.remove_dataset_files(dataset_id)
        log.info("dataset %s parsed but no longer wanted: files removed", dataset_id)
        return
    log.info("dataset %s stored: %d x %d (%s, %s, %d bytes)", dataset_id, parsed.X.shape[0],
             parsed.X.shape[1], fmt, meta["layout"], stored)


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


def mark_failed(dataset_id: str, problem: dict[str, Any], *,
                over_interrupted: bool = False) -> bool:
    """Move a parsing row to failed with its problem body (it holds no bytes any more);
    False when it was not parsing.

    ``over_interrupted``: the caller knows why the parse ended (the watcher of a child that
    a limit killed), so a row a sweep failed ``ingest-interrupted`` in between (it saw the
    dead child first) takes this problem instead: the client is told the limit, not a
    restart."""
    with session_scope() as s:
        if s.execute(
                update(Dataset).where(Dataset.id == dataset_id,
                                      Dataset.state == DatasetState.PARSING)
                .values(state=DatasetState.FAILED, problem=problem, stored_bytes=0)).rowcount:
            return True
        if not over_interrupted:
            return False
        ds = s.get(Dataset, dataset_id, with_for_update=True)
        if ds is None or ds.state != DatasetState.FAILED or ds.deleted_at is not None \
                or not is_interrupted(ds.problem):
            return False
        ds.problem = problem
        return True


def abandoned_problem() -> dict[str, Any]:
    return ProblemError(503, "Parse interrupted",
                        detail="the process parsing this upload stopped before it finished "
                               "(a restart or crash of the service); upload it again",
                        type=INTERRUPTED).body()


def is_interrupted(problem: dict[str, Any] | None) -> bool:
    """Whether a failed row's problem is :func:`abandoned_problem`'s."""
    return (problem or {}).get("type") == problem_type(INTERRUPTED)


def _aware(ts: datetime | None) -> datetime | None:
    """SQLite hands back naive UTC timestamps."""
    return ts if ts is None or ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def fail_stuck(session: Session, tenant_id: str | None = None) -> list[str]:
    """Fail (``ingest-interrupted``) the parsing rows (of one tenant, or all) whose owner
    is gone: dead on this machine, or unknown here and unheard of for ``STALE_SECONDS``
    (database clock). The caller commits; returns their ids."""
    stmt = select(Dataset.id, Dataset.ingest_owner, Dataset.heartbeat_at).where(
        Dataset.state == DatasetState.PARSING, Dataset.deleted_at.is_(None))
    if tenant_id is not None:
        stmt = stmt.where(Dataset.tenant_id == tenant_id)
    rows = session.execute(stmt).all()
    if not rows:
        return []
    now = _aware(session.scalar(select(func.now()))) if session.get_bind().dialect.name == (
        "postgresql") else utcnow()
    stale_before = now - timedelta(seconds=STALE_SECONDS)
    failed = []
    for dataset_id, owner, beat in rows:
        alive = process_owner.alive(owner)
        if alive is True or (alive is None and beat is not None
                             and _aware(beat) >= stale_before):
            continue
        hit = session.execute(update(Dataset).where(
            Dataset.id == dataset_id, Dataset.state == DatasetState.PARSING,
            Dataset.ingest_owner.is_not_distinct_from(owner))
            .values(state=DatasetState.FAILED, problem=abandoned_problem(), stored_bytes=0))
        if hit.rowcount:
            failed.append(dataset_id)
    if failed:
        log.warning("parses abandoned by their owner, failed: %s", failed[:20])
    return failed


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
    if fail_stuck(session, tenant.id):
        session.commit()
    ds = session.get(Dataset, dataset_id)
    if ds is None or ds.tenant_id != tenant.id or ds.deleted_at is not None:
        raise ProblemError(404, "Dataset not found", detail=f"no dataset {dataset_id!r}",
                           type="not-found")
    return ds


def list_datasets(session: Session, tenant: Tenant, cursor: str | None,
                  limit: int) -> tuple[list[Dataset], str | None]:
    if fail_stuck(session, tenant.id):
        session.commit()
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
    remove_files(ds.id)


def remove_files(dataset_id: str) -> None:
    """A dataset's stored files and its upload's directory (a parse still running notices
    at its next heartbeat and stops)."""
    with contextlib.suppress(OSError):
        storage.remove_dataset_files(dataset_id)
    UploadDir(dataset_id).remove()


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
            "stored_bytes": ds.stored_bytes,
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
