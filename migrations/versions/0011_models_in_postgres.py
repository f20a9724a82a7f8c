"""Models: their bytes in Postgres (``model_blobs``), no model file on a shared disk.

Copies every model file of the earlier layout (``SODM_DATA_DIR/models/{id}.sodm``, named by
the rows' ``file_path``) into ``model_blobs`` when its bytes match the row's sha256, then drops
``models.file_path``. A file that is missing or does not match is not copied: its model then
answers 404 "Model file missing" / is not served, as it was before. The files stay on disk
until the reaper's sweep (``app.services.model_registry.model_store.sweep``) sees their bytes
stored. Downgrade writes the bytes back to ``models/{id}.sodm`` and restores ``file_path``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 08:00:00.000000
"""

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")


def _data_dir() -> Path:
    from app.core.config import get_settings

    return Path(get_settings().data_dir)


def upgrade() -> None:
    op.create_table(
        "model_blobs",
        sa.Column("model_id", sa.String(length=36), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("model_id"),
    )
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, file_path, file_sha256 FROM models "
                                "WHERE deleted_at IS NULL")).all()
    root = _data_dir()
    copied = 0
    for model_id, rel, sha in rows:
        path = root / rel if rel else None
        if path is None or not path.is_file():
            log.warning("model %s: no file at %s, not copied", model_id, rel)
            continue
        data = path.read_bytes()
        if sha and hashlib.sha256(data).hexdigest() != sha:
            log.warning("model %s: file does not match its sha256, not copied", model_id)
            continue
        conn.execute(sa.text("INSERT INTO model_blobs (model_id, data) VALUES (:m, :d)"),
                     {"m": model_id, "d": data})
        copied += 1
    if rows:
        log.info("copied %d of %d model files into model_blobs", copied, len(rows))
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("file_path")


def downgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("file_path", sa.Text(), nullable=False,
                                      server_default=""))
    conn = op.get_bind()
    root = _data_dir()
    for model_id, data in conn.execute(sa.text("SELECT model_id, data FROM model_blobs")):
        rel = f"models/{model_id}.sodm"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.downgrade.tmp")
        tmp.write_bytes(bytes(data))
        os.replace(tmp, path)
        conn.execute(sa.text("UPDATE models SET file_path = :p WHERE id = :m"),
                     {"p": rel, "m": model_id})
    op.drop_table("model_blobs")
