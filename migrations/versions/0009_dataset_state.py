"""Datasets: state (parsing | ready | failed) and the problem of a failed parse.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 18:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.add_column(sa.Column("state", sa.String(16), nullable=False,
                                      server_default="ready"))
        batch_op.add_column(sa.Column("problem", JSONT, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_column("problem")
        batch_op.drop_column("state")
