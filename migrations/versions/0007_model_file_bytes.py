"""Models: file_bytes (the model file's size; the tenant's storage quota counts it).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 18:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("file_bytes", sa.BigInteger(), nullable=False,
                                      server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("file_bytes")
