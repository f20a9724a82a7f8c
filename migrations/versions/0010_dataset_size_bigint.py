"""Datasets: size_bytes as a 64-bit integer (uploads of 2 GiB and more overflowed it).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 21:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.alter_column("size_bytes", existing_type=sa.Integer(),
                              type_=sa.BigInteger(), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.alter_column("size_bytes", existing_type=sa.BigInteger(),
                              type_=sa.Integer(), existing_nullable=False)
