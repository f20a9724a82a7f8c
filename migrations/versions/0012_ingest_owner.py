"""Datasets: who parses an upload (owner token, heartbeat, when its parse started) and the
bytes it holds on disk (the storage quota counts these, not the upload's size).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stored_bytes", sa.BigInteger(), nullable=False,
                                      server_default="0"))
        batch_op.add_column(sa.Column("ingest_owner", sa.String(128), nullable=True))
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True),
                                      nullable=True))
        batch_op.add_column(sa.Column("parse_started_at", sa.DateTime(timezone=True),
                                      nullable=True))
        batch_op.create_index("ix_datasets_state", ["state"])
    # rows stored before: their files were not measured; the upload's size stands in
    op.execute("UPDATE datasets SET stored_bytes = size_bytes")


def downgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_index("ix_datasets_state")
        batch_op.drop_column("parse_started_at")
        batch_op.drop_column("heartbeat_at")
        batch_op.drop_column("ingest_owner")
        batch_op.drop_column("stored_bytes")
