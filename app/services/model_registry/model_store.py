"""Model bytes in Postgres: written with the model's row, read back checked.

A model's portable file (``solver.io.model_io`` bytes: JSON and ``.npy`` arrays, no pickle) is
a ``model_blobs`` row inserted in the transaction that inserts the model and sets its job
SUCCEEDED (``worker.runner``), so a model exists exactly when its row does and an API
process or worker on any host can load it. Reads check the bytes against the sha256 on the
model row (500 ``model-file-corrupt`` otherwise). Deleting a model deletes its bytes in the
same transaction (the storage quota counts only live models' bytes).

``cached_file`` writes the bytes under ``SODM_DATA_DIR/cache/models`` for the file download
(a ``FileResponse`` answers ``Range`` requests): a cache any host rebuilds from the row, named
by the model id and its sha256 so it is never stale. ``sweep`` (the reaper) removes cache
files of deleted models and the model files of the layout before Postgres held the bytes
(``models/{id}.sodm``, which migration 0011 copied in) once their bytes are in Postgres.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import delete as sql_delete
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.orm import Model, ModelBlob
from app.core.problems import ProblemError
from app.services.filestore.stale_files import STALE_SECONDS, stale_files
from app.services.filestore.stale_files import remove as remove_files

log = logging.getLogger(__name__)

SUFFIX = ".sodm"
CACHE_DIR = Path("cache") / "models"  # under SODM_DATA_DIR
LEGACY_DIR = Path("models")  # model files before the bytes moved into Postgres


@dataclass(frozen=True)
class ModelBytes:
    """A model's portable file and its sha256."""

    data: bytes
    sha256: str

    @property
    def size(self) -> int:
        return len(self.data)


def dump(est: Any) -> ModelBytes:
    """The portable file of a fitted (portable) estimator."""
    from solver.io.model_io import dumps

    data = dumps(est)
    return ModelBytes(data, hashlib.sha256(data).hexdigest())


def blob(model_id: str, mb: ModelBytes) -> ModelBlob:
    """The ``model_blobs`` row to add beside the model's row."""
    return ModelBlob(model_id=model_id, data=mb.data)


def read_bytes(session: Session, model_id: str, sha256: str) -> bytes:
    """The stored bytes of a model, checked against ``sha256`` (404 when there are none:
    a model of the old layout whose file was lost before the migration)."""
    data = session.scalar(select(ModelBlob.data).where(ModelBlob.model_id == model_id))
    if data is None:
        raise ProblemError(404, "Model file missing",
                           detail=f"model {model_id} has no stored file", type="not-found")
    data = bytes(data)
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        log.error("stored bytes of model %s do not match its sha256", model_id)
        raise ProblemError(500, "Model file corrupt",
                           detail=f"the file of model {model_id} does not match the checksum "
                                  "stored when it was trained; it is not loaded",
                           type="model-file-corrupt")
    return data


def is_stored(session: Session, model_id: str) -> bool:
    """Whether the model's bytes are there (a model of the old layout whose file was lost
    before migration 0011 has none)."""
    return session.scalar(select(ModelBlob.model_id).where(
        ModelBlob.model_id == model_id)) is not None


def read(model_id: str, sha256: str) -> bytes:
    """``read_bytes`` in a read-only session of its own (serving, exports, batch jobs)."""
    from app.core.db import get_read_sessionmaker

    with get_read_sessionmaker()() as session:
        return read_bytes(session, model_id, sha256)


def load(model_id: str, sha256: str) -> Any:
    """The fitted estimator of a model (no pickle: ``solver.io.model_io.loads``)."""
    from solver.io.model_io import loads

    return loads(read(model_id, sha256))


def delete(session: Session, model_id: str) -> None:
    """Drop a model's bytes (in the caller's transaction: the soft delete of its row)."""
    session.execute(sql_delete(ModelBlob).where(ModelBlob.model_id == model_id))


def cached_file(model_id: str, sha256: str) -> Path:
    """A local file holding the model's checked bytes (written once per host)."""
    from app.services.filestore.storage import atomic_write_bytes

    name = f"{model_id}.{sha256[:16] or 'unchecked'}{SUFFIX}"
    path = Path(get_settings().data_dir) / CACHE_DIR / name
    if not path.is_file():
        atomic_write_bytes(path, read(model_id, sha256))
    return path


def sweep(stale_seconds: float = STALE_SECONDS) -> list[str]:
    """Remove stale temporary files, cache files of models that are gone, and old-layout
    model files whose bytes are in Postgres (or whose model is gone); returns their names."""
    root = Path(get_settings().data_dir)
    cache = stale_files(root / CACHE_DIR, SUFFIX, stale_seconds)
    legacy = stale_files(root / LEGACY_DIR, SUFFIX, stale_seconds)
    by_id = {name.split(".", 1)[0]: p for name, p in cache.finished.items()}
    ids = list(set(by_id) | set(legacy.finished))
    kept: set[str] = set()
    if ids:
        with session_scope() as s:
            live = set(s.scalars(select(Model.id).where(Model.id.in_(ids),
                                                        Model.deleted_at.is_(None))))
            stored = set(s.scalars(select(ModelBlob.model_id).where(
                ModelBlob.model_id.in_(list(legacy.finished)))))
        kept = live
        # an old-layout file goes once Postgres holds its bytes or its model is gone
        legacy_gone = [p for mid, p in legacy.finished.items()
                       if mid in stored or mid not in live]
    else:
        legacy_gone = []
    orphans = [p for mid, p in by_id.items() if mid not in kept]
    return remove_files(cache.temps + legacy.temps + orphans + legacy_gone,
                        "model files no model needs")
